"""A small cache of recent answers, for the questions asked of isl again and again.

The IR is immutable and structurally hashed, so an answer computed from it (a point
set, a loop nest, a box, an offset range) can be kept under its arguments and shared
by every later caller asking the same question.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from ..ir import same


class Recent:
    """The values of the last ``size`` keys asked for (least recently used dropped
    first), each made once by ``make()``; safe from several threads (programs may be
    lowered on several). For answers that are pure functions of immutable IR.

    ``plain``: the keys hold no IR node (strings, numbers, tuples of them: a question's
    shape, ``polyhedral.renamed``), compared by ``==`` in C rather than node by node.

    >>> r = Recent(2)
    >>> r.get(("a",), lambda: 1), r.get(("a",), lambda: 2)
    (1, 1)
    """

    def __init__(self, size: int, plain: bool = False):
        self.size = size
        self.key = _PlainKey if plain else _Key
        self.kept: "OrderedDict[tuple, object]" = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple, make):
        k = self.key(key)
        with self.lock:
            got = self.kept.get(k)
            if got is not None:
                # (by the kept key object itself: found by identity, not compared again)
                self.kept.move_to_end(got[0])
                return got[1]
        known = make()  # outside the lock: isl may take a while
        with self.lock:
            self.kept[k] = (k, known)
            if len(self.kept) > self.size:
                self.kept.popitem(last=False)
        return known


class _Key:
    """A key of :class:`Recent`, its hash computed once. Keys hold IR expressions built
    afresh by each caller, equal but not identical: they are compared structurally
    (``ir.same``: shared sub-expressions once, no ``eq`` node built per element, as
    ``==`` of expressions would), and a hit compares the key once, not again to move it
    to the end.

    >>> _Key((1, "a")) == _Key((1, "a")), hash(_Key((1,))) == hash((1,))
    (True, True)
    """

    __slots__ = ("key", "hash")

    def __init__(self, key):
        self.key = key
        self.hash = hash(key)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other) -> bool:
        return self is other or same(self.key, other.key)


class _PlainKey(_Key):
    """A key of a ``plain`` :class:`Recent`: no IR node in it, compared by ``==``.

    >>> _PlainKey((1, ("a", 2.5))) == _PlainKey((1, ("a", 2.5)))
    True
    """

    __slots__ = ()

    def __eq__(self, other) -> bool:
        return self is other or self.key == other.key

    __hash__ = _Key.__hash__
