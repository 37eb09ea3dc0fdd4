"""An on-disk cache of ``te.differentiate``'s results, shared across processes.

Differentiating a program (normalising it, inverting its reads with isl,
simplifying) can take a hundred milliseconds, far longer than loading its
already-compiled kernels from the build cache. So ``te.differentiate`` (which
calls :func:`differentiate` here) first looks for the result in the cache
directory (``$TENSOREXPR_CACHE_DIR``, beside the kernels) under a key made of:

* the request: the structural fingerprint of every tensor reachable from the
  outputs, heads, overridden tensors and inputs (``codegen.fingerprint``: tensors
  numbered by position, so uids do not matter), which of them are the outputs,
  heads and inputs, the stopped gradients (``override`` values ``None``),
  ``jacobian=``, and the names of the tensors and axes (the result's names
  derive from them);
* a digest of the source of ``passes`` and ``tensorexpr`` (``codegen.source_digest``):
  any edit of the code that differentiates misses.

The result is pickled with every tensor and axis of the caller's program
replaced by its position, so a hit returns gradients that read the caller's own
tensor objects (``te.build(grads, inputs)`` matches inputs by identity); every
other tensor and axis gets a fresh uid of this process, in the order the
original ones were made. A result tensor's source line (``origin``, named by
error messages) that was some forward tensor's line, or the line calling
``te.differentiate``, is the caller's corresponding line.

Not cached (computed as before): overrides that are functions (their effect
cannot be keyed), requests that cannot be fingerprinted, and errors. An entry
that is missing, unreadable, corrupt (checked with a SHA-256) or made for
another key is recomputed and rewritten; an unwritable cache only costs
computing again. Entries are pickles, trusted like the compiled libraries beside
them. ``TENSOREXPR_DIFF_CACHE=0`` turns the cache off.
"""
from __future__ import annotations

import copyreg
import hashlib
import io
import os
import pickle
from dataclasses import fields
from typing import Dict, List, Optional

from passes.gradients import Gradients, resolve_inputs
from tensorexpr.errors import user_origin
from tensorexpr.ir import Node, Tensor, fresh_uid, topo_order
from tensorexpr.ir import nodes as ir_nodes

#: bump when the layout of an entry changes
DIFF_FORMAT = "1"

#: what this process did, for tests and benchmarks: cache hits, misses (computed, then
#: stored), requests not cacheable, and entries that were present but unusable
stats: Dict[str, int] = {"hits": 0, "misses": 0, "uncacheable": 0, "unusable": 0}


def enabled() -> bool:
    """False when ``$TENSOREXPR_DIFF_CACHE`` is ``0`` (or ``off``, ``false``, ``no``).

    >>> import os
    >>> os.environ["TENSOREXPR_DIFF_CACHE"] = "0"; enabled()
    False
    >>> del os.environ["TENSOREXPR_DIFF_CACHE"]; enabled()
    True
    """
    return os.environ.get("TENSOREXPR_DIFF_CACHE", "1").strip().lower() not in (
        "0", "off", "false", "no")


def differentiate(output, inputs=None, head=None, override=None, jacobian=False) -> Gradients:
    """:func:`passes.differentiate.differentiate`, its result cached on disk.

    >>> import tensorexpr as te
    >>> X = te.placeholder((3,), name="X")
    >>> i = te.reduce_axis(3)
    >>> L = te.compute((), lambda: te.sum(X[i] * X[i], axis=i), name="L")
    >>> (dX,) = differentiate(L, [X])   # computed, then stored
    >>> before = stats["hits"]
    >>> (dX2,) = differentiate(L, [X])  # loaded: equal, reading the caller's X
    >>> str(dX2) == str(dX), stats["hits"] - before
    (True, 1)
    """
    if inputs is not None and not isinstance(inputs, Tensor):
        inputs = list(inputs)  # an iterator is read once, here

    def compute():
        # imported on a miss only: a hit needs neither it nor isl
        from passes.differentiate import differentiate as differentiate_uncached
        return differentiate_uncached(output, inputs=inputs, head=head, override=override,
                                      jacobian=jacobian)

    if not enabled():
        return compute()
    req = request(output, inputs, head, override, jacobian)
    if req is None:
        stats["uncacheable"] += 1
        return compute()
    got = req.load()
    if got is not None:
        stats["hits"] += 1
        return got
    grads = compute()
    stats["misses"] += 1
    req.store(grads)
    return grads


def request(output, inputs=None, head=None, override=None, jacobian=False):
    """The :class:`Request` of these arguments, or None when they cannot be cached
    (a function in ``override``, an unfingerprintable program, arguments that
    ``differentiate`` would refuse: it then raises its own error).

    >>> import tensorexpr as te
    >>> X = te.placeholder((2,), name="X")
    >>> Y = te.compute((2,), lambda i: X[i] * X[i], name="Y")
    >>> request(Y, [X], te.placeholder((2,), name="H")) is not None
    True
    >>> request(Y, [X], te.placeholder((2,), name="H"), override={Y: lambda *a: None})
    """
    several = isinstance(output, (list, tuple))
    outputs = list(output) if several else [output]
    if several:
        if head is None:
            heads = [None] * len(outputs)
        elif isinstance(head, (list, tuple)) and len(head) == len(outputs):
            heads = list(head)
        else:
            return None
    else:
        heads = [head]
    stops = []
    for key, fn in (override or {}).items():
        if fn is not None:
            return None
        stops.append(tuple(key) if isinstance(key, tuple) else (key,))
    if not outputs or not all(isinstance(t, Tensor) for t in outputs + [
            t for s in stops for t in s] + [h for h in heads if h is not None]):
        return None
    inputs = resolve_inputs(outputs, inputs)
    if not all(isinstance(t, Tensor) for t in inputs) or \
            len({t.uid for t in inputs}) != len(inputs):
        return None
    from codegen.fingerprint import Unfingerprintable
    try:
        return Request(outputs, several, inputs, heads, stops, jacobian)
    except Unfingerprintable:
        return None


class Request:
    """One call of ``differentiate``, numbered: its tensors in canonical order (the
    inputs, then the rest in topological order), its axes in first-occurrence order,
    and the key naming its cache entry."""

    def __init__(self, outputs, several, inputs, heads, stops, jacobian):
        from codegen import source_digest
        from codegen.fingerprint import Encoder

        given = {t.uid for t in inputs}
        roots = list(outputs) + [h for h in heads if h is not None] + \
            [t for s in stops for t in s] + list(inputs)
        self.tensors: List[Tensor] = list(inputs) + [t for t in topo_order(roots)
                                                      if t.uid not in given]
        self.n_inputs = len(inputs)
        enc = Encoder(self.tensors)
        defs = tuple(enc.tensor(t) for t in self.tensors)
        pos = {t.uid: k for k, t in enumerate(self.tensors)}
        self.axes = enc.axis_objects
        spec = (several, bool(jacobian), tuple(pos[t.uid] for t in outputs),
                tuple(None if h is None else pos[h.uid] for h in heads), len(inputs),
                tuple(sorted(tuple(pos[t.uid] for t in s) for s in stops)))
        names = (tuple(t.name for t in self.tensors), tuple(a.name for a in self.axes))
        text = repr((DIFF_FORMAT, defs, list(enc.records), spec, names))
        self.key = hashlib.sha256(
            f"{source_digest.source_digest('passes', 'tensorexpr')}\0{text}".encode()).hexdigest()
        # the caller's objects by their position: a result's reference to one is stored
        # as its position and loaded as the caller's object
        self.forward: Dict[tuple, object] = {}
        for k, t in enumerate(self.tensors):
            self.forward[("T", k)] = t
            ref = getattr(t, "self_ref", None)
            if ref is not None:
                self.forward[("S", k)] = ref
        for k, a in enumerate(self.axes):
            self.forward[("A", k)] = a

    def path(self) -> str:
        """The entry's file in the cache directory."""
        from codegen import compiler
        return os.path.join(compiler.cache_dir(), f"diff_{self.key[:40]}.pickle")

    # {{{ store

    def store(self, grads: Gradients) -> None:
        """Write ``grads`` as this request's entry (atomically; failures are ignored)."""
        from codegen import compiler
        origins: Dict[str, tuple] = {user_origin(): ("C",)}
        for k in reversed(range(len(self.tensors))):
            origins[self.tensors[k].origin] = ("T", k)  # the first tensor of a line wins
        buf = io.BytesIO()
        pickler = _Pickler(buf, self.forward, origins)
        try:
            pickler.dump((list(grads), list(grads.adjoints.items())))
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
            return  # a value pickle cannot write (say, a foreign object): not cached
        body = buf.getvalue()
        meta = {"format": DIFF_FORMAT, "key": self.key, "n": len(self.tensors),
                "uids": sorted(pickler.new_uids), "sha256": hashlib.sha256(body).hexdigest()}
        try:
            compiler.write_atomic(self.path(), pickle.dumps((meta, body), protocol=5))
        except OSError:
            pass

    # }}}

    # {{{ load

    def load(self) -> Optional[Gradients]:
        """The cached result, or None (missing or unusable: then it is recomputed)."""
        try:
            with open(self.path(), "rb") as f:
                data = f.read()
        except OSError:
            return None
        try:
            return self._decode(data)
        except Exception:  # noqa: BLE001 - whatever is wrong with an entry, recompute it
            stats["unusable"] += 1
            return None

    def _decode(self, data: bytes) -> Optional[Gradients]:
        meta, body = _Unpickler(io.BytesIO(data), {}, {}).load()
        if not (isinstance(meta, dict) and meta.get("format") == DIFF_FORMAT
                and meta.get("key") == self.key and meta.get("n") == len(self.tensors)
                and isinstance(body, bytes)
                and hashlib.sha256(body).hexdigest() == meta.get("sha256")):
            stats["unusable"] += 1
            return None
        # fresh uids in the order the original ones were made (creation order is uid order)
        uids = {old: fresh_uid() for old in meta["uids"]}
        origins = {("C",): user_origin()}
        grads, adjoints = _Unpickler(io.BytesIO(body), self.forward, uids, origins).load()
        if not (len(grads) == self.n_inputs and all(isinstance(g, Tensor) for g in grads)):
            stats["unusable"] += 1
            return None
        return Gradients(grads, dict(adjoints))

    # }}}


# {{{ pickling with the caller's objects by position


class _Ref:
    """A value written as a persistent id (a position, a uid to renumber, a line)."""

    __slots__ = ("pid",)

    def __init__(self, pid: tuple):
        self.pid = pid


_FIELDS: Dict[type, tuple] = {}


def _field_names(cls: type) -> tuple:
    got = _FIELDS.get(cls)
    if got is None:
        got = _FIELDS[cls] = tuple(f.name for f in fields(cls))
    return got


class _Pickler(pickle.Pickler):
    def __init__(self, file, forward: Dict[tuple, object], origins: Dict[str, tuple]):
        super().__init__(file, protocol=5)
        self.by_id = {id(obj): pid for pid, obj in forward.items()}
        self.by_uid = {obj.uid: pid for pid, obj in forward.items()}
        self.origins = origins
        self.new_uids: set = set()

    def persistent_id(self, obj):
        if type(obj) is _Ref:
            return obj.pid
        return self.by_id.get(id(obj))

    def reducer_override(self, obj):
        if not isinstance(obj, Node):
            return NotImplemented
        cls = type(obj)
        # the fields only: a cached hash (``_hash``) is of this process's string hashing
        state = {f: getattr(obj, f) for f in _field_names(cls)}
        uid = state.get("uid")
        if uid is not None:
            pid = self.by_uid.get(uid)
            if pid is None:
                self.new_uids.add(uid)
                state["uid"] = _Ref(("U", uid))
            else:  # another object with a caller's uid (a normalised tensor keeps its uid)
                state["uid"] = _Ref(("uid",) + pid)
        if isinstance(obj, Tensor):
            line = self.origins.get(obj.origin)
            if line is not None:
                state["origin"] = _Ref(("O",) + line)
        return copyreg.__newobj__, (cls,), state


#: the only classes an entry may hold (a foreign or tampered pickle fails to load)
_CLASSES = {name: cls for name, cls in vars(ir_nodes).items()
            if isinstance(cls, type) and (issubclass(cls, Node) or cls is ir_nodes.Carry)}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, forward, uids, origins=None):
        super().__init__(file)
        self.forward, self.uids, self.origins = forward, uids, origins or {}

    def persistent_load(self, pid):
        kind = pid[0]
        if kind == "U":
            return self.uids[pid[1]]
        if kind == "uid":
            return self.forward[pid[1:]].uid
        if kind == "O":
            line = pid[1:]
            return self.origins[line] if line == ("C",) else self.forward[line].origin
        return self.forward[pid]

    def find_class(self, module, name):
        if module == ir_nodes.__name__ and name in _CLASSES:
            return _CLASSES[name]
        if (module, name) == ("builtins", "set"):
            return set
        raise pickle.UnpicklingError(f"a differentiation cache entry holds {module}.{name}")


# }}}


__all__ = ["DIFF_FORMAT", "Request", "differentiate", "enabled", "request",
           "stats"]
