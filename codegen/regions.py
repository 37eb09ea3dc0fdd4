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
become private to each thread inside a region, so it ends the run of nests.
"""
from __future__ import annotations

from dataclasses import replace
from typing import List, Set, Tuple

from .loopast import (Accumulate, Assign, Block, Call, Comment, Decl, For, If, Load, Op, Region,
                      Stmt, Store, flat, total_work)


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
    """
    out: List[Stmt] = []
    run: List[Stmt] = []

    def flush():
        loops = [s for unit in run for s in flat([unit]) if isinstance(s, For)]
        if sum(s.parallel for s in loops) >= 2:
            out.append(_region(run))
        else:
            out.extend(run)
        run.clear()

    for s in body:
        if _whole_loops(s):
            run.append(s)
        else:
            flush()
            out.append(s)
    flush()
    return out


def _whole_loops(s: Stmt) -> bool:
    parts = flat([s])
    return (any(isinstance(p, For) for p in parts)
            and all(isinstance(p, Comment) or (isinstance(p, For) and not p.descending
                                                and not (p.parallel and p.reduction)
                                                and not _inner_parallel(p.body))
                    for p in parts))


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


def _region(run: List[Stmt]) -> Region:
    parts = flat(run)
    loops = [p for p in parts if isinstance(p, For)]
    access = [_accesses(p) for p in loops]
    works = [p.work for p in loops if p.parallel]
    team = {}
    pending: List[Tuple[Set[str], Set[str]]] = []  # loops since the last wait
    for k, p in enumerate(loops):
        pending.append(access[k])
        last = k == len(loops) - 1
        if not p.parallel:
            team[id(p)] = "single"  # ends in a wait
            pending = []
            continue
        nxt = None if last else access[k + 1]
        if not last and loops[k + 1].parallel and all(_independent(a, nxt) for a in pending):
            team[id(p)] = "for nowait"
        else:
            team[id(p)] = "for"
            pending = []
    body = tuple(replace(p, parallel=False, work=None, team=team[id(p)])
                 if isinstance(p, For) else p for p in parts)
    return Region(Block(body), total_work(works))


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
    return reads, writes
