"""The growth check: does a gradient's cost grow faster than its forward's?

Issue 5 asks for no quadratic cliffs (TVM's softmax, clamped blur and embedding
gradients grow with the square of the row, signal or vocabulary while their
forwards grow linearly), checked at two sizes. The runner times tensorexpr's
forward and VJP at a case's size and at the size grown by the case's ``grow``
factors (``benchmarks.cases``), all four programs interleaved round by round so
a burst of load lands on all of them alike. This module turns those medians into
growth exponents and a verdict.

The size ratio ``s`` is the ratio of the forward's analytic work (FLOPs or bytes,
``Case.work``) between the two sizes, about 4 for every case; a cost growing as
the work has exponent ``log(t_big / t_small) / log(s) = 1``, a quadratic cliff 2.
The verdict uses each program's fastest call: load from other processes only
ever slows a call down, and on a busy machine it moved the medians enough to
swing an exponent by 0.2.

>>> g = judge(fwd_ms=(1.0, 4.0), vjp_ms=(2.0, 32.0), size_ratio=4.0)
>>> g["fwd_exp"], g["vjp_exp"], g["vjp_fwd"], g["status"]
(1.0, 2.0, (2.0, 8.0), 'grows faster (VJP exponent 2.00 vs forward 1.00)')
>>> judge(fwd_ms=(1.0, 4.4), vjp_ms=(2.0, 12.0), size_ratio=4.0)["status"]
'ok'
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

#: The VJP's exponent may exceed the forward's (and 1) by this much before a case is flagged.
MARGIN = 0.5

#: A VJP moving its bytes at this share of a copy of as many bytes, at the grown size, is
#: at the memory roof there: a steep exponent is then the data leaving a cache level
#: (its base size still fit, its grown size does not), which no schedule can undo.
ROOF = 0.6

RULE = (f"grown: the sizes multiplied as shown; work x = forward work (FLOPs or bytes) grown / "
        f"base; ms = fastest call of each of the four tensorexpr programs (forward and VJP at "
        f"both sizes, timed interleaved); exp = log(t_grown / t_base) / log(work x): 1 = "
        f"growing as the work, 2 = quadratic. Flagged 'grows faster' when the VJP's exponent "
        f"exceeds the forward's by more than {MARGIN:g} (its vjp/fwd ratio grows over "
        f"{4 ** MARGIN:.2g}x at work x 4) AND exceeds 1 + {MARGIN:g} (it grows faster than "
        f"its work). The margin lies between memory-hierarchy effects (a softmax VJP moving "
        f"1.5x the forward's bytes leaves the cache sooner: differences of 0.15-0.35 measured) "
        f"and the quadratic cliffs sought (a difference near 1); a VJP growing no faster than "
        f"its work is no cliff even next to a forward still dominated by the fixed cost of a "
        f"call (exponent below 1). Not flagged either: a VJP whose bytes (cases measured in "
        f"bytes) move at {ROOF:.0%} or more of a numpy copy of as many bytes at the grown size "
        f"(at the memory roof: its base size fit a cache its grown size leaves; shown as 'ok "
        f"(at the memory roof)')")


def exponent(t_small: float, t_big: float, size_ratio: float) -> Optional[float]:
    """``log(t_big / t_small) / log(size_ratio)``; None if not measurable.

    >>> exponent(1.0, 16.0, 4.0), exponent(1.0, 2.0, 1.0)
    (2.0, None)
    """
    if not (t_small > 0 and t_big > 0 and size_ratio > 1):
        return None
    return math.log(t_big / t_small) / math.log(size_ratio)


def judge(fwd_ms: Sequence[float], vjp_ms: Sequence[float], size_ratio: float,
          vjp_roof: Optional[float] = None) -> dict:
    """Exponents, vjp/fwd ratios and the verdict from ``(base, grown)`` times of each part.

    ``vjp_roof``: the grown VJP's bytes per second over a copy's of as many bytes (cases
    measured in bytes; None otherwise).

    >>> judge((1.0, 4.0), (1.0, 16.0), 4.0, vjp_roof=0.8)["status"]
    'ok (at the memory roof: VJP exponent 2.00 vs forward 1.00, 80% of a copy)'
    >>> judge((1.0, 4.0), (1.0, 16.0), 4.0, vjp_roof=0.3)["status"]
    'grows faster (VJP exponent 2.00 vs forward 1.00)'
    """
    fe = exponent(fwd_ms[0], fwd_ms[1], size_ratio)
    ve = exponent(vjp_ms[0], vjp_ms[1], size_ratio)
    out = {"size_ratio": size_ratio, "vjp_fwd": (vjp_ms[0] / fwd_ms[0], vjp_ms[1] / fwd_ms[1]),
           "fwd_exp": fe, "vjp_exp": ve}
    if vjp_roof is not None:
        out["vjp_roof"] = vjp_roof
    if fe is None or ve is None:
        out["status"] = "not measurable (the sizes do not differ)"
    elif ve - fe > MARGIN and ve > 1 + MARGIN:
        steep = f"VJP exponent {ve:.2f} vs forward {fe:.2f}"
        if vjp_roof is not None and vjp_roof >= ROOF:
            out["status"] = f"ok (at the memory roof: {steep}, {vjp_roof:.0%} of a copy)"
        else:
            out["status"] = f"grows faster ({steep})"
    else:
        out["status"] = "ok"
    return out


def flagged(growth: Optional[dict]) -> bool:
    """Whether a case's growth entry says its gradient grows faster than its forward.

    >>> flagged(judge((1.0, 4.0), (1.0, 16.0), 4.0)), flagged({"status": "ok"}), flagged(None)
    (True, False, False)
    """
    return bool(growth) and growth.get("status", "").startswith("grows faster")


def pair(xs: Optional[Tuple[float, float]], fmt) -> str:
    """``"a -> b"`` for a (base, grown) pair, ``-`` if missing.

    >>> pair((0.5, 2.0), "{:.2g}".format), pair(None, str)
    ('0.5 -> 2', '-')
    """
    return "-" if not xs else f"{fmt(xs[0])} -> {fmt(xs[1])}"
