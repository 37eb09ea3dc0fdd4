"""The strategy table: how each tensor may be lowered, tried in a documented order.

Each :class:`Strategy` has a name, ``applies(lw, t)`` (None, or the plan its
lowering needs: a pure function of the tensor and the program, no lowering
state is touched) and ``lower(lw, t, plan)`` (the statements; a lowering may
decline by returning None, before it changes anything, when a fit it can only
judge with the plan in hand fails: the next strategy is tried). :func:`choose`
takes the first that applies, or the one ``Options.force`` names; a cost-based
choice would replace that first-match loop and nothing else. What ran is
recorded in the build's :class:`codegen.schedule.Schedule`.

A strategy marked ``reorders`` may add an element's sum in another order than the
written one (vector lanes along the reduction, partial sums per tap): it never takes
a tensor holding a sum whose value is compared (``patterns.compared_sums``: a max's
tie test recomputes that sum in written order, and the two must be equal bit for
bit), the next candidate does. The others add each element's terms in written order.

The order (a recurrence runs ``steps``, ``interchange`` or ``loops``, its carried axis
sequential;
``codegen.checkpoint`` may keep it in a ring or checkpointed segments):

========================  ===================================================
``adjoint-steps``         a sum over the steps of an adjoint (a weight gradient):
                          a step at a time, last first (``codegen.adjoint_sums``)
``step-rows``             a tensor holding sums along a checkpointed gradient's
                          steps: a step (row) at a time, each step's sums for all
                          its positions at once (``codegen.recurrence_steps``)
``padded-copy``           a gather sum over a zero-padded copy of its input
                          (``codegen.padcopy``), the plain sum kept for
                          non-finite weights
``rows``                  ``epilogue(sum)`` with reads along the innermost
                          axis: accumulators for a tile of it, row blocks,
                          register tiles (``compute_rows``)
``jam``                   dot-product sums: ``JAM`` x ``JAM`` elements per nest
``taps``                  short innermost tap axes: all taps per pass
                          (``codegen.tapsum``, ``codegen.tapsum_registers``)
``gather-rows``           data-dependent indices fixed along a row: checked
                          once per row
``pieces``                the innermost loop cut where its tests change value
                          (``codegen.piecewise``); a tensor holding sums with
                          no such test, an outer axis
``blocks``                a transpose: square blocks of two axes
``split``                 an axis read through ``(j + k) // c``: ``c`` remainders
                          unrolled, the loop cut where clamps change
                          (``codegen.residue_loops``)
``steps``                 a recurrence whose step holds sums over earlier steps:
                          each step's sums for all positions at once
                          (``codegen.recurrence_steps``), then the rest
``interchange``           a recurrence with axes its self-reads keep fixed: those
                          outside its carried loop, threaded; a carried last
                          axis inside blocks of rows (``codegen.interchange``)
``loops``                 loops over the box, the innermost in vector lanes
========================  ===================================================

A scatter-add runs ``scatter-rows`` (a contiguous target row per source row)
or ``scatter``.

>>> [s.name for s in TABLE]  # doctest: +NORMALIZE_WHITESPACE
['adjoint-steps', 'step-rows', 'padded-copy', 'rows', 'jam', 'taps', 'gather-rows', 'pieces', 'blocks',
 'split', 'steps', 'interchange', 'loops', 'scatter-rows', 'scatter']
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Tuple

from tensorexpr.errors import describe
from tensorexpr.ir import Compute, ScatterAdd, Tensor

from . import gather_rows, interchange, piecewise, residue_loops, rowsum, tapsum, target
from .scatter import scatter_rows_apply
from .patterns import jam_reduce, row_invariant_indices, row_reduce, transposed_axis


@dataclass(frozen=True)
class Strategy:
    """One row of the table: ``applies(lw, t) -> plan | None``,
    ``lower(lw, t, plan) -> statements | None`` and the parameters to print of a
    plan (``params(plan) -> ((name, value), ...)``).

    ``leads(lw, t, plan)``: how many leading axes of ``t`` its lowering runs as its
    outermost loops, in order (each one loop, or a main loop and a remainder), with
    nothing before them: what ``codegen.fuse`` decides a slab loop by, before anything
    is lowered (0, the default: none that fusion may rely on). ``declines``: its
    lowering may return None (then the next candidate runs). ``reorders``: it may add
    an element's sum in another order than the written one (then it never takes a
    tensor holding a compared sum: :func:`candidates`)."""
    name: str
    kind: type
    applies: Callable
    lower: Callable
    params: Callable = lambda plan: ()
    doc: str = ""
    leads: Callable = lambda lw, t, plan: 0
    declines: bool = False
    reorders: bool = False


def _no_carry(t) -> bool:
    return t.carry is None


def _padded_copy(lw, t):
    # planned with the program rewrite that added the copy (codegen.padcopy.rewrite),
    # for the tensor as written (not a form of it a fusion group lowers)
    p = lw.padded.get(t.uid)
    return (t.body, p) if p is not None and p.t is t else None


def _rows(lw, t):
    return row_reduce(t) if _no_carry(t) else None


def _jam(lw, t):
    return jam_reduce(t) if _no_carry(t) else None


def _taps(lw, t):
    return tapsum.applies(t) if _no_carry(t) else None


def _plain_shape(t) -> bool:
    """No transposed axis and no ``j // c`` split: the shapes ``blocks`` and ``split``
    take first."""
    return transposed_axis(t) is None and residue_loops.divisor(t) is None


def _gather_rows(lw, t):
    if not _no_carry(t):
        return None
    hoist = row_invariant_indices(t)
    return hoist if hoist and _plain_shape(t) else None


def _pieces(lw, t):
    if not _no_carry(t) or not t.axes or not _plain_shape(t):
        return None
    return piecewise.cut(t)


def _blocks(lw, t):
    return transposed_axis(t) if _no_carry(t) else None


def _split(lw, t):
    if not _no_carry(t) or transposed_axis(t) is not None:
        return None
    return residue_loops.plan(t)


def _steps(lw, t):
    # planned with the program rewrite that gave the per-step sums their buffers
    # (codegen.recurrence_steps.rewrite), for the recurrence as written
    p = lw.steps.get(t.uid)
    return p if p is not None and p.t is t and t.carry is not None else None


def _step_rows(lw, t):
    # (codegen.recurrence_steps.rewrite_rows): a tensor along a checkpointed gradient's
    # steps, holding sums
    p = lw.steps.get(t.uid)
    return p if p is not None and p.t is t and t.carry is None else None


def _adjoint_steps(lw, t):
    # planned with the program rewrite that gave the per-step terms their buffers
    # (codegen.adjoint_sums.rewrite), for the sum as written
    p = lw.adjoint_sums.get(t.uid)
    return p if p is not None and p.t is t else None


def _interchange(lw, t):
    # a ring of rows (codegen.checkpoint) is filled step by step: kept in ``loops``
    if t.carry is None or t.uid in lw.rings:
        return None
    return interchange.plan(t, target.current().lanes(t.dtype))


def _scatter_rows(lw, t):
    return True if scatter_rows_apply(t) else None


def _all_axes(lw, t, plan) -> int:
    return t.ndim


def _outer_axes(lw, t, plan) -> int:
    """Every axis but the innermost, which the strategy reorganises."""
    return t.ndim - 1


TABLE: Tuple[Strategy, ...] = (
    # first: the order of a sum over an adjoint's steps is the one a checkpointed
    # gradient can follow (codegen.adjoint_sums), whatever else would apply
    Strategy("adjoint-steps", Compute, _adjoint_steps,
             lambda lw, t, p: lw.compute_adjoint_sum(t, p),
             lambda p: p.params()),
    # as early: a checkpointed gradient computes these a step at a time, so every build does
    Strategy("step-rows", Compute, _step_rows, lambda lw, t, p: lw.compute_steps(t, p),
             lambda p: (("step sums", tuple(x.name for x in p.sums)),)),
    Strategy("padded-copy", Compute, _padded_copy,
             lambda lw, t, p: lw.compute_padded_copy(t, *p),
             lambda p: (("copy", p[1].fill.name),)),
    Strategy("rows", Compute, _rows, lambda lw, t, red: lw.compute_rows(t, red),
             leads=lambda lw, t, red: rowsum.leading_loops(t, red)),
    # each element's sum in vector lanes along its reduction: another order
    Strategy("jam", Compute, _jam, lambda lw, t, red: lw.compute_jam(t, red), reorders=True),
    # all taps per pass, partial sums per tap: another order
    Strategy("taps", Compute, _taps, lambda lw, t, p: lw.compute_taps(t, p),
             lambda p: (("taps", p.ntaps), ("registers", p.registers_only)),
             leads=tapsum.leading_loops, declines=True, reorders=True),
    Strategy("gather-rows", Compute, _gather_rows,
             lambda lw, t, hoist: lw.compute_gather_rows(t, hoist),
             lambda hoist: (("hoisted", len(hoist)), ("share", gather_rows.SHARE.split(",")[0])),
             leads=_outer_axes),
    # pieces holding sums are tensors of their own, each with its own loop nest
    Strategy("pieces", Compute, _pieces, lambda lw, t, cut: lw.compute_pieces(t, cut),
             lambda cut: cut.params(),
             leads=lambda lw, t, cut: 0 if piecewise.holds_sums(cut.spans) or not cut.inner
             else t.ndim - 1),
    # square blocks of the transposed axis and the innermost: the axes before it in order
    Strategy("blocks", Compute, _blocks, lambda lw, t, a: lw.compute_loops(t, transposed=a),
             lambda a: (("axis", a),), leads=lambda lw, t, a: a),
    Strategy("split", Compute, _split, lambda lw, t, p: lw.compute_residues(t, p),
             lambda p: (("factor", p.c),) + ((("pieces", tuple((lo, hi) for lo, hi, _ in
                                                                p.pieces)),)
                                              if len(p.pieces) > 1 else ()),
             leads=_outer_axes),
    Strategy("steps", Compute, _steps, lambda lw, t, p: lw.compute_steps(t, p),
             lambda p: (("step sums", tuple(x.name for x in p.sums)),)),
    Strategy("interchange", Compute, _interchange, interchange.lower),
    Strategy("loops", Compute, lambda lw, t: True, lambda lw, t, _: lw.compute_loops(t),
             leads=_all_axes),
    Strategy("scatter-rows", ScatterAdd, _scatter_rows,
             lambda lw, t, _: lw.scatter(t, rows=True)),
    Strategy("scatter", ScatterAdd, lambda lw, t: True,
             lambda lw, t, _: lw.scatter(t, rows=False)),
)

BY_NAME = {s.name: s for s in TABLE}


def candidates(lw, t: Tensor) -> List[Tuple[Strategy, object]]:
    """The strategies that apply to ``t``, in table order, with their plans (or, when
    ``lw.options`` forces one on ``t``, that one alone: an error if it does not apply).

    >>> import tensorexpr as te
    >>> from codegen.lower import Lowerer
    >>> from codegen.signature import Signature
    >>> A = te.placeholder((64, 64), name="A")
    >>> B = te.compute((64, 64), lambda i, j: A[j, i] + 1.0, name="B")
    >>> [s.name for s, _ in candidates(Lowerer(Signature([B], [A])), B)]
    ['blocks', 'loops']
    """
    # the plans are pure functions of the tensor and the program: asked again (fusion
    # planning, leading loops, lowering), they are looked up (the tensor is kept with
    # them, so its id is not reused while the entry lives)
    # (a slab's lowering adds size variables; a checkpointed recurrence, rings)
    key = (id(t), tuple(lw.params), tuple(lw.rings))
    hit = lw.plans.get(key)
    if hit is not None and hit[0] is t:
        found = hit[1]
    else:
        # a compared sum is added in written order wherever it is computed
        compared = lw.holds_compared(t)
        found = [(s, p) for s in TABLE if isinstance(t, s.kind)
                 and not (s.reorders and compared)
                 for p in [s.applies(lw, t)] if p is not None]
        lw.plans[key] = (t, found)
    forced = lw.options.forced(t.name)
    if forced is None:
        return found
    if forced not in BY_NAME:
        raise ValueError(f"Options(force=...) names strategy {forced!r} for tensor {t.name!r}; "
                         f"the strategies are {', '.join(BY_NAME)}")
    mine = [(s, p) for s, p in found if s.name == forced]
    if not mine:
        raise ValueError(f"strategy {forced!r} does not apply to {describe(t)}; "
                         f"the ones that do: {', '.join(s.name for s, _ in found)}")
    return mine


def leading_loops(lw, t: Tensor) -> int:
    """How many leading axes of ``t`` its lowering will run as its outermost loops, in
    order, with nothing before them (see :class:`Strategy`), decided from the table
    before anything is lowered: the first candidate's, or, when that one may decline,
    the least of it and those that may run after it.

    >>> import tensorexpr as te
    >>> from codegen.lower import Lowerer
    >>> from codegen.signature import Signature
    >>> A = te.placeholder((64, 64), name="A")
    >>> B = te.compute((64, 64), lambda i, j: A[j, i] + 1.0, name="B")
    >>> leading_loops(Lowerer(Signature([B], [A])), B)   # blocks of i and j
    0
    """
    n = t.ndim
    for s, plan in candidates(lw, t):
        n = min(n, s.leads(lw, t, plan))
        if not s.declines:
            return n
    return 0


def lower(lw, t: Tensor):
    """Lower ``t`` by the first strategy of :func:`candidates` that does not decline,
    recording the choice (and what its lowering notes) in ``lw.record``."""
    for s, plan in candidates(lw, t):
        lw.record.choose(t.name, s.name, s.params(plan))
        try:
            stmts = s.lower(lw, t, plan)
        finally:
            lw.record.done()
        if stmts is not None:
            return stmts
        lw.record.choices.pop()  # declined before lowering anything: not a choice
    raise ValueError(f"no strategy lowers {describe(t)}")
