"""Answers of isl shared by questions that differ only in the uids of their axes.

An LSTM's gates (and their adjoints) are the same tensor four times over: the
same bodies, bounds and conditions, with other axes. Each axis is a distinct
isl dimension (``a<uid>``), so a cache keyed on the question itself
(:class:`~tensorexpr.polyhedral.recent.Recent`) misses on every gate, and each
asks isl the same questions again: of an LSTM gradient's 21 loop nests, 9 differ
modulo the renaming of axes; of its 32 offset ranges, 15; of its 19 index boxes, 4.

:class:`Renamed` keeps an answer under the question's *shape* as well: the
question with each axis replaced by its number in order of first appearance
(every appearance also spells out its dtype and bounds, and its name where the
answer speaks of axes by name (``loops.loop_nest``'s iterators), so two questions
of one shape have axes of equal ranges, axis for axis). Everything else
is kept as it is: size variables by name, constants with their type, operations,
and any tensor read by its uid (a data-dependent condition names the tensor it
reads). Two questions of one shape are therefore the same question about other
axes, and isl's answer is the same up to that renaming (isl sees an axis only as
a dimension of the space, matched by position). A hit of another question of the
shape renames the kept answer (the ``rename`` of the cache: the axes of an
expression or a loop nest; answers that hold no axis, like numbers, are returned
as they are).

Only answers in our IR (immutable) or plain values are shared this way, never isl
objects: isl simplifies a set in place while it is shared (a box printed
``n > 0 and 0 <= a < n`` by the question that made it prints ``0 <= a < n`` after
a few others used it), so a renamed set would carry the history of another
question's set into this one.

Only what a question's answer depends on is in its key (the caller's own
arguments, nothing from around it), so the shape is as exact as the key: a
different bound, stride, dtype or condition is another shape.

``ENABLED = False`` asks isl every question of a new shape again (the tests
compare the C of both ways, byte for byte).

>>> from tensorexpr.ir import Axis, Const
>>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 7)
>>> j = Axis("i", Const(0, "int64"), Const(8, "int64"), 9)
>>> shape(((i,), (i + 1,)))[0] == shape(((j,), (j + 1,)))[0]
True
>>> k = Axis("i", Const(0, "int64"), Const(9, "int64"), 9)  # another bound
>>> shape(((i,),))[0] == shape(((k,),))[0]
False
>>> m = Axis("m", Const(0, "int64"), Const(8, "int64"), 9)  # another name
>>> shape(((i,),))[0] == shape(((m,),))[0], shape(((i,),), True)[0] == shape(((m,),), True)[0]
(True, False)
"""
from __future__ import annotations

from dataclasses import fields
from typing import Callable, Dict, List, Optional, Tuple

from ..ir import Axis, Const, Node, Tensor, same
from .recent import Recent

#: False: a question is shared only with the same question (no renaming)
ENABLED = True

_FIELDS: Dict[type, Tuple[str, ...]] = {}


def shape(key, names: bool = False) -> Optional[Tuple[tuple, List[Axis]]]:
    """``(shape, axes)``: ``key`` (tuples of IR values) with every axis replaced by its
    numbers (its uid's and its own, in order of first appearance; with its name too if
    ``names``), and the axes at every appearance: two questions of one shape pair them
    up position by position, a bijection (equal numbers at equal positions). None for
    a question too large to be worth it (it is then only asked again as itself).

    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 7)
    >>> s, axes = shape(((i,), i + i))
    >>> [a.uid for a in axes]
    [7, 7, 7]
    """
    uids: Dict[int, int] = {}
    nodes: Dict[Axis, int] = {}
    axes: List[Axis] = []
    budget = [_LARGEST]

    def of(x):
        # a tree walk, no memo: every appearance of an axis is one entry, so questions
        # of one shape have their axes at the same positions (shared nodes included)
        budget[0] -= 1
        if budget[0] < 0:
            raise _TooLarge
        cls = type(x)
        if cls is Axis:
            axes.append(x)
            k = uids.setdefault(x.uid, len(uids))
            n = nodes.setdefault(x, len(nodes))
            return ("axis", k, n, x.name if names else None, x.dtype, of(x.lo), of(x.hi))
        if cls is tuple or cls is list:
            return (cls.__name__,) + tuple(of(y) for y in x)
        if cls is Const:
            return ("const", type(x.value).__name__, x.value, x.dtype)
        if isinstance(x, Tensor):  # (a read's tensor: its identity, not its structure)
            return ("tensor", cls.__name__, x.uid)
        if isinstance(x, Node):  # (SizeVar: its name and dtype)
            fs = _FIELDS.get(cls)
            if fs is None:
                fs = _FIELDS[cls] = tuple(f.name for f in fields(x))
            return (cls.__name__,) + tuple(of(getattr(x, f)) for f in fs)
        if x is None or cls in (int, float, bool, str):
            return (cls.__name__, x)
        raise TypeError(f"no shape for a question holding {cls.__name__}")

    try:
        return of(key), axes
    except (_TooLarge, RecursionError):  # (a condition thousands of operations deep)
        return None
    finally:  # (of calls itself: a cycle, with all it made, the collector alone would free)
        of = None  # noqa: F811, F841


#: the most nodes :func:`shape` walks (isl's questions are indices and conditions)
_LARGEST = 4000


class _TooLarge(Exception):
    pass


class Renamed:
    """A :class:`Recent` cache of answers that also shares them between questions of one
    :func:`shape`: ``rename(answer, {old axis: new axis})`` gives the kept answer in
    terms of another question's axes (see the module docstring); ``names``: axes of
    other names are other questions (the answer shows them); ``exact=False``: every
    answer is renamed, even for the same question again (an answer that makes axes of
    its own makes new ones each time, as isl's would).

    >>> from tensorexpr.ir import Axis, Const
    >>> from tensorexpr.transform import substitute
    >>> cache = Renamed(8, lambda e, m: substitute(e, m))
    >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 7)
    >>> j = Axis("i", Const(0, "int64"), Const(8, "int64"), 9)
    >>> asked = []
    >>> def answer(a): return lambda: asked.append(a) or a + 1
    >>> cache.get((i,), answer(i)).a.uid, cache.get((j,), answer(j)).a.uid, len(asked)
    (7, 9, 1)
    """

    def __init__(self, size: int, rename: Callable, names: bool = False, exact: bool = True):
        self.names = names
        self.renames_all = not exact
        self.exact = Recent(size)
        self.shapes = Recent(size, plain=True)  # (a shape holds no IR node)
        self.rename = rename

    def get(self, key: tuple, make):
        if self.renames_all:
            return make() if not ENABLED else self._by_shape(key, make)
        if not ENABLED:
            return self.exact.get(key, make)
        return self.exact.get(key, lambda: self._by_shape(key, make))

    def _by_shape(self, key: tuple, make):
        got = shape(key, self.names)
        if got is None:
            return make()
        s, axes = got
        made = []

        def first():
            made.append(True)
            return make(), axes
        answer, theirs = self.shapes.get(s, first)
        if made:
            return answer
        mapping = {a: b for a, b in zip(theirs, axes) if a is not b and not same(a, b)}
        return self.rename(answer, mapping) if mapping or self.renames_all else answer


def unchanged(answer, mapping):
    """The ``rename`` of answers that hold no axis (numbers, booleans, None).

    >>> unchanged((1, 2), {})
    (1, 2)
    """
    return answer
