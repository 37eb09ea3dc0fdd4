"""Register tiles of a row sum: whole tiles apart from the last, ragged one.

``lower.Lowerer.compute_rows`` reduces a tile of ``width`` elements of the
innermost output axis ``j`` at once (for ``ROW_BLOCK`` rows when they share
reads): per point of the reduction, ``width`` lanes of each row's accumulator
are updated. When every tile is whole, the loop over the lanes has a constant
trip count and the compiler keeps the accumulators in vector registers (for a
matrix product, one FMA per vector load or broadcast). When ``j``'s extent is
not a multiple of the tile (``200`` lanes in tiles of 32, or a symbolic size),
isl bounds the lanes by ``min(n - 1, 32 t + 31)`` in *every* tile: the trip
count is unknown, the accumulators live in memory, and a 200 x 300 x 200 matrix
product ran at a quarter of the speed of a 256 x 512 x 256 one.

:func:`whole_tiles` splits the loop over tiles in two: tiles ``[0, n // w)``,
where isl, told that the tile axis stays below ``n // w``, proves ``j < n`` and
drops the test (constant trip count, stores of whole tiles), then the last tile
``[n // w, ceil(n / w))`` with the bounds as before. Each element still sums the
same points in the same order: only the loop over tiles is cut in two.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, List, Optional

from tensorexpr.ir import Axis, Binary, Const, INDEX_DTYPE

from .loopast import Block, CExpr, For, Stmt, Var

I64 = INDEX_DTYPE


def whole_tiles(lowerer, jt: Axis, j: Axis, tile: int, scope_axes, tile_block: Callable,
                work) -> Callable[..., List[Stmt]]:
    """A function ``split(v, lo, hi, rows, parallel)`` that emits the loop over the tiles
    ``jt`` of ``j`` (``tile`` elements each, ``j`` starting at 0) as two loops of ``v``:
    the whole tiles, whose blocks (``tile_block(rows, axes, whole=True)``) see ``jt``
    bounded by ``j.hi // tile``, then the last tile (``tile_block(rows, axes)``).
    ``scope_axes``: the axes enclosing the tiles' blocks, ``jt`` among them.

    >>> import tensorexpr as te
    >>> from codegen.signature import Signature
    >>> from codegen.c_backend import generate
    >>> n = te.var("n")
    >>> A = te.placeholder((16, 8), name="A"); B = te.placeholder((8, n), name="B")
    >>> k = te.reduce_axis((0, 8), name="k")
    >>> C = te.compute((16, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> src = generate(Signature([C], [A, B]))[1]
    >>> "j_tile (whole tiles)" in src and "j_tile (last tile)" in src
    True
    """
    whole_hi = Binary("floordiv", j.hi, Const(tile, I64), I64)
    whole = replace(jt, hi=whole_hi)
    last = replace(jt, lo=whole_hi)

    def axes_with(ax: Axis):
        return tuple(ax if a.uid == jt.uid else a for a in scope_axes)

    def split(v: Var, lo: CExpr, hi: CExpr, rows: List[Optional[Var]], parallel: bool
              ) -> List[Stmt]:
        mid = lowerer.size_expr(whole_hi)
        kw = dict(parallel=parallel, work=work if parallel else None)
        return [For(v, lo, mid, 1, Block(tuple(tile_block(rows, axes_with(whole), True))),
                    note=f"{jt.name} (whole tiles)", **kw),
                For(v, mid, hi, 1, Block(tuple(tile_block(rows, axes_with(last)))),
                    note=f"{jt.name} (last tile)", **kw)]
    return split
