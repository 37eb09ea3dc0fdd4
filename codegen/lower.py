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
and the others in parallel within a step; a scatter-add zero-fills, then
accumulates serially with a checked target index.

Schedule (for speed; every step keeps the IR's semantics, and is skipped when
its preconditions do not hold):

* rows: a tensor whose body is ``epilogue(reduction)`` and whose reads walk
  along its innermost axis ``j`` computes the reduction for a tile of ``j`` at
  once, into an accumulator array, with isl loops over ``(reduction axes, j)``
  (``j`` innermost: contiguous, vectorizable). Each element still sums its
  points in the same order. An outer axis that those reads do not use (``i`` of
  a matmul, ``f`` of a convolution) is blocked ``row_block()`` rows at a time;
  bounds of ``j`` that move with a short reduction axis get one accumulator per
  value of it (store forwarding), combined at the end; the tiles all inside ``j``'s
  range loop apart from a ragged last one (constant trip counts, ``codegen.rowtiles``);
* bounds of ``j`` that move with a short tap axis (padded convolutions, their
  input gradients) become a mask over the whole tile, with an unmasked version
  over zero-staged rows when the weights are finite (``codegen.fulltile``); a
  row read at ``(x - k) // s`` is computed per residue of ``x`` (``codegen.residue``);
* sums whose innermost output axes are short taps (a convolution's weight
  gradient) compute all taps of a block of rows in one pass (``codegen.taps``),
  with the partial sums in vector registers over copies of the image when the sum
  is a convolution's weight gradient proper (``codegen.tapregs``);
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

from tensorexpr import polyhedral
from tensorexpr.ir import (Axis, Binary, Cast, Compute, Const, Expr, Placeholder, Read, Reduce,
                           ScatterAdd, Select, SizeVar, Tensor, Unary, fresh_uid,
                           is_float, promote, same, walk,
                           children, evaluated_with, postorder)
from tensorexpr.transform import const_value, flat_index, free_axes
from tensorexpr.polyhedral import LoopBlock, LoopFor, LoopIf, LoopLet, LoopPoint

from . import (checkpoint, fulltile, fuse, layout, padcopy, peel, regions, regtile, residue,
               rowtiles, target, taps)
from .cexpr import I64, add, all_of, cast, checked, fold, identity, mul, wrap_int, zero
from .loopast import (Accumulate, Assign, Block, Buffer, CExpr, Comment, Decl, For, If,
                      Kernel, Lit, Load, Local, Op, Stmt, Store, Var, loads, mark_inner_simd,
                      simd_safe)
from .patterns import (JAM, TRANSPOSE_BLOCK, closed_value, conj, inlinable, jam_reduce, pure,
                       row_block, row_block_axis, row_invariant_indices, row_reduce, split_factor,
                       transposed_axis, uses, where_form)
from .program import READ_OUT_OF_RANGE, SCATTER_OUT_OF_RANGE, Program, Site
from .scope import Scope


#: below this many estimated operations a loop nest is serial on any machine; above it,
#: the generated code compares the estimate with a threshold measured at run time
#: (``codegen.threads``)
SERIAL_WORK = 1 << 12

#: columns of a row accumulator (elements of the innermost output axis computed together)
ROW_TILE = 256


def row_tile_blocked(dtype: str) -> int:
    """The tile when :func:`row_block` rows are computed together: their accumulators fit
    the registers (``tile_vectors`` vectors a row, so one broadcast serves two FMAs; on
    AVX-512, 8 x 32 floats ran a 512 x 256 x 512 A^T B at 110 GFLOP/s, 8 x 16 at 82)."""
    t = target.current()
    return t.tile_vectors * t.lanes(dtype)

#: interleaved partial results of a max/min over one axis
LANES = 16
#: a float sum keeps partial sums per value of its last axis if it has at most this many
PARTIAL_SUMS = 4096


class Lowerer:
    """Lower the tensors of a :class:`codegen.signature.Signature` into one :class:`Kernel`.

    >>> import tensorexpr as te
    >>> from codegen.signature import Signature
    >>> A = te.placeholder((4,), name="A")
    >>> B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    >>> prog = Lowerer(Signature([B], [A])).program()
    >>> [b.name for b in prog.kernel.buffers]
    ['b0', 'b1']
    """

    def __init__(self, sig, title: str = ""):
        self.sig = sig
        self.title = title
        self.counters: Dict[str, int] = {}
        self.sites: List[Site] = []
        self.tensors: List[Tensor] = list(sig.inputs) + [
            t for t in sig.order if not isinstance(t, Placeholder)]
        self.buf: Dict[int, Buffer] = {}
        self.dims: Dict[int, Tuple[Expr, ...]] = {}
        for k, t in enumerate(self.tensors):
            b = Buffer(f"b{k}", t.dtype, isinstance(t, Placeholder),
                       f"{t.name}{' (input)' if isinstance(t, Placeholder) else ''}")
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
        self._affine: Dict[tuple, Optional[tuple]] = {}  # affine_offset's isl answers
        #: cheap elementwise intermediates evaluated where they are read, never stored
        self.inline = inlinable(sig)
        #: ids of float operations to compute once into a local (see ``_analyse``)
        self._bind: Dict[int, bool] = {}
        self._known: List[Expr] = []  # the analysed roots, kept alive: their ids are keys
        self._staging = False
        layout.install(self)  # transposed copies for dot-product sums (codegen.layout)

    def fresh(self, prefix: str, dtype: str) -> Var:
        k = self.counters.get(prefix, 0)
        self.counters[prefix] = k + 1
        return Var(f"{prefix}{k}", dtype)

    def program(self) -> Program:
        bounded = checkpoint.lower(self)
        if bounded is not None:
            return bounded
        body: List[Stmt] = []
        computed = [t for t in self.tensors if not isinstance(t, Placeholder)]
        for group in fuse.plan(computed, self.inline):
            fused = fuse.lower_group(self, group)
            if fused is not None:
                body.append(Block(tuple(fused)))
                continue
            body.extend(self.lower_alone(group))
        body = regions.merge(body)
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
            if isinstance(t, ScatterAdd):
                stmts = self.scatter(t)
            elif isinstance(t, Compute):
                stmts = self.compute(t)
            else:
                raise TypeError(f"the C backend cannot lower {t!r}")
            body.append(Block((Comment(str(t)),) + tuple(stmts)))
        return body

    # {{{ tensors

    def offset(self, uid: int, idx: Sequence[CExpr]) -> CExpr:
        """Row-major element offset of ``idx`` in the buffer of tensor ``uid`` (a ring's
        rows modulo their count, see :attr:`rings`)."""
        dims = self.dims[uid]
        if not idx:
            return Lit(0, I64)
        ring = self.rings.get(uid)
        if ring is not None:
            c, rows = ring
            dims, idx = list(dims), list(idx)
            dims[c] = rows
            idx[c] = fold("mod", idx[c], self.size_expr(rows), I64)
        out = idx[0]
        for d, x in zip(dims[1:], idx[1:]):
            out = add(mul(out, self.size_expr(d)), x)
        return out

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

    def compute(self, t: Compute) -> List[Stmt]:
        if t.carry is None:
            red = row_reduce(t)
            if red is not None:
                # a gather inside a zero-padded copy: a plain sum (codegen.padcopy)
                padded = padcopy.lower(self, t, red)
                return padded if padded is not None else self.compute_rows(t, red)
            red = jam_reduce(t)
            if red is not None:
                return self.compute_jam(t, red)
            tapped = taps.lower(self, t)  # short innermost axes: all taps per pass
            if tapped is not None:
                return tapped
            hoist = row_invariant_indices(t)
            if hoist and transposed_axis(t) is None and split_factor(t) is None:
                return self.compute_gather_rows(t, hoist)
        axes = list(t.axes)
        if t.carry is None and axes and transposed_axis(t) is None and split_factor(t) is None:
            cut = peel.pieces(t.body, axes[-1])
            if cut is not None:
                return self.compute_pieces(t, cut)
        carry = t.carry.axis if t.carry is not None else None
        order = ([carry] if carry is not None else []) + [k for k in range(len(axes)) if k != carry]
        vars_ = {k: self.fresh("i", I64) for k in range(len(axes))}
        scope = Scope({axes[k].uid: vars_[k] for k in order}, tuple(axes), (), {})
        a = transposed_axis(t) if carry is None else None
        c = split_factor(t) if carry is None and a is None else None
        body = Block(())
        if c is None:
            # Lowered once, in the form that is kept: a lowering thrown away would
            # leave its temporaries in the scope's memo, used where none is declared.
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
        if c is not None:
            # j = c*q + r with r unrolled: reads at j // c are contiguous in q (no gathers)
            k = len(axes) - 1
            j, q = axes[k], self.fresh("i", I64)
            stmts = []
            for r in range(c):
                jv = add(mul(q, Lit(c, I64)), Lit(r, I64))
                sc = scope.child(env={j.uid: jv})
                sc.memo.update(_split_memo(t.body, j, c, q, r))
                value = self.expr(t.body, sc, stmts)
                stmts.append(Store(self.buf[t.uid].name,
                                   self.offset(t.uid, [vars_[x] for x in range(k)] + [jv]),
                                   cast(value, t.dtype)))
            body = Block(tuple(stmts))
            vars_[k] = q
            axes[k] = Axis(j.name + f"//{c}", j.lo, Const(const_value(j.hi) // c, I64),
                           fresh_uid())
            simd = simd_safe(body)
        for k in reversed(order):
            ax = axes[k]
            parallel = bool(par) and k == par[0] and work is not False
            body = Block((For(vars_[k], self.size_expr(ax.lo), self.size_expr(ax.hi), 1, body,
                              descending=(k == carry and t.carry.step < 0),
                              parallel=parallel, work=work if parallel else None,
                              note=ax.name + (" (sequential)" if k == carry else ""),
                              simd=simd and k == order[-1]),))
        return list(body.stmts)

    def compute_pieces(self, t: Compute, cut: List[Tuple[int, int, Expr]]) -> List[Stmt]:
        """``t`` (no recurrence) with its innermost loop cut into ``cut``'s pieces
        (``codegen.peel``): one loop per piece, over that piece's body. The outermost
        axis is threaded; for a 1-d tensor that is the longest piece's loop."""
        axes = list(t.axes)
        j = axes[-1]
        outer = [self.fresh("i", I64) for _ in axes[:-1]]
        work = self.work(t, axes)
        longest = max(range(len(cut)), key=lambda k: cut[k][1] - cut[k][0])
        loops: List[Stmt] = []
        for k, (lo, hi, body) in enumerate(cut):
            jv = self.fresh("i", I64)
            scope = Scope({ax.uid: v for ax, v in zip(axes, outer + [jv])}, tuple(axes),
                           (j >= lo, j < hi), {})
            stmts: List[Stmt] = []
            value = self.expr(body, scope, stmts)
            stmts.append(Store(self.buf[t.uid].name, self.offset(t.uid, outer + [jv]),
                               cast(value, t.dtype)))
            block = Block(tuple(stmts))
            parallel = not outer and k == longest and work is not False
            loops.append(For(jv, Lit(lo, I64), Lit(hi, I64), 1, block, simd=simd_safe(block),
                             parallel=parallel, work=work if parallel else None,
                             note=f"{j.name} in [{lo}, {hi})"))
        return self.outer_loops(axes[:-1], outer, loops, work)

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

    def compute_gather_rows(self, t: Compute, hoist: List[Tuple[Read, int]]) -> List[Stmt]:
        """``t`` (no recurrence) whose data-dependent indices ``hoist`` (``idx[i]`` of
        ``E[idx[i], d]``) do not move along the innermost axis: they are loaded and
        checked once per row, and the row runs without checks (contiguous, in vector
        lanes). A row with a bad index runs the point-by-point loop instead, which
        records the error and reads 0 exactly as before."""
        axes = list(t.axes)
        j = axes[-1]
        outer = axes[:-1]
        vars_ = [self.fresh("i", I64) for _ in outer]
        oscope = Scope({ax.uid: v for ax, v in zip(outer, vars_)}, tuple(outer), (), {})
        pre: List[Stmt] = []
        bad: List[CExpr] = []
        known: Dict[Expr, CExpr] = {}
        for r, d in hoist:
            x = r.indices[d]
            if x in known:
                continue
            v = self.fresh("t", I64)
            pre.append(Decl(v, self.expr(x, oscope, pre)))
            known[x] = v
            size = self.size_expr(self.dims[r.tensor.uid][d])
            bad.append(Op("or", (Op("lt", (v, Lit(0, I64)), "bool"),
                                 Op("ge", (v, size), "bool")), "bool"))

        def row(memo) -> For:
            jv = self.fresh("i", I64)
            sc = oscope.child(axes=(j,), env={j.uid: jv})
            sc.memo.update(memo)
            stmts: List[Stmt] = []
            value = self.expr(t.body, sc, stmts)
            stmts.append(Store(self.buf[t.uid].name, self.offset(t.uid, vars_ + [jv]),
                               cast(value, t.dtype)))
            block = Block(tuple(stmts))
            return For(jv, self.size_expr(j.lo), self.size_expr(j.hi), 1, block, note=j.name,
                       simd=simd_safe(block))

        fast = row({("in range", x): v for x, v in known.items()})
        cond = bad[0]
        for b in bad[1:]:
            cond = Op("or", (cond, b), "bool")
        body = list(pre) + [If(cond, Block((row({}),)), Block((fast,)))]
        return self.outer_loops(outer, vars_, body, self.work(t, axes))

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

    def compute_jam(self, t: Compute, red: Reduce) -> List[Stmt]:
        """``t`` (body ``epilogue(red)``, a float sum) with ``JAM`` consecutive elements
        along its innermost axis ``j`` (and ``JAM`` along an outer axis whose rows share
        reads, when there is one) reduced in one loop nest, one accumulator each: a read
        that does not use ``j`` (``H[i, k]`` of ``H B^T``) is loaded once for the
        columns, one that does not use the row axis (``B[j, k]``) once for the rows.
        Each accumulator sums its own points (lanes reassociate, as for any sum)."""
        axes = list(t.axes)
        j, outer = axes[-1], axes[:-1]
        vars_ = [self.fresh("i", I64) for _ in outer]
        env = {ax.uid: v for ax, v in zip(outer, vars_)}
        work = self.work(t, axes)
        ri = row_block_axis(t, red, JAM)

        def block(rows: List[Optional[Var]], cols: List[CExpr]) -> List[Stmt]:
            scope = Scope(dict(env), tuple(outer) + (j,), (), {})
            pairs = [(r, c) for r in rows for c in cols]
            accs = [self.fresh("t", red.dtype) for _ in pairs]
            out: List[Stmt] = [Decl(a, identity(red.op, red.dtype)) for a in accs]

            def at(sc: Scope, r, c) -> Scope:
                bind = {j.uid: c}
                if r is not None:
                    bind[outer[ri].uid] = r
                return sc.child(env=bind)

            def point(inner: Scope, stmts: List[Stmt]):
                for a, (r, c) in zip(accs, pairs):
                    v = cast(self.expr(red.body, at(inner, r, c), stmts), red.dtype)
                    stmts.append(Accumulate(a, "sum", v))

            nest: List[Stmt] = []
            self.loops(red.axes, red.where, scope, point, nest)
            out.extend(mark_inner_simd(nest, tuple(("sum", a) for a in accs)))
            for a, (r, c) in zip(accs, pairs):
                es = at(scope, r, c)
                es.memo[red] = a
                value = self.expr(t.body, es, out)
                idx = [v if k != ri or r is None else r for k, v in enumerate(vars_)]
                out.append(Store(self.buf[t.uid].name, self.offset(t.uid, idx + [c]),
                                 cast(value, t.dtype)))
            return out

        def split(v: Var, lo: CExpr, hi: CExpr, inner, note: str, **kw) -> List[Stmt]:
            """``v`` over [lo, hi) JAM at a time (``inner(vars)``), then one at a time."""
            mid = add(lo, mul(fold("floordiv", fold("sub", hi, lo, I64), Lit(JAM, I64),
                                      I64), Lit(JAM, I64)))
            each = [self.fresh("i", I64) for _ in range(JAM)]
            decls = tuple(Decl(c, add(v, Lit(r, I64))) for r, c in enumerate(each))
            rv = self.fresh("i", I64)
            return [For(v, lo, mid, JAM, Block(decls + tuple(inner(each))), note=note, **kw),
                    For(rv, mid, hi, 1, Block(tuple(inner([rv]))), note=note + " (remainder)")]

        def columns(rows) -> List[Stmt]:
            return split(self.fresh("i", I64), self.size_expr(j.lo), self.size_expr(j.hi),
                         lambda cols: block(rows, cols), j.name)

        def nest_from(k: int, rows) -> List[Stmt]:
            if k == len(outer):
                return columns(rows)
            ax = outer[k]
            kw = dict(parallel=True, work=work) if k == 0 and work is not False else {}
            lo, hi = self.size_expr(ax.lo), self.size_expr(ax.hi)
            if k == ri:
                return split(vars_[k], lo, hi, lambda rs: nest_from(k + 1, rs), ax.name, **kw)
            return [For(vars_[k], lo, hi, 1, Block(tuple(nest_from(k + 1, rows))),
                        note=ax.name, **kw)]

        return nest_from(0, [None])

    def compute_rows(self, t: Compute, red: Reduce, sp=None) -> List[Stmt]:
        """``t`` whose body is ``epilogue(red)`` with the reduction computed for a tile of
        the innermost output axis ``j`` at once: an accumulator array over the tile, isl
        loops over ``(red's axes..., j)`` with ``j`` innermost (contiguous reads,
        vectorizable), then the epilogue per ``j``. Each element's reduction still
        visits its points in the same order as the point-by-point loops.

        When an outer axis ``i`` takes no part in the reads along ``j`` nor in the
        domain (``i`` of a matmul), ``row_block()`` values of ``i`` share each such read:
        their accumulators are updated together (registers, not memory).

        A row read at ``x // s`` or ``(x - k) // s`` (a strided convolution's gradient)
        is computed per residue ``x = s*q + r`` over ``q`` (``codegen.residue``; ``sp``)."""
        if sp is None:
            sp = residue.split(t, red)
            if sp is not None:
                self.buf[sp.tensor.uid] = self.buf[t.uid]
                self.dims[sp.tensor.uid] = t.dims
                return self.compute_rows(sp.tensor, sp.red, sp)
        axes = list(t.axes)
        j = axes[-1]
        outer = axes[:-1]
        orig = red
        body, where = where_form(red)
        red = Reduce(red.op, body, red.axes, where, red.dtype)
        vars_ = [self.fresh("i", I64) for _ in outer]
        ri = row_block_axis(t, red)
        n = const_value(j.hi)
        tile = row_tile_blocked(red.dtype) if ri is not None else ROW_TILE
        lanes = target.current().lanes(red.dtype)
        # a row block's tile is at most row_tile_blocked wide (registers); a single row's
        # tile may be up to twice ROW_TILE before it is cut (accumulators in memory)
        tiled = n is None or n > (tile if ri is not None else 2 * tile)
        width = tile if tiled else n
        # reads along j from zero-padded copies (codegen.layout): whole vectors of lanes,
        # the ones beyond j's extent computed and never stored
        pad = rowtiles.padded_lanes(red, j) if ri is not None and not tiled and sp is None \
            else None
        if pad is not None:
            width = pad
        env = {ax.uid: v for ax, v in zip(outer, vars_)}
        scope_axes = tuple(outer)
        conds = polyhedral.conjuncts(red.where)
        if sp is not None:  # x = s*q + r inside x's range
            conds = conds + [Binary("lt", j, sp.count, "bool")]
        if tiled:
            jt = Axis(f"{j.name}_tile", Const(0, I64),
                      Binary("floordiv", Binary("add", j.hi, Const(tile - 1, I64), I64),
                             Const(tile, I64), I64), fresh_uid())
            tv = self.fresh("i", I64)
            env[jt.uid] = tv
            scope_axes += (jt,)
            base: CExpr = mul(tv, Lit(tile, I64))
            start = Binary("mul", jt, Const(tile, I64), I64)
            conds = conds + [Binary("ge", j, start, "bool"),
                             Binary("lt", j, Binary("add", start, Const(tile, I64), I64),
                                    "bool")]
        else:
            base = Lit(0, I64)
        # every tile is full: constant trip counts
        exact = n is not None and n % width == 0 and (
            sp is None or const_value(sp.orig.axes[-1].hi) % sp.s == 0)
        if tiled:
            # the last tile too runs its whole width (the accumulator has it; the bounds
            # keep j < n): a constant trip count
            jstart: Expr = start
            jend: Expr = Binary("add", start, Const(tile, I64), I64)
        else:
            jstart, jend = j.lo, j.hi
        rx = list(red.axes) + [j if pad is None else replace(j, hi=Const(pad, I64))]
        # Bounds of j that move with a reduction axis p (a gradient's gather, a padded
        # convolution) start each pass at another offset of the accumulator, whose loads
        # would straddle the previous pass's stores (no store forwarding). A short p gets
        # one accumulator per value (each pass then meets its own previous offsets),
        # combined at the end: a reassociation of the reduction, as ir.py allows.
        phase, phases = None, 1
        for c in polyhedral.conjuncts(red.where):
            if phase is None and uses(c, {j.uid}):
                for ax in red.axes:
                    lo_, hi_ = const_value(ax.lo), const_value(ax.hi)
                    if (uses(c, {ax.uid}) and lo_ is not None and hi_ is not None
                            and 2 <= hi_ - lo_ <= 4):
                        phase, phases = ax, hi_ - lo_
                        break

        def tile_block(rows: List[Optional[Var]], tile_axes=None, whole=False) -> List[Stmt]:
            """The tile at ``tv`` for ``rows``; ``tile_axes``: the enclosing axes with the
            tile axis narrowed to the loop it is in (``whole``: tiles all inside j's range)."""
            nonlocal phase, phases
            acc = self.fresh("acc", red.dtype).name
            scope = Scope(dict(env), tile_axes or scope_axes, (), {})
            tree, rest = polyhedral.loop_nest(rx, conds, scope.axes, scope.guards)
            # bounds of j that move with a tap: the whole tile, masked (codegen.fulltile).
            # Every pass then starts at the tile's start: one accumulator for all taps,
            # when the tile is a whole number of vectors (measured: a padded convolution
            # 10% faster; a 17-wide residue row of a strided gradient 60% slower)
            full = False
            if fulltile.worth(red.body, red.op, j, rest):
                tree, full = fulltile.widen(tree, jstart, jend, keep={jt.uid} if tiled else ())
            if full and width % lanes == 0:
                phase, phases = None, 1
            size = width * len(rows)
            out: List[Stmt] = [Local(acc, red.dtype, size * phases)]
            z = self.fresh("k", I64)
            out.append(For(z, Lit(0, I64), Lit(size * phases, I64), 1,
                           Block((Store(acc, z, identity(red.op, red.dtype)),)), simd=True))

            def row_scope(sc: Scope, r: int) -> Scope:
                return sc if rows[r] is None else sc.child(env={outer[ri].uid: rows[r]})

            def point(inner: Scope, stmts: List[Stmt]):
                for r in range(len(rows)):
                    sc = row_scope(inner, r)
                    v = cast(self.expr(red.body, sc, stmts), red.dtype)
                    if blend:
                        c = self.expr(conj(rest), sc, stmts)
                        v = Op("select", (c, v, identity(red.op, red.dtype)), red.dtype)
                    at = add(fold("sub", inner.env[j.uid], base, I64), Lit(r * width, I64))
                    if phase is not None:
                        p = fold("sub", inner.env[phase.uid], Lit(const_value(phase.lo), I64),
                                  I64)
                        at = add(at, mul(p, Lit(size, I64)))
                    if red.op == "sum":
                        stmts.append(Store(acc, at, v, add=True))
                    else:
                        stmts.append(Store(acc, at, Op(red.op, (Load(acc, at, red.dtype), v),
                                                       red.dtype)))

            nest: List[Stmt] = []
            affine = [c for c in conds if not any(c is r for r in rest)]
            # A data-dependent condition around a value that is safe and cheap to
            # compute anyway becomes a blend with the identity, not a branch (masked
            # stores of the accumulator do not forward to the next pass's loads):
            # sum + 0.0 and max(x, -inf) leave the accumulator unchanged.
            blend = bool(rest) and pure(red.body)
            self._tree(tree, rx, affine, [] if blend else rest, scope, {}, point, nest)
            if full:
                # the unmasked version (codegen.fulltile) when the weights it multiplies
                # the staged rows by are all finite, checked once before the loops
                needs: set = set()
                fresh = lambda dt: self.fresh("t", dt)  # noqa: E731
                fast = fulltile.hoist(nest, fresh, needs)
                nest = fulltile.hoist(nest, fresh)
                if needs:
                    for b in sorted(needs):
                        if b not in finite:
                            finite[b] = self.fresh("fin", self._buffer_dtype(b))
                    ok = all_of([Op("eq", (finite[b], finite[b]), "bool") for b in sorted(needs)])
                    nest = [If(ok, Block(tuple(fast)), Block(tuple(nest)))]
            # the accumulators in vector registers where every term vectorizes
            # (codegen.regtile): gcc keeps the array in memory, an FMA per load and store
            regs = None
            if (red.op == "sum" and phases == 1 and not blend
                    and size <= lanes * target.current().accumulators):
                # a loop over one tile: isl put its value into the lane loops' bounds
                one = {}
                if tiled:
                    ax = next(a for a in tile_axes or scope_axes if a.uid == jt.uid)
                    lo_, hi_ = closed_value(ax.lo), closed_value(ax.hi)
                    if lo_ is not None and hi_ == lo_ + 1:
                        one[tv.name] = lo_
                regs = regtile.registerize(nest, acc, size, red.dtype, lanes,
                                           lambda dt: self.fresh("v", dt), one)
            if regs is not None:
                out.extend(regs[0] + regs[1] + regs[2])
            else:
                out.extend(mark_inner_simd(nest))
            # the epilogue: one element per j of the tile (and row)
            for r in range(len(rows)):
                jj = self.fresh("i", I64)
                jv = add(base, jj)
                escope = row_scope(scope, r).child(axes=(j,), env={j.uid: jv})
                total: CExpr = Load(acc, add(jj, Lit(r * width, I64)), red.dtype)
                for ph in range(1, phases):
                    part = Load(acc, add(jj, Lit(r * width + ph * size, I64)), red.dtype)
                    total = Op("add" if red.op == "sum" else red.op, (total, part), red.dtype)
                escope.memo[orig] = total
                est: List[Stmt] = []
                value = self.expr(t.body, escope, est)
                idx = [v if k != ri or rows[r] is None else rows[r] for k, v in enumerate(vars_)]
                if sp is not None:  # element q of residue r is x = s*q + r
                    idx, jv = idx[:-1], add(mul(Lit(sp.s, I64), jv), idx[-1])
                est.append(Store(self.buf[t.uid].name, self.offset(t.uid, idx + [jv]),
                                 cast(value, t.dtype)))
                hi: CExpr = Lit(width, I64)
                if not exact and not whole:
                    end = (self.size_expr(j.hi) if sp is None
                           else self.expr(sp.count, scope.child(), out))
                    hi = Op("min", (fold("sub", end, base, I64), hi), I64)
                eblock = Block(tuple(est))
                out.append(For(jj, Lit(0, I64), hi, 1, eblock, note=j.name,
                               simd=simd_safe(eblock)))
            return out

        work = self.work(t, axes)
        loops = [(ax, v, self.size_expr(ax.lo)) for ax, v in zip(outer, vars_)]
        if tiled:
            loops.append((jt, tv, Lit(0, I64)))

        def nest_from(k: int, rows: List[Optional[Var]]) -> List[Stmt]:
            if k == len(loops):
                return tile_block(rows)
            ax, v, lo = loops[k]
            parallel = k == 0 and work is not False and chunk is None
            hi = self.size_expr(ax.hi)
            if tiled and ax is jt and chunk is not None:  # the tiles of chunk jc
                lo = mul(jc, Lit(chunk, I64))
                hi = Op("min", (add(lo, Lit(chunk, I64)), hi), I64)
            if tiled and ax is jt and split is not None:
                return split(v, lo, hi, rows, parallel, chunk is not None)
            if k != ri:
                return [For(v, lo, hi, 1, Block(tuple(nest_from(k + 1, rows))),
                            parallel=parallel, work=work if parallel else None, note=ax.name)]
            # row_block() rows at a time, then the remaining rows (one block of them)
            R = row_block()
            row_vars = [self.fresh("i", I64) for _ in range(R)]
            decls = [Decl(rv, add(v, Lit(r, I64))) for r, rv in enumerate(row_vars)]
            span = fold("sub", hi, lo, I64)
            mid = add(lo, mul(fold("floordiv", span, Lit(R, I64), I64), Lit(R, I64)))
            main = For(v, lo, mid, R, Block(tuple(decls) + tuple(nest_from(k + 1, row_vars))),
                       parallel=parallel, work=work if parallel else None, note=ax.name)
            v2 = self.fresh("i", I64)
            left = (const_value(ax.hi) - const_value(ax.lo)) % R \
                if const_value(ax.hi) is not None and const_value(ax.lo) is not None else 0
            if left > 1:
                # a static remainder of rows is one block of that many rows: one row at a
                # time, its two vectors of accumulators wait on the FMA latency
                rest = [self.fresh("i", I64) for _ in range(left)]
                decls = [Decl(rv, add(v2, Lit(r, I64))) for r, rv in enumerate(rest)]
                rem = For(v2, mid, hi, left, Block(tuple(decls) + tuple(nest_from(k + 1, rest))),
                          note=ax.name + " (remainder)")
            else:
                rem = For(v2, mid, hi, 1, Block(tuple(nest_from(k + 1, [v2]))),
                          note=ax.name + " (remainder)")
            return [main, rem]

        split = None
        # (not when the tiles are the parallel loop: one loop, one work-sharing construct)
        if tiled and not exact and sp is None and const_value(j.lo) == 0 and outer:
            split = rowtiles.whole_tiles(self, jt, j, tile, scope_axes, tile_block, work)
        # Operands along the rows too large for the cache: the tiles in chunks whose panels
        # stay cached while every row block reads them (codegen.rowtiles.panel_chunk)
        chunk = rowtiles.panel_chunk(t, red, tile) if tiled and ri is not None else None
        finite: Dict[str, Var] = {}  # buffer -> sum of its elements times 0 (NaN: not finite)
        if chunk is None:
            loops = nest_from(0, [None])
        else:
            jc = self.fresh("i", I64)
            chunks = -(-(-(-n // tile)) // chunk)  # ceil(ceil(n / tile) / chunk)
            loops = [For(jc, Lit(0, I64), Lit(chunks, I64), 1, Block(tuple(nest_from(0, [None]))),
                parallel=work is not False, work=work if work is not False else None,
                note=f"{jt.name} (chunks of {chunk})")]
        return self._finite_checks(finite) + loops

    def _buffer_dtype(self, name: str) -> str:
        return next(b.dtype for b in self.buf.values() if b.name == name)

    def _finite_checks(self, finite: Dict[str, Var]) -> List[Stmt]:
        """``fin = sum(b[z] * 0)`` for each buffer ``b`` of ``finite``: +-0 if every
        element is finite, NaN otherwise (so ``fin == fin`` tests it), in vector lanes."""
        out: List[Stmt] = []
        for name, v in finite.items():
            t = next(t for t in self.tensors if self.buf[t.uid].name == name)
            total: CExpr = Lit(1, I64)
            for d in self.dims[t.uid]:
                total = mul(total, self.size_expr(d))
            z = self.fresh("k", I64)
            out.append(Decl(v, zero(v.dtype)))
            out.append(For(z, Lit(0, I64), total, 1, Block((Accumulate(
                v, "sum", Op("mul", (Load(name, z, v.dtype), zero(v.dtype)), v.dtype)),)),
                note=f"are the values of {t.name} finite?", simd=True,
                reduction=(("sum", v),)))
        return out

    def work_of(self, dims: Sequence[Expr]):
        """:meth:`work` of a loop over a box of ``dims`` doing one operation per point."""
        static, symbolic = 1, []
        for f in dims:
            c = const_value(f)
            if c is None:
                symbolic.append(f)
            else:
                static *= max(c, 1)
        if not symbolic:
            return Lit(static, I64) if static >= SERIAL_WORK else False
        out: CExpr = Lit(static, I64)
        for f in symbolic:
            out = mul(out, self.size_expr(f))
        return out

    def work(self, t: Compute, axes: Sequence[Axis]):
        """Estimated operations of one parallel loop nest: None (large), False (too small
        to be worth threads) or a C expression for symbolic sizes."""
        factors = [ax.hi for ax in axes]
        for x in walk(t.body, unique=True):
            if isinstance(x, Reduce):
                for ax in x.axes:
                    lo, hi = const_value(ax.lo), const_value(ax.hi)
                    factors.append(Const(hi - lo, I64) if lo is not None and hi is not None
                                   else Binary("sub", ax.hi, ax.lo, I64))
        return self.work_of(factors)

    def scatter(self, t: ScatterAdd) -> List[Stmt]:
        buf = self.buf[t.uid].name
        total: CExpr = Lit(1, I64)
        for d in t.dims:
            total = mul(total, self.size_expr(d))
        z = self.fresh("i", I64)
        fill_work = self.work_of(t.dims)
        fill = For(z, Lit(0, I64), total, 1, Block((Store(buf, z, zero(t.dtype)),)),
                   note="zero-fill", simd=True, parallel=fill_work is not False,
                   work=None if fill_work is False else fill_work)
        site = self._site(t, None)
        scope = Scope({}, (), (), {})
        rows = self.scatter_rows(t, site)
        if rows is not None:
            return [fill] + rows

        def point(inner: Scope, out: List[Stmt]):
            value = cast(self.expr(t.value, inner, out), t.dtype)
            idx = []
            for x in t.indices:
                v = self.fresh("t", I64)
                out.append(Decl(v, self.expr(x, inner, out)))
                idx.append(v)
            checks = [(d, v, self.size_expr(s)) for d, (v, s) in enumerate(zip(idx, t.dims))]
            store = Store(buf, self.offset(t.uid, idx), value, add=True)
            out.append(checked(SCATTER_OUT_OF_RANGE, site, checks, [store]))

        loops: List[Stmt] = []
        self.loops(t.axes, t.where, scope, point, loops)
        return [fill] + loops

    def scatter_rows(self, t: ScatterAdd, site: int) -> Optional[List[Stmt]]:
        """A scatter over a box whose last axis ``d`` is itself the last target index
        (``dE[idx[i], d] += H[i, d]``, an embedding's gradient): the other target
        indices are computed and checked once per row, outside the loop over ``d``,
        which then adds a contiguous row in vector lanes (distinct ``d``, distinct
        targets). Rows are added in order, as the point-by-point loops would."""
        if t.where is not None or len(t.axes) < 2 or len(t.indices) < 1:
            return None
        d = t.axes[-1]
        last = t.indices[-1]
        if not (isinstance(last, Axis) and last.uid == d.uid and same(d.hi, t.dims[-1])
                and const_value(d.lo) == 0):
            return None
        if any(uses(x, {d.uid}) for x in t.indices[:-1]):
            return None
        buf = self.buf[t.uid].name
        outer = list(t.axes[:-1])
        vars_ = [self.fresh("k", I64) for _ in outer]
        scope = Scope({ax.uid: v for ax, v in zip(outer, vars_)}, tuple(outer), (), {})
        head: List[Stmt] = []
        idx: List[CExpr] = []
        checks = []
        for k, (x, size) in enumerate(zip(t.indices[:-1], t.dims[:-1])):
            v = self.fresh("t", I64)
            head.append(Decl(v, self.expr(x, scope, head)))
            idx.append(v)
            if not scope.proves_inside(x, size, self.params):
                checks.append((k, v, self.size_expr(size)))
        dv = self.fresh("k", I64)
        inner_scope = scope.child(axes=(d,), env={d.uid: dv})
        body: List[Stmt] = []
        value = cast(self.expr(t.value, inner_scope, body), t.dtype)
        body.append(Store(buf, self.offset(t.uid, idx + [dv]), value, add=True))
        block = Block(tuple(body))
        row = For(dv, Lit(0, I64), self.size_expr(d.hi), 1, block, note=d.name,
                  simd=simd_safe(block))
        nest: Stmt = Block(tuple(head) + (checked(SCATTER_OUT_OF_RANGE, site, checks, [row]),))
        for ax, v in reversed(list(zip(outer, vars_))):
            nest = For(v, self.size_expr(ax.lo), self.size_expr(ax.hi), 1,
                       nest if isinstance(nest, Block) else Block((nest,)), note=ax.name)
        return [nest]

    # }}}

    # {{{ loops over a (reduction or scatter) domain

    def loops(self, axes: Sequence[Axis], where: Optional[Expr], scope: Scope, point,
              out: List[Stmt]) -> None:
        """Emit loops over ``axes``' box where ``where`` holds; ``point(scope, out)``
        emits the statements for one point."""
        conds = polyhedral.conjuncts(where)
        if conds:
            outer = scope.unbind(axes)
            tree, rest = polyhedral.loop_nest(axes, conds, outer.axes, outer.guards)
        else:
            tree, rest = LoopPoint(tuple(axes)), []
            for ax in reversed(axes):
                tree = LoopFor(ax, ax.lo, ax.hi, 1, tree)
        affine = [c for c in conds if not any(c is r for r in rest)]
        self._tree(tree, axes, affine, rest, scope, {}, point, out)

    def _tree(self, node, axes, affine, rest, scope: Scope, iters: Dict[int, CExpr],
              point, out: List[Stmt]) -> None:
        # Loop bounds and conditions are pure integer expressions of the
        # iterators, the enclosing axes and the sizes.
        bscope = scope.child(env=iters)
        match node:
            case LoopBlock(items):
                for item in items:
                    self._tree(item, axes, affine, rest, scope, iters, point, out)
            case LoopFor(it, lo, hi, step, body):
                v = self.fresh("k", I64)
                inner: List[Stmt] = []
                self._tree(body, axes, affine, rest, scope, {**iters, it.uid: v},
                           point, inner)
                out.append(For(v, self.expr(lo, bscope, out), self.expr(hi, bscope, out), step,
                               Block(tuple(inner)), note=it.name))
            case LoopLet(it, value, body):
                v = self.fresh("k", I64)
                out.append(Decl(v, self.expr(value, bscope, out)))
                self._tree(body, axes, affine, rest, scope, {**iters, it.uid: v},
                           point, out)
            case LoopIf(cond, then, orelse):
                a: List[Stmt] = []
                self._tree(then, axes, affine, rest, scope, iters, point, a)
                b: Optional[List[Stmt]] = None
                if orelse is not None:
                    b = []
                    self._tree(orelse, axes, affine, rest, scope, iters, point, b)
                out.append(If(self.expr(cond, bscope, out), Block(tuple(a)),
                              None if b is None else Block(tuple(b))))
            case LoopPoint(values):
                env: Dict[int, CExpr] = {}
                stmts: List[Stmt] = []
                for ax, val in zip(axes, values):
                    if isinstance(val, Axis) and val.uid in iters:
                        env[ax.uid] = iters[val.uid]
                    else:
                        v = self.fresh("k", I64)
                        stmts.append(Decl(v, self.expr(val, bscope, stmts)))
                        env[ax.uid] = v
                inner = scope.child(axes, affine, env)
                if rest:  # tested at each point, where the affine conjuncts hold
                    cond = self.expr(conj(rest), inner, stmts)
                    body: List[Stmt] = []
                    point(inner.child(guards=rest), body)
                    stmts.append(If(cond, Block(tuple(body))))
                else:
                    point(inner, stmts)
                out.append(Block(tuple(stmts)))
            case _:
                raise TypeError(f"unexpected loop tree node {node!r}")

    # }}}

    # {{{ expressions

    def _analyse(self, e: Expr) -> None:
        """Mark the float operations of ``e`` to compute into locals: those used more
        than once (an expression is a DAG; a gradient's partials share the forward's
        sub-expressions) and every ``STAGE``-th level of a deep one, so that the C
        text grows with the DAG and no C expression is deeper than ``STAGE``."""
        self._known.append(e)
        uses: Dict[int, int] = {}
        height: Dict[int, int] = {}
        nodes = postorder(e)
        for x in nodes:
            kids = children(x)
            for c in kids:
                uses[id(c)] = uses.get(id(c), 0) + 1
            height[id(x)] = 1 + max((height[id(c)] for c in kids), default=-1)
        for x in nodes:
            op = isinstance(x, (Binary, Unary, Cast)) and is_float(x.dtype)
            bind = op and (uses.get(id(x), 0) > 1 or height[id(x)] % STAGE == STAGE - 1)
            self._bind[id(x)] = self._bind.get(id(x), False) or bind

    def expr(self, e: Expr, scope: Scope, out: List[Stmt]) -> CExpr:
        """``e`` as a C expression; statements it needs first are appended to ``out``.

        A float operation marked by ``_analyse`` is computed once into a local in
        ``out`` and reused from ``scope.memo`` (scopes end at select branches and
        guards, so nothing is hoisted out of them). Deep expressions are lowered
        children first in stages, so Python's stack stays ``STAGE`` levels deep."""
        if id(e) not in self._bind:
            self._analyse(e)
        if not self._staging and children(e):
            self._staging = True
            try:
                for x in postorder(e, evaluated_with):
                    if x is not e and self._bind[id(x)] and ("cse", id(x)) not in scope.memo:
                        self.expr(x, scope, out)
            finally:
                self._staging = False
        if not self._bind[id(e)]:
            return self._expr(e, scope, out)
        # Keyed by identity: a structural key would compare deep expressions in full.
        key = ("cse", id(e))
        if key in scope.memo:
            return scope.memo[key]
        res = self._expr(e, scope, out)
        if not isinstance(res, (Var, Lit)):
            v = self.fresh("t", e.dtype)
            out.append(Decl(v, res))
            res = v
        scope.memo[key] = res
        return res

    def _expr(self, e: Expr, scope: Scope, out: List[Stmt]) -> CExpr:
        match e:
            case Const(v, dt):
                return Lit(v, dt)
            case SizeVar(name):
                return self.sizes[name]
            case Axis():
                if e.uid not in scope.env:
                    raise RuntimeError(f"internal error: axis {e.name} is not bound here")
                return scope.env[e.uid]
            case Cast(a, dt):
                x = self.expr(a, scope, out)
                return x if a.dtype == dt else Op("cast", (x,), dt)
            case Unary("stop_gradient", a, _):
                return self.expr(a, scope, out)  # only differentiation sees it
            case Unary(op, a, dt):
                x = cast(self.expr(a, scope, out), dt if op != "not" else "bool")
                if op == "neg" and isinstance(x, Lit) and dt in ("int32", "int64"):
                    return Lit(wrap_int(-int(x.value), dt), dt)
                return Op(op, (x,), dt)
            case Binary("and" | "or"):
                return self.logic(e, scope, out)
            case Binary(op, a, b, dt):
                if op in ("floordiv", "mod") and scope.memo and e in scope.memo:
                    return scope.memo[e]
                x, y = self.expr(a, scope, out), self.expr(b, scope, out)
                if a.dtype != b.dtype or op not in ("lt", "le", "eq", "ne", "gt", "ge"):
                    t = dt if op not in ("lt", "le", "eq", "ne", "gt", "ge") else \
                        promote(a.dtype, b.dtype)
                    x, y = cast(x, t), cast(y, t)
                if (op in ("floordiv", "mod") and dt in ("int32", "int64")
                        and not isinstance(x, Lit) and isinstance(y, Lit) and y.value > 0
                        and scope.proves_nonneg(a, self.params)):
                    # C's truncating / and % agree with floor semantics here, and
                    # vectorize (the helpers' sign tests do not)
                    return Op("quot" if op == "floordiv" else "rem", (x, y), dt)
                return fold(op, x, y, dt)
        if e in scope.memo:
            return scope.memo[e]
        match e:
            case Select():
                res = self.select(e, scope, out)
            case Read():
                res = self.read(e, scope, out)
            case Reduce():
                res = self.reduce(e, scope, out)
            case _:
                raise TypeError(f"the C backend cannot lower {type(e).__name__}")
        if isinstance(res, Var):
            scope.memo[e] = res
        return res

    def logic(self, e: Binary, scope: Scope, out: List[Stmt]) -> CExpr:
        """``a & b`` or ``a | b``, short-circuiting as ir.py says: ``b`` is lowered where
        ``a`` leaves the result open (a guard its reads are proven under), and the
        statements it needs (checked loads, reductions) run only there."""
        x = self.expr(e.a, scope, out)
        cond = e.a if e.op == "and" else Unary("not", e.a, "bool")
        inner: List[Stmt] = []
        y = self.expr(e.b, scope.child(guards=(cond,)), inner)
        if not inner:
            return Op(e.op, (x, y), "bool")  # C's && and || short-circuit too
        v = self.fresh("t", "bool")
        out.append(Decl(v, x))
        out.append(If(v if e.op == "and" else Op("not", (v,), "bool"),
                      Block(tuple(inner) + (Assign(v, y),))))
        return v

    def select(self, e: Select, scope: Scope, out: List[Stmt]) -> CExpr:
        c = self.expr(e.cond, scope, out)
        sa, sb = scope.child(guards=(e.cond,)), scope.child(guards=(Unary("not", e.cond, "bool"),))
        la: List[Stmt] = []
        lb: List[Stmt] = []
        xa = cast(self.expr(e.a, sa, la), e.dtype)
        xb = cast(self.expr(e.b, sb, lb), e.dtype)
        if not la and not lb:
            if loads(xa) or loads(xb):
                # Loads under a condition keep loops scalar (gcc will not speculate
                # them). Where both branches are valid without the condition (reads
                # proven in range anyway, no checks), compute both and blend: the
                # untaken value is discarded (no traps: -fno-trapping-math).
                ta: List[Stmt] = []
                tb: List[Stmt] = []
                sites = len(self.sites)
                ya = cast(self.expr(e.a, scope.child(), ta), e.dtype)
                yb = cast(self.expr(e.b, scope.child(), tb), e.dtype)
                if not ta and not tb:
                    va, vb = self.fresh("t", e.dtype), self.fresh("t", e.dtype)
                    out.extend([Decl(va, ya), Decl(vb, yb)])
                    return Op("select", (c, va, vb), e.dtype)
                del self.sites[sites:]
            return Op("select", (c, xa, xb), e.dtype)
        v = self.fresh("t", e.dtype)
        out.append(Decl(v, None))
        out.append(If(c, Block(tuple(la) + (Assign(v, xa),)), Block(tuple(lb) + (Assign(v, xb),))))
        return v

    def read(self, e: Read, scope: Scope, out: List[Stmt]) -> CExpr:
        t = e.tensor
        if t.uid not in self.buf:
            raise RuntimeError(f"internal error: {t.name!r} has no buffer")
        idx: List[CExpr] = []
        checks = []
        for d, (x, size) in enumerate(zip(e.indices, self.dims[t.uid])):
            known = scope.memo.get(("in range", x)) if scope.memo else None
            if known is not None:  # loaded and checked once per row (compute_gather_rows)
                idx.append(known)
                continue
            cx = self.expr(x, scope, out)
            if not scope.proves_inside(x, size, self.params):
                v = self.fresh("t", I64)
                out.append(Decl(v, cx))
                cx = v
                checks.append((d, v, self.size_expr(size)))
            idx.append(cx)
        if t.uid in self.inline:
            return self.inlined(t, e, idx, checks, out)
        if not checks:
            flat = self.affine_offset(e, scope)
            return Load(self.buf[t.uid].name,
                        flat if flat is not None else self.offset(t.uid, idx), e.dtype)
        load = Load(self.buf[t.uid].name, self.offset(t.uid, idx), e.dtype)
        v = self.fresh("t", e.dtype)
        out.append(Decl(v, zero(e.dtype)))
        out.append(checked(READ_OUT_OF_RANGE, self._site(self.owner, e), checks,
                            [Assign(v, load)]))
        return v

    def affine_offset(self, e: Read, scope: Scope) -> Optional[CExpr]:
        """The element offset of ``e`` as ``c + sum(a_k * axis_k)`` when its indices use
        ``//`` or ``%`` but the offset is affine anyway (a flatten's
        ``X[n, k // 256, k // 16 % 16, k % 16]`` is ``X.flat[n * 8192 + k]``): no
        division per element, and contiguous. None otherwise."""
        if not any(isinstance(y, Binary) and y.op in ("floordiv", "mod")
                   for x in e.indices for y in walk(x, unique=True)):
            return None
        indices, dims = self.stored_at(e.tensor.uid, e.indices)
        dims = [const_value(d) for d in dims]
        if any(n is None for n in dims):
            return None
        offset = flat_index(indices, dims)
        axes = free_axes(offset)
        if not all(ax.uid in scope.env for ax in axes):
            return None
        key = (offset, tuple(axes))
        if key not in self._affine:
            self._affine[key] = polyhedral.affine_form(offset, axes)
        form = self._affine[key]
        if form is None:
            return None
        c, coeffs = form
        out: CExpr = Lit(c, I64)
        for a, ax in zip(coeffs, axes):
            if a:
                out = add(out, mul(scope.env[ax.uid], Lit(a, I64)))
        return out

    def inlined(self, t: Compute, e: Read, idx: List[CExpr], checks, out: List[Stmt]) -> CExpr:
        """``t[idx]`` computed from ``t``'s body (after the same index checks as a load):
        its axes are bound to ``idx``, which lie in its box, so its own reads are
        proven or checked exactly as where ``t`` is stored."""
        scope = Scope({ax.uid: x for ax, x in zip(t.axes, idx)}, tuple(t.axes), (), {})
        owner, self.owner = self.owner, t
        try:
            if not checks:
                return cast(self.expr(t.body, scope, out), t.dtype)
            v = self.fresh("t", e.dtype)
            out.append(Decl(v, zero(e.dtype)))
            inner: List[Stmt] = []
            value = cast(self.expr(t.body, scope, inner), t.dtype)
            out.append(checked(READ_OUT_OF_RANGE, self._site(owner, e), checks,
                                inner + [Assign(v, value)]))
            return v
        finally:
            self.owner = owner

    def reduce(self, e: Reduce, scope: Scope, out: List[Stmt]) -> CExpr:
        acc = self.fresh("t", e.dtype)
        out.append(Decl(acc, identity(e.op, e.dtype)))
        body, where = where_form(e)
        if body is not e.body:
            e = Reduce(e.op, body, e.axes, where, e.dtype)
        # A float sum over several axes keeps one partial sum per value of its last
        # axis (a static box), added up at the end: the reassociation ir.py allows, so
        # the innermost loop runs in vector lanes without a horizontal sum per pass.
        last = e.axes[-1] if e.axes else None
        lo = const_value(last.lo) if last is not None else None
        hi = const_value(last.hi) if last is not None else None
        split = (e.op == "sum" and is_float(e.dtype) and len(e.axes) >= 2 and lo is not None
                 and hi is not None and 0 < hi - lo <= PARTIAL_SUMS)
        if (e.op in ("max", "min") and is_float(e.dtype) and len(e.axes) == 1
                and e.where is None and lo is not None and hi is not None
                and hi - lo >= 4 * LANES and (hi - lo) % LANES == 0):
            return self.lane_reduce(e, acc, lo, hi, scope, out)
        part = self.fresh("part", e.dtype).name if split else ""
        lanes: set = set()  # loop variables that index the partial sums

        def point(inner: Scope, stmts: List[Stmt]):
            v = cast(self.expr(e.body, inner, stmts), e.dtype)
            if split:
                x = inner.env[last.uid]
                if isinstance(x, Var):
                    lanes.add(x.name)
                stmts.append(Store(part, fold("sub", x, Lit(lo, I64), I64), v, add=True))
            else:
                stmts.append(Accumulate(acc, e.op, v))

        nest: List[Stmt] = []
        self.loops(e.axes, e.where, scope, point, nest)
        if split:
            z, k = self.fresh("k", I64), self.fresh("k", I64)
            out.append(Local(part, e.dtype, hi - lo))
            out.append(For(z, Lit(0, I64), Lit(hi - lo, I64), 1,
                           Block((Store(part, z, zero(e.dtype)),)), simd=True))
            out.extend(mark_inner_simd(nest, only=lambda f: f.var.name in lanes))
            out.append(For(k, Lit(0, I64), Lit(hi - lo, I64), 1,
                           Block((Accumulate(acc, "sum", Load(part, k, e.dtype)),)),
                           simd=True, reduction=(("sum", acc),)))
        elif e.op == "sum":  # sums may be added in any order (ir.py): lanes
            out.extend(mark_inner_simd(nest, (("sum", acc),)))
        else:
            out.extend(nest)
        return acc

    def lane_reduce(self, e: Reduce, acc: Var, lo: int, hi: int, scope: Scope,
                    out: List[Stmt]) -> Var:
        """A max or min over one static axis as ``LANES`` interleaved partial results,
        combined at the end (any order gives the same maximum; ir.py leaves the order
        of reductions free)."""
        part = self.fresh("part", e.dtype).name
        z, k0, lane, k = (self.fresh("k", I64) for _ in range(4))
        init = identity(e.op, e.dtype)
        out.append(Local(part, e.dtype, LANES))
        out.append(For(z, Lit(0, I64), Lit(LANES, I64), 1, Block((Store(part, z, init),)),
                       simd=True))
        inner = scope.child(axes=e.axes, env={e.axes[0].uid: add(k0, lane)})
        stmts: List[Stmt] = []
        v = cast(self.expr(e.body, inner, stmts), e.dtype)
        stmts.append(Store(part, lane, Op(e.op, (Load(part, lane, e.dtype), v), e.dtype)))
        body = Block(tuple(stmts))
        out.append(For(k0, Lit(lo, I64), Lit(hi, I64), LANES,
                       Block((For(lane, Lit(0, I64), Lit(LANES, I64), 1, body,
                                  simd=simd_safe(body)),)), note=e.axes[0].name))
        out.append(For(k, Lit(0, I64), Lit(LANES, I64), 1,
                       Block((Accumulate(acc, e.op, Load(part, k, e.dtype)),))))
        return acc

    def _site(self, owner: Tensor, read: Optional[Read]) -> int:
        self.sites.append(Site(owner, read))
        return len(self.sites) - 1

    # }}}


# {{{ helpers


#: the most levels of a float expression lowered into one C expression
STAGE = 64


def _split_memo(body: Expr, j: Axis, c: int, q: Var, r: int) -> Dict[Expr, CExpr]:
    """``j // c`` and ``j % c`` of ``body`` as ``q`` and ``r`` (for j = c*q + r, 0 <= r < c)."""
    out: Dict[Expr, CExpr] = {}
    for x in walk(body, unique=True):
        if (isinstance(x, Binary) and x.op in ("floordiv", "mod") and isinstance(x.a, Axis)
                and x.a.uid == j.uid and isinstance(x.b, Const) and x.b.value == c):
            out[x] = q if x.op == "floordiv" else Lit(r, x.dtype)
    return out


# }}}
