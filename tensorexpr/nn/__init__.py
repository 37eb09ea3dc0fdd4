"""Neural-network layers built from the primitives, named and shaped like ``torch.nn.functional``.

Every function takes te tensors (placeholders or computes) and returns a new
te tensor, whose name is derived from the input's (``x`` gives ``x_softmax``).
Arguments follow ``torch.nn.functional``: names, defaults, negative ``dim``\\ s,
ints or tuples for ``kernel_size``/``stride``/``padding``/``dilation``, optional
biases, NCHW activations and OIHW weights. Sizes may be symbolic (``te.var``)
where a function needs no static value: batch dimensions everywhere, and any
dimension of elementwise functions, reductions, ``linear`` and ``matmul``.

Differences from PyTorch, by design of a pure expression language:

* ``gelu(approximate="none")`` in float32 builds ``erf`` from Abramowitz &
  Stegun 7.1.26 (``|error| <= 1.5e-7``, a few float32 ulps), which vectorizes
  where libm's ``erff`` would not, so it differs from torch's by at most ~1e-7 in
  value (and its gradient, that of the approximation, by ~1e-6); in float64 it
  calls ``te.erf`` (libm's ``erf``) and matches torch's to rounding.
  ``approximate="tanh"`` is torch's formula exactly.
* ``var`` (and ``std``-like uses) take ``correction`` as ``torch.var`` does,
  default 1 (Bessel's correction); ``layer_norm``, ``group_norm`` and
  ``batch_norm`` use the biased variance, as torch's layers do.
* ``batch_norm`` never updates running statistics (there is no state):
  ``training=True`` normalises by the batch's statistics; compute the new
  running averages from :func:`~tensorexpr.nn.reductions.mean` and
  :func:`~tensorexpr.nn.reductions.var` if you need them.
* the softmax family (``softmax``, ``log_softmax``, ``logsumexp``,
  ``cross_entropy``) subtracts the row maximum under :func:`te.stop_gradient`:
  its exact contribution to the gradient is zero, and without it the gradient
  would count ties and take another pass over ``x``.

The layers live in modules by concept, every public name re-exported here:
``activations`` (``relu``, ``leaky_relu``, ``elu``, ``silu``, ``softplus``, ``hardtanh``,
``sigmoid``, ``tanh``, ``gelu``, ``erf``),
``reductions`` (``sum``, ``amax``, ``mean``, ``var``), ``softmax_family``
(``softmax``, ``log_softmax``, ``logsumexp``), ``normalization`` (``layer_norm``,
``group_norm``, ``batch_norm``), ``losses`` (``cross_entropy``, ``mse_loss``, ``l1_loss``,
``smooth_l1_loss``, ``binary_cross_entropy_with_logits``),
``products`` (``matmul``, ``linear``), ``convolution`` (``conv1d``, ``conv2d``,
``conv_transpose2d``), ``pooling`` (``max_pool2d``, ``avg_pool2d``), ``embeddings``
(``embedding``), ``resampling`` (``interpolate``) and ``layout`` (``reshape``,
``transpose``, ``permute``, ``pad``, ``concat``). A new layer is built from
``arguments`` (checking and normalising torch-style arguments) and the public
helpers of ``reductions`` (``reduce_over``, ``reduced_at``, ``centered``).

>>> import numpy as np, tensorexpr as te
>>> x = te.placeholder((te.var("n"), 5), name="x")
>>> y = te.nn.softmax(x, dim=-1)
>>> y.name, y.shape
('x_softmax', (n, 5))
>>> out = te.build(y, backend="numpy")(np.zeros((2, 5), np.float32))
>>> bool(np.allclose(out, 0.2))
True
"""
from __future__ import annotations

from .activations import (elu, erf, gelu, hardtanh, leaky_relu, relu, sigmoid, silu, softplus,
                          tanh)
from .arguments import IntOrTuple
from .convolution import conv1d, conv2d, conv_transpose2d
from .embeddings import embedding
from .layout import concat, pad, permute, reshape, transpose
from .losses import (binary_cross_entropy_with_logits, cross_entropy, l1_loss, mse_loss,
                     smooth_l1_loss)
from .normalization import batch_norm, group_norm, layer_norm
from .pooling import avg_pool2d, max_pool2d
from .products import linear, matmul
from .reductions import amax, mean, sum, var  # noqa: A004 - torch's names
from .resampling import interpolate
from .softmax_family import log_softmax, logsumexp, softmax

__all__ = ["relu", "leaky_relu", "elu", "silu", "softplus", "hardtanh", "sigmoid", "tanh",
           "erf", "gelu", "sum", "amax", "mean", "var", "softmax", "log_softmax", "logsumexp",
           "layer_norm", "group_norm", "batch_norm", "cross_entropy", "mse_loss", "l1_loss",
           "smooth_l1_loss", "binary_cross_entropy_with_logits", "matmul", "linear", "conv1d",
           "conv2d", "conv_transpose2d", "max_pool2d", "avg_pool2d", "embedding",
           "interpolate", "reshape", "transpose", "permute", "pad", "concat", "IntOrTuple"]
