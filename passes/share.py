"""Costly sub-expressions recomputed by several tensors (or at several points of one)
are stored once.

A gradient recomputes the forward's activations wherever a partial derivative needs
them: an LSTM's ``sigmoid(xf[t, b, j] + s_sum[t, b, j])`` is evaluated by the input
gradients of every gate, by the adjoint at ``t + 1`` and by the weight gradients'
factors, a dozen times per point where JAX saves it once. Such an expression is
recognised up to its index expressions: its *form* replaces each maximal integer
sub-expression that uses an axis (``t + 1``, ``b``, ``j``) by a formal index, so
``sigmoid(xf[t + 1, b, j] + ...)`` in one tensor and ``sigmoid(xf[t, b, j] + ...)`` in
another are one form read at two index tuples. A form becomes a tensor ``G`` over
the box of the index values its occurrences take (isl: :func:`index_box` over the
points where each occurrence is evaluated, its guards included) when

- it holds a costly float operation (``COSTLY_OPS``), no reduction, no read of a
  recurrence's own values and only affine indices;
- it is evaluated at two or more distinct (tensor, index tuple) occurrences;
- ``G`` is in range over its whole box (``tensorexpr.bounds``: its reads cannot leave
  their tensors: it is only evaluated where some occurrence could be, or its own
  selects guard the reads);
- the work saved pays for storing ``G`` (:data:`STORE_COST` per element against the
  form's cost per evaluation saved).

Forms are taken costliest first, innermost first over rounds: a form holds no other
costly operation, and what holds a stored one is a form of the next round.
Values are unchanged: ``G`` computes the same expression in the same type, and each
occurrence reads it at its own index tuple.

>>> import tensorexpr as te
>>> X = te.placeholder((64,), name="X")
>>> A = te.compute((63,), lambda i: te.tanh(X[i + 1]) * 2.0, name="A")
>>> B = te.compute((64,), lambda i: te.tanh(X[i]) + X[i], name="B")
>>> done, made = share([A, B])
>>> [(str(g), [t.name for t in users]) for g, users in made]
[('A_s0[i] = tanh(X[i])    for i in [0, 64)    float32', ['A', 'B'])]
>>> print(done[A.uid])
A[i] = A_s0[i + 1] * 2.0    for i in [0, 63)    float32
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Tuple

from tensorexpr.bounds import check_tensor, tests_data
from tensorexpr.errors import BoundsError
from tensorexpr.ir import (COSTLY_OPS, Axis, Binary, Compute, Const, Expr, INDEX_DTYPE, Read,
                           Reduce, Tensor, Unary, fresh_uid, is_float, is_int, reads,
                           tensor_inputs, topo_order, walk)
from tensorexpr.polyhedral import NotAffine, index_box, is_index_arithmetic
from tensorexpr.transform import bottom_up, free_axes, substitute

from .contexts import contexts
from .extract import redirect

#: cost of storing and loading one element of a shared tensor, in the units of
#: :func:`cost` (an arithmetic operation 1, a transcendental 16)
STORE_COST = 8
#: the most forms stored per program (each is a tensor and a loop nest)
MAX_SHARED = 64


def cost(e: Expr) -> int:
    """Work of one evaluation of ``e``: 16 per costly float operation, 1 per other node.

    >>> import tensorexpr as te
    >>> X = te.placeholder((4,), name="X")
    >>> cost(te.exp(X[0]) + 1.0)
    20
    """
    n = 0
    for x in walk(e, unique=True):
        if isinstance(x, (Unary, Binary)) and x.op in COSTLY_OPS and is_float(x.dtype):
            n += 16
        else:
            n += 1
    return n


def form(e: Expr) -> Tuple[Expr, Tuple[Expr, ...]]:
    """``e`` with each maximal integer sub-expression that uses an axis replaced by a
    formal index (the same sub-expression by the same one, in order of first use; one
    a constant away from an earlier one by that formal plus the constant), and those
    sub-expressions: ``e`` is the form read at them.

    >>> import tensorexpr as te
    >>> X = te.placeholder((4, 4), name="X")
    >>> i = te.reduce_axis(3, name="i")
    >>> f, at = form(te.exp(X[i + 1, 2] * X[i + 1, i]))
    >>> print(f); print(*at)
    exp(X[p0, 2] * X[p0, p0 - 1])
    (i + 1)
    """
    at: List[Expr] = []
    formals: List[Axis] = []

    def stop(x: Expr) -> Optional[Expr]:
        if not (is_int(x.dtype) and free_axes(x)):
            return None
        for k, y in enumerate(at):
            if y == x:
                return formals[k]
        for k, y in enumerate(at):
            # x = y + d (t - 1 beside t): one formal index, not a dimension of its own
            d = _offset(x, y)
            if d is not None:
                return Binary("add", formals[k], Const(d, x.dtype), x.dtype) if d > 0 else \
                    Binary("sub", formals[k], Const(-d, x.dtype), x.dtype)
        at.append(x)
        # uid -1 - k: the same in every form, never an axis of a program
        formals.append(Axis(f"p{len(formals)}", Const(0, INDEX_DTYPE), Const(1, INDEX_DTYPE),
                            -1 - len(formals)))
        return formals[-1]

    return bottom_up(e, lambda x: x, stop=stop), tuple(at)


def _linear(e: Expr) -> Optional[Tuple[int, Dict[int, int]]]:
    """``(c, {axis uid: coefficient})`` for sums, differences and constant multiples of
    axes and constants (the index arithmetic of shifts), else None."""
    match e:
        case Const(v, _) if isinstance(v, int):
            return v, {}
        case Axis(uid=uid):
            return 0, {uid: 1}
        case Binary("add" | "sub" as op, a, b, _):
            la, lb = _linear(a), _linear(b)
            if la is None or lb is None:
                return None
            sign = 1 if op == "add" else -1
            terms = dict(la[1])
            for u, c in lb[1].items():
                terms[u] = terms.get(u, 0) + sign * c
            return la[0] + sign * lb[0], {u: c for u, c in terms.items() if c}
        case Binary("mul", a, Const(v, _), _) | Binary("mul", Const(v, _), a, _) \
                if isinstance(v, int):
            la = _linear(a)
            return None if la is None else (la[0] * v, {u: c * v for u, c in la[1].items()})
    return None


def _offset(x: Expr, y: Expr) -> Optional[int]:
    """``d`` when ``x == y + d`` (both linear in the axes), else None."""
    lx, ly = _linear(x), _linear(y)
    if lx is None or ly is None or lx[1] != ly[1]:
        return None
    return lx[0] - ly[0]


def _costly(y: Expr) -> bool:
    return isinstance(y, (Unary, Binary)) and y.op in COSTLY_OPS and is_float(y.dtype)


def _eligible(x: Expr, own: Optional[int], kept: set) -> bool:
    """A costly float operation on cheap operands (the innermost first: what holds it
    is considered in the next round, reading it), no reduction, no integer division by
    a value (it may be 0 where the form was not evaluated), affine indices, no read of
    the recurrence's own values nor of ``kept`` (values of a checkpointed recurrence:
    storing a function of every step would undo what checkpointing saves)."""
    if not _costly(x):
        return False
    for y in walk(x, unique=True):
        if (_costly(y) and y is not x) or isinstance(y, Reduce):
            return False
        if isinstance(y, Binary) and y.op in ("floordiv", "mod", "div") and is_int(y.dtype) \
                and not isinstance(y.b, Const):
            return False
    rs = reads(x)
    if any(r.tensor.uid == own or r.tensor.uid in kept for r in rs):
        return False  # a recurrence's own values cannot leave its body
    return all(is_index_arithmetic(i) for r in rs for i in r.indices)


def checkpointed(order: List[Tensor]) -> set:
    """Uids of the tensors of ``order`` (producers first) computed from a recurrence
    with ``checkpoints``: the C backend keeps their steps in rings where it can.

    >>> import tensorexpr as te
    >>> X = te.placeholder((4,), name="X")
    >>> h = te.recurrence((4,), lambda h, t: te.select(t == 0, X[0], h[t - 1] * X[t]),
    ...                   name="h", checkpoints=2)
    >>> Y = te.compute((4,), lambda t: h[t] * 2.0, name="Y")
    >>> len(checkpointed(te.ir.topo_order([Y])))
    2
    """
    out = set()
    for t in order:
        if getattr(t, "checkpoints", None) is not None or any(
                p.uid in out for p in tensor_inputs(t)):
            out.add(t.uid)
    return out


class _Occurrences:
    """The occurrences of one form: per (tensor uid, index tuple) the points it is
    evaluated at (at most) and the box of index values it takes (isl, worked out only
    for forms met at two sites or more), and the nodes by id."""

    def __init__(self, shape_form: Expr):
        self.form = shape_form
        self.entries: List[tuple] = []  # (tensor uid, node, index tuple, axes, conditions)
        self.data: Dict[int, tuple] = {}  # guard id -> (guard, does it only test data)
        self.sites: Dict[Tuple[int, Tuple[Expr, ...]], float] = {}
        self.box: Optional[List[List[int]]] = None
        self.nodes: Dict[int, Tuple[int, Tuple[Expr, ...]]] = {}  # node id -> site

    def add(self, t: Compute, x: Expr, at: Tuple[Expr, ...], bound, guards) -> None:
        # (a guard that only tests data is dropped by index_box anyway: left out, isl's
        # questions stay small when the data tested is a deep expression)
        data = self.data
        for g, _ in guards:
            if id(g) not in data:
                data[id(g)] = (g, tests_data(g))  # (g kept: its id stays its own)
        conds = [g if p else Unary("not", g, "bool") for g, p in guards if not data[id(g)][1]]
        self.entries.append((t.uid, x, at, list(bound.values()), conds))

    def measure(self) -> bool:
        """Work out the sites' boxes; False when the form cannot be shared (an index
        isl cannot bound, or fewer than two sites)."""
        if len({(uid, at) for uid, _, at, _, _ in self.entries}) < 2:
            return False
        for uid, x, at, axes, conds in self.entries:
            try:
                box = index_box(axes, conds, list(at))
            except NotAffine:
                return False
            if box is None:
                continue  # never evaluated
            if any(b is None for b in box):
                return False
            points = 1.0
            for a in axes:
                points *= (a.hi.value - a.lo.value) if isinstance(a.lo, Const) and \
                    isinstance(a.hi, Const) else float("inf")
            key = (uid, at)
            self.sites[key] = self.sites.get(key, 0.0) + points
            self.nodes[id(x)] = key
            if self.box is None:
                self.box = [[lo, hi] for lo, hi in box]
            else:
                for b, (lo, hi) in zip(self.box, box):
                    b[0], b[1] = min(b[0], lo), max(b[1], hi)
        return self.box is not None

    def tensor(self, name: str, origin: str) -> Optional[Compute]:
        """The shared tensor over the box (None if some read could leave its tensor)."""
        axes = [Axis(f"i{k}" if k else "i", Const(0, INDEX_DTYPE),
                     Const(hi - lo + 1, INDEX_DTYPE), fresh_uid())
                for k, (lo, hi) in enumerate(self.box)]
        at = {Axis(f"p{k}", Const(0, INDEX_DTYPE), Const(1, INDEX_DTYPE), -1 - k):
              (a if lo == 0 else a + lo) for k, (a, (lo, _)) in enumerate(zip(axes, self.box))}
        g = Compute(name, tuple(a.hi for a in axes), self.form.dtype, fresh_uid(), origin,
                    axes=tuple(axes), body=substitute(self.form, at))
        try:
            check_tensor(g)
        except BoundsError:
            return None
        return g

    def worth(self) -> bool:
        if self.box is None or len(self.sites) < 2:
            return False
        size = 1
        for lo, hi in self.box:
            size *= hi - lo + 1
        evaluated = sum(self.sites.values())
        return (evaluated - size) * cost(self.form) > size * STORE_COST


def _find(order: List[Tensor], reached) -> Dict[Expr, _Occurrences]:
    found: Dict[Expr, _Occurrences] = {}
    kept = checkpointed(order)
    for t in order:
        if not isinstance(t, Compute) or t.body is None:
            continue
        own = t.self_ref.uid if t.self_ref is not None else None
        checked: Dict[int, bool] = {}
        forms: Dict[int, Tuple[Expr, Tuple[Expr, ...]]] = {}
        for x, bound, guards, _ in reached(t):
            if id(x) not in checked:
                checked[id(x)] = _eligible(x, own, kept)
            if not checked[id(x)]:
                continue
            if id(x) not in forms:  # (a node is reached once per context: formed once)
                forms[id(x)] = form(x)
            f, at = forms[id(x)]
            occ = found.get(f)
            if occ is None:
                occ = found[f] = _Occurrences(f)
            occ.add(t, x, at, bound, guards)
    return {f: occ for f, occ in found.items() if occ.measure()}


#: rounds of :func:`share`: a form holding a shared one is considered in the next
MAX_ROUNDS = 4


def share(outputs) -> Tuple[Dict[int, Tensor], List[Tuple[Compute, List[Tensor]]]]:
    """Every tensor reachable from ``outputs`` reading the shared forms it held, keyed by
    uid (a rewritten tensor keeps its uid), and ``(shared tensor, the tensors reading
    it)`` for each form stored, innermost first (``tanh(c)`` after the sigmoids in
    ``c``: its form then reads them).

    >>> import tensorexpr as te
    >>> X = te.placeholder((8,), name="X")
    >>> A = te.compute((8,), lambda i: te.exp(X[i]) * 2.0, name="A")
    >>> share([A])[1]  # one occurrence: nothing to share
    []
    """
    outputs = list(outputs)
    done = {t.uid: t for t in topo_order(outputs)}
    made: List[Tuple[Compute, List[Tensor]]] = []
    for _ in range(MAX_ROUNDS):
        step, new = _round(outputs, len(made))
        if not new:
            break
        done.update(step)
        made += new
        outputs = [step[t.uid] for t in outputs]
    return done, made


def _round(outputs, n: int) -> Tuple[Dict[int, Tensor], List[Tuple[Compute, List[Tensor]]]]:
    order = topo_order(list(outputs))
    cache: Dict[int, list] = {}

    def reached(t: Compute) -> list:  # contexts(t), worked out once per round
        if t.uid not in cache:
            cache[t.uid] = contexts(t)
        return cache[t.uid]

    found = _find(order, reached)
    by_tensor: Dict[int, Dict[int, Expr]] = {}  # tensor uid -> node id -> replacement
    made: List[Tuple[Compute, List[Tensor]]] = []
    tensors = {t.uid: t for t in order}
    # (a form holds no other costly operation, so no occurrence lies inside another)
    for occ in sorted(found.values(), key=lambda o: -cost(o.form)):
        if n + len(made) >= MAX_SHARED:
            break
        if not occ.worth():
            continue
        users = [tensors[uid] for uid in dict.fromkeys(uid for uid, _ in occ.sites)]
        g = occ.tensor(f"{users[0].name}_s{n + len(made)}", users[0].origin)
        if g is None:
            continue
        made.append((g, users))
        for node, (uid, at) in occ.nodes.items():
            idx = tuple(e if lo == 0 else Binary("sub", e, Const(lo, e.dtype), e.dtype)
                        for e, (lo, _) in zip(at, occ.box))
            by_tensor.setdefault(uid, {})[node] = Read(g, idx, g.dtype)
    if not made:
        return {t.uid: t for t in order}, []
    rewritten: Dict[int, Tensor] = {}
    for t in order:
        repl = by_tensor.get(t.uid)
        rewritten[t.uid] = t if not repl else replace(
            t, body=bottom_up(t.body, lambda x: x, stop=lambda x: repl.get(id(x))))
    return _resolve(rewritten, [g for g, _ in made], outputs), made


def _resolve(rewritten: Dict[int, Tensor], shared: List[Compute], outputs
             ) -> Dict[int, Tensor]:
    """Each rewritten tensor (and shared one) reading the final versions of the tensors
    it reads, in an order where those come first (iteratively: programs may be deep)."""
    pending = {t.uid: t for t in list(rewritten.values()) + shared}
    done: Dict[int, Tensor] = {}
    for root in list(outputs) + shared:
        stack = [(pending[root.uid], False)]
        while stack:
            t, ready = stack.pop()
            if t.uid in done:
                continue
            if ready:
                done[t.uid] = redirect(t, done)
                continue
            stack.append((t, True))
            for p in tensor_inputs(t):
                q = pending.get(p.uid, p)
                if q.uid not in done:
                    stack.append((q, False))
    return done
