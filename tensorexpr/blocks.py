"""A program restricted to one block of an output: the regions it reads, and one build
with symbolic sizes that computes any block.

Chunked execution (``tensorexpr.dask``) runs a program block by block. A *block* of an
output is a box of its indices and, when the output is a sum (max, min) over axes that
run along chunked inputs, a box of those reduction axes too (the partial results are
combined afterwards). For a block, isl gives the bounding box of the elements of every
tensor the block needs (:meth:`BlockProgram.windows`): consumers before producers, the
image of each read over the points where it is evaluated (its tensor's window, the
reductions around it, the guards that hold there). Clamped borders, strides, dilations
and the gather form of gradients need nothing special: the windows are exact per side.

The block program computes each tensor over its window only, in global coordinates
(``T'[i] = T[start + i]``, each read shifted by the start of the window it reads).
Starts and extents are size variables, so one build serves every block, the uneven
edge blocks included. The sizes that no window array carries (starts, the extents of
intermediate tensors) are the first dimensions of empty *carrier* arrays (``(v, 0)``),
the one way a built function takes sizes.
"""
from __future__ import annotations

import copyreg
import dataclasses
import io
import pickle
import threading
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .bounds import read_sites
from .errors import TensorExprError, describe
from .ir import (INDEX_DTYPE, Axis, Compute, Const, Expr, Node, Placeholder, Read, Reduce,
                 ScatterAdd, SelfRef, SizeVar, Tensor, fresh_uid, topo_order)
from .polyhedral import image_bounds, index_box
from .printer import expr_str
from .transform import map_reads, substitute

#: reductions whose partial results over pieces of their axes combine into the whole
SPLITTABLE = ("sum", "max", "min")
Box = List[Tuple[int, int]]  # half-open [lo, hi) per dimension


def _c(v: int) -> Const:
    return Const(int(v), INDEX_DTYPE)


def _shifted(e: Expr, start: Expr) -> Expr:
    return e if isinstance(start, Const) and start.value == 0 else e - start


def relocate(order: Sequence[Tensor], dims: Dict[int, Tuple[Expr, ...]],
             starts: Dict[int, Tuple[Expr, ...]], sizes: Optional[Dict[str, int]] = None,
             reduce_ranges: Optional[Dict[int, Tuple[Expr, Expr]]] = None
             ) -> Dict[int, Tensor]:
    """Every tensor of ``order`` (producers first) computed over a window of its own:
    ``T'[i] = T[starts[T] + i]`` for ``i`` in the box of ``dims[T]``, its reads shifted
    to the windows they read. ``sizes`` binds size variables to values; ``reduce_ranges``
    gives the axes (by uid) of a top-level reduction new bounds ``[lo, hi)``. Returns the
    new tensors by uid (uids kept: they stand for the same values).

    >>> import tensorexpr as te
    >>> X = te.placeholder((8,), name="X")
    >>> Y = te.compute((8,), lambda i: X[te.maximum(i - 1, 0)], name="Y")
    >>> s = te.var("s")
    >>> new = relocate([X, Y], {X.uid: (te.var("w"),), Y.uid: (te.var("n"),)},
    ...                {X.uid: (s,), Y.uid: (s + 1,)})
    >>> print(new[Y.uid].body)
    X[max((i + (s + 1)) - 1, 0) - s]
    """
    sizes = {SizeVar(k): _c(v) for k, v in (sizes or {}).items()}
    reduce_ranges = reduce_ranges or {}
    new: Dict[int, Tensor] = {}
    self_refs: Dict[int, SelfRef] = {}
    self_of: Dict[int, int] = {}  # a recurrence's self-reference uid -> its own uid

    def redirect(r: Read) -> Expr:
        t = r.tensor
        target = self_refs[t.uid] if isinstance(t, SelfRef) else new[t.uid]
        start = starts.get(t.uid if not isinstance(t, SelfRef) else self_of[t.uid])
        idx = r.indices if start is None else tuple(_shifted(ix, s) for ix, s in zip(r.indices, start))
        return Read(target, idx, r.dtype)

    for t in order:
        d = tuple(dims.get(t.uid, t.dims))
        if isinstance(t, Placeholder):
            new[t.uid] = Placeholder(t.name, d, t.dtype, t.uid, t.origin)
            continue
        start = starts.get(t.uid)
        if isinstance(t, Compute):
            axes = tuple(Axis(a.name, _c(0), n, fresh_uid()) for a, n in zip(t.axes, d))
            mapping = dict(sizes)
            for a, na, s in zip(t.axes, axes, start or [_c(0)] * len(axes)):
                mapping[a] = na if isinstance(s, Const) and s.value == 0 else na + s
            sr = None
            if t.self_ref is not None:
                sr = SelfRef(t.self_ref.name, d, t.dtype, t.self_ref.uid, t.self_ref.origin)
                self_refs[sr.uid], self_of[sr.uid] = sr, t.uid
            body = _substitute_top(t.body, mapping, reduce_ranges, sizes)
            new[t.uid] = dataclasses.replace(t, dims=d, axes=axes, self_ref=sr,
                                             body=map_reads(body, redirect))
        elif isinstance(t, ScatterAdd):
            # iterates over its own (whole) domain; only where it writes moves
            axes = tuple(Axis(a.name, substitute(a.lo, sizes), substitute(a.hi, sizes),
                              fresh_uid()) for a in t.axes)
            mapping = dict(sizes)
            mapping.update(zip(t.axes, axes))

            def go(e):
                return None if e is None else map_reads(substitute(e, mapping), redirect)
            idx = tuple(go(ix) for ix in t.indices)
            if start is not None:
                idx = tuple(_shifted(ix, s) for ix, s in zip(idx, start))
            new[t.uid] = dataclasses.replace(t, dims=d, axes=axes, indices=idx,
                                             value=go(t.value), where=go(t.where))
        else:
            raise TypeError(f"cannot restrict {describe(t)} to a block")
    return new


def _substitute_top(body: Expr, mapping: dict, reduce_ranges: dict, sizes: dict) -> Expr:
    """``body`` with ``mapping`` applied; a top-level reduction's axes listed in
    ``reduce_ranges`` (by uid) get the new bounds (``substitute`` leaves bound axes)."""
    if not (isinstance(body, Reduce) and any(a.uid in reduce_ranges for a in body.axes)):
        return substitute(body, mapping)
    inner, axes = dict(mapping), []
    for a in body.axes:
        lo, hi = reduce_ranges.get(a.uid, (substitute(a.lo, sizes), substitute(a.hi, sizes)))
        na = Axis(a.name, lo, hi, fresh_uid())
        inner[a] = na
        axes.append(na)
    where = None if body.where is None else substitute(body.where, inner)
    return Reduce(body.op, substitute(body.body, inner), tuple(axes), where, body.dtype)


def bind_sizes(outputs: Sequence[Tensor], inputs: Sequence[Tensor], sizes: Dict[str, int]
               ) -> Tuple[List[Tensor], List[Tensor]]:
    """``(outputs, inputs)`` with every size variable replaced by its value (constant
    shapes: windows are boxes of integers).

    >>> import tensorexpr as te
    >>> n = te.var("n")
    >>> X = te.placeholder((n,), name="X")
    >>> Y = te.compute((n - 1,), lambda i: X[i + 1], name="Y")
    >>> (y,), (x,) = bind_sizes([Y], [X], {"n": 5})
    >>> y.shape, x.shape
    ((4,), (5,))
    """
    if not sizes:
        return list(outputs), list(inputs)
    order = topo_order(list(outputs) + list(inputs))
    binding = {SizeVar(k): _c(v) for k, v in sizes.items()}
    dims = {t.uid: tuple(_c(_eval(substitute(d, binding))) for d in t.dims) for t in order}
    new = relocate(order, dims, {}, sizes)
    return [new[t.uid] for t in outputs], [new[t.uid] for t in inputs]


def _eval(e: Expr) -> int:
    from .transform import eval_int
    return int(eval_int(e))


def _const_shape(t: Tensor) -> Tuple[int, ...]:
    return tuple(int(d.value) for d in t.dims)


class WholeRead(TensorExprError, ValueError):
    """A block would read a whole chunked input (a data-dependent read, a transpose of
    a row into a column...): rechunk it, or let ``tensorexpr.dask`` gather it."""


@dataclasses.dataclass
class Windows:
    """The box of each tensor (by uid) one block needs, and why a dimension of a tensor
    is needed whole: ``whole[(uid, dim)]`` is the text of a read that alone spans it.
    ``read`` holds the uids of the tensors the block reads at all."""

    boxes: Dict[int, Box]
    whole: Dict[Tuple[int, int], str]
    read: set


class BlockProgram:
    """One output of a program with constant shapes, computable block by block.

    ``split`` are the axes of the output's top-level sum (max, min) that blocks may
    cover in pieces (``op`` says how partial results combine); a block is the output
    box and a box of those axes. :meth:`windows` finds what a block reads,
    :meth:`run` computes it from the input windows. The build (C, one for every block)
    is made on first use, in whatever process runs blocks: a block program pickles as
    its IR.

    >>> import numpy as np, tensorexpr as te
    >>> X = te.placeholder((10,), "float64", name="X")
    >>> Y = te.compute((10,), lambda i: X[te.maximum(i - 1, 0)] + X[i], name="Y")
    >>> bp = BlockProgram(Y, [X], backend="numpy")
    >>> w = bp.windows([(4, 7)], [])
    >>> w.boxes[X.uid]
    [(3, 7)]
    >>> x = np.arange(10.0)
    >>> bp.run(w, [x[3:7]]).tolist()
    [7.0, 9.0, 11.0]
    """

    def __init__(self, output: Tensor, inputs: Sequence[Tensor], backend: str = "c",
                 options=None):
        self.output, self.inputs = output, list(inputs)
        self.backend, self.options = backend, options
        self._setup()

    def _setup(self) -> None:
        out = self.output
        self.order = topo_order([self.output] + self.inputs)
        self.by_uid = {t.uid: t for t in self.order}
        body = getattr(out, "body", None)
        self.op = body.op if isinstance(body, Reduce) and body.op in SPLITTABLE else None
        self.split: List[Axis] = list(body.axes) if self.op else []
        self.sites = {t.uid: list(_sites(t)) for t in self.order if not isinstance(t, Placeholder)}
        self._functions: Dict[tuple, tuple] = {}
        self._lock = threading.Lock()  # tasks in threads build it once

    # {{{ pickling: the IR, without cached hashes (str hashes differ between processes)

    def __getstate__(self):
        buf = io.BytesIO()
        _IRPickler(buf).dump((self.output, self.inputs, self.backend, self.options))
        return {"ir": buf.getvalue()}

    def __setstate__(self, state):
        # every task carries its own pickled copy: one program (and build) per process
        seen = _UNPICKLED.get(state["ir"])
        if seen is not None:
            self.__dict__ = seen.__dict__
            return
        self.output, self.inputs, self.backend, self.options = pickle.loads(state["ir"])
        _reserve_uids(max(_all_uids(self.output, self.inputs)))
        self._setup()
        _UNPICKLED[state["ir"]] = self

    # }}}

    def windows(self, box: Box, split_box: Box) -> Windows:
        """The box of every tensor's elements that the block ``box`` of the output (and
        ``split_box`` of the :attr:`split` axes) reads.

        A tensor nothing reads gets a one-element box (a window is never empty, so no
        size of the block program is 0); a recurrence and a scatter-add are needed whole.
        """
        boxes: Dict[int, Box] = {self.output.uid: [tuple(b) for b in box]}
        whole: Dict[Tuple[int, int], str] = {}
        read_uids = {self.output.uid}
        split = {a.uid: Axis(a.name, _c(lo), _c(hi), a.uid)
                 for a, (lo, hi) in zip(self.split, split_box)}
        for t in reversed(self.order):
            if isinstance(t, Placeholder):
                continue
            shape = _const_shape(t)
            if isinstance(t, ScatterAdd) or getattr(t, "self_ref", None) is not None:
                boxes[t.uid] = [(0, n) for n in shape]
                own = [Axis(a.name, a.lo, a.hi, a.uid) for a in t.axes]
            else:
                got = boxes.get(t.uid) or [(0, min(1, n)) for n in shape]
                boxes[t.uid] = got
                own = [Axis(a.name, _c(lo), _c(hi), a.uid) for a, (lo, hi) in zip(t.axes, got)]
            for read, guards, raxes in self.sites[t.uid]:
                src = read.tensor
                if isinstance(src, SelfRef):
                    continue
                axes = own + [split.get(a.uid, a) if t is self.output else a for a in raxes]
                got = index_box(axes, guards, read.indices)
                if got is None:
                    continue  # never evaluated in this block
                read_uids.add(src.uid)
                mine = boxes.setdefault(src.uid, None)
                size = _const_shape(src)
                new = []
                for d, (r, n) in enumerate(zip(got, size)):
                    lo, hi = (0, n) if r is None else (max(r[0], 0), min(r[1] + 1, n))
                    if (lo, hi) == (0, n) and n > 1:
                        why = "a data-dependent index" if r is None else "its whole range"
                        whole.setdefault((src.uid, d), f"{expr_str(read)} in {describe(t)} "
                                                       f"({why})")
                    if mine is not None:
                        lo, hi = min(lo, mine[d][0]), max(hi, mine[d][1])
                    new.append((lo, hi))
                boxes[src.uid] = new
        for t in self.inputs:
            boxes.setdefault(t.uid, [(0, min(1, n)) for n in _const_shape(t)])
        return Windows(boxes, whole, read_uids)

    # {{{ the block program

    def _block_sizes(self, fixed: Dict[str, int]):
        """The output block and the split axes' ranges as expressions of the block
        program's sizes: per output dimension ``d`` the block's start plus one ``s{d}``
        and its distance from the end plus one ``g{d}``; ``r{k}``/``h{k}`` the same for
        the split axes. They are all at least 1 (what isl assumes of every size) exactly
        when the block lies inside the output, so a read proven in range on the whole
        program is proven in range of its window in the block program. The sizes in
        ``fixed`` (the same for every block of a plan: a dimension in one chunk, taps
        never split) are constants, which the C backend schedules better.

        Returns ``(box, split ranges by axis uid, names, facts)``: ``names`` are the
        sizes left, ``facts`` say that the block is not empty (the windows may be wrong
        for an empty one: no loop runs then, and a read isl cannot prove is checked)."""
        def size(name: str) -> Expr:
            return _c(fixed[name]) if name in fixed else SizeVar(name)
        shape = _const_shape(self.output)
        box = [(size(f"s{d}") - 1, _c(n + 1) - size(f"g{d}")) for d, n in enumerate(shape)]
        split = {a.uid: (a.lo + size(f"r{k}") - 1, a.hi + 1 - size(f"h{k}"))
                 for k, a in enumerate(self.split)}
        names = [f"{c}{d}" for d in range(len(shape)) for c in "sg"]
        names += [f"{c}{k}" for k in range(len(self.split)) for c in "rh"]
        facts = [hi > lo for lo, hi in [*box, *split.values()]
                 if not (isinstance(lo, Const) and isinstance(hi, Const))]
        return box, split, [n for n in names if n not in fixed], facts

    def sizes(self, windows: Windows, split_box: Box = ()) -> Dict[str, int]:
        """The sizes of the block program (:meth:`_block_sizes`) for one block."""
        values = {}
        for d, ((lo, hi), n) in enumerate(zip(windows.boxes[self.output.uid],
                                              _const_shape(self.output))):
            values[f"s{d}"], values[f"g{d}"] = lo + 1, n - hi + 1
        for k, ((lo, hi), a) in enumerate(zip(split_box, self.split)):
            values[f"r{k}"], values[f"h{k}"] = lo - int(a.lo.value) + 1, int(a.hi.value) - hi + 1
        return values

    def _symbolic_windows(self, box, split, names, facts) -> Dict[int, List[Tuple[Expr, Expr]]]:
        """:meth:`windows` as expressions of the block's sizes (isl's exact bounding
        boxes, piecewise: a clamped border's halo is 0 on its side)."""
        wins: Dict[int, List[Tuple[Expr, Expr]]] = {self.output.uid: list(box)}
        reads: Dict[int, list] = {}
        for t in reversed(self.order):
            shape = _const_shape(t)
            if isinstance(t, ScatterAdd) or getattr(t, "self_ref", None) is not None:
                wins[t.uid] = [(_c(0), _c(n)) for n in shape]
                own = list(t.axes)
            elif t is not self.output:
                wins[t.uid] = [(lo, hi) for lo, hi, _ in
                               image_bounds(reads.get(t.uid, []), shape, names, facts)]
            if isinstance(t, Placeholder):
                continue
            if not (isinstance(t, ScatterAdd) or getattr(t, "self_ref", None) is not None):
                own = [Axis(a.name, lo, hi, a.uid) for a, (lo, hi) in zip(t.axes, wins[t.uid])]
            for read, guards, raxes in self.sites[t.uid]:
                if isinstance(read.tensor, SelfRef):
                    continue
                axes = own + [Axis(a.name, *split[a.uid], a.uid)
                              if t is self.output and a.uid in split else a for a in raxes]
                reads.setdefault(read.tensor.uid, []).append((axes, guards, read.indices))
        return wins

    def function(self, fixed: Dict[str, int] = None):
        """The built block program (window arrays of the inputs, then the carriers), for
        blocks whose sizes ``fixed`` are those values (a plan passes the ones its blocks
        share)."""
        key = tuple(sorted((fixed or {}).items()))
        with self._lock:
            got = self._functions.get(key)
            if got is None:
                got = self._functions[key] = self._build(dict(key))
            return got

    def _build(self, fixed: Dict[str, int]):
        """Build the block program: every tensor relocated to its window, the windows
        functions of the block (so isl proves reads in range as on the whole program:
        no check per element, the same strategies as at constant sizes)."""
        from .build import build
        box, split, names, facts = self._block_sizes(fixed)
        wins = self._symbolic_windows(box, split, names, facts)
        ext = {uid: tuple(_difference(hi, lo) for lo, hi in w) for uid, w in wins.items()}
        start = {uid: tuple(lo for lo, _ in w) for uid, w in wins.items()}
        new = relocate(self.order, ext, start, reduce_ranges=split)
        # one empty array per size: numpy refuses a shape whose non-zero dims overflow
        carriers = [Placeholder(f"block_{v}", (SizeVar(v), _c(0)), "bool", fresh_uid(),
                                self.output.origin) for v in names]
        f = build(new[self.output.uid], inputs=[new[t.uid] for t in self.inputs] + carriers,
                  backend=self.backend, options=self.options)
        return f, names

    def run(self, windows: Windows, arrays: Sequence[np.ndarray],
            split_box: Box = (), fixed: Dict[str, int] = None) -> np.ndarray:
        """The block ``windows`` was found for, from the inputs' windows ``arrays``
        (``fixed``: as for :attr:`function`, which must hold for this block)."""
        f, names = self.function(fixed)
        values = self.sizes(windows, split_box)
        if any(values[k] != v for k, v in (fixed or {}).items()):
            raise ValueError(f"block sizes {values} do not match the build's {fixed}")
        return f(*arrays, *[np.empty((values[n], 0), np.bool_) for n in names])

    # }}}


def _difference(hi: Expr, lo: Expr) -> Expr:
    if isinstance(hi, Const) and isinstance(lo, Const):
        return _c(hi.value - lo.value)
    return hi if isinstance(lo, Const) and lo.value == 0 else hi - lo


def _sites(t: Tensor):
    """``(read, guards, reduce axes)`` of every read in ``t``'s definition."""
    if isinstance(t, Compute):
        yield from read_sites(t.body)
    elif isinstance(t, ScatterAdd):
        g = () if t.where is None else (t.where,)
        for e in (*t.indices, t.value):
            yield from read_sites(e, g)
        if t.where is not None:
            yield from read_sites(t.where)


#: the block programs this process unpickled, by their pickled IR
_UNPICKLED: Dict[bytes, "BlockProgram"] = {}


class _IRPickler(pickle.Pickler):
    """Pickles IR nodes without what is cached on them (``_hash``, ``_inputs``,
    ``_free_axes``...: underscore attributes, no field is one): the structural hash hashes
    strings, which Python salts per process (another process would compare wrongly),
    and the rest is worked out again where needed."""

    def reducer_override(self, obj):
        if isinstance(obj, Node) and any(k.startswith("_") for k in obj.__dict__):
            state = {k: v for k, v in obj.__dict__.items() if not k.startswith("_")}
            return copyreg.__newobj__, (type(obj),), state
        return NotImplemented


def _all_uids(output: Tensor, inputs: Sequence[Tensor]):
    from .ir import walk
    yield 0
    for t in topo_order([output] + list(inputs)):
        yield t.uid
        for e in (getattr(t, "body", None), *getattr(t, "indices", ()),
                  getattr(t, "value", None)):
            if e is None:
                continue
            for x in walk(e, unique=True):
                if isinstance(x, Axis):
                    yield x.uid
                elif isinstance(x, Reduce):
                    yield from (a.uid for a in x.axes)
        yield from (a.uid for a in getattr(t, "axes", ()))
        if getattr(t, "self_ref", None) is not None:
            yield t.self_ref.uid


def _reserve_uids(top: int) -> None:
    """Make later ``fresh_uid()`` values exceed ``top`` (a program unpickled in another
    process keeps its uids; the build there must not make one of them again)."""
    while fresh_uid() <= top:
        pass
