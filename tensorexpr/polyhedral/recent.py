"""A small cache of recent answers, for the questions asked of isl again and again.

The IR is immutable and structurally hashed, so an answer computed from it (a point
set, a loop nest, a box, an offset range) can be kept under its arguments and shared
by every later caller asking the same question.
"""
from __future__ import annotations

import threading
from collections import OrderedDict


class Recent:
    """The values of the last ``size`` keys asked for (least recently used dropped
    first), each made once by ``make()``; safe from several threads (programs may be
    lowered on several). For answers that are pure functions of immutable IR.

    >>> r = Recent(2)
    >>> r.get(("a",), lambda: 1), r.get(("a",), lambda: 2)
    (1, 1)
    """

    def __init__(self, size: int):
        self.size = size
        self.kept: "OrderedDict[tuple, object]" = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple, make):
        with self.lock:
            known = self.kept.get(key)
            if known is not None:
                self.kept.move_to_end(key)
                return known
        known = make()  # outside the lock: isl may take a while
        with self.lock:
            self.kept[key] = known
            if len(self.kept) > self.size:
                self.kept.popitem(last=False)
        return known
