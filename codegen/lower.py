"""Lowering: tensor IR -> loop-AST (``codegen.loopast``).

Each tensor becomes loops over its box storing one element per point (the last
axis innermost, the outermost independent loop marked parallel). Scalar
expressions become C expressions where that is faithful and statements where
it is not:

* a reduction becomes an accumulator and loops over its axes; when its
  ``where`` has affine conjuncts, isl (``polyhedral.loop_nest``) gives tight
  bounds and strides, the other conjuncts are tested at each point;
* a ``select`` whose branches need statements becomes an ``if`` (only the
  taken branch runs, so its reductions and reads run only when taken); so does
  the right operand of ``&`` (``|``), run only where the left one is true (false);
* a read is checked against the size of the tensor read unless isl proves
  it in range wherever it runs (under the enclosing boxes, ``where`` and
  ``select`` conditions): data-dependent indices are always checked. A bad
  index records an error site and the read yields 0.

A recurrence runs its carried axis sequentially (outermost, in its direction)
and the others in parallel within a step, or, where its self-reads keep some axes
fixed, those outside the carried loop (``codegen.interchange``); a scatter-add
zero-fills, then accumulates serially with a checked target index.

This module is the core: :class:`Lowerer` (its expression, row-sum, jam, gather-row
and scatter parts are mixins in ``lower_expr``, ``rowsum``, ``unroll_jam``,
``gather_rows`` and ``scatter``) lowers each tensor by the strategy
``codegen.strategies`` chooses and records the choice (``codegen.schedule``);
``codegen.pipeline`` runs it between the program rewrites and the loop-AST passes.
What the strategies do (for speed; every step keeps the IR's semantics, and a
strategy applies only when its preconditions hold):

* rows: a tensor whose body is ``epilogue(reduction)`` and whose reads walk
  along its innermost axis ``j`` computes the reduction for a tile of ``j`` at
  once, into an accumulator array, with isl loops over ``(reduction axes, j)``
  (``j`` innermost: contiguous, vectorizable). Each element still sums its
  points in the same order. An outer axis that those reads do not use (``i`` of
  a matmul, ``f`` of a convolution) is blocked ``row_block()`` rows at a time;
  bounds of ``j`` that move with a short reduction axis get one accumulator per
  value of it (store forwarding), combined at the end; the tiles all inside ``j``'s
  range loop apart from a ragged last one (constant trip counts, ``codegen.rowsum_tiles``);
* bounds of ``j`` that move with a short tap axis (padded convolutions, their
  input gradients) become a mask over the whole tile, with an unmasked version
  over zero-staged rows when the weights are finite (``codegen.rowsum_masked``); a
  row read at ``(x - k) // s`` is computed per residue of ``x`` (``codegen.rowsum_residues``);
* a sum that gathers with a stride (a transposed convolution's gradients, a strided
  convolution) had its reduction axes split by residues of the stride before lowering,
  its strided reads moved to de-interleaved planes (``codegen.residues``): its parts
  are stride-1 sums, lowered by the strategies below;
* sums whose innermost output axes are short taps (a convolution's weight
  gradient) compute all taps of a block of rows in one pass (``codegen.tapsum``),
  with the partial sums in vector registers over copies of the image when the sum
  is a convolution's weight gradient proper (``codegen.tapsum_registers``);
* dot-product-like sums (``H B^T``: no read walks along ``j``) read a transposed
  copy of the operand instead (``codegen.layout``; then they run by rows) when it
  is read by enough rows; the others reduce ``JAM`` x ``JAM`` elements in one loop
  nest, each read loaded once for its row or column; row sums narrower than a vector
  read zero-padded copies (whole vectors of lanes), and a large operand read down
  its columns by the row blocks (``A`` of ``A^T B``) a transposed copy (``codegen.layout``);
* ``sum(select(c, x, 0))`` becomes ``sum(x, where=c)`` (adding +0.0 to a sum
  that starts at +0.0 changes nothing), so ``c`` becomes a loop bound;
* float sums over several axes keep partial sums per value of their last axis
  and other sums run their innermost loop in vector lanes (``omp simd``
  reductions): the reassociation ir.py allows for reductions;
* independent innermost loops are ``omp simd`` (math functions vectorize too, with
  the same bits as in scalar code, see ``mathlib``); transposing nests run in square
  blocks; an innermost axis read through ``j // c`` loops over ``j // c`` with the ``c``
  remainders unrolled; floor division of indices isl proves non-negative is C's;
  a select whose branches are valid without its condition computes both and
  blends (conditional loads would keep the loop scalar);
* cheap elementwise intermediates are computed where they are read (inlined)
  instead of stored; reductions, recurrences and outputs are always stored;
* consecutive tensors that read each other only at their own row (softmax,
  layer norm, a perceptron) run in one parallel loop over slabs of rows
  (``codegen.fuse``); a loop nest runs on threads only when its estimated work
  exceeds a threshold measured at run time (``codegen.threads``).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple

from tensorexpr.ir import (Axis, Binary, Compute, Const, Expr, Placeholder, Read, Reduce,
                           ScatterAdd,
                           Tensor, fresh_uid, tensor_exprs, walk)
from tensorexpr.transform import const_value, free_axes

from . import (finite_flags, fuse, padcopy, piecewise, residue_loops, strategies, tapsum,
               target)
from .cexpr import I64, add, cast, mul, ring_row
from .loopast import (Block, Buffer, CExpr, Comment, Decl, For, Kernel, Lit, Op, Stmt, Store, Var,
                      simd_safe)
from .patterns import TRANSPOSE_BLOCK, compared_sums, inlinable
from .program import Program, Site
from .replay import Replays
from .schedule import DEFAULT, Options, Recorder
from .scope import Scope
from .size_bound import Budget
from .gather_rows import GatherRowsLowering
from .lower_expr import ExprLowering
from .rowsum import RowSumLowering
from .scatter import ScatterLowering
from .unroll_jam import JamLowering


#: below this many estimated operations a loop nest is serial on any machine; above it,
#: the generated code compares the estimate with a threshold measured at run time
#: (``codegen.threads``)
SERIAL_WORK = 1 << 12
#: the largest work estimate written in the C (2^40 operations: always worth threads)
WORK_CAP = 1 << 40



class Lowerer(ExprLowering, RowSumLowering, JamLowering, GatherRowsLowering,
              ScatterLowering):
    """Lower the tensors of a :class:`codegen.signature.Signature` into one :class:`Kernel`.

    >>> import tensorexpr as te
    >>> from codegen.signature import Signature
    >>> A = te.placeholder((4,), name="A")
    >>> B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    >>> prog = Lowerer(Signature([B], [A])).program()
    >>> [b.name for b in prog.kernel.buffers]
    ['b0', 'b1']
    """

    def __init__(self, sig, title: str = "", options: Options = DEFAULT,
                 tensors: Optional[Sequence[Tensor]] = None,
                 scratch: Sequence[Tuple[Tensor, str]] = (), padded=None, steps=None,
                 adjoint_sums=None):
        """``tensors``: the computed tensors to lower, in order, when a rewrite of the
        program (``codegen.pipeline``) changed them (default: the signature's);
        ``scratch``: ``(tensor, note)`` of the tensors a strategy computes inside another
        one's loop nest (buffers of their own, after the others); ``padded``: the sums
        that read zero-padded copies (``codegen.padcopy.rewrite``); ``steps``: the
        recurrences run by steps (``codegen.recurrence_steps.rewrite``); ``adjoint_sums``:
        the sums added a step at a time (``codegen.adjoint_sums.rewrite``)."""
        self.sig = sig
        self.title = title
        self.options = options
        #: the choices of this lowering (``codegen.schedule``)
        self.record = Recorder(options)
        #: the lowerings of tensors alike but for their names, kept for replay (``codegen.alike``)
        self.alike = Replays(self)
        self.counters: Dict[str, int] = {}
        self.sites: List[Site] = []
        self.tensors: List[Tensor] = list(sig.inputs) + list(
            tensors if tensors is not None else
            [t for t in sig.order if not isinstance(t, Placeholder)])
        #: the tensors lowered in turn (the scratch ones are lowered inside others)
        self.lowered: List[Tensor] = [t for t in self.tensors if not isinstance(t, Placeholder)]
        notes = {t.uid: note for t, note in scratch}
        self.tensors += [t for t, _ in scratch]
        self.padded = dict(padded or {})
        self.steps = dict(steps or {})
        self.adjoint_sums = dict(adjoint_sums or {})
        #: uids of the padded copies computed so far (one several sums read is made once)
        self.copies_made: set = set()
        #: input buffer -> its finiteness flag, shared by the kernel (None: a flag per
        #: check); the scans made of each (``codegen.finite_flags``)
        self.flags: Optional[Dict[str, Var]] = None
        self.scans: Dict[str, list] = {}
        self.buf: Dict[int, Buffer] = {}
        self.dims: Dict[int, Tuple[Expr, ...]] = {}
        #: tensor uid -> per-axis offsets: a part of another tensor's buffer (a piece of
        #: ``compute_pieces`` lowered as a tensor of its own) stores element x at x + shift
        self.shifts: Dict[int, Tuple[int, ...]] = {}
        #: the strategy table's plans per tensor (``codegen.strategies.candidates``)
        self.plans: Dict[tuple, tuple] = {}
        for k, t in enumerate(self.tensors):
            b = Buffer(f"b{k}", t.dtype, isinstance(t, Placeholder), notes.get(
                t.uid, f"{t.name}{' (input)' if isinstance(t, Placeholder) else ''}"))
            self.buf[t.uid] = b
            self.dims[t.uid] = t.dims
            if isinstance(t, Compute) and t.self_ref is not None:
                self.buf[t.self_ref.uid] = b
                self.dims[t.self_ref.uid] = t.dims
        self.sizes = {name: Var(f"n{k}", I64) for k, name in enumerate(sig.size_names)}
        #: size variables isl may see in bounds (``fuse`` adds a slab's bounds while lowering it)
        self.params: Tuple[str, ...] = tuple(sig.size_names)
        #: the tensor being lowered (the owner of the error sites recorded)
        self.owner: Optional[Tensor] = None
        #: tensor uid -> (axis, rows): a ring of ``rows`` along ``axis``, holding index ``x``
        #: at ``x mod rows`` (``codegen.checkpoint``'s rolling state)
        self.rings: Dict[int, Tuple[int, Expr]] = {}
        #: cheap elementwise intermediates evaluated where they are read, never stored
        self.inline = inlinable(sig)
        #: the temporaries its lowering may make (a backstop: ``codegen.size_bound``)
        self.budget = Budget(sig)
        ExprLowering.__init__(self)
        self.compared = compared_sums([e for t in self.tensors for e in tensor_exprs(t)])
        # a tensor run by steps computes its sums in per-step tensors nothing compares:
        # they are compared sums where the tensor's are (a max's tie test recomputing
        # M_sum found no tie where M_sum's step added its 17 terms in 16 lanes)
        for plan in self.steps.values():
            for part in (*plan.sums, plan.rest):
                self.derived(plan.t, part)

    def holds_compared(self, t: Tensor) -> bool:
        """Does ``t``'s body hold a sum whose value is compared (``patterns.compared_sums``):
        one each of its lowerings adds in the order written?

        >>> import tensorexpr as te
        >>> from codegen.signature import Signature
        >>> X = te.placeholder((4, 3), name="X")
        >>> k, r = te.reduce_axis(3, name="k"), te.reduce_axis(4, name="r")
        >>> M = te.compute((), lambda: te.max(te.sum(X[r, k], axis=k), axis=r), name="M")
        >>> S = te.compute((4,), lambda i: te.sum(X[i, k], axis=k), name="S")
        >>> lw = Lowerer(Signature([M, S], [X]))
        >>> lw.holds_compared(M), lw.holds_compared(S)
        (True, False)
        """
        body = getattr(t, "body", None)
        return body is not None and any(id(x) in self.compared for x in walk(body, unique=True))

    def derived(self, t: Tensor, new: Tensor) -> None:
        """``new`` computes (some of) ``t``'s points, rewritten (a piece, a residue split):
        if ``t`` holds a compared sum, ``new``'s sums are compared sums too, so that every
        strategy lowering it keeps their written order."""
        if self.holds_compared(t):
            self.compared |= {id(x) for x in walk(new.body, unique=True)
                              if isinstance(x, Reduce) and x.op == "sum"}

    def fresh(self, prefix: str, dtype: str) -> Var:
        self.budget.spend(1, self.owner)
        k = self.counters.get(prefix, 0)
        self.counters[prefix] = k + 1
        return Var(f"{prefix}{k}", dtype)

    def program(self) -> Program:
        """Every tensor's loop nest, in order: row-fusion groups (``codegen.fuse``) in one
        loop over slabs where their members' strategies allow it (decided from the
        strategy table before lowering them), the others alone."""
        body: List[Stmt] = []
        self.flags, self.scans = {}, {}   # an input's finiteness scanned once (finite_flags)
        computed = self.lowered
        fixed = set(self.adjoint_sums) | set(self.steps)
        groups = fuse.plan(computed, self.inline, fixed) if self.options.fuse else \
            [[t] for t in computed]
        # a sum added a step at a time (codegen.adjoint_sums), or a tensor by steps, is
        # never fused: its order is the one a checkpointed gradient follows
        groups = [h for g in groups for h in (
            [[t] for t in g] if any(t.uid in self.adjoint_sums or t.uid in self.steps
                                    for t in g) else [g])]
        for group in groups:
            nslab, blocker = fuse.decide(self, group)       # before anything is lowered
            names = tuple(t.name for t in group if t.uid not in self.inline)
            if nslab:
                self.record.fuse(names, "planes" if nslab == 2 else "rows")
                body.append(Block(tuple(fuse.lower_group(self, group, nslab))))
                continue
            if blocker is not None:
                self.record.unfused.append((names, blocker.name))
            body.extend(self.lower_alone(group))
        body = finite_flags.hoist(body, self.scans)
        kernel = Kernel(self.title, tuple((v, n) for n, v in self.sizes.items()),
                        tuple(self.buf[t.uid] for t in self.tensors), tuple(body))
        return Program(kernel, self.tensors, self.sites)

    def lower_alone(self, tensors: Sequence[Tensor]) -> List[Stmt]:
        """Each of ``tensors`` in its own loop nest (or as a comment, if inlined)."""
        body: List[Stmt] = []
        for t in tensors:
            self.owner = t
            if t.uid in self.inline:
                body.append(Comment(f"{t} [computed where it is read]"))
                continue
            if not isinstance(t, (ScatterAdd, Compute)):
                raise TypeError(f"the C backend cannot lower {t!r}")
            stmts = self.compute(t)
            body.append(Block((Comment(str(t)),) + tuple(stmts)))
        return body

    # {{{ tensors

    def offset(self, uid: int, idx: Sequence[CExpr]) -> CExpr:
        """Row-major element offset of ``idx`` in the buffer of tensor ``uid`` (a ring's
        rows modulo their count, see :attr:`rings`)."""
        dims = self.dims[uid]
        if not idx:
            return Lit(0, I64)
        if uid in self.shifts:
            idx = [x if d == 0 else add(x, Lit(d, I64)) for x, d in zip(idx, self.shifts[uid])]
        ring = self.rings.get(uid)
        if ring is not None:
            c, rows = ring
            dims, idx = list(dims), list(idx)
            dims[c] = rows
            idx[c] = ring_row(idx[c], self.size_expr(rows))
        out = idx[0]
        for d, x in zip(dims[1:], idx[1:]):
            out = add(mul(out, self.size_expr(d)), x)
        return out

    def same_buffer(self, new: Tensor, old: Tensor) -> None:
        """Store ``new`` (a rewrite of ``old`` over the same elements: its residues, the
        rest of a step) where ``old`` is stored: its buffer and dimensions, and the
        shift of a piece (``compute_piece_tensors``) or the ring of rows
        (``codegen.checkpoint``) ``old`` is kept in, if any; without them a piece's
        rewrite wrote at the start of the buffer."""
        self.buf[new.uid] = self.buf[old.uid]
        self.dims[new.uid] = self.dims.get(old.uid, old.dims)
        if old.uid in self.shifts:
            self.shifts[new.uid] = self.shifts[old.uid]
        if old.uid in self.rings:
            self.rings[new.uid] = self.rings[old.uid]

    def stored_at(self, uid: int, indices: Sequence[Expr]) -> Tuple[Tuple[Expr, ...],
                                                                   Tuple[Expr, ...]]:
        """``(indices, dims)``: where the element ``indices`` of tensor ``uid`` lies in
        its buffer, as IR, row-major in ``dims``. :meth:`offset` is the same address
        as C (a ring's carry row modulo its row count, see :attr:`rings`), so that
        :meth:`affine_offset` flattens the address actually used.

        >>> import tensorexpr as te
        >>> from codegen.signature import Signature
        >>> A = te.placeholder((4, 3), name="A")
        >>> B = te.compute((4, 3), lambda i, j: A[i, j] * 2.0, name="B")
        >>> Lowerer(Signature([B], [A])).stored_at(A.uid, B.body.a.indices)[1]
        (4, 3)
        """
        if uid in self.shifts:
            indices = [x if d == 0 else Binary("add", x, Const(d, I64), I64)
                       for x, d in zip(indices, self.shifts[uid])]
        ring = self.rings.get(uid)
        if ring is None or not indices:
            return tuple(indices), tuple(self.dims[uid])
        c, rows = ring
        dims, indices = list(self.dims[uid]), list(indices)
        dims[c] = rows
        indices[c] = Binary("mod", indices[c], rows, I64)
        return tuple(indices), tuple(dims)

    def size_expr(self, d: Expr) -> CExpr:
        """A size (constant or expression of size variables) as a C expression."""
        return self.expr(d, Scope({}, (), (), {}), [])

    def compute(self, t: Tensor) -> List[Stmt]:
        """``t``'s statements, by the strategy ``codegen.strategies`` chooses (recorded)."""
        return strategies.lower(self, t)

    def compute_padded_copy(self, t: Compute, red: Reduce, p) -> List[Stmt]:
        """A gather sum inside a zero-padded copy (``codegen.padcopy``'s plan ``p``)."""
        return padcopy.lower(self, t, red, p)

    def compute_taps(self, t: Compute, p) -> Optional[List[Stmt]]:
        """Short innermost tap axes, all taps per pass (``codegen.tapsum``'s plan ``p``)."""
        return tapsum.lower(self, t, p)

    def compute_steps(self, t: Compute, p) -> List[Stmt]:
        """The recurrence ``t`` by steps (``codegen.recurrence_steps``' plan ``p``): a
        sequential loop over its carried axis, each step computing its sums (each by the
        strategy the table picks for it), then the rest of the body, both over the other
        axes in parallel."""
        ax = t.axes[p.axis]
        s = self.fresh("s", I64)
        body = self.step_of(t, p, s)
        return [For(s, self.size_expr(ax.lo), self.size_expr(ax.hi), 1, Block(tuple(body)),
                    descending=t.carry is not None and t.carry.step < 0,
                    note=ax.name + " (steps)")]

    def step_of(self, t: Compute, p, s: Var) -> List[Stmt]:
        """Step ``s`` (a C variable) of the recurrence ``t`` run by steps: the one
        lowering of a step, shared by :meth:`compute_steps` and the checkpointed
        gradients of ``codegen.checkpoint`` (which run steps one at a time), so that
        both evaluate every element by the same C."""
        outer_sizes, outer_params = dict(self.sizes), self.params
        # the step is a size variable of the sums while they are lowered (isl sees it
        # as a parameter their domains bound); not a size of the kernel
        s1 = self.fresh("s", I64)
        self.sizes[p.step] = s1
        self.params = tuple(outer_params) + (p.step,)
        self.same_buffer(p.rest, t)   # (kept in a ring of rows, codegen.checkpoint: so is rest)
        body: List[Stmt] = [Decl(s1, add(s, Lit(1, I64)))]  # (see Plan.step)
        for S in p.sums:
            body.append(Block((Comment(str(S)),) + tuple(self.compute(S))))
        body.extend(self.compute_loops(p.rest, at_step=s, step_axis=p.axis))
        self.sizes, self.params = outer_sizes, outer_params
        self.record.note("sums per step", len(p.sums))
        return body

    def compute_adjoint_sum(self, t: Compute, p) -> List[Stmt]:
        """The sum over an adjoint's steps ``t`` a step at a time (``codegen.adjoint_sums``'
        plan ``p``): zero, then each step's terms added, from the last step down."""
        lo, hi = self.adjoint_bounds(p)
        s = self.fresh("s", I64)
        return self.adjoint_zero(p) + [
            For(s, lo, hi, 1, Block(tuple(self.adjoint_step(p, s))),
                descending=True, note=p.axis.name + " (steps, last first)")]

    def adjoint_bounds(self, p) -> Tuple[CExpr, CExpr]:
        """The steps ``[lo, hi)`` the sum over an adjoint's steps of plan ``p`` adds, as C
        (a symbolic ``T``: expressions of the kernel's sizes)."""
        return tuple(Lit(int(b.value), I64) if isinstance(b, Const) else self.size_expr(b)
                     for b in p.bounds())

    def adjoint_zero(self, p) -> List[Stmt]:
        """``p.t = 0`` (a sum starts at +0.0)."""
        t = p.t
        zero = Compute(f"{t.name}_zero", t.dims, t.dtype, fresh_uid(), t.origin,
                       axes=p.add.axes, body=Const(0.0, t.dtype))
        self.buf[zero.uid], self.dims[zero.uid] = self.buf[t.uid], t.dims
        return self.compute_loops(zero)

    def adjoint_step(self, p, s: Optional[CExpr], after: Optional[CExpr] = None) -> List[Stmt]:
        """Step ``s`` (a C variable in the sum's steps) of the sum of plan ``p``: its terms,
        by the strategy the table picks for them, added to the running sum. The one
        lowering of a step, shared by :meth:`compute_adjoint_sum` and the checkpointed
        gradients of ``codegen.checkpoint``. ``after``: ``s + 1`` as C, instead of ``s``
        (the only use of ``s``: a replayed step fills it in, ``codegen.replay``)."""
        outer_sizes, outer_params = dict(self.sizes), self.params
        s1 = self.fresh("s", I64)  # the step plus one (isl takes sizes to be >= 1)
        self.sizes[p.step] = s1
        self.params = tuple(outer_params) + (p.step,)
        self.buf[p.add.uid], self.dims[p.add.uid] = self.buf[p.t.uid], p.t.dims
        body: List[Stmt] = [Decl(s1, after if after is not None else add(s, Lit(1, I64))),
                            Block((Comment(str(p.term)),) + tuple(self.compute(p.term)))]
        body.extend(self.compute_loops(p.add))
        self.sizes, self.params = outer_sizes, outer_params
        return body

    def compute_loops(self, t: Compute, transposed: Optional[int] = None,
                      at_step: Optional[Var] = None,
                      step_axis: Optional[int] = None) -> List[Stmt]:
        """Loops over ``t``'s box (its carried axis outermost and sequential), the
        innermost in vector lanes; ``transposed``: that axis and the innermost in square
        blocks; ``at_step``: a recurrence's loops at that step of its carried axis
        (the variable of an enclosing loop), or of ``step_axis`` for a tensor that is no
        recurrence (``codegen.recurrence_steps.plan_rows``)."""
        axes = list(t.axes)
        carry = t.carry.axis if t.carry is not None else (
            step_axis if at_step is not None else None)
        order = ([carry] if carry is not None else []) + [k for k in range(len(axes)) if k != carry]
        vars_ = {k: self.fresh("i", I64) if k != carry or at_step is None else at_step
                 for k in range(len(axes))}
        scope = Scope({axes[k].uid: vars_[k] for k in order}, tuple(axes), (), {})
        a = transposed
        if t.carry is not None:
            self.record.note("sequential", axes[carry].name)
        stmts: List[Stmt] = []
        value = self.expr(t.body, scope, stmts)
        offset = self.offset(t.uid, [vars_[k] for k in range(len(axes))])
        stmts.append(Store(self.buf[t.uid].name, offset, cast(value, t.dtype)))
        body = Block(tuple(stmts))
        # The innermost loop runs in vector lanes when it is not the carried axis: its
        # points are independent (each stores its own element).
        simd = bool(order) and order[-1] != carry and simd_safe(body)
        par = [k for k in order if k != carry]
        work = self.work(t, [axes[k] for k in par])
        if a is not None:
            return self.compute_blocks(t, a, vars_, body, work)
        for k in reversed(order):
            if k == carry and at_step is not None:
                continue
            ax = axes[k]
            parallel = bool(par) and k == par[0] and work is not False
            body = Block((For(vars_[k], self.size_expr(ax.lo), self.size_expr(ax.hi), 1, body,
                              descending=(k == carry and t.carry.step < 0),
                              parallel=parallel, work=work if parallel else None,
                              note=ax.name + (" (sequential)" if k == carry else ""),
                              simd=simd and k == order[-1]),))
        return list(body.stmts)

    def compute_residues(self, t: Compute, plan: residue_loops.Residues,
                         hoist: bool = True) -> List[Stmt]:
        """``t`` (no recurrence) with its innermost axis as ``c*q + r`` (``plan``,
        ``codegen.residue_loops``): one loop over ``q`` per piece, storing the ``c``
        residues' elements of each ``q``. The outermost axis is threaded; for a 1-d
        tensor that is the longest piece's loop. ``hoist``: the row's own floor
        divisions and modulos computed once per row."""
        axes = list(t.axes)
        outer = [self.fresh("i", I64) for _ in axes[:-1]]
        work = self.work(t, axes)
        longest = max(range(len(plan.pieces)),
                      key=lambda k: plan.pieces[k][1] - plan.pieces[k][0])
        # the row's own // and % (an upsampling's source row (y - 1) // 2) once per row:
        # gcc left the floor-division helper in the loop, and the loop scalar
        loops: List[Stmt] = []
        row = Scope(dict(zip((a.uid for a in axes[:-1]), outer)), tuple(axes[:-1]), (), {})
        hoisted: Dict[Expr, CExpr] = {}
        for e in residue_loops.row_divisions(plan) if hoist else ():
            v = self.fresh("k", I64)
            loops.append(Decl(v, self.expr(e, row, loops)))
            hoisted[e] = v
        for k, (lo, hi, bodies) in enumerate(plan.pieces):
            qv = self.fresh("i", I64)
            scope = Scope({ax.uid: v for ax, v in zip(axes[:-1] + [plan.q], outer + [qv])},
                          tuple(axes[:-1]) + (plan.q,), (plan.q >= lo, plan.q < hi),
                          dict(hoisted))
            stmts: List[Stmt] = []
            for r, body in enumerate(bodies):
                value = self.expr(body, scope, stmts)
                at = add(mul(qv, Lit(plan.c, I64)), Lit(r, I64))
                stmts.append(Store(self.buf[t.uid].name, self.offset(t.uid, outer + [at]),
                                   cast(value, t.dtype)))
            block = Block(tuple(stmts))
            parallel = not outer and k == longest and work is not False
            loops.append(For(qv, Lit(lo, I64), Lit(hi, I64), 1, block, simd=simd_safe(block),
                             parallel=parallel, work=work if parallel else None,
                             note=f"{plan.q.name} in [{lo}, {hi})"))
        return self.outer_loops(axes[:-1], outer, loops, work)

    def compute_pieces(self, t: Compute, plan: piecewise.Cut) -> List[Stmt]:
        """``t`` (no recurrence) with its innermost loop cut into ``plan``'s pieces
        (``codegen.piecewise``): one loop per piece, over that piece's body. The outermost
        axis is threaded; for a 1-d tensor that is the longest piece's loop. Pieces
        holding sums, or along an outer axis, are tensors of their own."""
        cut = list(plan.spans)
        if piecewise.holds_sums(cut) or not plan.inner:
            return self.compute_piece_tensors(t, cut, plan.d)
        # the pieces of a row are its residues modulo 1
        whole = residue_loops.Residues(1, t.axes[-1], tuple((lo, hi, (body,))
                                                            for lo, hi, body in cut))
        return self.compute_residues(t, whole, hoist=False)

    def compute_piece_tensors(self, t: Compute, cut: List[Tuple[int, int, Expr]],
                              d: int = -1) -> List[Stmt]:
        """``t``'s pieces (``codegen.piecewise``) when they hold sums: each a tensor of its
        own over its part of the innermost axis, stored into ``t``'s buffer there and
        lowered by the strategy the table picks for it (the gradient of a weight read
        as three gates ``W[k, g * H + j]`` is three contractions, each then row-tiled,
        not one dot product per element)."""
        out: List[Stmt] = []
        # (``t`` may itself be a piece: its own shift and its parent's buffer carry over)
        base = self.shifts.get(t.uid, (0,) * t.ndim)
        d = d % t.ndim
        for sub, lo in piecewise.piece_tensors(t, cut, d):
            self.derived(t, sub)
            self.buf[sub.uid] = self.buf[t.uid]
            self.dims[sub.uid] = self.dims[t.uid]
            self.shifts[sub.uid] = base[:d] + (base[d] + lo,) + base[d + 1:]
            out.append(Block((Comment(str(sub)),) + tuple(self.compute(sub))))
        return out

    def outer_loops(self, axes: Sequence[Axis], vars_: Sequence[Var], body: List[Stmt],
                    work) -> List[Stmt]:
        """``body`` inside loops over ``axes`` (``vars_``), the outermost threaded."""
        nest = body
        for k in reversed(range(len(axes))):
            ax = axes[k]
            parallel = k == 0 and work is not False
            nest = [For(vars_[k], self.size_expr(ax.lo), self.size_expr(ax.hi), 1,
                        Block(tuple(nest)), parallel=parallel,
                        work=work if parallel else None, note=ax.name)]
        return nest

    def compute_blocks(self, t: Compute, a: int, vars_, body: Block, work) -> List[Stmt]:
        """``t``'s loops (no recurrence: any order is valid) with the innermost axis and
        axis ``a`` in square blocks of ``TRANSPOSE_BLOCK``: a read along ``a`` (a
        transpose) then reuses each cache line it brings in before it is evicted."""
        axes = list(t.axes)
        j = len(axes) - 1
        B = TRANSPOSE_BLOCK
        tiles = {k: self.fresh("i", I64) for k in (a, j)}
        loops = []
        for k in range(len(axes) - 1):
            if k != a:
                ax = axes[k]
                loops.append(For(vars_[k], self.size_expr(ax.lo), self.size_expr(ax.hi), 1,
                                 Block(()), note=ax.name))
        for k in (a, j):
            ax = axes[k]
            loops.append(For(tiles[k], self.size_expr(ax.lo), self.size_expr(ax.hi), B,
                             Block(()), note=ax.name + " (block)"))
        for k in (a, j):
            ax = axes[k]
            hi = Op("min", (add(tiles[k], Lit(B, I64)), self.size_expr(ax.hi)), I64)
            loops.append(For(vars_[k], tiles[k], hi, 1, Block(()), note=ax.name))
        for k in reversed(range(len(loops))):
            extra = {}
            if k == 0 and work is not False:
                extra = dict(parallel=True, work=work)
            body = Block((replace(loops[k], body=body, **extra),))
        return list(body.stmts)

    def work_of(self, dims: Sequence[Expr]):
        """:meth:`work` of a loop over a box of ``dims`` doing one operation per point."""
        static, symbolic = 1, []
        for f in dims:
            c = const_value(f)
            if c is None:
                symbolic.append(f)
            else:
                static *= max(c, 1)
        # past any thread threshold; a GRU's VJP multiplied its extents past 2^63, an
        # integer constant C cannot hold (and a region adds several loops' work)
        static = min(static, WORK_CAP)
        if not symbolic:
            return Lit(static, I64) if static >= SERIAL_WORK else False
        out: CExpr = Lit(static, I64)
        for f in symbolic:
            out = mul(out, self.size_expr(f))
        return out

    def work(self, t: Compute, axes: Sequence[Axis], dense: bool = False):
        """Estimated operations of one parallel loop nest: None (large), False (too small
        to be worth threads) or a C expression for symbolic sizes.

        The thread threshold prices an operation at a streaming loop's cost
        (``codegen.threads``); a ``dense`` nest of a contraction whose two operands are
        each reused across an output axis the other uses (a register-tiled matrix
        product: each vector FMA does a vector's lanes of operations on operands held in
        registers) counts one operation per vector; a sum streaming its operand once
        (a column sum, a matrix-vector product) keeps the streaming count. A tanh RNN's step sums (16 x 128 x 128) ran on the team
        each step and took 4x longer on 2 threads than on 1."""
        factors = [ax.hi for ax in axes]
        for x in walk(t.body, unique=True):
            if isinstance(x, Reduce):
                for ax in x.axes:
                    lo, hi = const_value(ax.lo), const_value(ax.hi)
                    factors.append(Const(hi - lo, I64) if lo is not None and hi is not None
                                   else Binary("sub", ax.hi, ax.lo, I64))
        if not (dense and _reuses_both(t)):
            return self.work_of(factors)
        lanes = target.current().lanes(t.dtype)
        static = [f for f in factors if const_value(f) is not None]
        total = 1
        for f in static:
            total *= max(const_value(f), 1)
        rest = [f for f in factors if const_value(f) is None]
        return self.work_of([Const(max(total // lanes, 1), I64)] + rest)


# {{{ helpers


def _reuses_both(t: Compute) -> bool:
    """Does a sum of ``t``'s body read two tensors each missing an output axis that the
    other uses (``A[i, k] * B[k, j]``: A reused across j, B across i)?"""
    out = {a.uid for a in t.axes}
    for r in (x for x in walk(t.body, unique=True) if isinstance(x, Reduce)):
        used = [out & {a.uid for a in free_axes(x)} for x in walk(r.body, unique=True)
                if isinstance(x, Read)]
        if any(a - b and b - a for a in used for b in used):
            return True
    return False


# }}}
