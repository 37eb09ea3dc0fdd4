"""Calling a compiled kernel: buffers, sizes, and error records turned into exceptions.

Every call allocates the outputs as fresh numpy arrays (the caller owns them);
intermediates are allocated once per sizes and reused by later calls (fresh
pages cost more than the kernels on bandwidth-bound programs), unless another
thread is using them at that moment; so is the pointer array holding their
addresses, so a call only fills in its inputs' and outputs' (a call of a small
program costs ~3 us of Python here, the validation of ``codegen.signature`` ~1).
A call passes all buffers, the size values and an error record to the kernel
through ctypes, and raises ``IndexError`` if the kernel met an out-of-range
data-dependent index.

What a call needs besides the library is a :class:`Layout`: plain data (the
buffers' dtypes and shapes, which buffers are the outputs, the error sites)
derived from the lowered program in one place, :meth:`Layout.of`, and stored as
JSON next to the library by the build cache, so a cached build never lowers.
"""
from __future__ import annotations

import ctypes
import os
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tensorexpr.errors import describe
from tensorexpr.ir import Binary, Cast, Const, Expr, Read, Select, SizeVar, Unary, walk

from . import compiler, threads

#: the kernel's entry point (codegen.cemit.ENTRY; not imported to keep cached builds light)
ENTRY = "te_kernel"
#: error codes of the kernel's error record (codegen.lower's READ/SCATTER_OUT_OF_RANGE)
READ_OUT_OF_RANGE = 1
SCATTER_OUT_OF_RANGE = 2
_ERR_WORDS = 5  # code, site, dim, index, size


# {{{ size expressions as plain data

_SIZE_NODES = {c.__name__: c for c in (Const, SizeVar, Binary, Unary, Cast, Select)}


def size_to_plain(e: Expr):
    """A size expression (constants, size variables, arithmetic) as JSON-able lists.

    >>> import tensorexpr as te
    >>> size_to_plain(te.var("n") - 3)
    ['Binary', 'sub', ['SizeVar', 'n', 'int64'], ['Const', 3, 'int64'], 'int64']
    """
    name = type(e).__name__
    if name not in _SIZE_NODES:
        raise TypeError(f"a buffer size cannot contain a {name}")
    out = [name]
    for v in e._key():
        out.append(size_to_plain(v) if isinstance(v, Expr) else v)
    return out


def size_from_plain(p) -> Expr:
    """The inverse of :func:`size_to_plain`; raises ``ValueError`` on anything else.

    >>> size_from_plain(['Const', 4, 'int64']).value
    4
    """
    if not (isinstance(p, list) and p and p[0] in _SIZE_NODES):
        raise ValueError(f"not a size expression: {p!r}")
    args = [size_from_plain(v) if isinstance(v, list) else v for v in p[1:]]
    return _SIZE_NODES[p[0]](*args)


# }}}


@dataclass
class SiteInfo:
    """An error site as plain data: the owner tensor's and the read's positions
    (see ``codegen.fingerprint``; None if lowering made them up) and the text of
    the message parts, used when the positions cannot be resolved."""

    owner: Optional[int]
    read: Optional[int]
    owner_text: str
    read_text: str
    read_tensor: str
    data_dims: Tuple[bool, ...]


@dataclass
class Layout:
    """What calling a kernel needs, as plain data.

    ``buffers`` are ``(dtype, dims)`` of the computed buffers (after the
    ``n_inputs`` input buffers), ``dims`` in :func:`size_to_plain` form;
    ``outputs`` the buffer index of each output; ``sites`` the error sites.
    """

    n_inputs: int
    size_names: Tuple[str, ...]
    buffers: List[Tuple[str, list]]
    outputs: List[int]
    sites: List[SiteInfo]

    @classmethod
    def of(cls, program, sig, source: Optional[str] = None) -> "Layout":
        """The layout of a lowered ``program`` of ``sig``'s tensors; given its C
        ``source``, a buffer that is no output and that the source never touches (a
        tensor inlined into its readers) is one element, not the tensor's size."""
        from tensorexpr.printer import expr_str

        from .cemit import referenced_buffers
        from .fingerprint import all_reads, buffer_tensors

        n = len(sig.inputs)
        index = {t.uid: k for k, t in enumerate(program.tensors)}
        outputs = [index[t.uid] for t in sig.outputs]
        untouched: set = set()
        if source is not None:
            asked = {b.name: k for k, b in enumerate(program.kernel.buffers)
                     if k >= n and k not in outputs}
            untouched = set(asked.values()) - referenced_buffers(source, asked)
        bufs = [(t.dtype, [] if n + j in untouched else [size_to_plain(d) for d in t.dims])
                for j, t in enumerate(program.tensors[n:])]
        canon = {t.uid: k for k, t in enumerate(buffer_tensors(sig))}
        sites = []
        for s in program.sites:
            owner = canon.get(s.owner.uid)
            read = None
            if owner is not None and s.read is not None:
                found = all_reads(s.owner)
                read = next((k for k, r in enumerate(found) if r is s.read), None)
            r = s.read
            sites.append(SiteInfo(
                owner, read, describe(s.owner), expr_str(r) if r is not None else "",
                r.tensor.name if r is not None else "",
                tuple(any(isinstance(x, Read) for x in walk(i, unique=True)) for i in r.indices)
                if r is not None else ()))
        return cls(n, tuple(sig.size_names), bufs, outputs, sites)

    def to_plain(self) -> dict:
        return {"n_inputs": self.n_inputs, "size_names": list(self.size_names),
                "buffers": [[d, dims] for d, dims in self.buffers], "outputs": self.outputs,
                "sites": [[s.owner, s.read, s.owner_text, s.read_text, s.read_tensor,
                           list(s.data_dims)] for s in self.sites]}

    @classmethod
    def from_plain(cls, p: dict) -> "Layout":
        """Raises ``ValueError``/``KeyError``/``TypeError`` on malformed data."""
        bufs = []
        for dtype, dims in p["buffers"]:
            np.dtype(dtype)
            for d in dims:
                size_from_plain(d)
            bufs.append((str(dtype), list(dims)))
        sites = [SiteInfo(o if o is None else int(o), r if r is None else int(r), str(a),
                          str(b), str(c), tuple(bool(x) for x in dd))
                 for o, r, a, b, c, dd in p["sites"]]
        return cls(int(p["n_inputs"]), tuple(str(x) for x in p["size_names"]), bufs,
                   [int(x) for x in p["outputs"]], sites)


def _address(a: np.ndarray, _view=ctypes.c_char.from_buffer, _addr=ctypes.addressof) -> int:
    """The address of ``a``'s first element (a C-contiguous array); ~0.2 us where
    ``a.ctypes.data`` takes ~1.5 us, which adds up over a program's buffers."""
    try:
        return _addr(_view(a))
    except (TypeError, ValueError):  # read-only or empty: take the slow way
        return a.ctypes.data


#: distinct size values whose shapes and size array a kernel function keeps (oldest dropped)
SIZES_KEPT = 1024
#: bytes of reused intermediate buffers a kernel function keeps: the sets of the most
#: recently used sizes while they fit (the latest one always, whatever its size)
POOL_BYTES = 64 << 20
#: size values whose call plans (pointer arrays, buffers) a kernel function keeps
PLANS_KEPT = 16


@dataclass
class _Sizes:
    """What a kernel's calls at one set of size values share: the computed buffers'
    shapes and dtypes, and the size array whose address the kernel gets. Whoever passes
    ``ptr`` to the kernel holds this object for the call, so the array outlives it
    whatever the caches drop meanwhile."""

    buffers: List[Tuple[Tuple[int, ...], np.dtype]]
    values: np.ndarray
    ptr: int


@dataclass
class _Plan:
    """A kernel's calls at one set of size values (used under its lock)."""

    ptrs: ctypes.Array  # the buffers' addresses: inputs and fresh outputs set per call
    fresh: List[Tuple[int, Tuple[int, ...], np.dtype]]  # (slot, shape, dtype) per call
    outputs: List[Tuple[int, bool]]  # (input to copy, True) or (fresh array, False)
    sizes: _Sizes  # owns the size array the kernel reads
    err: ctypes.Array  # zero between calls
    scratch: List[np.ndarray]  # the reused buffers, kept alive here
    nbytes: int  # of scratch


#: guards the shared caches of every kernel function (held for dict updates only)
_cache_lock = threading.Lock()
#: the kernel functions alive in this process (a forked child resets their call state)
_live: "weakref.WeakSet[KernelFunction]" = weakref.WeakSet()


class KernelFunction:
    """``impl(arrays, sizes) -> outputs`` for a compiled program and its :class:`Layout`.

    ``arrays`` are the validated inputs (C-contiguous, right dtype) and
    ``sizes`` maps size names to values (see ``codegen.signature``). It holds its
    library: the library is unloaded once no kernel function needs it.
    """

    def __init__(self, library_path: str, layout: Layout, sig):
        self.layout = layout
        self.sig = sig
        lib = compiler.load(library_path)
        # lib[...] rather than getattr: no function cached on the library, no cycle, so
        # the library goes as soon as the last kernel function of it does
        fn = lib[ENTRY]
        try:  # the work above which its loops run on the thread team (codegen.threads)
            ctypes.c_int64.in_dll(lib, threads.SYMBOL).value = threads.min_work()
        except ValueError:
            pass  # no loop of this program asks
        fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
        fn.restype = ctypes.c_int
        self._lib = lib
        self._fn = fn
        n = layout.n_inputs
        if n != len(sig.inputs) or tuple(sig.size_names) != layout.size_names:
            raise ValueError("the layout does not belong to this signature")
        self._n_inputs = n
        self._n_bufs = n + len(layout.buffers)
        self._ptr_type = ctypes.c_void_p * max(self._n_bufs, 1)
        self._dtypes = [np.dtype(d) for d, _ in layout.buffers]
        self._dims = [[size_from_plain(d) for d in dims] for _, dims in layout.buffers]
        # Per size values, shared by all threads (updated under _cache_lock).
        self._sizes: Dict[tuple, _Sizes] = {}
        # An output that is an input buffer is copied: callers own what they get.
        self._outputs = [(k, k < n) for k in layout.outputs]
        self._sites: Optional[list] = None
        out = set(layout.outputs)
        self._scratch_ids = [j for j in range(len(layout.buffers)) if n + j not in out]
        self._scratch_set = frozenset(self._scratch_ids)
        self._size_names = tuple(layout.size_names)
        self._reset_calls()
        _live.add(self)

    def _reset_calls(self) -> None:
        # Per size values, for the caller holding the lock, least recently used first:
        # the pointer array with the reused buffers' addresses filled in, what to
        # allocate fresh, the error record.
        self._plans: "OrderedDict[tuple, _Plan]" = OrderedDict()
        self._pool = 0  # bytes of the plans' reused buffers
        self._lock = threading.Lock()

    def pool_bytes(self) -> int:
        """Bytes of intermediate buffers kept for later calls (at most :data:`POOL_BYTES`,
        or the latest call's set if that alone is more).

        >>> import numpy as np, tensorexpr as te
        >>> n = te.var("n")
        >>> X = te.placeholder((n,), name="X")
        >>> T = te.compute((n,), lambda i: te.exp(X[i]), name="T")   # stored: read twice
        >>> Y = te.compute((n,), lambda i: T[i] + T[n - 1 - i], name="Y")
        >>> from codegen.pipeline import build
        >>> from codegen.signature import Signature
        >>> impl, _, _ = build(Signature([Y], [X]))
        >>> _ = impl([np.ones(1000, np.float32)], {"n": 1000})
        >>> impl.pool_bytes()
        4000
        """
        return self._pool

    def _for_sizes(self, key: tuple) -> _Sizes:
        got = self._sizes.get(key)
        if got is None:
            from tensorexpr.transform import eval_int, substitute
            binding = {SizeVar(name): Const(v, "int64")
                       for name, v in zip(self.layout.size_names, key)}
            shapes = [tuple(int(eval_int(substitute(d, binding))) if not isinstance(d, Const)
                            else d.value for d in dims) for dims in self._dims]
            vals = np.array(key or (0,), dtype=np.int64)
            new = _Sizes(list(zip(shapes, self._dtypes)), vals, vals.ctypes.data)
            with _cache_lock:
                # another thread may have got here first: all use the one it stored
                got = self._sizes.setdefault(key, new)
                while len(self._sizes) > SIZES_KEPT:
                    del self._sizes[next(iter(self._sizes))]
        return got

    def _plan(self, key: tuple) -> "_Plan":
        sizes = self._for_sizes(key)
        buffers = sizes.buffers
        n = self._n_inputs
        scratch = [np.empty(*buffers[j]) for j in self._scratch_ids]
        ptrs = self._ptr_type()
        for j, a in zip(self._scratch_ids, scratch):
            ptrs[n + j] = _address(a)
        fresh = [(n + j, s, d) for j, (s, d) in enumerate(buffers) if j not in self._scratch_set]
        slot = {k: m for m, (k, _, _) in enumerate(fresh)}
        outputs = [(k, True) if k < n else (slot[k], False) for k in self.layout.outputs]
        nbytes = sum(a.nbytes for a in scratch)
        plans = self._plans
        # the least recently used go while the pool is over its bounds; the new one stays
        while plans and (len(plans) >= PLANS_KEPT or self._pool + nbytes > POOL_BYTES):
            _, old = plans.popitem(last=False)
            self._pool -= old.nbytes
        plan = plans[key] = _Plan(ptrs, fresh, outputs, sizes,
                                  (ctypes.c_int64 * _ERR_WORDS)(), scratch, nbytes)
        self._pool += nbytes
        return plan

    #: ``__call__`` takes ``into=`` (``tensorexpr.Function`` passes ``out=`` arrays there)
    writes_into = True

    def __call__(self, arrays: Sequence[np.ndarray], sizes: Dict[str, int],
                 into: Optional[Sequence[Optional[np.ndarray]]] = None) -> List[np.ndarray]:
        """The outputs; ``into`` (one entry per output, None: a new array) gives arrays the
        kernel writes its outputs into directly: each of the output's shape and dtype,
        C-contiguous, aligned and sharing no memory with an input (the caller checks). An
        output the kernel does not compute itself (an input returned as is) or a second
        output of the same buffer is returned as before: the caller copies it."""
        key = tuple([sizes[name] for name in self._size_names])
        if not self._lock.acquire(blocking=False):
            return self._call_private(arrays, key)  # another thread is running this kernel
        try:
            plan = self._plans.get(key)
            if plan is None:
                plan = self._plan(key)
            elif len(self._plans) > 1:
                self._plans.move_to_end(key)
            ptrs = plan.ptrs
            for k, a in enumerate(arrays):
                ptrs[k] = _address(a)
            given = {}
            if into is not None:
                for (m, copy), dst in zip(plan.outputs, into):
                    if dst is not None and not copy:
                        given.setdefault(m, dst)
            outs = []
            for m, (k, shape, dtype) in enumerate(plan.fresh):
                a = given.get(m)
                if a is None:
                    a = np.empty(shape, dtype)
                ptrs[k] = _address(a)
                outs.append(a)
            err, failed = plan.err, None
            rc = self._fn(ptrs, plan.sizes.ptr, err)
            if rc != 0 or err[0] != 0:
                failed = tuple(err)
                ctypes.memset(err, 0, ctypes.sizeof(err))  # the next call starts clean
        finally:
            self._lock.release()
        if failed is not None:
            raise self._error(failed)
        return [arrays[k].copy() if copy else outs[k] for k, copy in plan.outputs]

    def _call_private(self, arrays: Sequence[np.ndarray], key: tuple) -> List[np.ndarray]:
        """A call with buffers and an error record of its own (thread-safe, slower)."""
        sizes = self._for_sizes(key)  # held until the kernel returns
        bufs: List[np.ndarray] = list(arrays)
        bufs.extend([np.empty(s, dtype=d) for s, d in sizes.buffers])
        ptrs = self._ptr_type(*[_address(b) for b in bufs])
        err = (ctypes.c_int64 * _ERR_WORDS)()
        rc = self._fn(ptrs, sizes.ptr, err)
        if rc != 0 or err[0] != 0:
            raise self._error(tuple(err))
        return [bufs[k].copy() if copy else bufs[k] for k, copy in self._outputs]

    def _resolved_sites(self) -> list:
        """Each site as (owner tensor or None, read or None) in the caller's program,
        so messages name the caller's tensors and source lines."""
        if self._sites is None:
            from .fingerprint import all_reads, buffer_tensors
            tensors = buffer_tensors(self.sig)
            out = []
            for s in self.layout.sites:
                owner = tensors[s.owner] if s.owner is not None and s.owner < len(tensors) \
                    else None
                read = None
                if owner is not None and s.read is not None:
                    found = all_reads(owner)
                    read = found[s.read] if s.read < len(found) else None
                out.append((owner, read))
            self._sites = out
        return self._sites

    def buffer_shapes(self, sizes: Dict[str, int]) -> List[Tuple[Tuple[int, ...], np.dtype]]:
        """``(shape, dtype)`` of each computed buffer (the layout's ``buffers``) at ``sizes``.

        >>> import tensorexpr as te
        >>> from codegen.pipeline import build
        >>> from codegen.signature import Signature
        >>> n = te.var("n")
        >>> X = te.placeholder((n,), name="X")
        >>> impl, _, _ = build(Signature([te.compute((n - 1,), lambda i: X[i] + X[i + 1])], [X]))
        >>> impl.buffer_shapes({"n": 5})
        [((4,), dtype('float32'))]
        """
        return list(self._for_sizes(tuple(sizes[name] for name in self._size_names)).buffers)

    def entry_address(self) -> int:
        """The address of the kernel's C entry point ``int te_kernel(void *const *bufs,
        const int64_t *sizes, int64_t *err)``, for callers that reach it without ctypes
        (tensorexpr.jax's XLA FFI handler). Valid while this object is alive.

        >>> import tensorexpr as te
        >>> from codegen.pipeline import build
        >>> from codegen.signature import Signature
        >>> X = te.placeholder((2,), name="X")
        >>> impl, _, _ = build(Signature([te.compute((2,), lambda i: X[i] + X[1 - i])], [X]))
        >>> impl.entry_address() > 0
        True
        """
        return ctypes.cast(self._fn, ctypes.c_void_p).value

    def error_template(self, code: int, site: int, dim: Optional[int]) -> Optional[str]:
        """The message of the kernel's error ``code`` at ``site`` in dimension ``dim``,
        with :data:`INDEX_MARK`, :data:`SIZE_MARK` and :data:`DIM_MARK` standing for the
        values the kernel reports (:func:`fill` puts them in); ``dim=None``: a read's
        message for a dimension whose index is not known to come from data. None for a
        code or site the layout does not know.

        >>> import numpy as np, tensorexpr as te
        >>> from codegen.pipeline import build
        >>> from codegen.signature import Signature
        >>> E = te.placeholder((4,), name="E")
        >>> I = te.placeholder((2,), dtype="int32", name="I")
        >>> impl, _, _ = build(Signature([te.compute((2,), lambda i: E[I[i]], name="G")], [E, I]))
        >>> text = impl.error_template(READ_OUT_OF_RANGE, 0, 0)
        >>> fill(text, 9, 4, 0).split(") ", 1)[1].split(" (in")[0]
        "reads 'E' at index 9 in dimension 0, outside its size 4"
        """
        if not 0 <= site < len(self.layout.sites) or \
                code not in (READ_OUT_OF_RANGE, SCATTER_OUT_OF_RANGE):
            return None
        info = self.layout.sites[site]
        owner, read = self._resolved_sites()[site]
        who = describe(owner) if owner is not None else info.owner_text
        if code == SCATTER_OUT_OF_RANGE:
            return (f"{who} scatters to index {INDEX_MARK} in dimension {DIM_MARK}, "
                    f"outside its size {SIZE_MARK}")
        if read is not None:
            from tensorexpr.printer import expr_str
            name, text = read.tensor.name, expr_str(read)
            data = dim is not None and dim < len(read.indices) and any(
                isinstance(x, Read) for x in walk(read.indices[dim], unique=True))
        else:
            name, text = info.read_tensor, info.read_text
            data = dim is not None and dim < len(info.data_dims) and info.data_dims[dim]
        hint = "; the index comes from data: check the index tensor's values" if data else ""
        return (f"{who} reads {name!r} at index {INDEX_MARK} in dimension {DIM_MARK}, "
                f"outside its size {SIZE_MARK} (in {text}){hint}")

    def read_dims(self, site: int) -> int:
        """How many dimensions the read of error ``site`` indexes (0: no read).

        >>> import tensorexpr as te
        >>> from codegen.pipeline import build
        >>> from codegen.signature import Signature
        >>> E = te.placeholder((4, 3), name="E")
        >>> I = te.placeholder((2,), dtype="int32", name="I")
        >>> impl, _, _ = build(Signature([te.compute((2,), lambda i: E[I[i], 1])], [E, I]))
        >>> impl.read_dims(0)
        2
        """
        read = self._resolved_sites()[site][1]
        return len(read.indices) if read is not None else len(self.layout.sites[site].data_dims)

    def _error(self, err: Sequence[int]) -> Exception:
        code, site, dim, index, size = (int(x) for x in err)
        if not 0 <= site < len(self.layout.sites):
            return RuntimeError(f"the compiled kernel reported error code {code} at an "
                                f"unknown site {site} (a bug in tensorexpr)")
        text = self.error_template(code, site, dim)
        if text is None:
            return RuntimeError(f"the compiled kernel reported unknown error code {code}")
        return IndexError(fill(text, index, size, dim))


#: stand-ins for the reported index, size and dimension in :meth:`KernelFunction.error_template`
INDEX_MARK, SIZE_MARK, DIM_MARK = "\x01", "\x02", "\x03"


def fill(template: str, index: int, size: int, dim: int) -> str:
    """``template`` with the values a kernel reported in place of its marks.

    >>> fill(f"index {INDEX_MARK} of {SIZE_MARK} in dimension {DIM_MARK}", 7, 3, 1)
    'index 7 of 3 in dimension 1'
    """
    return (template.replace(INDEX_MARK, str(index)).replace(SIZE_MARK, str(size))
            .replace(DIM_MARK, str(dim)))


def _after_fork_in_child() -> None:
    """A forked child (a data-loader worker) has only the thread that forked. GNU
    libgomp's thread team of that thread is gone but still recorded: its next parallel
    region would wait for the team forever. So if an OpenMP runtime was loaded, the child
    runs its kernels serially: every loop's work threshold is set out of reach (now and
    for libraries loaded later) and the forking thread's team size is 1, which also
    covers regions without a threshold. The kernel functions' call state is reset: a
    thread that vanished may have held a lock or been in a call."""
    global _cache_lock
    _cache_lock = threading.Lock()
    for f in list(_live):
        f._reset_calls()
    if not compiler.openmp_runtime_loaded():
        return  # no team was ever started: the child may start its own
    threads.run_serially()
    one_thread = True
    for lib in compiler.loaded():
        try:
            ctypes.c_int64.in_dll(lib, threads.SYMBOL).value = threads.NEVER
        except ValueError:
            pass
        if one_thread:
            try:
                lib["omp_set_num_threads"](ctypes.c_int(1))
                one_thread = False
            except AttributeError:
                pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
