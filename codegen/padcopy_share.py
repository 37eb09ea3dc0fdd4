"""One zero-padded copy of an operand per kernel, read by every sum that can read it.

Several sums of one program may each gather the same tensor over a zero-padded copy
of it (``codegen.padcopy``): the residue classes of a strided convolution's input
gradient (``codegen.residue_classes``: four classes of ``dX`` gather the same ``H``),
the input gradients of several convolutions of one ``H``. Each copy is a pass over the
tensor, and its own parallel loop. One copy of their union box serves them all: as
many zeros before the tensor's elements as the sum that needs most, and after them as
many as the sum reading furthest (the classes of a stride-2 gradient: 19, 18, 18 and
17 rows of 17; of a transposed convolution: 1 or 0 zero rows and columns before, 17
by 17). A sum reads each element where the union box puts it (``padcopy.replan``),
the same values; a flat sum (rows of the output's length ``S``,
``padcopy.Plan.flat``) needs rows of ``S``, so it shares only a copy with rows of
``S``. When some sum cannot read the union box, the sums with the same zeros before
share one copy.

Which sums share is decided here, before lowering, as data: :func:`share` gives the
program's plans (``padcopy.replan`` over the shared copies) and a line per shared
copy for the schedule (``shared copy: ...``). The first sum lowered makes the copy, in
its version for finite weights (``padcopy.lower``); so only sums that check the same
weights share one (the same buffer, written once: every sum takes the same version).

>>> import tensorexpr as te
>>> H = te.placeholder((2, 4, 12), name="H"); W = te.placeholder((3, 4, 3), name="W")
>>> def gather(n, name):   # an input gradient of a 1-D convolution, n outputs
...     f, k = te.reduce_axis(4), te.reduce_axis(3)
...     return te.compute((2, 3, n), lambda b, c, x: te.sum(
...         H[b, f, x - k] * W[c, f, k], axis=[f, k],
...         where=(x - k >= 0) & (x - k < 12)), name=name)
>>> from codegen import padcopy
>>> a, b = gather(14, "dA"), gather(13, "dB")
>>> plans = {t.uid: padcopy.plan(t, t.body) for t in (a, b)}
>>> [p.fill.shape for p in plans.values()]
[(2, 4, 16), (2, 4, 15)]
>>> scratch = [(p.fill, p.note()) for p in plans.values()]
>>> scratch, plans, lines = share(scratch, plans)
>>> [t.shape for t, _ in scratch], lines
([(2, 4, 16)], ['H_padded[16] read by dA, dB'])
>>> plans[a.uid].fill is plans[b.uid].fill
True
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from tensorexpr.transform import const_value

from .padcopy import Plan, replan


def share(scratch: Sequence[Tuple[object, str]], plans: Dict[int, Plan],
          params: Sequence[str] = ()) -> Tuple[List[Tuple[object, str]], Dict[int, Plan],
                                               List[str]]:
    """``(scratch, plans, lines)``: ``padcopy.rewrite``'s scratch tensors and plans with
    the copies that can be one made one (see the module docstring), and the schedule's
    line for each shared copy: its name, extents and readers."""
    out = dict(plans)
    lines: List[str] = []
    old_to_new: Dict[int, Plan] = {}
    for members in _candidates(plans.values()):
        done = _shared(members, params)
        # a sum that cannot read their union box: those with the same zeros before
        found = [(members, done)] if done is not None else [
            (part, d) for part in _by_zeros(members) if len(part) > 1
            for d in [_shared(part, params)] if d is not None]
        for part, done in found:
            for p, q in zip(part, done):
                out[p.t.uid] = q
                old_to_new[p.fill.uid] = q
            extent = _widths(done[0])
            lines.append(f"{done[0].fill.name}[{', '.join(map(str, extent))}] read by "
                         f"{', '.join(p.t.name for p in part)}")
    new_scratch: List[Tuple[object, str]] = []
    seen = set()
    for t, note in scratch:
        q = old_to_new.get(t.uid)
        if q is not None:
            t, note = q.fill, q.note()
        if t.uid not in seen:
            seen.add(t.uid)
            new_scratch.append((t, note))
    return new_scratch, out, lines


def _shared(part: List[Plan], params: Sequence[str]):
    """The plans of ``part`` over one copy (their union box), or None."""
    zeros = tuple(max(z) for z in zip(*(p.before for p in part)))
    # each sum's elements after its zeros, then as many zeros before as the most needs
    extent = tuple(max(w) for w in zip(*(
        tuple(w - b + z for w, b, z in zip(_widths(p), p.before, zeros)) for p in part)))
    if any(p.flat is not p.fill for p in part):   # rows as long as the flat sums' rows
        extent = extent[:-1] + (max(_widths(p)[-1] for p in part),)
    first = replan(part[0], extent, None, params, zeros)
    if first is None:
        return None
    done = [first] + [replan(p, extent, first.fill, params, zeros) for p in part[1:]]
    return None if any(q is None for q in done) else done


def _by_zeros(members: List[Plan]) -> List[List[Plan]]:
    """``members`` by their zeros before."""
    out: Dict[tuple, List[Plan]] = {}
    for p in members:
        out.setdefault(p.before, []).append(p)
    return list(out.values())


def _widths(p: Plan) -> Tuple[int, ...]:
    """The copy's extent along each of its padded dimensions."""
    return tuple(const_value(p.fill.dims[k]) for k in p.padded)


def _candidates(plans) -> List[List[Plan]]:
    """Groups of two or more plans (in program order) that one copy may serve: the
    same tensor, padded dimensions and weights; a flat sum only with copies whose rows
    are as long as its own."""
    by_key: Dict[tuple, List[Plan]] = {}
    for p in plans:
        key = (p.source.uid, p.padded, p.weight.tensor.uid, p.fill.dtype)
        by_key.setdefault(key, []).append(p)
    out = []
    for members in by_key.values():
        # the flat sums' row lengths; a sum that keeps its axes joins the shortest rows
        # that hold its own
        rows = sorted({_widths(p)[-1] for p in members if p.flat is not p.fill})
        parts: Dict[object, List[Plan]] = {}
        for p in members:
            w = _widths(p)[-1]
            at = w if p.flat is not p.fill else next((r for r in rows if r >= w), None)
            parts.setdefault(at, []).append(p)
        out += [part for part in parts.values() if len(part) > 1]
    return out
