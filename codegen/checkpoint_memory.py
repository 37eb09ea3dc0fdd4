"""What a checkpointed-gradient plan keeps in memory, beside what the full tape keeps.

A plan (``codegen.checkpoint_plan.Segments``) replaces the full ``T``-row tensors it runs
along the steps (the recurrences, their adjoints, the forward rows, consumers kept in
rings, the tensors before the reversals computed from kept rows) by rings of a few rows,
and adds its checkpoint stores and the stores of first rows. All of them are ordinary
program buffers, alive for the whole call: the plan's peak is their sum. The full tape
keeps the same tensors whole. :func:`memory` counts both, as data the schedule prints
(``h: 1,104 bytes in 5 buffers (67 rows), the full tape 936 bytes (39 rows)``), and the
planner keeps the full tape where the plan is not smaller (``checkpoint_plan.plan``).

A mirrored read is what makes a plan large: the bidirectional GRU whose output
multiplies its layers, ``y[t] = h[t] * g[T - 1 - t]``, has ``dh[t]`` read ``g[T - 1 - t]``
(and ``dg[t]`` read ``h[T - 1 - t]``) at every turn. A turn of the two in lockstep is at
``T - 1 - 2 t`` rows from the other layer's row it reads: up to ``T - 1`` back or ahead,
so a checkpoint would hold ``4 (T - 1)`` rows of each, far more than the tape.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

from tensorexpr.ir import INDEX_DTYPE, Binary, Const, Expr, Tensor

I64 = INDEX_DTYPE


def _product(xs: Sequence[Expr]) -> Expr:
    return _fold_all("mul", xs, 1)


def _total(xs: Sequence[Expr]) -> Expr:
    return _fold_all("add", xs, 0)


def _fold_all(op: str, xs: Sequence[Expr], unit: int) -> Expr:
    """``x0 op x1 op ...``, the constants folded into one (``unit`` for none)."""
    c, rest = unit, []
    for x in xs:
        if isinstance(x, Const):
            c = c * x.value if op == "mul" else c + x.value
        else:
            rest.append(x)
    out: Optional[Expr] = None
    for x in rest + ([Const(c, I64)] if c != unit or not rest else []):
        out = x if out is None else Binary(op, out, x, I64)
    return out


@dataclass(frozen=True)
class Buffer:
    """A buffer of ``rows`` rows (along ``axis``) of ``tensor``'s shape."""

    tensor: Tensor
    rows: Expr
    axis: int = 0

    def bytes(self) -> Expr:
        dims = list(self.tensor.dims)
        dims[self.axis] = self.rows
        return _product(dims + [Const(np.dtype(self.tensor.dtype).itemsize, I64)])


@dataclass(frozen=True)
class Memory:
    """The buffers a plan keeps (``plan``) and the full tensors the full tape keeps in
    their place (``tape``), each tensor with its rows along its step axis.

    >>> import tensorexpr as te
    >>> h = te.placeholder((13, 2, 3), name="h")
    >>> m = Memory((Buffer(h, Const(3, I64)), Buffer(h, Const(6, I64))),
    ...            (Buffer(h, Const(13, I64)),))
    >>> m.smaller(), str(m)
    (True, '216 bytes in 2 buffers (9 rows), the full tape 312 bytes (13 rows)')
    """

    plan: Tuple[Buffer, ...]
    tape: Tuple[Buffer, ...]

    def bytes(self) -> Tuple[Expr, Expr]:
        """``(plan, tape)``: the bytes of each (constants when every size is)."""
        return (_total([b.bytes() for b in self.plan]), _total([b.bytes() for b in self.tape]))

    def rows(self) -> Tuple[Expr, Expr]:
        """``(plan, tape)``: the rows of each, summed over their buffers."""
        return _total([b.rows for b in self.plan]), _total([b.rows for b in self.tape])

    def smaller(self) -> Optional[bool]:
        """Does the plan keep fewer bytes than the full tape? None: not known (a size is
        symbolic)."""
        p, t = self.bytes()
        if isinstance(p, Const) and isinstance(t, Const):
            return p.value < t.value
        return None

    def __str__(self) -> str:
        (p, t), (pr, tr) = self.bytes(), self.rows()
        return (f"{_show(p)} bytes in {len(self.plan)} buffers ({_show(pr)} rows), "
                f"the full tape {_show(t)} bytes ({_show(tr)} rows)")


def _show(e: Expr) -> str:
    return f"{e.value:,}" if isinstance(e, Const) else str(e)


def memory(p, s) -> Memory:
    """The :class:`Memory` of the group ``s`` (a ``checkpoint_plan.Segments`` whose
    buffers are made) in the plan ``p`` (its ``rings``: the tensors ``s`` runs, and
    those computed from kept rows it relies on, kept in rings; ``s.stores``,
    ``s.firsts``: its checkpoints and first rows, which the full tape does not need; the
    tensors from kept rows computed where they are read keep nothing).

    >>> import tensorexpr as te
    >>> from codegen.checkpoint_plan import plan
    >>> from codegen.signature import Signature
    >>> u = te.placeholder((40, 2), name="u")
    >>> e = te.recurrence((40, 2), lambda e, t, r: te.sin(u[t, r] + te.select(
    ...     t > 0, e[t - 1, r], 0.0)), name="e", checkpoints=4)
    >>> (du,) = te.differentiate(te.compute((), lambda: e[39, 0], name="L"), [u])
    >>> p = plan(Signature([du], [u]))
    >>> print(memory(p, p.segments))
    64 bytes in 3 buffers (8 rows), the full tape 640 bytes (80 rows)
    """
    ours = set(s.runs()) | set(s.kept)
    rings = [r for u, r in p.rings.items() if u in ours]
    plan = [Buffer(r.tensor, r.rows, r.axis) for r in rings] + [
        Buffer(x, x.dims[0]) for x in list(s.stores.values()) + list(s.firsts.values())]
    tape = [Buffer(r.tensor, r.tensor.dims[r.axis], r.axis) for r in rings] + [
        Buffer(p.kept[u].tensor, p.kept[u].tensor.dims[0]) for u in sorted(p.where_read)
        if u in s.kept]
    return Memory(tuple(plan), tuple(tape))
