"""Statement lists a program runs at several places, emitted once as C functions.

A checkpointed gradient (``codegen.checkpoint``) runs a recurrence's forward step in
the forward sweep, after each restore of a checkpoint and before each turn (revolve),
or in each segment's recomputation (segments); revolve runs the reverse step at the
last step and at every turn. Each place is the same lowering with another step index:
copied, its text would be in the C as many times (an LSTM's revolve program: 604 KB
of C, the full tape's 251 KB), and the C compiler would compile each copy. Here such a
lowering is a :class:`~codegen.loopast.Function` of its step index (and of whatever
else the places pass), lowered once, and each place a :class:`~codegen.loopast.Call`.
A call runs the same statements on the same values: the values are those of the
copies, bit for bit (the C is compiled without FMA contraction or fast-math, so
no expression is evaluated otherwise in a function).

Which lowerings become functions is recorded in the schedule (``Schedule.functions``):
one called from one place only is put back in place (nothing to share); so is one whose
statements name a variable of the caller besides their parameters or a local array
(another place need not have it).

>>> import tensorexpr as te
>>> from codegen.lower import Lowerer
>>> from codegen.loopast import Block, For, Lit, Store, Var
>>> from codegen.signature import Signature
>>> A = te.placeholder((4,), name="A")
>>> B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
>>> lw = Lowerer(Signature([B], [A]))
>>> fs = Functions(lw)
>>> def row(t):
...     return [Store("b1", t, Lit(1.0, "float32"))]
>>> calls = [fs.call("B's row", "B's row", row, (Lit(k, "int64"),)) for k in (0, 1)]
>>> body, functions = fs.finish(calls)
>>> body[0], [(f.name, [p.name for p in f.params]) for f in functions]
(Call(name='te_step0', args=(Lit(value=0, dtype='int64'),)), [('te_step0', ['p0'])])
>>> lw.record.functions
["te_step0: B's row (2 calls)"]
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Sequence, Tuple

from tensorexpr.ir import INDEX_DTYPE

from .loopast import (Accumulate, Assign, Block, Call, CExpr, Decl, Fail, Fence, For, Function,
                      If, Load, Local, Op, Region, Stmt, Store, StreamStore, Var)
from .replay import substitute


@dataclass
class _Made:
    """A lowering kept as a function: its name, parameters, statements and calls."""

    name: str
    note: str
    params: Tuple[Var, ...]
    body: List[Stmt]
    calls: int = 0
    #: the arguments of each call, in program order (to put it back in place)
    args: List[Tuple[CExpr, ...]] = field(default_factory=list)


class Functions:
    """The functions of one lowerer ``lw``'s program (see the module docstring)."""

    def __init__(self, lw):
        self.lw = lw
        self.made: Dict[object, _Made] = {}

    def call(self, key, note: str, lower: Callable[..., List[Stmt]],
             args: Sequence[CExpr]) -> Stmt:
        """A call of ``lower(*params)`` (lowered once per ``key``: the same statements
        for every ``args`` of the same types) with ``args``; ``note`` says what it
        runs."""
        m = self.made.get(key)
        if m is None:
            params = tuple(self.lw.fresh("p", getattr(a, "dtype", INDEX_DTYPE)) for a in args)
            m = self.made[key] = _Made(f"te_step{len(self.made)}", note, params,
                                       list(lower(*params)))
        m.calls += 1
        m.args.append(tuple(args))
        return Call(m.name, tuple(args))

    def finish(self, body: List[Stmt]) -> Tuple[List[Stmt], Tuple[Function, ...]]:
        """``(body, functions)``: the program's statements ``body`` with the calls of the
        lowerings not worth a function replaced by their statements, and the functions
        kept; each recorded in the schedule."""
        bufs = {b.name for b in self.lw.buf.values()}
        sizes = {v.name for v in self.lw.sizes.values()}
        kept, inline = [], {}
        for m in self.made.values():
            why = None if m.calls > 1 else "one call"
            if why is None:
                why = _closed(m.body, {p.name for p in m.params} | sizes, bufs)
            if why is None:
                kept.append(Function(m.name, m.params, Block(tuple(m.body)), m.note))
                self.lw.record.functions.append(f"{m.name}: {m.note} ({m.calls} calls)")
            else:
                inline[m.name] = m
                self.lw.record.functions.append(f"{m.note}: in place ({why})")
        if inline:
            body = _put_back(body, inline)
        return body, tuple(kept)


def _closed(stmts: List[Stmt], known: set, bufs: set):
    """None if ``stmts`` name no variable but ``known`` and their own, assign none of
    those and address only the buffers ``bufs`` and their own local arrays; else why."""
    used, own, arrays, addressed, assigned = set(), set(), set(), set(), set()

    def expr(x) -> None:
        cls = type(x)
        if cls is Var:
            used.add(x.name)
        elif cls is Op:
            for a in x.args:
                expr(a)
        elif cls is Load:
            addressed.add(x.buf)
            expr(x.offset)

    def stmt(s) -> None:
        match s:
            case Block(items):
                for x in items:
                    stmt(x)
            case Decl(var, init):
                own.add(var.name)
                if init is not None:
                    expr(init)
            case Assign(var, value) | Accumulate(var, _, value):
                assigned.add(var.name)
                expr(value)
            case Store(buf, off, value, _) | StreamStore(buf, off, value):
                addressed.add(buf)
                expr(off)
                expr(value)
            case For():
                own.add(s.var.name)
                for e in (s.lo, s.hi, s.work):
                    if e is not None and e is not False:
                        expr(e)
                for _, v in s.reduction:
                    used.add(v.name)
                stmt(s.body)
            case If(c, then, orelse):
                expr(c)
                stmt(then)
                if orelse is not None:
                    stmt(orelse)
            case Region(b, work):
                if work is not None:
                    expr(work)
                stmt(b)
            case Local(name, _, _, _):
                arrays.add(name)
            case Fence(name, _, _):
                addressed.add(name)
            case Call(_, args):
                for a in args:
                    expr(a)
            case Fail(_, _, _, index, size):
                expr(index)
                expr(size)

    for s in stmts:
        stmt(s)
    expr = stmt = None  # noqa: F811, F841 (they call themselves: a cycle)
    outer = (used | assigned) - own - known
    if outer:
        return f"it reads the caller's {', '.join(sorted(outer))}"
    if assigned & known:
        return f"it assigns {', '.join(sorted(assigned & known))}"
    foreign = addressed - bufs - arrays
    if foreign:
        return f"it addresses the caller's {', '.join(sorted(foreign))}"
    return None


def _put_back(stmts, inline: Dict[str, _Made]):
    """``stmts`` with each call of a function of ``inline`` replaced by its statements
    (its parameters by the call's arguments)."""
    out = []
    for s in stmts:
        match s:
            case Call(name, args) if name in inline:
                m = inline[name]
                out.append(Block(tuple(substitute(m.body, {p.name: a for p, a in
                                                          zip(m.params, args)}))))
            case Block(items):
                out.append(Block(tuple(_put_back(items, inline))))
            case For():
                out.append(replace(s, body=Block(tuple(_put_back(s.body.stmts, inline)))))
            case If(c, then, orelse):
                out.append(If(c, Block(tuple(_put_back(then.stmts, inline))),
                              None if orelse is None else
                              Block(tuple(_put_back(orelse.stmts, inline)))))
            case Region(b, work):
                out.append(Region(Block(tuple(_put_back(b.stmts, inline))), work))
            case _:
                out.append(s)
    return out
