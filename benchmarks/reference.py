"""The float64 reference and the error measure every system is judged by.

The reference runs the hand-written numpy forward and backward
(``systems.numpy_sys``) on the same inputs converted to float64; the tests check
those formulas against float64 finite differences, so the reference does not
merely agree with itself.

>>> import numpy as np
>>> round(rel_err([np.array([1.0, 2.001])], [np.array([1.0, 2.0])]), 6)
0.0005
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

from benchmarks.systems.numpy_sys import IMPL

#: Smallest reference magnitude the error is divided by (an all-zero reference).
TINY = 1e-30
#: A float32 gradient further than this from the float64 reference is "wrong".
TOLERANCE = 1e-3
DEFINITION = ("err = max over gradient tensors of max|g - ref| / max(max|ref|, 1e-30), "
              "ref computed in float64 from the same float32 inputs and head; "
              f"status 'wrong' above {TOLERANCE:g}")


def reference(case, p: dict,
              inputs: Dict[str, np.ndarray]) -> Tuple[np.ndarray, np.ndarray, List[np.ndarray]]:
    """``(Y, H, gradients)``: float64 forward and VJP, and the case's float32 head ``H``."""
    forward, backward = IMPL[case.key]
    wide = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in inputs.items()}
    Y, saved = forward(p, **wide)
    H = case.head(Y.shape)
    return Y, H, list(backward(p, saved, H.astype(np.float64)))


def rel_err(got: Sequence[np.ndarray], ref: Sequence[np.ndarray]) -> float:
    """The error defined in :data:`DEFINITION` (inf on a shape mismatch or NaN)."""
    if len(got) != len(ref):
        return float("inf")
    worst = 0.0
    for g, r in zip(got, ref):
        g = np.asarray(g, dtype=np.float64)
        if g.shape != r.shape or not np.all(np.isfinite(g)):
            return float("inf")
        scale = max(float(np.max(np.abs(r), initial=0.0)), TINY)
        worst = max(worst, float(np.max(np.abs(g - r), initial=0.0)) / scale)
    return worst
