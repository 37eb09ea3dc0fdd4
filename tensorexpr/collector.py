"""Python's cyclic garbage collector, paused while a program is differentiated or built.

Differentiating and lowering a program allocate hundreds of thousands of small objects
that live until the end of the build (IR and loop-AST nodes, the caches of isl's
answers, the schedule). CPython's cyclic collector runs a pass of its youngest
generation every 700 net allocations of containers, and each pass traverses every
object still young; the survivors are promoted and traversed again by the older
generations' passes, the last of which walks the whole heap. None of that frees much
(nodes are freed by their reference counts; the cycles a build leaves are a few
closures of recursive helpers): an LSTM gradient's ``te.build`` ran 248 + 23 + 2 passes,
117 ms of CPU time out of 700 ms. :func:`paused` turns the collector off for the
duration of the build; the cycles made meanwhile are collected by the first pass after
it (one pass over what the build left, not hundreds).

Builds may nest (``te.build`` differentiating, several threads building at once): the
collector is turned back on when the last one ends, and only if it was on when the
first one began (a caller who turned it off keeps it off).

>>> import gc
>>> with paused():
...     inside = gc.isenabled()
>>> inside, gc.isenabled()
(False, True)
"""
from __future__ import annotations

import gc
import threading
from contextlib import contextmanager

_lock = threading.Lock()
#: builds running (all threads), and whether the collector was on before the first
_depth = 0
_resume = False


@contextmanager
def paused():
    """The cyclic garbage collector off inside the ``with`` block (see the module
    docstring); reference counting frees memory as usual.

    >>> import gc
    >>> gc.disable()
    >>> with paused():
    ...     pass
    >>> gc.isenabled()   # off before: left off
    False
    >>> gc.enable()
    """
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
