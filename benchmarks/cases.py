"""The 14 benchmark cases as data: sizes, inputs, differentiated inputs, analytic work.

Each system (``benchmarks/systems/*``) defines the forward of a case from its
``key`` and parameters ``p``; everything shared (input generation, the head, the
work counted for the roofline figures) lives here once. The three convolutions
are one parametrised definition (``key == "conv2d"``).

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
    """

    name: str
    shape: Callable[[dict], tuple]
    dtype: str = "float32"
    high: Optional[Callable[[dict], int]] = None


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
                out[a.name] = rng.standard_normal(shape).astype(a.dtype)
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


def by_id(case_id: int) -> Case:
    """The case numbered ``case_id`` (1-based, as in the suite's table)."""
    for c in CASES:
        if c.id == case_id:
            return c
    raise KeyError(f"no benchmark case {case_id}; cases are 1..{len(CASES)}")
