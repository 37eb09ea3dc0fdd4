"""Lowerings repeated with other loop bounds, lowered once and replayed.

A checkpointed gradient (``codegen.checkpoint``) runs the same rows of a tensor at
several places of its program: a revolve schedule's forward steps at the start, in
the forward sweep, after each restore and before each turn; a turn's reverse step
for the last step and inside the schedule's loop. Each place is the same lowering
(``Lowerer.step_of``, ``RingProgram.rows``) with other C expressions for the
bounds of one loop. Lowering is a pure function of the tensor and the lowerer's
state, except for what it allocates and records:

* fresh variable names (``Lowerer.fresh``): a replay renames the template's to the
  ones the lowering would have allocated next, so the C is the same text;
* the schedule's choices (``Recorder``): those opened inside are appended again,
  the notes it made to a choice open outside are made again;
* run-time check sites: a lowering that records one is not replayed (its index is
  in the C), nor one that adds to any other list of the schedule;
* the names of the axes a lowering keyed modulo them (``codegen.alike``) shows in its
  prose (a loop's note, a comment, a note made to a choice): a replay renames them,
  word by word, to the caller's. (An axis named like a word of the lowerings' own prose,
  ``of``, would have that word renamed too: a comment's text, never the code's.)

The bounds are *holes*: the template is lowered with a marker variable for each,
which a replay (and the use that made it) replaces by the caller's expression; a hole
given as None is part of the key (the lowering then uses its own bound). A lowering
with holes is lowered as itself at its first use and made a template at its second:
most are used once (a checkpointed step is a function, its call the only use: every
one of an LSTM's gradient), and filling a template's markers walks all of it (~14,000 nodes to
rebuild ~30) where lowering as itself walks nothing more.

>>> import tensorexpr as te
>>> from codegen.lower import Lowerer
>>> from codegen.loopast import Lit, Var
>>> from codegen.signature import Signature
>>> A = te.placeholder((4,), name="A")
>>> B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
>>> lw = Lowerer(Signature([B], [A]))
>>> r = Replays(lw)
>>> def nest(lo):
...     v = lw.fresh("i", "int64")
...     return [For(v, lo, Lit(4, "int64"), 1, Block(()))]
>>> from codegen.loopast import Block, For
>>> [s.var.name for s in r.get("B", nest, lo=Lit(0, "int64"))]
['i0']
>>> again = r.get("B", nest, lo=Var("k", "int64"))  # replayed: the next name, the new bound
>>> again[0].var.name, again[0].lo.name, lw.counters["i"]
('i1', 'k', 2)
"""
from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, fields
from typing import Callable, Dict, List, Optional, Tuple

from tensorexpr.ir import INDEX_DTYPE

from .loopast import Comment, For, Lit, Var

#: False: every lowering is lowered again (the tests compare the C of both ways)
ENABLED = True

#: string fields that hold prose, never a name the lowering allocated
_PROSE = {(Comment, "text"), (For, "note")}


@dataclass
class Template:
    """A lowering kept for replay: its statements (holes as marker variables), the
    names it allocated (``{prefix: (first, count)}``), the choices it opened and the
    notes it made to the choice open around it."""

    stmts: List
    allocated: Dict[str, Tuple[int, int]]
    choices: List
    notes: List[Tuple[str, object]]
    #: the buffers of its slots (``codegen.alike``), renamed to the caller's by a replay
    slots: Tuple[str, ...] = ()
    #: the names of the axes it was keyed modulo (``codegen.alike``), in its order: a
    #: replay renames them in its prose
    axes: Tuple[str, ...] = ()
    #: its nodes as rebuild steps (:func:`_compile`), made at its second replay (a
    #: template replayed once is walked once either way)
    plan: Optional[tuple] = None
    replays: int = 0
    #: whether it depends on its slots only through their names (``Replays._abstracted``)
    checked: bool = True


class Replays:
    """The replayable lowerings of one lowerer ``lw`` (see the module docstring)."""

    def __init__(self, lw):
        # (by a weak reference: the lowerer holds its replays, and a cycle of the two
        # would keep every template, the lowering's nodes, alive until the cyclic
        # collector's next pass, ~20 ms after an LSTM's build, not freed when it ends)
        self._lw = weakref.ref(lw)
        #: by key: its template, None if it is not replayable, or :data:`_ONCE` (a
        #: lowering with holes, lowered as itself once so far)
        self.kept: Dict[tuple, object] = {}

    @property
    def lw(self):
        """The lowerer whose lowerings these are."""
        return self._lw()

    def get(self, key, lower: Callable[..., List], slots: Tuple[str, ...] = (),
            axes: Tuple[str, ...] = (), **holes) -> List:
        """``lower(**holes)``: lowered once per ``key`` (with the holes that are None
        as part of it), replayed after that. ``slots``: the buffers of the tensors
        ``key`` abstracts (``codegen.alike``), in its order: a replay's are renamed to
        them; a lowering that names another buffer, a tensor in its prose, or records a
        choice is not replayed. ``axes``: the names of the axes ``key`` abstracts, in
        its order: a replay's prose is renamed to them (one name given two new ones:
        lowered again)."""
        if not ENABLED:
            return lower(**holes)
        key = (key,) + tuple((n, h is None) for n, h in sorted(holes.items()))
        t = self.kept.get(key, _NEW)
        if t is None:  # not replayable
            return lower(**holes)
        if t is _NEW and any(h is not None for h in holes.values()):
            self.kept[key] = _ONCE
            return lower(**holes)
        if t is not _NEW and t is not _ONCE:
            if not t.checked:
                if not self._abstracted(t.stmts, t.slots, t.allocated):
                    self.kept[key] = None
                    return lower(**holes)
                t.checked = True
            words = _renamed_words(t.axes, axes)
            if words is None:
                return lower(**holes)
            return self._replay(t, holes, slots, words)
        markers = {n: None if h is None else Var(f"\0{n}", INDEX_DTYPE) for n, h in holes.items()}
        t, stmts = self._capture(lambda: lower(**markers), slots, axes)
        self.kept[key] = t
        fill = {f"\0{n}": h for n, h in holes.items() if h is not None}
        if not fill:  # (the template's own nodes: immutable, shared with its replays)
            return stmts
        memo: Dict[int, tuple] = {}
        return [_filled(s, fill, memo) for s in stmts]

    def _capture(self, lower, slots: Tuple[str, ...] = (), axes: Tuple[str, ...] = ()
                 ) -> Tuple[Optional[Template], List]:
        lw, rec = self.lw, self.lw.record
        before = dict(lw.counters)
        nsites, nchoices = len(lw.sites), len(rec.choices)
        lists = rec.lists()
        heard, rec.heard = rec.heard, []
        try:
            stmts = lower()
            notes = rec.heard
        finally:
            rec.heard = heard if heard is None else heard + rec.heard
        if len(lw.sites) != nsites or rec.lists() != lists:
            return None, stmts
        allocated = {p: (before.get(p, 0), n - before.get(p, 0)) for p, n in lw.counters.items()
                     if n != before.get(p, 0)}
        outer = [(name, value) for at, name, value in notes if at < nchoices]
        if slots and len(rec.choices) != nchoices:  # (a choice names its tensor)
            return None, stmts
        # (whether it names only its slots is asked at its first replay: most are used once)
        return Template(stmts, allocated, rec.choices[nchoices:], outer, tuple(slots),
                        tuple(axes), checked=not slots), stmts

    def _abstracted(self, stmts, slots, allocated) -> bool:
        """Does a lowering keyed modulo its tensors and sizes (``slots``) depend on them
        only through the names of ``slots``: no other buffer named, no tensor nor size
        named in its prose (a comment, a loop's note), no name it allocated spelled like
        a slot or a buffer?"""
        names: set = set()
        prose: List[str] = []
        _names(tuple(stmts), names, prose)
        bufs = {b.name for b in self.lw.buf.values()}
        if (names & bufs) - set(slots):
            return False
        if any(f"{p}{first + k}" in bufs or f"{p}{first + k}" in slots
               for p, (first, n) in allocated.items() for k in range(n)):
            return False
        named = ({t.name for t in self.lw.tensors} | {t.name for t in self.lw.sig.order}
                 | set(self.lw.sizes))
        return not any(w in named for text in prose for w in _WORD.findall(text))

    def _replay(self, t: Template, holes, slots: Tuple[str, ...] = (),
                words: Optional[Dict[str, str]] = None) -> List:
        lw, rec = self.lw, self.lw.record
        names: Dict[str, str] = {a: b for a, b in zip(t.slots, slots) if a != b}
        for p, (first, n) in t.allocated.items():
            base = lw.counters.get(p, 0)
            for k in range(n):
                names[f"{p}{first + k}"] = f"{p}{base + k}"
            lw.counters[p] = base + n
        for c in t.choices:
            rec.choices.append(c)
        for name, value in t.notes:
            rec.note(name, reworded(value, words) if type(value) is str else value)
        fill = {f"\0{n}": h for n, h in holes.items() if h is not None}
        t.replays += 1
        if t.plan is None:
            if t.replays == 1:
                memo: Dict[object, object] = {}
                return [_rename(s, names, fill, memo, words) for s in t.stmts]
            t.plan = _compile(t.stmts)
        return _rebuild(t.plan, names, fill, words)


#: :attr:`Replays.kept`'s marks: a key never asked, a lowering with holes lowered once
_NEW, _ONCE = object(), object()

#: a word of prose (a name it may hold)
_WORD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def _renamed_words(old: Tuple[str, ...], new: Tuple[str, ...]) -> Optional[Dict[str, str]]:
    """``{old name: new name}`` of the axes a replay renames in its prose (empty: none),
    or None when one old name would become two new ones (two axes of one name in the
    template, of two names in the caller's: the words cannot tell them apart).

    >>> _renamed_words(("di", "j"), ("df", "j")), _renamed_words(("k", "k"), ("a", "b"))
    ({'di': 'df'}, None)
    """
    got: Dict[str, str] = {}
    for a, b in zip(old, new):
        if got.setdefault(a, b) != b:
            return None
    return {a: b for a, b in got.items() if a != b}


def reworded(text: str, words: Optional[Dict[str, str]]) -> str:
    """``text`` (prose) with each whole word of ``words`` replaced by its new one, all at
    once (two names swapped stay swapped).

    >>> reworded("k (remainder of k1, j)", {"k": "j", "j": "k"})
    'j (remainder of k1, k)'
    """
    if not words:
        return text
    return _WORD.sub(lambda m: words.get(m.group(0), m.group(0)), text)


def _names(x, names: set, prose: List[str]) -> None:
    """Collect the names ``x`` (a loop-AST node, tuple or value) holds into ``names``
    (what :func:`_rename` would rename) and its prose into ``prose``."""
    cls = type(x)
    if cls is Var:
        names.add(x.name)
        return
    if cls in _LEAVES:
        return
    if cls is tuple:
        for y in x:
            _names(y, names, prose)
        return
    if cls is str:
        names.add(x)
        return
    d = x.__dict__
    for f, walk in _FIELDS.get(cls) or _fields(cls):
        v = d[f]
        if walk:
            _names(v, names, prose)
        elif type(v) is str and (cls, f) in _PROSE:
            prose.append(v)


# {{{ replay by a plan: each node of the template once, children first

# how a step finds a field's new value: kept, a name renamed, a node rebuilt before (by
# index), a tuple of such nodes, a tuple of anything (:func:`_value`), or prose whose
# words may be renamed (:func:`reworded`)
_NAME, _NODE, _NODES, _MIXED, _TEXT = range(1, 6)  # (0: a value kept as it is)


def _compile(stmts) -> tuple:
    """``(steps, roots)``: the nodes under ``stmts`` (each once, by identity) in postorder
    as rebuild steps, ``(Var, var)`` or ``(cls, fields kept, ((field, how, what), ...))``,
    and the statements as indices. What :func:`_rename` walks for each replay, walked
    once per template: a replay then runs the steps (:func:`_rebuild`)."""
    ids: Dict[int, int] = {}
    steps: list = []

    def ref(x):
        cls = type(x)
        if cls in _LEAVES:
            return None
        if cls is str:
            return (_NAME, x)
        if cls is tuple:
            parts = [ref(y) for y in x]
            if parts and all(p is not None and p[0] == _NODE for p in parts):
                return (_NODES, tuple(p[1] for p in parts))
            return (_MIXED, tuple((0, y) if p is None else p for y, p in zip(x, parts)))
        k = ids.get(id(x))
        if k is not None:
            return (_NODE, k)
        if cls is Var:
            step = (Var, x)
        else:
            d = x.__dict__
            kept, subs = {}, []
            for f, walk in _FIELDS.get(cls) or _fields(cls):
                v = d[f]
                kept[f] = v
                if walk:
                    r = ref(v)
                    if r is not None:
                        subs.append((f,) + r)
                elif type(v) is str and (cls, f) in _PROSE:
                    subs.append((f, _TEXT, v))
            step = (cls, kept, tuple(subs))
        ids[id(x)] = len(steps)
        steps.append(step)
        return (_NODE, len(steps) - 1)

    roots = [ref(s) for s in stmts]
    ref = None  # noqa: F811, F841 (it calls itself: a cycle holding every step made)
    assert all(r is not None and r[0] == _NODE for r in roots), "a statement is a node"
    return tuple(steps), tuple(r[1] for r in roots)


def _rebuild(plan: tuple, names: Dict[str, str], fill: Dict[str, object],
             words: Optional[Dict[str, str]] = None) -> List:
    """The statements of :func:`_compile`'s ``plan`` with the variables of ``names``
    renamed, the markers of ``fill`` replaced and the words of ``words`` renamed in
    the prose: what :func:`_rename` gives (each node made once, each renamed variable
    once per name and type)."""
    steps, roots = plan
    out: list = []
    made: Dict[tuple, Var] = {}
    new_object = object.__new__
    set_dict = object.__setattr__
    for step in steps:
        cls = step[0]
        if cls is Var:
            x = step[1]
            name = x.name
            if name in fill:
                got = fill[name]
            else:
                new = names.get(name)
                if new is None:
                    got = x
                else:
                    got = made.get((name, x.dtype))
                    if got is None:
                        got = made[(name, x.dtype)] = Var(new, x.dtype)
            out.append(got)
            continue
        od = dict(step[1])
        for f, how, what in step[2]:
            if how == _NODE:
                od[f] = out[what]
            elif how == _NODES:
                od[f] = tuple([out[k] for k in what])
            elif how == _NAME:
                od[f] = names.get(what, what)
            elif how == _TEXT:
                if words:
                    od[f] = reworded(what, words)
            else:
                od[f] = _value((_MIXED, what), out, names)
        o = new_object(cls)
        set_dict(o, "__dict__", od)  # (frozen dataclasses without __post_init__)
        out.append(o)
    return [out[k] for k in roots]


def _value(r, out: list, names: Dict[str, str]):
    how, what = r
    if how == 0:
        return what
    if how == _NODE:
        return out[what]
    if how == _NODES:
        return tuple([out[k] for k in what])
    if how == _NAME:
        return names.get(what, what)
    return tuple([_value(p, out, names) for p in what])

# }}}


#: per loop-AST class, ``((field, may hold a name?), ...)``: prose, element types and
#: operation names never do
_FIELDS: Dict[type, tuple] = {}
_NEVER_NAMES = ("dtype", "op")
#: values that are never a name nor hold one
_LEAVES = frozenset((int, float, bool, type(None), Lit))


def _fields(cls) -> tuple:
    fs = _FIELDS.get(cls)
    if fs is None:
        fs = _FIELDS[cls] = tuple(
            (f.name, (cls, f.name) not in _PROSE and f.name not in _NEVER_NAMES)
            for f in fields(cls))
    return fs


def substitute(stmts, values: Dict[str, object]) -> List:
    """``stmts`` (loop-AST) with the variables named in ``values`` replaced by their
    expressions.

    >>> from codegen.loopast import Store
    >>> substitute([Store("b1", Var("p0", "int64"), Lit(1.0, "float32"))],
    ...            {"p0": Lit(3, "int64")})[0].offset
    Lit(value=3, dtype='int64')
    """
    memo: Dict[object, object] = {}
    return [_rename(s, {}, values, memo) for s in stmts]


def _filled(x, fill: Dict[str, object], memo: Dict[int, tuple]):
    """``x`` (a loop-AST node, tuple or value) with the marker variables of ``fill``
    replaced by their expressions: :func:`_rename` without names to rename, for a
    template's first use (most are used once: a checkpointed step is a function, its
    call the only use). Only the nodes above a marker are made again; the others are the
    template's own (immutable, shared with its replays as a template without holes is).

    >>> from codegen.loopast import Block, Store
    >>> inner = Store("b1", Var("p0", "int64"), Lit(1.0, "float32"))
    >>> loop = For(Var("i", "int64"), Var("\\0lo", "int64"), Lit(4, "int64"), 1, Block((inner,)))
    >>> got = _filled(loop, {"\\0lo": Lit(2, "int64")}, {})
    >>> got.lo, got.body is loop.body
    (Lit(value=2, dtype='int64'), True)
    """
    cls = type(x)
    if cls is Var:
        return fill.get(x.name, x)
    if cls in _LEAVES or cls is str:
        return x
    if cls is tuple:
        new = [_filled(y, fill, memo) for y in x]
        return x if all(a is b for a, b in zip(new, x)) else tuple(new)
    got = memo.get(id(x))
    if got is not None:
        return got[1]
    d = x.__dict__
    changed = None
    fs = _FIELDS.get(cls) or _fields(cls)
    for f, walk in fs:
        if walk:
            v = d[f]
            t = type(v)
            if t is not str and t not in _LEAVES:
                v2 = _filled(v, fill, memo)
                if v2 is not v:
                    if changed is None:
                        changed = {}
                    changed[f] = v2
    out = x
    if changed is not None:
        out = object.__new__(cls)
        od = out.__dict__
        for f, _ in fs:
            od[f] = changed.get(f, d[f])
    memo[id(x)] = (x, out)  # (x kept: its id is not reused while the memo lives)
    return out


def _rename(x, names: Dict[str, str], fill: Dict[str, object], memo: Dict[object, object],
            words: Optional[Dict[str, str]] = None):
    """``x`` (a loop-AST node, tuple or value) with the variables of ``names`` renamed,
    the marker variables of ``fill`` replaced by their expressions and the words of
    ``words`` renamed in its prose.

    A replay rebuilds every node of its template (nearly all hold a loop variable), so
    this is the replay's cost: the nodes are copied field by field into a new object's
    ``__dict__`` (the nodes are frozen dataclasses, without ``__post_init__``: their
    ``__init__`` would only set the same fields, slower), leaf fields without a call,
    and each renamed variable made once per replay (``memo`` by name)."""
    cls = type(x)
    if cls is Var:
        name = x.name
        if name in fill:
            return fill[name]
        new = names.get(name)
        if new is None:
            return x
        got = memo.get(name)
        if got is None or got.dtype != x.dtype:
            got = memo[name] = Var(new, x.dtype)
        return got
    if cls in _LEAVES:
        return x
    if cls is tuple:
        return tuple([_rename(y, names, fill, memo, words) for y in x])
    if cls is str:
        return names.get(x, x)
    got = memo.get(id(x))
    if got is not None:
        return got[1]
    out = object.__new__(cls)
    d, od = x.__dict__, out.__dict__
    for f, walk in _FIELDS.get(cls) or _fields(cls):
        v = d[f]
        if walk:
            t = type(v)
            if t is str:
                v = names.get(v, v)
            elif t not in _LEAVES:
                v = _rename(v, names, fill, memo, words)
        elif words and type(v) is str and (cls, f) in _PROSE:
            v = reworded(v, words)
        od[f] = v
    memo[id(x)] = (x, out)  # (x kept: its id is not reused while the memo lives)
    return out
