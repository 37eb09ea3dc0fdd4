"""Programs on chunked arrays: ``ted.op(outputs)`` is a function of dask arrays.

>>> import numpy as np, dask.array as da, tensorexpr as te, tensorexpr.dask as ted
>>> X = te.placeholder((10,), "float64", name="X")
>>> Y = te.compute((10,), lambda i: X[te.maximum(i - 1, 0)] + X[i], name="Y")
>>> f = ted.op(Y)
>>> y = f(da.arange(10.0, chunks=4))
>>> y.chunks, y.compute().tolist()
(((4, 4, 2),), [0.0, 1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0, 17.0])

Each output block is one task (:mod:`tensorexpr.blocks`): it reads, from the input
chunks its window meets, exactly the elements it needs (per block and per side: a
clamped border's block has no halo on that side) and computes them with one build for
every block. An output that is a sum (max, min) over axes running along chunked inputs
(a weight gradient summing over the image) is computed in pieces of those axes, and
the pieces are combined by a tree of tasks. Output chunks follow the inputs: an output
axis that reads an input dimension gets that dimension's chunk boundaries (mapped
through the read: a stride-2 output has half as many elements per chunk).

A read that would need a whole chunked dimension in every block (a data-dependent
gather, a sum over a chunked axis nested inside another expression) is refused,
naming the read, unless ``rechunk=True`` lets each block gather it.

Tasks release the GIL while the kernel runs; a task's OpenMP team is capped so that
tasks times threads does not exceed the cores (``threads=`` sets the team size). A
program pickles as its IR and is built again (from the on-disk cache) in a worker
process, so ``distributed`` clusters work as the threaded scheduler does.
"""
from __future__ import annotations

import itertools
import math
import operator
import os
import threading
import uuid
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .blocks import Box, BlockProgram, WholeRead, bind_sizes
from .interop import Program
from .ir import Tensor

#: how many partial results one task of a tree reduction combines
SPLIT_EVERY = 8


def op(outputs, inputs: Optional[Sequence[Tensor]] = None, *, chunks=None,
       rechunk: bool = False, threads: Optional[int] = None, backend: str = "c",
       options=None) -> "Op":
    """A function of dask arrays (one per input, any chunking) returning dask arrays
    equal to ``te.build(outputs, inputs)`` on the whole arrays.

    ``inputs`` are as in :func:`te.build` (None: the placeholders read, in creation
    order). ``chunks`` (one dask chunk spec per output, or None) overrides the output
    chunks, which otherwise follow the inputs. ``rechunk=True`` lets a block gather a
    whole chunked dimension it needs instead of refusing. ``threads`` is the OpenMP team
    of one task (default: the cores divided by the tasks that run at once).

    >>> import numpy as np, dask.array as da, tensorexpr as te, tensorexpr.dask as ted
    >>> A = te.placeholder((6, 4), "float64", name="A")
    >>> k = te.reduce_axis(6, name="k")
    >>> S = te.compute((4,), lambda j: te.sum(A[k, j], axis=k), name="S")
    >>> s = ted.op(S)(da.ones((6, 4), chunks=(2, 4)))   # three pieces of k, summed
    >>> s.compute().tolist()
    [6.0, 6.0, 6.0, 6.0]
    """
    return Op(outputs, inputs, chunks=chunks, rechunk=rechunk, threads=threads,
              backend=backend, options=options)


class Op:
    """What :func:`op` returns: call it with dask (or numpy) arrays; :meth:`plan` shows
    the blocks, halos and reductions a call would make."""

    def __init__(self, outputs, inputs=None, *, chunks=None, rechunk=False, threads=None,
                 backend="c", options=None):
        self.program = Program(outputs, inputs, save=False)
        self.single, self.outputs, self.inputs = (self.program.single, self.program.outputs,
                                                  self.program.inputs)
        self.chunks = chunks
        self.rechunk, self.threads = rechunk, threads
        self.backend, self.options = backend, options
        self.token = uuid.uuid4().hex[:12]
        self._programs: Dict[tuple, List[BlockProgram]] = {}

    def __call__(self, *arrays):
        outs = self.plan(*arrays).arrays()
        return outs[0] if self.single else tuple(outs)

    def plan(self, *arrays) -> "Plan":
        """The blocks of a call on ``arrays``: printable, with the halo bytes moved.

        >>> import dask.array as da, tensorexpr as te, tensorexpr.dask as ted
        >>> X = te.placeholder((8,), "float64", name="X")
        >>> Y = te.compute((8,), lambda i: X[te.maximum(i - 1, 0)] + X[te.minimum(i + 1, 7)],
        ...                name="Y")
        >>> print(ted.op(Y).plan(da.zeros(8, chunks=4)))
        Y: chunks ((4, 4),), 2 tasks
          X: halo per side (low, high) by dimension [(1, 1)], 16 bytes moved
        """
        import dask.array as da
        if len(arrays) != len(self.inputs):
            raise TypeError(f"the function takes {len(self.inputs)} input(s) "
                            f"({', '.join(t.name for t in self.inputs)}); got {len(arrays)}")
        arrays = [a if isinstance(a, da.Array) else da.asarray(a) for a in arrays]
        for t, a in zip(self.inputs, arrays):
            if a.ndim != t.ndim or a.dtype != np.dtype(t.dtype):
                raise TypeError(f"input {t.name!r} must be a {t.ndim}-d {t.dtype} array; got "
                                f"{a.ndim}-d {a.dtype} (convert with .astype(np.{t.dtype}))")
            if any(math.isnan(c) for c in itertools.chain.from_iterable(a.chunks)):
                raise ValueError(f"input {t.name!r} has unknown chunk sizes; call "
                                 f"compute_chunk_sizes() on it first")
        sizes = self.program.check_shapes([a.shape for a in arrays])
        key = tuple(sorted(sizes.items()))
        programs = self._programs.get(key)
        if programs is None:
            outs, ins = bind_sizes(self.outputs, self.inputs, sizes)
            programs = self._programs[key] = [
                BlockProgram(o, ins, backend=self.backend, options=self.options) for o in outs]
        wanted = self.chunks if self.chunks is not None else [None] * len(programs)
        if len(wanted) != len(programs):
            raise ValueError(f"chunks= gives {len(wanted)} chunk specs for "
                             f"{len(programs)} outputs")
        return Plan(self, programs, arrays, wanted)


class Plan:
    """The tasks of one call: per output its chunks, the pieces of its split reduction
    and, per input, the halo on each side and the bytes moved between chunks."""

    def __init__(self, fn: Op, programs: List[BlockProgram], arrays, wanted):
        self.fn, self.programs, self.inputs = fn, programs, arrays
        self.outputs = [_OutputPlan(fn, bp, arrays, w) for bp, w in zip(programs, wanted)]

    @property
    def halo_bytes(self) -> int:
        """Bytes of input that tasks read from chunks other than their main one."""
        return sum(o.halo_bytes for o in self.outputs)

    def arrays(self) -> list:
        """The dask arrays of the outputs."""
        return [o.array() for o in self.outputs]

    def __str__(self):
        return "\n".join(str(o) for o in self.outputs)


class _OutputPlan:
    def __init__(self, fn: Op, bp: BlockProgram, arrays, wanted):
        import dask.array as da
        self.fn, self.bp, self.arrays = fn, bp, arrays
        self.in_chunks = {t.uid: a.chunks for t, a in zip(bp.inputs, arrays)}
        shape = tuple(int(d.value) for d in bp.output.dims)
        if wanted is not None:
            self.chunks = da.core.normalize_chunks(wanted, shape,
                                                   dtype=np.dtype(bp.output.dtype))
        else:
            self.chunks = tuple(self._follow(("out", d), n) for d, n in enumerate(shape))
        self.split_chunks = tuple(
            self._follow(("split", k), int(a.hi.value) - int(a.lo.value), int(a.lo.value))
            for k, a in enumerate(bp.split))
        self.blocks = []  # (block index, split index, output box, split box, windows)
        for bi in itertools.product(*(range(len(c)) for c in self.chunks)):
            box = _box(self.chunks, bi)
            for si in itertools.product(*(range(len(c)) for c in self.split_chunks)):
                sbox = _box(self.split_chunks, si, [int(a.lo.value) for a in bp.split])
                self.blocks.append((bi, si, box, sbox, bp.windows(box, sbox)))
        self._check_whole()

    def _follow(self, which, n: int, lo: int = 0) -> Tuple[int, ...]:
        """Chunks of an output axis (or split axis) of extent ``n``: the boundaries of
        the chunked input dimension it reads, mapped through the read (two probes of
        the window's centre, far from borders, give the affine map)."""
        if n <= 1:
            return (n,)
        best = None
        probes = sorted({lo + p for p in (n // 3, n // 3 + 1, (2 * n) // 3, (2 * n) // 3 + 1)
                         if p < n})
        wins = [self._probe(which, p) for p in probes]
        for t in self.bp.inputs:
            ch = self.in_chunks[t.uid]
            # two points that read t (a strided gradient reads nothing at some points)
            at = [(p, w.boxes[t.uid]) for p, w in zip(probes, wins) if t.uid in w.read]
            if len(at) < 2:
                continue
            (p0, w0), (p1, w1) = at[0], at[-1]
            for d, c in enumerate(ch):
                size = sum(c)
                spans = [w0[d], w1[d]]
                if len(c) <= 1 or any(hi - lo_ >= size for lo_, hi in spans):
                    continue  # not chunked, or not following this axis
                centres = [(lo_ + hi - 1) / 2 for lo_, hi in spans]
                slope = (centres[1] - centres[0]) / (p1 - p0)
                if slope <= 0 or (best is not None and len(c) <= best[0]):
                    continue
                best = (len(c), c, slope, centres[0] - slope * p0)
        if best is None:
            return (n,)
        _, c, slope, offset = best
        cuts = {lo, lo + n}
        for b in itertools.accumulate(c[:-1]):
            i = math.ceil((b - 0.5 - offset) / slope)  # first index whose centre is past b
            if lo < i < lo + n:
                cuts.add(i)
        cuts = sorted(cuts)
        return tuple(b - a for a, b in zip(cuts, cuts[1:]))

    def _probe(self, which, p: int):
        bp = self.bp
        shape = [int(d.value) for d in bp.output.dims]
        box = [(0, n) for n in shape]
        sbox = [(int(a.lo.value), int(a.hi.value)) for a in bp.split]
        kind, d = which
        (box if kind == "out" else sbox)[d] = (p, p + 1)
        return bp.windows(box, sbox)

    def _check_whole(self) -> None:
        """Refuse a read that needs a whole chunked dimension even for a one-element
        block (a data-dependent index, a sum over a chunked axis inside an expression):
        every task would gather all of it."""
        if self.fn.rechunk or len(self.blocks) <= 1:
            return
        bp = self.bp
        point = [(n // 2, n // 2 + 1) for n in (int(d.value) for d in bp.output.dims)]
        spoint = [((int(a.lo.value) + int(a.hi.value)) // 2,) * 2 for a in bp.split]
        win = bp.windows(point, [(lo, lo + 1) for lo, _ in spoint])
        for t, a in zip(bp.inputs, self.arrays):
            for d, c in enumerate(a.chunks):
                why = win.whole.get((t.uid, d))
                if len(c) > 1 and why is not None and win.boxes[t.uid][d] == (0, a.shape[d]):
                    raise WholeRead(
                        f"every block of output {bp.output.name!r} reads all of input "
                        f"{t.name!r} along its dimension {d} (in {len(c)} chunks), through "
                        f"{why}. Rechunk it to one chunk there ({t.name}.rechunk({{{d}: -1}})) "
                        f"or pass ted.op(..., rechunk=True) to let each block gather it")

    # {{{ halos

    def _main_chunk(self, uid: int, box: Box) -> Tuple[int, ...]:
        """Per dimension, the chunk holding most of ``box`` (where the task would run; of
        equal ones, the nearest to the box's centre)."""
        out = []
        for (lo, hi), c in zip(box, self.in_chunks[uid]):
            starts = [0, *itertools.accumulate(c)]
            centre = (lo + hi) / 2
            out.append(max(range(len(c)), key=lambda k: (
                min(hi, starts[k + 1]) - max(lo, starts[k]),
                -abs((starts[k] + starts[k + 1]) / 2 - centre))))
        return tuple(out)

    def moved(self, t: Tensor) -> int:
        """Bytes of input ``t`` that tasks read from chunks other than their main one."""
        total = 0
        for b in self.blocks:
            box = b[4].boxes[t.uid]
            main = _box(self.in_chunks[t.uid], self._main_chunk(t.uid, box))
            inside = math.prod(max(0, min(h, mh) - max(lo, ml))
                               for (lo, h), (ml, mh) in zip(box, main))
            total += math.prod(h - lo for lo, h in box) - inside
        return total * np.dtype(t.dtype).itemsize

    @property
    def halo_bytes(self) -> int:
        return sum(self.moved(t) for t in self.bp.inputs)

    def halos(self, t: Tensor) -> List[Tuple[int, int]]:
        """Per dimension of input ``t``, the widest halo below and above the main chunk."""
        out = [[0, 0] for _ in range(t.ndim)]
        for b in self.blocks:
            box = b[4].boxes[t.uid]
            main = _box(self.in_chunks[t.uid], self._main_chunk(t.uid, box))
            for d, ((lo, hi), (ml, mh)) in enumerate(zip(box, main)):
                out[d][0] = max(out[d][0], ml - lo)
                out[d][1] = max(out[d][1], hi - mh)
        return [tuple(x) for x in out]

    def __str__(self):
        head = f"{self.bp.output.name}: chunks {self.chunks}, {len(self.blocks)} tasks"
        if self.bp.split:
            head += (f"; {self.bp.op} over {', '.join(a.name for a in self.bp.split)} in "
                     f"pieces {self.split_chunks}, combined by a tree")
        lines = [head]
        for t in self.bp.inputs:
            lines.append(f"  {t.name}: halo per side (low, high) by dimension "
                         f"{self.halos(t)}, {self.moved(t)} bytes moved")
        return "\n".join(lines)

    # }}}

    def array(self):
        import dask.array as da
        from dask.highlevelgraph import HighLevelGraph
        bp, fn = self.bp, self.fn
        name = f"{bp.output.name}-te-{fn.token}-{_tokenize(self.arrays)}"
        layer: dict = {}
        parts: Dict[tuple, list] = {}
        runner = _Runner(bp, fn.threads, self.shared_sizes())
        for bi, si, box, sbox, win in self.blocks:
            args = [self._gather(t, a, win.boxes[t.uid])
                    for t, a in zip(bp.inputs, self.arrays)]
            task = (runner, win, sbox, *args)
            if not bp.split or len(list(itertools.product(*self.split_chunks))) == 1:
                layer[(name, *bi)] = task
            else:
                key = (f"{name}-part", *bi, *si)
                layer[key] = task
                parts.setdefault(bi, []).append(key)
        for bi, keys in parts.items():
            level = 0
            while len(keys) > SPLIT_EVERY:
                nxt = []
                for j in range(0, len(keys), SPLIT_EVERY):
                    k = (f"{name}-combine{level}", *bi, j // SPLIT_EVERY)
                    layer[k] = (_combine, bp.op, keys[j:j + SPLIT_EVERY])
                    nxt.append(k)
                keys, level = nxt, level + 1
            layer[(name, *bi)] = (_combine, bp.op, keys)
        graph = HighLevelGraph.from_collections(name, layer, dependencies=self.arrays)
        meta = np.empty((0,) * len(self.chunks), np.dtype(bp.output.dtype))
        return da.Array(graph, name, self.chunks, meta=meta)

    def shared_sizes(self) -> Dict[str, int]:
        """The block program's sizes that every block of this plan has alike (a
        dimension in one chunk, a reduction not split): its build takes them as
        constants."""
        per = [self.bp.sizes(win, sbox) for _, _, _, sbox, win in self.blocks]
        return {k: v for k, v in per[0].items() if all(p[k] == v for p in per)}

    def _gather(self, t: Tensor, a, box: Box):
        """A task argument giving ``a[box]``: a slice of one chunk, or pieces joined."""
        pieces = []
        ranges = []
        for (lo, hi), c in zip(box, a.chunks):
            starts = [0, *itertools.accumulate(c)]
            ranges.append([(k, max(lo, s), min(hi, e)) for k, (s, e)
                           in enumerate(zip(starts, starts[1:])) if max(lo, s) < min(hi, e)])
        chunk_starts = [[0, *itertools.accumulate(c)] for c in a.chunks]
        for combo in itertools.product(*ranges):
            idx = tuple(k for k, _, _ in combo)
            sl = tuple(slice(s - cs[k], e - cs[k]) for (k, s, e), cs in zip(combo, chunk_starts))
            offset = [s - lo for (_, s, _), (lo, _) in zip(combo, box)]
            pieces.append([offset, (operator.getitem, (a.name, *idx), sl)])
        if len(pieces) == 1:
            return pieces[0][1]
        shape = [hi - lo for lo, hi in box]
        return (_assemble, shape, t.dtype, pieces)


def _box(chunks, index, lows=None) -> Box:
    out = []
    for d, (c, k) in enumerate(zip(chunks, index)):
        start = (lows[d] if lows else 0) + sum(c[:k])
        out.append((start, start + c[k]))
    return out


def _tokenize(arrays) -> str:
    from dask.base import tokenize
    return tokenize(*[a.name for a in arrays])


def _assemble(shape, dtype, pieces) -> np.ndarray:
    """One window from pieces of several chunks: ``[[offset, array], ...]``."""
    out = np.empty(shape, dtype)
    for offset, part in pieces:
        out[tuple(slice(o, o + n) for o, n in zip(offset, part.shape))] = part
    return out


def _combine(op_name: str, parts) -> np.ndarray:
    fn = {"sum": np.add, "max": np.maximum, "min": np.minimum}[op_name]
    out = np.array(parts[0], copy=True)
    for p in parts[1:]:
        fn(out, p, out=out)
    return out


class _Runner:
    """The task function of one output: caps this thread's OpenMP team, runs a block."""

    def __init__(self, bp: BlockProgram, threads: Optional[int], fixed: Dict[str, int]):
        self.bp, self.threads, self.fixed = bp, threads, fixed

    def __call__(self, windows, split_box, *arrays):
        self.bp.function(self.fixed)  # built (or loaded) first: the cap goes to its OpenMP runtime
        cap_threads(self.threads or task_threads())
        return self.bp.run(windows, [np.ascontiguousarray(a) for a in arrays], split_box,
                           self.fixed)


# {{{ OpenMP teams per task

_capped = threading.local()


def task_threads() -> int:
    """The OpenMP team of one task: the cores divided by the tasks that run at once on
    this machine (the threads of every ``distributed`` worker on this host, else the
    threaded scheduler's workers), at least 1.

    >>> 1 <= task_threads() <= (os.cpu_count() or 1)
    True
    """
    cores = os.cpu_count() or 1
    slots = _host_slots()
    if slots is None:
        import dask
        slots = dask.config.get("num_workers", None) or cores
    return max(1, cores // max(1, slots))


_host_slots_cache: Dict[str, int] = {}


def _host_slots() -> Optional[int]:
    """Threads of all the distributed workers on this host, if this is one (None if not)."""
    try:
        from distributed import get_worker
        worker = get_worker()
    except (ImportError, ValueError):
        return None
    got = _host_slots_cache.get(worker.address)
    if got is None:
        host = worker.address.rsplit(":", 1)[0]
        try:
            info = worker.client.scheduler_info(n_workers=-1)["workers"] \
                if _takes_n_workers(worker.client) else worker.client.scheduler_info()["workers"]
            got = sum(w["nthreads"] for addr, w in info.items() if addr.rsplit(":", 1)[0] == host)
        except Exception:  # no scheduler reachable: this worker alone
            got = worker.state.nthreads
        _host_slots_cache[worker.address] = got
    return got


def _takes_n_workers(client) -> bool:
    import inspect
    return "n_workers" in inspect.signature(client.scheduler_info).parameters


def cap_threads(n: int) -> None:
    """Limit the OpenMP team of kernels started by this thread to ``n`` threads.

    >>> cap_threads(1)
    """
    if getattr(_capped, "n", None) == n:
        return
    from codegen import compiler
    for lib in compiler.loaded():
        try:
            fn = lib["omp_set_num_threads"]
        except AttributeError:
            continue
        import ctypes
        fn(ctypes.c_int(n))
        _capped.n = n
        return

# }}}
