"""Row-tiled reductions: ``epilogue(sum)`` computed for a tile of the innermost axis at once.

A mixin of :class:`codegen.lower.Lowerer` (``compute_rows``): an accumulator array
over a tile of the innermost output axis ``j``, isl loops over ``(reduction axes, j)``
with ``j`` innermost (contiguous, vectorizable), row blocks sharing the reads along
``j``, then the epilogue per element. Its helpers: ``codegen.rowsum_tiles`` (tile shapes),
``codegen.rowsum_registers`` (the accumulators in registers), ``codegen.rowsum_masked`` (masked
whole tiles), ``codegen.rowsum_residues`` (strided rows per residue).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional

from tensorexpr import polyhedral
from tensorexpr.ir import Axis, Binary, Compute, Const, Expr, Reduce, fresh_uid, walk
from tensorexpr.transform import const_value

from . import alike, rowsum_masked, rowsum_registers, rowsum_residues, rowsum_tiles, target
from .cexpr import I64, add, all_of, cast, fold, identity, mul, zero
from .loopast import (Accumulate, Block, CExpr, Decl, For, If, Lit, Load, Local, Op, Stmt, Store,
                      Var, mark_inner_simd, simd_safe)
from .patterns import closed_value, conj, pure, row_block, row_block_axis, uses, where_form
from .scope import Scope


#: columns of a row accumulator (elements of the innermost output axis computed together)
ROW_TILE = 256


def row_tile_blocked(dtype: str) -> int:
    """The tile when :func:`row_block` rows are computed together: their accumulators fit
    the registers (``tile_vectors`` vectors a row, so one broadcast serves two FMAs; on
    AVX-512, 8 x 32 floats ran a 512 x 256 x 512 A^T B at 110 GFLOP/s, 8 x 16 at 82).

    >>> with target.use(target.Target(64, 32, True)):   # AVX-512: 16 floats a vector
    ...     row_tile_blocked("float32")
    32
    """
    t = target.current()
    return t.tile_vectors * t.lanes(dtype)


def tiling(t: Compute, red: Reduce):
    """``(tile, tiled)``: the tile width :meth:`RowSumLowering.compute_rows` gives the
    innermost axis of ``t`` (a sum ``red``), and whether that axis is cut into tiles (a
    single row's tile may be up to twice ``ROW_TILE`` before it is cut: accumulators
    in memory; a row block's at most ``row_tile_blocked``: registers).

    >>> import tensorexpr as te
    >>> A = te.placeholder((4, 600), name="A")
    >>> k = te.reduce_axis(4, name="k")
    >>> S = te.compute((600,), lambda j: te.sum(A[k, j], axis=k), name="S")
    >>> tiling(S, S.body)
    (256, True)
    """
    ri = row_block_axis(t, red)
    n = const_value(t.axes[-1].hi)
    tile = row_tile_blocked(red.dtype) if ri is not None else ROW_TILE
    return tile, n is None or n > (tile if ri is not None else 2 * tile)


def leading_loops(t: Compute, red: Reduce) -> int:
    """How many leading axes of ``t`` :meth:`RowSumLowering.compute_rows` runs as its
    outermost loops, in order, with nothing before them (what ``codegen.fuse`` needs of
    a member of a slab loop): its axes but the innermost, unless the tiles of that axis
    run in chunks (their loop is outermost) or the sum may take masked full tiles
    (``codegen.rowsum_masked``: checks of the weights run before the loops).

    >>> import tensorexpr as te
    >>> A = te.placeholder((3, 8, 20), name="A")
    >>> k = te.reduce_axis(20, name="k")
    >>> S = te.compute((3, 8), lambda b, i: te.sum(A[b, i, k], axis=k), name="S")
    >>> leading_loops(S, S.body)
    1
    """
    sp = rowsum_residues.split(t, red)
    if sp is not None:
        t, red = sp.tensor, sp.red
    body, where = where_form(red)
    red = Reduce(red.op, body, red.axes, where, red.dtype)  # as compute_rows sees it
    j = t.axes[-1]
    # masked tiles replace loops over j whose bounds move with other axes: a condition
    # on j (a residue's count of j included) that names another axis
    conds = polyhedral.conjuncts(where) + ([] if sp is None else [sp.count])
    tied = any((sp is not None and c is sp.count or uses(c, {j.uid})) and any(
        isinstance(x, Axis) and x.uid != j.uid for x in walk(c, unique=True)) for c in conds)
    if tied and rowsum_masked.worth(body, red.op, j, []):
        return 0
    tile, tiled = tiling(t, red)
    if tiled and row_block_axis(t, red) is not None and rowsum_tiles.panel_chunk(t, red, tile):
        return 0
    return t.ndim - 1


class RowSumLowering:
    """The row-tiled reductions of :class:`codegen.lower.Lowerer`."""

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
        is computed per residue ``x = s*q + r`` over ``q`` (``codegen.rowsum_residues``; ``sp``)."""
        if sp is None:
            sp = rowsum_residues.split(t, red)
            if sp is not None:
                self.record.note("residues of", f"{sp.orig.axes[-1].name} // {sp.s}")
                self.same_buffer(sp.tensor, t)
                self.derived(t, sp.tensor)
                return self.compute_rows(sp.tensor, sp.red, sp)
            # a tensor alike one lowered before but for its tensors (an LSTM's gates):
            # that lowering again, with its own buffers and names (codegen.alike)
            got = alike.shape(self, t, red)
            if got is not None:
                return self.alike.get(("rows", got[0]), lambda: self._lower_rows(t, red, None),
                                      slots=got[1], axes=got[2])
        return self._lower_rows(t, red, sp)

    def _lower_rows(self, t: Compute, red: Reduce, sp) -> List[Stmt]:
        axes = list(t.axes)
        j = axes[-1]
        outer = axes[:-1]
        orig = red
        body, where = where_form(red)
        red = Reduce(red.op, body, red.axes, where, red.dtype)
        vars_ = [self.fresh("i", I64) for _ in outer]
        ri = row_block_axis(t, red)
        n = const_value(j.hi)
        tile, tiled = tiling(t, red)
        lanes = target.current().lanes(red.dtype)
        width = tile if tiled else n
        # reads along j from zero-padded copies (codegen.layout): whole vectors of lanes,
        # the ones beyond j's extent computed and never stored
        pad = rowsum_tiles.padded_lanes(red, j) if ri is not None and not tiled and sp is None \
            else None
        if pad is not None:
            width = pad
        self.record.note("tile", width)
        if ri is not None:
            self.record.note("row block", f"{outer[ri].name} x {row_block()}")
        if pad is not None:
            self.record.note("padded lanes", pad)
        env = {ax.uid: v for ax, v in zip(outer, vars_)}
        scope_axes = tuple(outer)
        # The bounds of the points (a residue's count of q, a tile's range of j) come
        # before the reduction's own conditions: those are evaluated left to right and
        # may read data that exists only inside the bounds (loop_nest keeps an affine
        # condition after one that may fail out of the loop bounds, tested per point).
        bounds: List[Expr] = []
        if sp is not None:  # x = s*q + r inside x's range
            bounds.append(Binary("lt", j, sp.count, "bool"))
        if tiled:
            jt = Axis(f"{j.name}_tile", Const(0, I64),
                      Binary("floordiv", Binary("add", j.hi, Const(tile - 1, I64), I64),
                             Const(tile, I64), I64), fresh_uid())
            tv = self.fresh("i", I64)
            env[jt.uid] = tv
            scope_axes += (jt,)
            base: CExpr = mul(tv, Lit(tile, I64))
            start = Binary("mul", jt, Const(tile, I64), I64)
            bounds += [Binary("ge", j, start, "bool"),
                       Binary("lt", j, Binary("add", start, Const(tile, I64), I64), "bool")]
        else:
            base = Lit(0, I64)
        conds = bounds + polyhedral.conjuncts(red.where)
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
        # combined at the end: a reassociation of the reduction, as ir.py allows (not for
        # a compared sum, added in written order: patterns.compared_sums).
        phase, phases = None, 1
        reassociate = not self.holds_compared(t)
        for c in polyhedral.conjuncts(red.where):
            if reassociate and phase is None and uses(c, {j.uid}):
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
            # bounds of j that move with a tap: the whole tile, masked (codegen.rowsum_masked).
            # Every pass then starts at the tile's start: one accumulator for all taps,
            # when the tile is a whole number of vectors (measured: a padded convolution
            # 10% faster; a 17-wide residue row of a strided gradient 60% slower)
            full = False
            if rowsum_masked.worth(red.body, red.op, j, rest):
                tree, full = rowsum_masked.widen(tree, jstart, jend, keep={jt.uid} if tiled else ())
            if full and width % lanes == 0:
                phase, phases = None, 1
            if full:
                self.record.note("masked full tiles", True)
            if phases > 1:
                self.record.note("accumulators per tap", phases)
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
            self.loop_tree(tree, rx, affine, [] if blend else rest, scope, {}, point, nest)
            if full:
                # the unmasked version (codegen.rowsum_masked) when the weights it multiplies
                # the staged rows by are all finite, checked once before the loops
                needs: set = set()
                fresh = lambda dt: self.fresh("t", dt)  # noqa: E731
                fast = rowsum_masked.hoist(nest, fresh, needs)
                nest = rowsum_masked.hoist(nest, fresh)
                if needs:
                    for b in sorted(needs):
                        if b not in finite:
                            finite[b] = self.finite_flag(b)
                    ok = all_of([Op("eq", (finite[b], finite[b]), "bool") for b in sorted(needs)])
                    nest = [If(ok, Block(tuple(fast)), Block(tuple(nest)))]
            # the accumulators in vector registers where every term vectorizes
            # (codegen.rowsum_registers): gcc keeps the array in memory, an FMA per load and store
            regs = None
            if (self.options.register_tiles and red.op == "sum" and phases == 1 and not blend
                    and size <= lanes * target.current().accumulators):
                # a loop over one tile: isl put its value into the lane loops' bounds
                one = {}
                if tiled:
                    ax = next(a for a in tile_axes or scope_axes if a.uid == jt.uid)
                    lo_, hi_ = closed_value(ax.lo), closed_value(ax.hi)
                    if lo_ is not None and hi_ == lo_ + 1:
                        one[tv.name] = lo_
                regs = rowsum_registers.registerize(nest, acc, size, red.dtype, lanes,
                                           lambda dt: self.fresh("v", dt), one)
            if regs is not None:
                self.record.note("register tile", f"{size} x {red.dtype}")
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

        work = self.work(t, axes, dense=True)
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
            split = rowsum_tiles.whole_tiles(self, jt, j, tile, scope_axes, tile_block, work)
            if split is not None:
                self.record.note("whole tiles apart", True)
        # Operands along the rows too large for the cache: the tiles in chunks whose panels
        # stay cached while every row block reads them (codegen.rowsum_tiles.panel_chunk)
        chunk = rowsum_tiles.panel_chunk(t, red, tile) if tiled and ri is not None else None
        if chunk is not None:
            self.record.note("panel chunks", chunk)
        finite: Dict[str, Var] = {}  # buffer -> sum of its elements times 0 (NaN: not finite)
        if chunk is None:
            loops = nest_from(0, [None])
        else:
            jc = self.fresh("i", I64)
            chunks = -(-(-(-n // tile)) // chunk)  # ceil(ceil(n / tile) / chunk)
            loops = [For(jc, Lit(0, I64), Lit(chunks, I64), 1, Block(tuple(nest_from(0, [None]))),
                parallel=work is not False, work=work if work is not False else None,
                note=f"{jt.name} (chunks of {chunk})")]
        # (the recursive closures hold themselves, and through their cells the nests
        # made: unbound, reference counting frees them now, not the cyclic collector)
        nest_from = tile_block = None  # noqa: F811, F841
        return self.finite_checks(finite) + loops

    def buffer_dtype(self, name: str) -> str:
        return next(b.dtype for b in self.buf.values() if b.name == name)

    def finite_flag(self, name: str) -> Var:
        """The variable :meth:`finite_checks` sets for buffer ``name``: while
        ``self.flags`` is a dict (``Lowerer.program``), one per input buffer for the
        whole kernel (an input does not change: ``codegen.finite_flags`` scans it once),
        else a new one."""
        b = next(b for b in self.buf.values() if b.name == name)
        if self.flags is None or not b.readonly:
            return self.fresh("fin", b.dtype)
        if name not in self.flags:
            self.flags[name] = self.fresh("fin", b.dtype)
        return self.flags[name]

    def finite_checks(self, finite: Dict[str, Var]) -> List[Stmt]:
        """``fin = sum(b[z] * 0)`` for each buffer ``b`` of ``finite``: +-0 if every
        element is finite, NaN otherwise (so ``fin == fin`` tests it), in vector lanes.
        The scans of a flag shared by the kernel (:meth:`finite_flag`) are recorded in
        ``self.scans``."""
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
            if self.flags is not None and self.flags.get(name) is v:
                self.scans.setdefault(name, []).append(tuple(out[-2:]))
        return out
