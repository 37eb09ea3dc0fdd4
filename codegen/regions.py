"""Parallel regions: consecutive loop nests share one wake-up of the thread team.

Each ``#pragma omp parallel for`` wakes the team and puts it back to sleep; with
passive waiting (or in a virtual machine) that costs tens of microseconds, as
much as a small loop nest. A program whose tensors are computed by consecutive
parallel loop nests (a gradient's ``dW`` and ``db``, a matmul's ``dA`` and
``dB``) runs them in one ``#pragma omp parallel`` region instead: each nest
shares out its iterations (``omp for``), a serial nest between them runs on one
thread (``omp single``), and the team waits at the end of a nest only when the
next one touches what it wrote or writes what it read (otherwise ``nowait``).

Only nests that are whole loops qualify: a statement outside the loops
(a scalar accumulator declared before a parallel reduction, a 0-d store) would
become private to each thread inside a region, so it ends the run of nests. An
``if`` around whole loops qualifies when its condition is *uniform*: it reads no
memory and only scalars set before the region that nothing in it sets (a
weights' finiteness flag, ``codegen.finite_flags``): shared, the same for every
thread, so the whole team takes the same branch and meets the same ``omp for``
constructs (the versions of ``codegen.padcopy``'s sums, one region for all the
residue classes of a strided gradient). Across such an ``if`` a nest waits unless
every nest that may run next (the first of either branch, or the one after the
``if`` when a branch has none) is independent of it.
"""
from __future__ import annotations

from dataclasses import replace
from typing import List, Optional, Set, Tuple

from .cexpr import fold
from .loopast import (Accumulate, Assign, Block, Call, Comment, Decl, For, If, Load, Op, Region,
                      Stmt, Store, flat, loads, total_work, variables)


def merge(body: List[Stmt]) -> List[Stmt]:
    """``body`` (the kernel's top-level statements) with runs of whole-loop nests that
    hold at least two parallel loops put into one :class:`Region`.

    >>> from codegen.loopast import Block, For, Lit, Store, Var
    >>> i, j = Var("i", "int64"), Var("j", "int64")
    >>> a = Block((For(i, Lit(0, "int64"), Lit(9, "int64"), 1,
    ...                Block((Store("b1", i, Lit(1.0, "float32")),)), parallel=True),))
    >>> b = Block((For(j, Lit(0, "int64"), Lit(9, "int64"), 1,
    ...                Block((Store("b2", j, Lit(2.0, "float32")),)), parallel=True),))
    >>> [type(s).__name__ for s in merge([a, b])]
    ['Region']

    Under an ``if`` on a flag set before them, the same:

    >>> from codegen.loopast import If, Op
    >>> fin = Var("fin", "float32")
    >>> c = If(Op("eq", (fin, fin), "bool"), a, b)
    >>> [type(s).__name__ for s in merge([c, a])]
    ['Region']
    """
    out: List[Stmt] = []
    run: List[Stmt] = []
    tested: Set[str] = set()    # the variables the run's conditions read
    assigned: Set[str] = set()  # the variables its statements set

    def flush():
        if sum(s.parallel for s in _loops(run)) >= 2:
            out.append(_region(run))
        else:
            out.extend(run)
        run.clear()
        tested.clear()
        assigned.clear()

    for s in body:
        if _whole_loops(s):
            t, a = _conditions(s), _assigned(s)
            if (t | tested) & (a | assigned):
                flush()
            if not t & a:
                run.append(s)
                tested.update(t)
                assigned.update(a)
                continue
        flush()
        out.append(s)
    flush()
    return out


def _whole_loops(s: Stmt) -> bool:
    parts = flat([s])
    return any(isinstance(p, For) for p in _loops(parts)) and all(_whole(p) for p in parts)


def _whole(p: Stmt) -> bool:
    """Is ``p`` a comment, a loop nest a team can share, or an ``if`` around such nests
    whose condition reads no memory?"""
    match p:
        case Comment():
            return True
        case For():
            return not p.descending and not (p.parallel and p.reduction) and not _inner_parallel(
                p.body)
        case If(c, then, orelse):
            return not loads(c) and all(_whole(x) for x in flat(
                [then] + ([orelse] if orelse is not None else [])))
    return False


def _loops(stmts) -> List[For]:
    """The loop nests of ``stmts`` (blocks opened), those under an ``if`` included."""
    out: List[For] = []
    for p in flat(stmts):
        if isinstance(p, For):
            out.append(p)
        elif isinstance(p, If):
            out += _loops([p.then] + ([p.orelse] if p.orelse is not None else []))
    return out


def _conditions(s: Stmt) -> Set[str]:
    """The variables the conditions of the ``if`` s of ``s`` (outside its loops) read."""
    out: Set[str] = set()
    for p in flat([s]):
        if isinstance(p, If):
            out |= variables(p.cond) | _conditions(p.then)
            if p.orelse is not None:
                out |= _conditions(p.orelse)
    return out


def _assigned(s) -> Set[str]:
    """The variables ``s`` declares or sets (loop variables included)."""
    match s:
        case Block(stmts):
            return set().union(*(_assigned(x) for x in stmts)) if stmts else set()
        case For():
            return {s.var.name} | _assigned(s.body)
        case If(_, then, orelse):
            return _assigned(then) | (_assigned(orelse) if orelse is not None else set())
        case Decl(var, _) | Assign(var, _) | Accumulate(var, _, _):
            return {var.name}
    return set()


def _inner_parallel(s) -> bool:
    """Does ``s`` hold a parallel loop (a recurrence's steps)? Inside a region it would
    be a nested region, which runs on one thread. A call may: its function is not
    looked into (nor are its accesses, so no region holds it)."""
    match s:
        case Call():
            return True
        case Block(stmts):
            return any(_inner_parallel(x) for x in stmts)
        case For():
            return s.parallel or _inner_parallel(s.body)
        case If(_, then, orelse):
            return _inner_parallel(then) or (orelse is not None and _inner_parallel(orelse))
    return False


Access = Tuple[Set[str], Set[str]]
#: what may run after a nest: None (the region's end, or a path that ends it: wait), else
#: (whether every nest that may run first is a parallel one, their accesses)
Next = Optional[Tuple[bool, List[Access]]]


def _region(run: List[Stmt]) -> Region:
    parts = flat(run)
    body, _ = _teams(parts, [], None)
    return Region(Block(tuple(body)), total_work([_work(p) for p in parts]))


def _work(p: Stmt):
    """The work of the parallel loops of ``p`` (an ``if``: the larger branch)."""
    if isinstance(p, For):
        return p.work if p.parallel else False
    if isinstance(p, If):
        ws = [total_work([_work(x) for x in flat([b])]) for b in (p.then, p.orelse)
              if b is not None]
        if any(w is None for w in ws):
            return None
        ws = [w for w in ws if w is not False]
        if len(ws) == 2 and ws[0] != ws[1]:
            return fold("max", ws[0], ws[1], "int64")
        return ws[0] if ws else False
    return False


def _teams(parts: List[Stmt], pending: List[Access], after: Next
           ) -> Tuple[List[Stmt], List[Access]]:
    """``parts`` with each loop's ``team`` set, given the accesses of the loops since the
    last wait (``pending``) and what may run after ``parts``; and the loops since the
    last wait at their end."""
    out: List[Stmt] = []
    for k, p in enumerate(parts):
        if isinstance(p, For):
            access = _accesses(p)
            pending = pending + [access]
            if not p.parallel:
                team = "single"  # ends in a wait
            else:
                nxt = _next(parts[k + 1:], after)
                free = nxt is not None and nxt[0] and all(
                    _independent(a, b) for a in pending for b in nxt[1])
                team = "for nowait" if free else "for"
            if team != "for nowait":
                pending = []
            out.append(replace(p, parallel=False, work=None, team=team))
        elif isinstance(p, If):
            nxt = _next(parts[k + 1:], after)
            then, p_then = _teams(flat([p.then]), pending, nxt)
            if p.orelse is None:
                orelse, p_else = None, pending
            else:
                body, p_else = _teams(flat([p.orelse]), pending, nxt)
                orelse = Block(tuple(body))
            out.append(If(p.cond, Block(tuple(then)), orelse))
            pending = p_then + [a for a in p_else if not any(a is b for b in p_then)]
        else:
            out.append(p)
    return out, pending


def _next(parts: List[Stmt], after: Next) -> Next:
    """What may run first among ``parts`` (then ``after``)."""
    for k, p in enumerate(parts):
        if isinstance(p, For):
            return p.parallel, [_accesses(p)]
        if isinstance(p, If):
            rest = _next(parts[k + 1:], after)
            ways = [_next(flat([b]), rest) if b is not None else rest
                    for b in (p.then, p.orelse)]
            if any(w is None for w in ways):
                return None
            return all(w[0] for w in ways), [a for w in ways for a in w[1]]
    return after


def _independent(a: Tuple[Set[str], Set[str]], b: Tuple[Set[str], Set[str]]) -> bool:
    reads_a, writes_a = a
    reads_b, writes_b = b
    return not (writes_a & (reads_b | writes_b)) and not (reads_a & writes_b)


def _accesses(s) -> Tuple[Set[str], Set[str]]:
    """Buffers (and local arrays) that ``s`` loads from and stores to."""
    reads: Set[str] = set()
    writes: Set[str] = set()

    def expr(x):
        match x:
            case Load(buf, off, _):
                reads.add(buf)
                expr(off)
            case Op(_, args, _):
                for a in args:
                    expr(a)

    def stmt(t):
        match t:
            case Block(stmts):
                for x in stmts:
                    stmt(x)
            case For():
                expr(t.lo)
                expr(t.hi)
                stmt(t.body)
            case If(cond, then, orelse):
                expr(cond)
                stmt(then)
                if orelse is not None:
                    stmt(orelse)
            case Store(buf, off, value, _):
                writes.add(buf)
                expr(off)
                expr(value)
            case Decl(_, init):
                if init is not None:
                    expr(init)
            case Assign(_, value) | Accumulate(_, _, value):
                expr(value)
    stmt(s)
    expr = stmt = None  # noqa: F811, F841 (they call themselves: a cycle)
    return reads, writes
