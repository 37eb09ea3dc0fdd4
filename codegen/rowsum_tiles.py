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

:func:`panel_chunk` decides the cache blocking: row blocks outside, tiles inside
reread the operand walked along the rows (``B`` of ``A B``, a ``K x width``
panel per tile) once per row block, from cache while it fits the L2 (the
benchmark's products); a larger ``B`` is streamed from memory by every row
block. Then the tiles run in chunks (the parallel loop), each with every row
block inside: a chunk's panels are loaded once and stay cached.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, List, Optional

from tensorexpr.ir import Axis, Binary, Const, INDEX_DTYPE

from .copies import padded_width
from .loopast import Block, CExpr, For, Op, Stmt, Var

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
    >>> from codegen.pipeline import generate
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

    def split(v: Var, lo: CExpr, hi: CExpr, rows: List[Optional[Var]], parallel: bool,
              part: bool = False) -> List[Stmt]:
        """``part``: [lo, hi) is a part of the tiles (a chunk), cut at the last tile too."""
        mid = lowerer.size_expr(whole_hi)
        kw = dict(parallel=parallel, work=work if parallel else None)
        end, start = (Op("min", (mid, hi), I64), Op("max", (mid, lo), I64)) if part else (mid, mid)
        return [For(v, lo, end, 1, Block(tuple(tile_block(rows, axes_with(whole), True))),
                    note=f"{jt.name} (whole tiles)", **kw),
                For(v, start, hi, 1, Block(tuple(tile_block(rows, axes_with(last)))),
                    note=f"{jt.name} (last tile)", **kw)]
    return split


#: operands read along the rows (``B`` of ``A B``) beyond this many bytes are not reread
#: from cache by every row block: the tiles go in chunks. Twice this CPU's L2 per core:
#: streaming B from L3 once per row block costs less than rereading the rows' operand
#: once per chunk up to there (B of 2 MB: chunks 0-15% slower; 4 MB: 40% faster)
CACHED_BYTES = 2 << 20
#: bytes of the operands' panels of a chunk of tiles (a quarter of the L2: the rows of the
#: other operand and the output stay cached beside them)
PANEL_BYTES = 1 << 18
#: chunks of tiles at least (the chunks are the parallel loop)
MIN_CHUNKS = 4


def panel_chunk(t, red, tile: int) -> Optional[int]:
    """Tiles per chunk, or None: the loops of a row-blocked sum then run chunk by chunk
    (in parallel), each chunk's row blocks inside, then its tiles: the panels a chunk's
    tiles read (``K x chunk * tile`` elements of ``B`` of ``A B``) are loaded from memory
    once and reread from cache by every row block, instead of every row block streaming
    all of ``B`` (a 64 x 512 x 4096 product ran at a third of BLAS's speed). Only when
    the parts of the tensors read along the row axis ``j`` (static sizes) that a sweep of
    the row blocks reads exceed ``CACHED_BYTES`` (not a convolution's image: each sweep
    reads a few of its rows; chunks of its tiles measured 10-25% slower).

    >>> import tensorexpr as te
    >>> A = te.placeholder((64, 512), name="A"); B = te.placeholder((512, 4096), name="B")
    >>> k = te.reduce_axis((0, 512), name="k")
    >>> C = te.compute((64, 4096), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k))
    >>> panel_chunk(C, C.body, 32)  # 512 x 128 floats: 256 KB of B per chunk
    4
    >>> B2 = te.placeholder((512, 256), name="B2")
    >>> C2 = te.compute((64, 256), lambda i, j: te.sum(A[i, k] * B2[k, j], axis=k))
    >>> panel_chunk(C2, C2.body, 32) is None  # B2 (512 KB) stays cached
    True
    """
    import numpy as np

    from tensorexpr.ir import Read, walk
    from tensorexpr.transform import const_value
    j = t.axes[-1]
    n = const_value(j.hi)
    depth = 1
    for ax in red.axes:
        lo, hi = const_value(ax.lo), const_value(ax.hi)
        if lo is None or hi is None:
            return None
        depth *= max(hi - lo, 1)
    if n is None:
        return None
    # the part of each such tensor one sweep of the row blocks reads: the dimensions its
    # indices walk with the reduction and j only (a convolution's image rows move with
    # the output's y: each sweep reads a few rows of one image, which stay cached)
    outer = {ax.uid for ax in t.axes[:-1]}
    along, size = {}, 0
    for r in (x for x in walk(red, unique=True) if isinstance(x, Read)):
        if any(isinstance(x, Axis) and x.uid == j.uid for i in r.indices for x in walk(i, unique=True)):
            dims = [const_value(d) for d in r.tensor.dims]
            if any(d is None for d in dims):
                return None
            swept = [d for d, i in zip(dims, r.indices)
                     if not any(isinstance(x, Axis) and x.uid in outer for x in walk(i, unique=True))]
            along[r.tensor.uid] = int(np.prod(swept, dtype=np.int64)) * np.dtype(
                r.tensor.dtype).itemsize
    size = sum(along.values())
    if size <= CACHED_BYTES:
        return None
    item = max(np.dtype(red.dtype).itemsize, 4)
    tiles = -(-n // tile)
    chunk = max(1, PANEL_BYTES // (depth * tile * item * len(along)))
    chunk = min(chunk, max(1, tiles // MIN_CHUNKS))
    return chunk if chunk < tiles else None


def padded_lanes(red, j: Axis) -> Optional[int]:
    """The padded width when every read of ``red`` along ``j`` is of a zero-padded copy
    (``codegen.copies.padded``) of one width, else None."""
    from tensorexpr.ir import Read, walk

    widths = set()
    for r in (x for x in walk(red, unique=True) if isinstance(x, Read)):
        if any(isinstance(x, Axis) and x.uid == j.uid for i in r.indices for x in walk(i, unique=True)):
            widths.add(padded_width(r.tensor))
    return widths.pop() if len(widths) == 1 and None not in widths else None
