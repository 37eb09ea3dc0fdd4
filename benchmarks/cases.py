"""The benchmark cases as data: sizes, inputs, differentiated inputs, analytic work.

Tier 1 (``TIER1``, ids 1-14) is the suite's original 14 cases; tier 2 (``TIER2``,
ids 15-33) the 19 common kernels of issue 14 (batched matmul, attention, more
convolutions, normalisations, a loss, recurrent cells, scans, resampling, ...).
``CASES`` is both, in id order.

Each system (``benchmarks/systems/*``) defines the forward of a case from its
``key`` and parameters ``p``; everything shared (input generation, the head, the
work counted for the roofline figures) lives here once. The three convolutions
are one parametrised definition (``key == "conv2d"``), as is tier 2's 5x5 one.

>>> case = CASES[0]
>>> p = case.params(quick=True)
>>> {k: v.shape for k, v in case.inputs(p).items()}
{'A': (64, 128), 'B': (128, 64)}
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

import numpy as np


@dataclass(frozen=True)
class Arg:
    """One input of a case: a name, a shape from the parameters, a dtype.

    ``high`` makes it an integer index input with values in ``[0, high(p))``.
    ``scale`` multiplies a float input's standard normal values by ``scale(p)``:
    recurrent and gate weights scaled by ``1/sqrt(fan_in)`` as a user initialises
    them, so the sigmoids and tanhs of tier 2 are not saturated (a saturated
    ``1 - y**2`` in float32 is all rounding, and its error would mean nothing).
    """

    name: str
    shape: Callable[[dict], tuple]
    dtype: str = "float32"
    high: Optional[Callable[[dict], int]] = None
    scale: Optional[Callable[[dict], float]] = None


@dataclass(frozen=True)
class Work:
    """What a case's forward and VJP must do at least: FLOPs or bytes moved."""

    unit: str  # "flop" or "byte"
    fwd: int
    vjp: int


@dataclass(frozen=True)
class Case:
    """A benchmark case: ``Y = f(inputs)``, a head ``H`` of ``Y``'s shape, and the VJP.

    ``full`` are the suite's sizes, ``quick`` reduced ones for ``--quick``.
    ``grow`` multiplies some of those sizes for the growth check (the same
    factors at both): the dimension along which a gradient could grow faster
    than its forward (a softmax row, a clamped signal, a vocabulary together
    with the lookups), chosen so the forward's work grows about 4x.
    ``wrt`` names the differentiated inputs (gradients come in this order).
    ``flops(p)`` gives (forward, VJP) FLOPs for compute-bound cases; the others
    are measured in bytes: every input and output once, the VJP reading only
    ``vjp_reads`` of the forward inputs (plus ``H``) and writing the gradients;
    ``nbytes(p)`` replaces that count where it would overstate the least traffic.
    ``tier`` is 1 for the suite's first 14 cases, 2 for the common kernels of issue 14
    (ids 15-33), run with ``--tier 2``.
    """

    id: int
    key: str
    title: str
    full: Dict[str, int]
    quick: Dict[str, int]
    args: Tuple[Arg, ...]
    wrt: Tuple[str, ...]
    vjp_reads: Tuple[str, ...] = ()
    flops: Optional[Callable[[dict], Tuple[int, int]]] = None
    nbytes: Optional[Callable[[dict], Tuple[int, int]]] = None
    extra: Dict[str, object] = field(default_factory=dict)
    grow: Dict[str, int] = field(default_factory=dict)
    tier: int = 1

    def params(self, quick: bool = False, grown: bool = False) -> dict:
        """The sizes and fixed parameters of this case (``extra`` merged in);
        ``grown``: the sizes named in ``grow`` multiplied by their factors.

        >>> CASES[7].params(quick=True, grown=True)
        {'B': 32, 'D': 1024}
        """
        sizes = dict(self.quick if quick else self.full)
        if grown:
            sizes.update({k: v * self.grow[k] for k, v in sizes.items() if k in self.grow})
        return {**sizes, **self.extra}

    def inputs(self, p: dict) -> Dict[str, np.ndarray]:
        """The fixed random inputs (seeded by the case number): same in every run."""
        rng = np.random.default_rng(_seed(self.id, "inputs"))
        out = {}
        for a in self.args:
            shape = a.shape(p)
            if a.high is not None:
                out[a.name] = rng.integers(0, a.high(p), size=shape).astype(a.dtype)
            else:
                x = rng.standard_normal(shape)
                out[a.name] = (x * a.scale(p) if a.scale else x).astype(a.dtype)
        return out

    def head(self, shape: tuple) -> np.ndarray:
        """The fixed random head ``H`` (float32) for an output of ``shape``."""
        rng = np.random.default_rng(_seed(self.id, "head"))
        return rng.standard_normal(shape).astype(np.float32)

    def work(self, p: dict, inputs: Dict[str, np.ndarray], y_nbytes: int) -> Work:
        """The least work of the forward and of the VJP, for the roofline figures."""
        if self.flops is not None:
            fwd, vjp = self.flops(p)
            return Work("flop", int(fwd), int(vjp))
        if self.nbytes is not None:
            fwd, vjp = self.nbytes(p)
            return Work("byte", int(fwd), int(vjp))
        ins = sum(a.nbytes for a in inputs.values())
        reads = sum(inputs[n].nbytes for n in self.vjp_reads)
        grads = sum(inputs[n].nbytes for n in self.wrt)
        return Work("byte", ins + y_nbytes, reads + y_nbytes + grads)


def _seed(case_id: int, what: str) -> int:
    return zlib.crc32(f"{case_id}:{what}".encode())


def conv_out(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    """Output extent of a convolution or pooling window along one axis.

    >>> conv_out(33, 3, 2, 0, 1), conv_out(36, 3, 1, 0, 2), conv_out(32, 3, 1, 1, 1)
    (16, 32, 32)
    """
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


def _conv_flops(p):
    oh = conv_out(p["H"], p["KH"], p["stride"], p["pad"], p["dil"])
    ow = conv_out(p["W"], p["KW"], p["stride"], p["pad"], p["dil"])
    fwd = 2 * p["N"] * p["F"] * oh * ow * p["C"] * p["KH"] * p["KW"]
    return fwd, 2 * fwd  # dX and dW each cost one forward


def _conv(id: int, title: str, hw: int, quick_hw: int, stride: int, pad: int, dil: int) -> Case:
    sizes = dict(N=8, C=16, F=32, KH=3, KW=3)
    quick = dict(N=2, C=4, F=8, KH=3, KW=3)
    return Case(
        id, "conv2d", title,
        full={**sizes, "H": hw, "W": hw}, quick={**quick, "H": quick_hw, "W": quick_hw},
        args=(Arg("X", lambda p: (p["N"], p["C"], p["H"], p["W"])),
              Arg("W", lambda p: (p["F"], p["C"], p["KH"], p["KW"]))),
        wrt=("X", "W"), flops=_conv_flops, extra=dict(stride=stride, pad=pad, dil=dil),
        grow=_IMAGE)


def _mlp_flops(p):
    fwd = 2 * p["B"] * (p["I"] * p["Hd"] + p["Hd"] * p["O"])
    return fwd, 2 * fwd  # weight gradients and input gradients each cost one forward


def _embedding_bytes(p):
    rows = 4 * p["I"] * p["D"]  # float32 rows gathered (read) = Y (written) = H (read)
    idx = 8 * p["I"]
    # the forward reads only the gathered rows of E; the VJP writes all of dE
    return idx + 2 * rows, idx + rows + 4 * p["V"] * p["D"]


#: the image grows 2x along both axes (pooling, flatten and the convolutions)
_IMAGE = {"H": 2, "W": 2}


def _nchw(p):
    return (p["N"], p["C"], p["H"], p["W"])


CASES: Tuple[Case, ...] = (
    Case(1, "matmul", "matmul",
         full=dict(M=256, K=512, N=256), quick=dict(M=64, K=128, N=64),
         args=(Arg("A", lambda p: (p["M"], p["K"])), Arg("B", lambda p: (p["K"], p["N"]))),
         wrt=("A", "B"),
         flops=lambda p: (2 * p["M"] * p["N"] * p["K"], 4 * p["M"] * p["N"] * p["K"]),
         grow={"M": 4}),
    _conv(2, "conv2d s1 p1", 32, 16, stride=1, pad=1, dil=1),
    _conv(3, "conv2d s2", 33, 17, stride=2, pad=0, dil=1),
    _conv(4, "conv2d dil2", 36, 20, stride=1, pad=0, dil=2),
    Case(5, "maxpool", "maxpool 2x2 s2",
         full=dict(N=8, C=32, H=32, W=32), quick=dict(N=2, C=8, H=16, W=16),
         args=(Arg("X", _nchw),), wrt=("X",), vjp_reads=("X",), extra=dict(k=2), grow=_IMAGE),
    Case(6, "avgpool", "avgpool 3x3 s1",
         full=dict(N=8, C=32, H=32, W=32), quick=dict(N=2, C=8, H=16, W=16),
         args=(Arg("X", _nchw),), wrt=("X",), extra=dict(k=3), grow=_IMAGE),
    Case(7, "flatten", "flatten",
         full=dict(N=8, C=32, H=16, W=16), quick=dict(N=2, C=8, H=8, W=8),
         args=(Arg("X", _nchw),), wrt=("X",), grow=_IMAGE),
    Case(8, "softmax", "softmax",
         full=dict(B=256, D=1024), quick=dict(B=32, D=256),
         args=(Arg("X", lambda p: (p["B"], p["D"])),), wrt=("X",), vjp_reads=("X",),
         grow={"D": 4}),
    Case(9, "layernorm", "layer norm",
         full=dict(B=256, D=1024), quick=dict(B=32, D=256),
         args=(Arg("X", lambda p: (p["B"], p["D"])), Arg("gamma", lambda p: (p["D"],)),
               Arg("beta", lambda p: (p["D"],))),
         wrt=("X", "gamma", "beta"), vjp_reads=("X", "gamma"), extra=dict(eps=1e-5),
         grow={"D": 4}),
    Case(10, "bias_transpose", "bias+transpose",
         full=dict(M=1024, N=1024), quick=dict(M=128, N=256),
         args=(Arg("X", lambda p: (p["M"], p["N"])), Arg("b", lambda p: (p["N"],))),
         wrt=("X", "b"), grow={"M": 2, "N": 2}),
    Case(11, "ewma", "EWMA recurrence",
         full=dict(R=1024, T=512), quick=dict(R=128, T=64),
         args=(Arg("d", lambda p: (p["R"], p["T"])),), wrt=("d",), grow={"T": 4}),
    Case(12, "mlp", "2-layer MLP",
         full=dict(B=256, I=512, Hd=512, O=10), quick=dict(B=32, I=64, Hd=64, O=10),
         args=(Arg("X", lambda p: (p["B"], p["I"])), Arg("W1", lambda p: (p["I"], p["Hd"])),
               Arg("b1", lambda p: (p["Hd"],)), Arg("W2", lambda p: (p["Hd"], p["O"])),
               Arg("b2", lambda p: (p["O"],))),
         wrt=("X", "W1", "b1", "W2", "b2"), flops=_mlp_flops, grow={"B": 4}),
    Case(13, "embedding", "embedding gather",
         full=dict(V=10000, D=128, I=4096), quick=dict(V=500, D=16, I=256),
         args=(Arg("E", lambda p: (p["V"], p["D"])),
               Arg("idx", lambda p: (p["I"],), dtype="int64", high=lambda p: p["V"])),
         wrt=("E",), nbytes=_embedding_bytes, grow={"V": 4, "I": 4}),
    Case(14, "blur", "1D blur, clamped",
         full=dict(n=1_000_000), quick=dict(n=10_000),
         args=(Arg("X", lambda p: (p["n"],)),), wrt=("X",), grow={"n": 4}),
)


# {{{ tier 2: common kernels outside the first 14 (issue 14), ids 15-33


def _fan_in(*dims: str):
    """``1/sqrt(product of the sizes dims)``: a weight's usual initial scale."""
    return lambda p: float(np.prod([p[d] for d in dims])) ** -0.5


def _mm_flops(fwd):
    """(forward, VJP) FLOPs of a product-dominated case: each operand's gradient is
    one more product of the forward's size."""
    return lambda p: (fwd(p), 2 * fwd(p))


def _seq(p):
    return (p["T"], p["B"], p["I"])


TIER2: Tuple[Case, ...] = (
    Case(15, "bmm", "batched matmul",
         full=dict(B=16, M=128, K=256, N=128), quick=dict(B=3, M=32, K=24, N=40),
         args=(Arg("A", lambda p: (p["B"], p["M"], p["K"])),
               Arg("Bm", lambda p: (p["B"], p["K"], p["N"]))),
         wrt=("A", "Bm"), flops=_mm_flops(lambda p: 2 * p["B"] * p["M"] * p["N"] * p["K"]),
         grow={"B": 4}, tier=2),
    Case(16, "attention", "attention (sdpa)",
         full=dict(BH=16, L=128, d=64), quick=dict(BH=2, L=24, d=16),
         args=tuple(Arg(n, lambda p: (p["BH"], p["L"], p["d"])) for n in ("Q", "K", "V")),
         wrt=("Q", "K", "V"),
         flops=_mm_flops(lambda p: 4 * p["BH"] * p["L"] * p["L"] * p["d"]),
         grow={"L": 2}, tier=2),
    Case(17, "depthwise", "depthwise conv 3x3",
         full=dict(N=8, C=64, H=32, W=32), quick=dict(N=2, C=4, H=8, W=7),
         args=(Arg("X", _nchw), Arg("W", lambda p: (p["C"], 1, 3, 3))),
         wrt=("X", "W"),
         flops=_mm_flops(lambda p: 2 * 9 * p["N"] * p["C"] * p["H"] * p["W"]),
         grow=_IMAGE, tier=2),
    Case(18, "conv1x1", "conv 1x1",
         full=dict(N=8, C=64, F=64, H=32, W=32), quick=dict(N=2, C=8, F=6, H=6, W=5),
         args=(Arg("X", _nchw), Arg("W", lambda p: (p["F"], p["C"], 1, 1), scale=_fan_in("C"))),
         wrt=("X", "W"),
         flops=_mm_flops(lambda p: 2 * p["N"] * p["F"] * p["C"] * p["H"] * p["W"]),
         grow=_IMAGE, tier=2),
    Case(19, "conv2d", "conv 5x5 p2",
         full=dict(N=8, C=16, F=32, KH=5, KW=5, H=32, W=32),
         quick=dict(N=2, C=4, F=8, KH=5, KW=5, H=12, W=12),
         args=(Arg("X", _nchw), Arg("W", lambda p: (p["F"], p["C"], p["KH"], p["KW"]))),
         wrt=("X", "W"), flops=_conv_flops, extra=dict(stride=1, pad=2, dil=1), grow=_IMAGE,
         tier=2),
    Case(20, "conv1d", "conv1d k5 p2 (NCW)",
         full=dict(N=8, C=64, F=64, L=512, K=5), quick=dict(N=2, C=6, F=8, L=40, K=5),
         args=(Arg("X", lambda p: (p["N"], p["C"], p["L"])),
               Arg("W", lambda p: (p["F"], p["C"], p["K"]), scale=_fan_in("C", "K"))),
         wrt=("X", "W"), extra=dict(pad=2),
         flops=_mm_flops(lambda p: 2 * p["N"] * p["F"] * p["L"] * p["C"] * p["K"]),
         grow={"L": 4}, tier=2),
    Case(21, "conv_transpose", "conv transpose k4 s2 p1",
         full=dict(N=8, C=32, F=16, H=16, W=16, K=4), quick=dict(N=2, C=4, F=6, H=5, W=4, K=4),
         args=(Arg("X", _nchw), Arg("W", lambda p: (p["C"], p["F"], p["K"], p["K"]))),
         wrt=("X", "W"), extra=dict(stride=2, pad=1),
         flops=_mm_flops(lambda p: 2 * p["N"] * p["C"] * p["F"] * p["H"] * p["W"] * p["K"] ** 2),
         grow=_IMAGE, tier=2),
    Case(22, "groupnorm", "group norm",
         full=dict(N=8, C=64, H=16, W=16, G=8), quick=dict(N=2, C=6, H=4, W=5, G=3),
         args=(Arg("X", _nchw), Arg("gamma", lambda p: (p["C"],)),
               Arg("beta", lambda p: (p["C"],))),
         wrt=("X", "gamma", "beta"), vjp_reads=("X", "gamma"), extra=dict(eps=1e-5),
         grow=_IMAGE, tier=2),
    Case(23, "batchnorm", "batch norm (training)",
         full=dict(N=16, C=64, H=16, W=16), quick=dict(N=3, C=4, H=4, W=5),
         args=(Arg("X", _nchw), Arg("gamma", lambda p: (p["C"],)),
               Arg("beta", lambda p: (p["C"],))),
         wrt=("X", "gamma", "beta"), vjp_reads=("X", "gamma"), extra=dict(eps=1e-5),
         grow=_IMAGE, tier=2),
    Case(24, "xent", "log-softmax cross-entropy",
         full=dict(B=1024, V=1000), quick=dict(B=32, V=50),
         args=(Arg("logits", lambda p: (p["B"], p["V"])),
               Arg("labels", lambda p: (p["B"],), dtype="int64", high=lambda p: p["V"])),
         wrt=("logits",), vjp_reads=("logits", "labels"), grow={"V": 4}, tier=2),
    Case(25, "lstm", "LSTM cell, fused gates",
         full=dict(B=64, I=256, Hd=256), quick=dict(B=4, I=12, Hd=8),
         args=(Arg("x", lambda p: (p["B"], p["I"])), Arg("h", lambda p: (p["B"], p["Hd"])),
               Arg("c", lambda p: (p["B"], p["Hd"])),
               Arg("Wx", lambda p: (p["I"], 4 * p["Hd"]), scale=_fan_in("I")),
               Arg("Wh", lambda p: (p["Hd"], 4 * p["Hd"]), scale=_fan_in("Hd")),
               Arg("b", lambda p: (4 * p["Hd"],))),
         wrt=("x", "h", "c", "Wx", "Wh", "b"),
         flops=_mm_flops(lambda p: 8 * p["B"] * (p["I"] + p["Hd"]) * p["Hd"]),
         grow={"B": 4}, tier=2),
    Case(26, "gru", "GRU over T steps",
         full=dict(T=64, B=16, I=64, Hd=128), quick=dict(T=6, B=2, I=5, Hd=4),
         args=(Arg("x", _seq), Arg("Wx", lambda p: (p["I"], 3 * p["Hd"]), scale=_fan_in("I")),
               Arg("Wh", lambda p: (p["Hd"], 3 * p["Hd"]), scale=_fan_in("Hd")),
               Arg("b", lambda p: (3 * p["Hd"],))),
         wrt=("x", "Wx", "Wh", "b"),
         flops=_mm_flops(lambda p: 6 * p["T"] * p["B"] * (p["I"] + p["Hd"]) * p["Hd"]),
         grow={"T": 4}, tier=2),
    Case(27, "rnn", "tanh RNN over T steps",
         full=dict(T=64, B=16, I=64, Hd=128), quick=dict(T=6, B=2, I=5, Hd=4),
         args=(Arg("x", _seq), Arg("Wx", lambda p: (p["I"], p["Hd"]), scale=_fan_in("I")),
               Arg("Wh", lambda p: (p["Hd"], p["Hd"]), scale=_fan_in("Hd")),
               Arg("b", lambda p: (p["Hd"],))),
         wrt=("x", "Wx", "Wh", "b"),
         flops=_mm_flops(lambda p: 2 * p["T"] * p["B"] * (p["I"] + p["Hd"]) * p["Hd"]),
         grow={"T": 4}, tier=2),
    Case(28, "cumsum", "cumsum, last axis",
         full=dict(R=512, N=2048), quick=dict(R=16, N=64),
         args=(Arg("X", lambda p: (p["R"], p["N"])),), wrt=("X",), grow={"N": 4}, tier=2),
    Case(29, "upsample", "bilinear 2x upsampling",
         full=dict(N=8, C=32, H=32, W=32), quick=dict(N=2, C=3, H=5, W=6),
         args=(Arg("X", _nchw),), wrt=("X",), grow=_IMAGE, tier=2),
    Case(30, "pdist", "pairwise sq. distances",
         full=dict(N=1024, M=1024, D=64), quick=dict(N=40, M=24, D=16),
         args=(Arg("A", lambda p: (p["N"], p["D"])), Arg("Bm", lambda p: (p["M"], p["D"]))),
         wrt=("A", "Bm"), flops=_mm_flops(lambda p: 2 * p["N"] * p["M"] * p["D"]),
         grow={"N": 2, "M": 2}, tier=2),
    Case(31, "seqmax", "global max pool (seq)",
         full=dict(N=32, C=256, L=512), quick=dict(N=2, C=8, L=40),
         args=(Arg("X", lambda p: (p["N"], p["C"], p["L"])),), wrt=("X",), vjp_reads=("X",),
         grow={"L": 4}, tier=2),
    Case(32, "gelu", "GELU (tanh form)",
         full=dict(B=4096, D=1024), quick=dict(B=64, D=256),
         args=(Arg("X", lambda p: (p["B"], p["D"])),), wrt=("X",), vjp_reads=("X",),
         grow={"B": 4}, tier=2),
    Case(33, "l2norm", "row L2 normalization",
         full=dict(B=4096, D=512), quick=dict(B=64, D=128),
         args=(Arg("X", lambda p: (p["B"], p["D"])),), wrt=("X",), vjp_reads=("X",),
         extra=dict(eps=1e-12), grow={"D": 4}, tier=2),
)

# }}}

TIER1 = CASES
#: every case of both tiers, in id order
CASES = TIER1 + TIER2
#: the tiers by number (``python -m benchmarks --tier N``)
TIERS = {1: TIER1, 2: TIER2}


def by_id(case_id: int) -> Case:
    """The case numbered ``case_id`` (1-based, as in the suite's table).

    >>> by_id(16).title, by_id(16).tier
    ('attention (sdpa)', 2)
    """
    for c in CASES:
        if c.id == case_id:
            return c
    raise KeyError(f"no benchmark case {case_id}; cases are 1..{len(CASES)}")
