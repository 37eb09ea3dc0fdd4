"""Structural fingerprints of programs: the key of the build cache.

Two programs get the same fingerprint only if they compute the same thing: the
same tensors reachable from the outputs (dtypes, shapes, bodies, every field of
every node), the same inputs in the same order and the same outputs. Names of
tensors and axes and the source lines tensors come from are left out (C
identifiers are generated, and error messages are rendered from the caller's
own tensors), and so are uids: tensors are numbered by their position (inputs
first, then the topological order lowering uses) and axes by first occurrence,
so the same program built in another process gets the same fingerprint.

Size variables keep their names: sizes are bound by name and ordered by name in
the calling convention.

The encoding is a hash-consed DAG: every distinct node becomes one record of
plain values (numbers, strings) naming its children by record number, so shared
sub-expressions cost once and the text hashed is linear in the program's size.
New node types or fields are encoded generically from their dataclass fields;
a value that cannot be encoded raises :class:`Unfingerprintable` (the caller
then builds without the cache, never with a wrong entry).
"""
from __future__ import annotations

import hashlib
from dataclasses import fields, is_dataclass
from typing import Dict, List, Sequence

from tensorexpr.ir import (Axis, Node, Placeholder, Read, Reduce, Tensor, field_nodes,
                           tensor_exprs, walk)

#: fields that never affect what a program computes
_SKIP_TENSOR = frozenset(("name", "uid", "origin"))
_SKIP_AXIS = frozenset(("name", "uid"))


class Unfingerprintable(TypeError):
    """The program holds a value the fingerprint cannot encode faithfully."""


_field_names: Dict[type, tuple] = {}


def _names(cls: type, skip=frozenset()) -> tuple:
    key = (cls, skip)
    got = _field_names.get(key)
    if got is None:
        got = _field_names[key] = tuple(f.name for f in fields(cls) if f.name not in skip)
    return got


def buffer_tensors(sig) -> List[Tensor]:
    """The tensors of ``sig`` in canonical order: the inputs as listed, then the
    computed tensors in topological order (the order lowering gives buffers).

    >>> import tensorexpr as te
    >>> from codegen.signature import Signature
    >>> A = te.placeholder((2,), name="A")
    >>> B = te.compute((2,), lambda i: A[i] + 1.0, name="B")
    >>> [t.name for t in buffer_tensors(Signature([B], [A]))]
    ['A', 'B']
    """
    return list(sig.inputs) + [t for t in sig.order if not isinstance(t, Placeholder)]


class Encoder:
    """Encodes the definitions of ``tensors`` (numbered by their position; every tensor
    they read must be among them) as plain records: ``tensor(t)`` gives ``t``'s
    definition, ``records`` the hash-consed nodes it names, ``axis_objects`` the axes
    met, in their canonical order (first occurrence).

    >>> import tensorexpr as te
    >>> A = te.placeholder((2,), name="A")
    >>> B = te.compute((2,), lambda i: A[i] + 1.0, name="B")
    >>> enc = Encoder([A, B])
    >>> enc.tensor(B)[:3], [a.name for a in enc.axis_objects]
    (('Compute', (0,), 'float32'), ['i'])
    """

    def __init__(self, tensors: Sequence[Tensor]):
        self.records: Dict[tuple, int] = {}
        self.memo: Dict[int, int] = {}  # id(node) -> record number
        self.axes: Dict[int, int] = {}  # axis uid -> canonical number
        self.axis_objects: List[Axis] = []
        self.tensor_pos: Dict[int, int] = {}
        for k, t in enumerate(tensors):
            self.tensor_pos[t.uid] = k
            ref = getattr(t, "self_ref", None)
            if ref is not None:
                self.tensor_pos[ref.uid] = -1 - k  # a recurrence's read of itself

    def record(self, rec: tuple) -> int:
        n = self.records.get(rec)
        if n is None:
            n = self.records[rec] = len(self.records)
        return n

    def value(self, v):
        if v is None or isinstance(v, str):
            return v
        t = type(v)
        if t is bool or t is int:
            return (t.__name__, v)
        if t is float:
            return ("float", repr(v))  # tells -0.0 from 0.0 and keeps nan, inf
        if t is tuple:
            return tuple(self.value(x) for x in v)
        if isinstance(v, Tensor):
            pos = self.tensor_pos.get(v.uid)
            if pos is None:
                raise Unfingerprintable(f"{v!r} is read but is not part of the program")
            return ("T", pos)
        if isinstance(v, Node):
            return self.node(v)
        if is_dataclass(v) and not isinstance(v, type):
            return (type(v).__name__,) + tuple(self.value(getattr(v, f)) for f in _names(type(v)))
        raise Unfingerprintable(f"cannot fingerprint a {type(v).__name__} in the program")

    def node(self, e: Node) -> int:
        got = self.memo.get(id(e))
        if got is not None:
            return got
        # Children first, with an explicit stack: then the fields below find their
        # nodes in the memo and nothing recurses (expressions can be any depth).
        stack = [(e, False)]
        while stack:
            x, expanded = stack.pop()
            if expanded:
                if id(x) not in self.memo:
                    self.memo[id(x)] = self._record_node(x)
            elif id(x) not in self.memo:
                stack.append((x, True))
                stack.extend((c, False) for c in reversed(list(field_nodes(x))))
        return self.memo[id(e)]

    def _record_node(self, e: Node) -> int:
        cls = type(e)
        if cls is Axis:
            canon = self.axes.get(e.uid)
            if canon is None:
                canon = self.axes[e.uid] = len(self.axes)
                self.axis_objects.append(e)
            rec = ("Axis", canon) + tuple(self.value(getattr(e, f))
                                          for f in _names(cls, _SKIP_AXIS))
        else:
            rec = (cls.__name__,) + tuple(self.value(getattr(e, f)) for f in _names(cls))
        return self.record(rec)

    def tensor(self, t: Tensor) -> tuple:
        cls = type(t)
        return (cls.__name__,) + tuple(self.value(getattr(t, f))
                                       for f in _names(cls, _SKIP_TENSOR))


def fingerprint(sig) -> str:
    """A hex digest that equals another program's only if both compute the same.

    >>> import tensorexpr as te
    >>> from codegen.signature import Signature
    >>> def prog(c):
    ...     A = te.placeholder((3,), name="A")
    ...     return Signature([te.compute((3,), lambda i: A[i] * c, name="B")], [A])
    >>> fingerprint(prog(2.0)) == fingerprint(prog(2.0))
    True
    >>> fingerprint(prog(2.0)) == fingerprint(prog(3.0))
    False
    """
    tensors = buffer_tensors(sig)
    enc = Encoder(tensors)
    # Each tensor's definition; SelfRef handles are encoded as back references,
    # so their own fields (a copy of the owner's) are not needed.
    defs = tuple(enc.tensor(t) for t in tensors)
    outs = tuple(enc.value(t) for t in sig.outputs)
    text = repr((defs, outs, len(sig.inputs), tuple(sig.size_names), list(enc.records)))
    return hashlib.sha256(text.encode()).hexdigest()


def all_reads(t: Tensor) -> List[Read]:
    """Every read in ``t``'s definition in a canonical order (pre-order of its
    expressions, reduction bounds after their reduction), with repeats: the
    position of a read identifies it in any program with the same fingerprint.

    >>> import tensorexpr as te
    >>> A = te.placeholder((3,), name="A")
    >>> B = te.compute((3,), lambda i: A[i] + A[2 - i], name="B")
    >>> [str(r) for r in all_reads(B)]
    ['A[i]', 'A[2 - i]']
    """
    out: List[Read] = []
    for e in tensor_exprs(t):
        for x in walk(e, unique=True):
            if isinstance(x, Read):
                out.append(x)
            elif isinstance(x, Reduce):
                for ax in x.axes:
                    for b in (ax.lo, ax.hi):
                        out.extend(y for y in walk(b, unique=True) if isinstance(y, Read))
    return out


__all__ = ["Encoder", "Unfingerprintable", "all_reads", "buffer_tensors", "fingerprint"]
