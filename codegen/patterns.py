"""IR shape predicates: which schedule a tensor's expression fits (pure functions of the IR).

The lowering (``codegen.lower``) and its strategy modules ask these questions of a
tensor before choosing how to lower it: is its body one reduction computed a row at
a time (:func:`row_reduce`), a dot-product-like sum (:func:`jam_reduce`), a transpose
(:func:`transposed_axis`), which outer axis shares reads along the row
(:func:`row_block_axis`), which intermediates are computed where they are read
(:func:`inlinable`), ... None of them builds C: they read the tensor IR only.

>>> import tensorexpr as te
>>> A, B = te.placeholder((64, 32), name="A"), te.placeholder((32, 64), name="B")
>>> k = te.reduce_axis((0, 32), name="k")
>>> C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> row_reduce(C) is C.body, row_block_axis(C, C.body)
(True, 0)
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from tensorexpr.ir import (Axis, Binary, Cast, Compute, Const, Expr, Read, Reduce, Select,
                           SizeVar, TIE_TESTS, Unary, COSTLY_OPS, children, is_float, occurrences,
                           postorder, same, tensor_exprs, walk)
from tensorexpr.transform import const_value, eval_int

from . import target
from .copies import is_copy

#: a reduction is computed by rows only if its innermost output axis is at least this long
ROW_MIN = 8
#: elements of the innermost axis reduced together by a dot-product-like sum
JAM = 4
#: square blocks of a transposing loop nest
TRANSPOSE_BLOCK = 8


def row_block() -> int:
    """Rows of an outer axis computed together when they share the reads along the row:
    the register tile's rows on this target (``codegen.target``; 6 on AVX2, 8 on AVX-512).

    >>> with target.use(target.Target(64, 32, True)):
    ...     row_block()
    8
    """
    return target.current().row_block


def uses(e: Expr, uids: set) -> bool:
    """Does ``e`` mention an axis whose uid is in ``uids``?"""
    return any(isinstance(x, Axis) and x.uid in uids for x in walk(e, unique=True))


def on_path(e: Expr, red: Reduce) -> bool:
    """Is ``red`` reached from ``e`` through arithmetic, casts and math only?"""
    match e:
        case Reduce():
            return e is red
        case Binary(_, a, b, _):
            return on_path(a, red) or on_path(b, red)
        case Unary(_, a, _) | Cast(a, _):
            return on_path(a, red)
    return False


def only_sum(t: Compute) -> Optional[Reduce]:
    """The float sum that is ``t``'s only reduction, reached from its body through
    arithmetic only, over at least one axis; None otherwise (a recurrence, a max, two
    sums, a sum under a select).

    >>> import tensorexpr as te
    >>> X = te.placeholder((4, 8), name="X")
    >>> k = te.reduce_axis(8, name="k")
    >>> S = te.compute((4,), lambda i: te.exp(te.sum(X[i, k], axis=k)), name="S")
    >>> only_sum(S) is S.body.a, only_sum(te.compute((4,), lambda i: te.max(X[i, k], axis=k)))
    (True, None)
    """
    if not isinstance(t, Compute) or t.carry is not None or t.self_ref is not None:
        return None
    # occurrences in the tree: a reduction object used twice is two reductions
    reds = [x for x, n in occurrences(t.body) if isinstance(x, Reduce) for _ in range(min(n, 2))]
    if len(reds) != 1 or not on_path(t.body, reds[0]):
        return None
    red = reds[0]
    if red.op != "sum" or not is_float(red.dtype) or not red.axes:
        return None
    return red


def pure(e: Expr) -> bool:
    """Can ``e`` be evaluated where it is not needed: no reads, reductions or branches?"""
    return not any(isinstance(x, (Read, Reduce, Select)) for x in walk(e, unique=True))


def where_form(red: Reduce) -> Tuple[Expr, Optional[Expr]]:
    """``sum(select(c, x, 0), where=w)`` as ``(x, w & c)``: the same value (adding +0.0
    to a sum that starts at +0.0 never changes it), with ``c`` now a loop bound."""
    body, where = red.body, red.where
    while (red.op == "sum" and isinstance(body, Select) and isinstance(body.b, Const)
           and body.b.value == 0 and not (is_float(body.b.dtype) and
                                          str(body.b.value).startswith("-"))
           and body.dtype == red.dtype):
        where = body.cond if where is None else Binary("and", where, body.cond, "bool")
        body = body.a
    return body, where


def compared_sums(roots: Sequence[Expr]) -> set:
    """The ids of the float sums in ``roots`` whose value is compared: inside the
    operands of an equality test (``ir.TIE_TESTS``), or a max's/min's body or where,
    or in the body of a tensor read there (and so on through its reads). The
    gradient of an extremum tests ``body == forward value`` bit for bit
    (``passes.differentiate``'s tie counts), recomputing such a sum in other loops
    (a tie count, a gather) than the forward's, or in a tensor of its own (the sum
    inside a max of a sum, extracted: ``M_sum``): both must add its terms in the same
    order, so these are lowered in the order written (``lower_expr``), whatever the
    loops around them.

    >>> import tensorexpr as te
    >>> X = te.placeholder((4, 3), name="X")
    >>> k, r = te.reduce_axis(3, name="k"), te.reduce_axis(4, name="r")
    >>> s = te.sum(X[r, k], axis=k)
    >>> M = te.compute((), lambda: te.max(s, axis=r), name="M")
    >>> S = te.compute((4,), lambda i: te.sum(X[i, k], axis=k) * 2.0, name="S")
    >>> len(compared_sums([M.body])), len(compared_sums([S.body]))
    (1, 0)
    >>> T = te.compute((), lambda: te.sum(te.select(S[r] * 0.5 == M[()], 1.0, 0.0), axis=r))
    >>> # S's sum, read in a comparison, and through M the sum M's max compares
    >>> compared_sums([T.body]) == {id(S.body.a), id(s)}
    True
    >>> # an order test or an elementwise max does not (see ir.TIE_TESTS): a row norm's sum
    >>> N = te.compute((4,), lambda i: te.maximum(te.sum(X[i, k] * X[i, k], axis=k), 1e-6))
    >>> len(compared_sums([N.body]))
    0
    """
    out: set = set()
    todo = [(root, False) for root in roots]
    bodies: set = set()  # the tensors whose whole body is compared, queued once
    while todo:
        root, whole = todo.pop()
        flag: Dict[int, bool] = {id(root): whole}
        for x in reversed(postorder(root)):  # every parent before its children
            f = flag.get(id(x), False)
            if f and isinstance(x, Reduce) and x.op == "sum" and is_float(x.dtype):
                out.add(id(x))
            if (f and isinstance(x, Read) and isinstance(x.tensor, Compute)
                    and x.tensor.body is not None and id(x.tensor) not in bodies):
                bodies.add(id(x.tensor))
                todo.append((x.tensor.body, True))
            inside = f or (isinstance(x, Binary) and x.op in TIE_TESTS
                           or isinstance(x, Reduce) and x.op in ("max", "min"))
            for c in children(x):
                flag[id(c)] = flag.get(id(c), False) or inside
    return out


def conj(conds: Sequence[Expr]) -> Optional[Expr]:
    """The conjunction ``c0 & c1 & ...`` of IR conditions (None if there are none).

    >>> import tensorexpr as te
    >>> i = te.reduce_axis(4, name="i")
    >>> conj([i > 0, i < 3]).op, conj([])
    ('and', None)
    """
    out = None
    for c in conds:
        out = c if out is None else Binary("and", out, c, "bool")
    return out


def nonneg(e: Expr) -> bool:
    """Is the integer expression ``e`` >= 0 everywhere (a syntactic proof)?"""
    match e:
        case Const(v, _):
            return v >= 0
        case SizeVar():
            return True
        case Axis():
            lo = const_value(e.lo)
            return lo is not None and lo >= 0
        case Binary("add" | "mul" | "floordiv" | "min", a, b, _):
            return nonneg(a) and nonneg(b)
        case Binary("mod", a, b, _):
            return nonneg(b)
        case Binary("max", a, b, _):
            return nonneg(a) or nonneg(b)
    return False


def closed_value(e: Expr) -> Optional[int]:
    """The value of an integer expression of constants alone (``53 // 32``), else None."""
    if any(isinstance(x, (SizeVar, Axis, Read)) for x in walk(e, unique=True)):
        return None
    return int(eval_int(e))


def row_reduce(t: Compute) -> Optional[Reduce]:
    """The reduction of ``t``'s body to compute a row at a time, or None.

    It must be the body's only reduction, reached through arithmetic only (not
    inside a select branch: all of it runs for every point), with a domain that
    does not depend on the output's axes, and worth it: the innermost output axis
    ``j`` is long (or symbolic), some read of the reduced expression walks along
    its last index with ``j``, and none has ``j`` in an earlier (strided) index.
    """
    if not t.axes:
        return None
    # occurrences in the tree: a reduction object used twice is two reductions
    reds = [x for x, n in occurrences(t.body) if isinstance(x, Reduce) for _ in range(min(n, 2))]
    if len(reds) != 1 or not on_path(t.body, reds[0]):
        return None
    red = reds[0]
    n = const_value(t.axes[-1].hi)
    if n is not None and n < ROW_MIN:
        return None
    for ax in red.axes:
        if any(isinstance(x, Axis) for b in (ax.lo, ax.hi) for x in walk(b, unique=True)):
            return None
    body, where = where_form(red)
    if where is not None and any(isinstance(x, Reduce) for x in walk(where, unique=True)):
        return None
    j = t.axes[-1].uid
    along = False
    rd = [x for x in walk(body, unique=True) if isinstance(x, Read)]
    rd += [x for x in walk(where, unique=True) if isinstance(x, Read)] if where is not None else []
    for r in rd:
        hits = [uses(i, {j}) for i in r.indices]
        if any(hits[:-1]):
            return None
        along = along or (bool(hits) and hits[-1])
    if not along:
        return None
    return red


def row_block_axis(t: Compute, red: Reduce, block: int = 0) -> Optional[int]:
    """The outer axis of ``t`` (position) whose rows are computed ``block`` (default
    :func:`row_block`) at a time, or None: one absent from the domain and from every read along the row axis ``j``,
    present in some other read (else blocking shares nothing), long enough."""
    j = t.axes[-1].uid

    reads = [x for x in walk(red.body, unique=True) if isinstance(x, Read)]
    for k in reversed(range(len(t.axes) - 1)):
        ax = t.axes[k]
        n = const_value(ax.hi)
        if n is not None and n < 2 * (block or row_block()):
            continue
        if red.where is not None and uses(red.where, {ax.uid}):
            continue
        if any(uses(r, {j}) and uses(r, {ax.uid}) for r in reads):
            continue
        if not any(uses(r, {ax.uid}) for r in reads):
            continue
        if any(isinstance(x, (Select, Reduce)) for x in walk(red.body, unique=True)):
            continue  # branches would be duplicated per row
        return k
    return None


def jam_reduce(t: Compute) -> Optional[Reduce]:
    """The float sum of ``t``'s body to reduce ``JAM`` elements of the innermost axis
    ``j`` at a time (see ``Lowerer.compute_jam``), or None: the body's only reduction,
    on its arithmetic path, with bounds free of output axes and a domain free of ``j``
    (tests on outer axes, a channels-last convolution's input gradient at its borders,
    are the same for the ``JAM`` elements; :func:`row_block_axis` keeps clear of
    them); some read
    without ``j`` (shared) and some with it; ``j`` long (or symbolic); an outer axis to
    parallelize over."""
    if len(t.axes) < 2:
        return None
    # occurrences in the tree: a reduction object used twice is two reductions
    reds = [x for x, n in occurrences(t.body) if isinstance(x, Reduce) for _ in range(min(n, 2))]
    if len(reds) != 1 or not on_path(t.body, reds[0]):
        return None
    red = reds[0]
    if red.op != "sum" or not is_float(red.dtype):
        return None
    n = const_value(t.axes[-1].hi)
    if n is not None and n < 2 * JAM:
        return None
    out_uids = {ax.uid for ax in t.axes}
    for ax in red.axes:
        if uses(ax.lo, out_uids | {a.uid for a in red.axes}) or uses(ax.hi, out_uids):
            return None
    j = {t.axes[-1].uid}
    if red.where is not None and uses(red.where, j):
        return None
    if any(isinstance(x, (Select, Reduce)) for x in walk(red.body, unique=True)):
        return None
    reads = [x for x in walk(red.body, unique=True) if isinstance(x, Read)]
    if not any(uses(r, j) for r in reads) or all(uses(r, j) for r in reads):
        return None
    return red


def transposed_axis(t: Compute) -> Optional[int]:
    """An outer axis ``a`` of ``t`` that some read walks along in its last index while the
    innermost axis ``j`` is in an earlier index of the same read (a transpose), or None.
    Both must be long: blocks of TRANSPOSE_BLOCK."""
    if len(t.axes) < 2 or any(isinstance(x, Reduce) for x in walk(t.body, unique=True)):
        return None
    j = t.axes[-1]

    for r in (x for x in walk(t.body, unique=True) if isinstance(x, Read)):
        if len(r.indices) < 2 or not any(uses(i, {j.uid}) for i in r.indices[:-1]):
            continue
        for k, ax in enumerate(t.axes[:-1]):
            n, m = const_value(ax.hi), const_value(j.hi)
            if (uses(r.indices[-1], {ax.uid}) and not uses(r.indices[-1], {j.uid})
                    and (n is None or n >= 2 * TRANSPOSE_BLOCK)
                    and (m is None or m >= 2 * TRANSPOSE_BLOCK)):
                return k
    return None


def row_invariant_indices(t: Compute) -> List[Tuple[Read, int]]:
    """``(read, dimension)`` of the data-dependent indices that ``t``'s body evaluates
    at every point (not under a select's branch, the right operand of ``&`` or ``|``,
    or a reduction) and that do not use its innermost axis; empty unless ``t`` has at
    least two axes."""
    if t.ndim < 2:
        return []
    j = t.axes[-1].uid
    out: List[Tuple[Read, int]] = []
    seen: set = set()  # ids: a DAG's shared nodes once (its tree can be exponential)

    def visit(e: Expr) -> None:
        if id(e) in seen:
            return
        seen.add(id(e))
        match e:
            case Select(c, _, _, _):
                visit(c)
            case Reduce():
                return
            case Read(_, indices):
                for d, x in enumerate(indices):
                    if not uses(x, {j}) and any(isinstance(y, Read) for y in walk(x, unique=True)):
                        out.append((e, d))
                    visit(x)
            case Binary("and" | "or", a, _, _):
                visit(a)  # the right operand runs only where the left leaves it open
            case Binary(_, a, b, _):
                visit(a)
                visit(b)
            case Unary(_, a, _) | Cast(a, _):
                visit(a)
    visit(t.body)
    visit = None  # noqa: F811, F841 (it calls itself: a cycle the collector alone would free)
    return out




def inlinable(sig) -> set:
    """Uids of the intermediates to compute where they are read: elementwise (no
    reduction, no recurrence), not an output, and either cheap (at most 2 reads, no
    transcendental functions, small) or read exactly once in the program, by an
    elementwise read at the reader's own point (each element is then still computed
    once: inlining only saves storing and loading it). Worked out once per signature
    (the pipeline, the lowerer and a checkpoint plan ask of the same one; the caller's
    set is its own)."""
    known = sig.__dict__.get("_inlinable")
    if known is None:
        known = sig.__dict__["_inlinable"] = frozenset(_inlinable(sig))
    return set(known)


def _inlinable(sig) -> set:
    outputs = {t.uid for t in sig.outputs}
    once = read_once_in_place(sig)
    depth: Dict[int, int] = {}  # inlined uid -> nesting depth of its body, reads expanded
    for t in sig.order:
        if (not isinstance(t, Compute) or t.uid in outputs or t.self_ref is not None
                or is_copy(t)):  # a copy is made to be stored (codegen.copies)
            continue
        nodes = occurrences(t.body)  # the sizes below count the tree, in DAG time
        if any(isinstance(x, (Reduce, Select)) for x, _ in nodes):
            continue
        if not (t.uid in once and sum(n for _, n in nodes) <= 64) and not cheap(t.body):
            continue
        # A chain of inlined tensors is one expression, lowered (and emitted, and
        # compiled) recursively: past a bounded depth the link is stored instead.
        d = expanded_depth(t.body, depth)
        if d <= INLINE_DEPTH:
            depth[t.uid] = d
    return set(depth)


#: the deepest expression that inlining may build out of a chain of tensors
INLINE_DEPTH = 64


def cheap(e: Expr) -> bool:
    """Is ``e`` cheap enough to compute at each read rather than store: at most 16 nodes
    (counted as a tree), 2 reads, no transcendental function.

    >>> import tensorexpr as te
    >>> A = te.placeholder((4,), name="A")
    >>> cheap(2.0 * te.select(A[0] > 0.0, A[1], 0.0)), cheap(te.exp(A[0]))
    (True, False)
    """
    nodes = occurrences(e)
    return (sum(n for _, n in nodes) <= 16 and sum(n for x, n in nodes if isinstance(x, Read)) <= 2
            and not any(isinstance(x, (Binary, Unary)) and x.op in COSTLY_OPS for x, _ in nodes))


def expanded_depth(e: Expr, inlined: Dict[int, int]) -> int:
    """Nesting depth of ``e`` with the reads of ``inlined`` tensors (uid -> depth of their
    own expanded body) replaced by those bodies."""
    height: Dict[int, int] = {}
    for x in postorder(e):  # children first, without recursion (any depth)
        h = max((height[id(c)] for c in children(x)), default=0)
        if isinstance(x, Read):
            h = max(h, inlined.get(x.tensor.uid, 0))
        height[id(x)] = 1 + h
    return height[id(e)]


def read_once_in_place(sig) -> set:
    """Uids of the tensors read exactly once in the whole program, outside any
    reduction, by a plain elementwise compute indexing them with its own axes."""
    count: Dict[int, int] = {}
    in_place = set()
    for r in sig.order:
        if not isinstance(r, Compute):
            for e in tensor_exprs(r):
                for x, n in occurrences(e):
                    if isinstance(x, Read):
                        count[x.tensor.uid] = count.get(x.tensor.uid, 0) + 2 * n
            continue
        inside = {id(x) for red in walk(r.body, unique=True) if isinstance(red, Reduce)
                  for x in walk(red, unique=True) if isinstance(x, Read)}
        for x, n in occurrences(r.body):
            if isinstance(x, Read):
                u = x.tensor.uid
                count[u] = count.get(u, 0) + n
                if (r.self_ref is None and r.carry is None and id(x) not in inside
                        and len(x.indices) == len(r.axes) == x.tensor.ndim
                        and all(isinstance(i, Axis) and i.uid == a.uid
                                for i, a in zip(x.indices, r.axes))
                        and all(same(d, e) for d, e in zip(x.tensor.dims, r.dims))):
                    in_place.add(u)
    return {u for u in in_place if count[u] == 1}
