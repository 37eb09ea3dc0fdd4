"""The numpy reference backend: a direct, vectorised interpreter of the IR.

Each tensor is evaluated over its whole box at once: axis ``k`` is an
``arange`` along array dimension ``k`` and every reduction appends its axes as
trailing dimensions. A boolean *mask* travels with the evaluation so that the
IR's "outside a domain is never evaluated" holds: masked-out reads are
redirected to index 0 (never checked, never faulting) and masked-out values
never reach a result. It favours clarity over speed: it is the oracle the C
backend is tested against.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional

import numpy as np

from tensorexpr.ir import (Axis, Binary, Cast, Compute, Const, Expr, Placeholder, Read,
                           Reduce, ScatterAdd, Select, SizeVar, Tensor, Unary,
                           evaluated_with, topo_order)

_NP = {"bool": np.bool_, "int32": np.int32, "int64": np.int64,
       "float32": np.float32, "float64": np.float64}
#: the types a wide evaluation (``run(..., wide=True)``) computes in: float64 values as
#: ``np.longdouble`` (x87's 80-bit extended on x86: 64-bit mantissas; where the platform's
#: long double is double, the same values as float64)
WIDE = dict(_NP, float64=np.longdouble)


def _lift(a: np.ndarray, depth: int) -> np.ndarray:
    a = np.asarray(a)
    return a.reshape(a.shape + (1,) * (depth - a.ndim)) if a.ndim < depth else a


def _and(m: Optional[np.ndarray], c: np.ndarray) -> np.ndarray:
    return c if m is None else (m & c)


def identity(op: str, dtype: str, types=_NP):
    """The value of an empty reduction: 0, or the least / greatest value of the type
    (``types``: the numpy type of each IR dtype, :data:`WIDE` for a wide evaluation).

    >>> float(identity("max", "float32")), int(identity("min", "int32"))
    (-inf, 2147483647)
    """
    if op == "sum":
        return types[dtype](0)
    if dtype.startswith("float"):
        return types[dtype](-np.inf if op == "max" else np.inf)
    info = np.iinfo(types[dtype])
    return types[dtype](info.min if op == "max" else info.max)


class _Eval:
    def __init__(self, env: Dict[int, np.ndarray], sizes: Dict[str, int], owner: Tensor,
                 types=_NP):
        self.env, self.sizes, self.owner, self.types = env, sizes, owner, types
        # (ctx, depth, mask) -> values of the nodes evaluated there, by node id. The
        # context and mask are kept alive with their memo so that their ids stay theirs.
        self.frames: Dict[tuple, tuple] = {}

    def ev(self, e: Expr, ctx: Dict[int, np.ndarray], depth: int, mask) -> np.ndarray:
        """``e``'s values over ``ctx``; each shared node is evaluated once per context,
        children first with an explicit stack (any depth). Only the branches of a
        select (another mask) and reductions (other axes) are evaluated by a nested
        call, so Python's stack grows with their nesting, not with ``e``'s depth."""
        key = (id(ctx), depth, id(mask))
        owner = key not in self.frames
        if owner:
            self.frames[key] = ({}, ctx, mask)
        memo = self.frames[key][0]
        uses = _uses(e, memo)
        stack = [e]
        while stack:
            x = stack[-1]
            if id(x) in memo:
                stack.pop()
                continue
            todo = [c for c in evaluated_with(x) if id(c) not in memo]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            memo[id(x)] = self._node(x, ctx, depth, mask, memo)
            # A value computed here is dropped once the last node computed here that
            # reads it is done: live values are the DAG's width, not its size (a
            # second-order gradient's body inside a 4-d reduction domain kept
            # thousands of arrays of 33**4 values: MemoryError). One needed again by a
            # later call is computed again.
            for c in _distinct(evaluated_with(x)):
                left = uses.get(id(c))
                if left is not None:
                    uses[id(c)] = left - 1
                    if left == 1 and c is not e:
                        memo.pop(id(c), None)
        out = memo[id(e)]
        if owner:
            del self.frames[key]  # (with its mask and context: their values are done)
        return out

    def _node(self, e: Expr, ctx, depth: int, mask, memo) -> np.ndarray:
        """``e``'s values given those of its children in the same context (``memo``)."""
        dt = self.types[e.dtype]
        match e:
            case Const(v, _):
                return _lift(np.asarray(v, dtype=dt), depth)
            case SizeVar(name):
                return _lift(np.asarray(self.sizes[name], dtype=np.int64), depth)
            case Axis():
                return _lift(ctx[e.uid], depth)
            case Cast(a, _):
                return memo[id(a)].astype(dt)
            case Unary(op, a, _):
                return _unary(op, memo[id(a)]).astype(dt, copy=False)
            case Binary("and" | "or" as op, a, b, _):
                # ``&`` and ``|`` short-circuit: the right operand is evaluated only
                # where the left one leaves the result open (ir.py)
                x = memo[id(a)]
                y = self.ev(b, ctx, depth, _and(mask, x if op == "and" else ~x))
                return np.asarray(_binary(op, x, y)).astype(dt, copy=False)
            case Binary(op, a, b, _):
                return np.asarray(_binary(op, memo[id(a)], memo[id(b)])).astype(dt, copy=False)
            case Select(c, a, b, _):
                cv = memo[id(c)]
                # A value both branches compute wherever they are taken is computed
                # once here, over both masks' union (the parent's: the same points),
                # and handed to each branch: a chain of selects whose branches share
                # the previous link costs its length, not 2**length
                in_b = _frame_nodes(b, memo)
                added = [n for k, n in _frame_nodes(a, memo).items() if k in in_b]
                for n in reversed(added):  # (children first: each computed once)
                    self.ev(n, ctx, depth, mask)
                x = self._branch(a, ctx, depth, _and(mask, cv), memo)
                y = self._branch(b, ctx, depth, _and(mask, ~cv), memo)
                for n in added:
                    if n is not e:
                        memo.pop(id(n), None)
                return np.where(cv, x, y).astype(dt, copy=False)
            case Read(t, idx, _):
                return self._read(t, [memo[id(i)] for i in idx], mask, depth)
            case Reduce():
                return self._reduce(e, ctx, depth, mask)
        raise TypeError(f"cannot evaluate {type(e).__name__}")

    def _branch(self, e: Expr, ctx, depth: int, mask, parent: dict) -> np.ndarray:
        """``e``'s values under ``mask`` (a select's branch), in a frame of its own seeded
        with the values of ``parent``'s frame (computed over a wider mask) it reads."""
        key = (id(ctx), depth, id(mask))
        if key in self.frames:
            return self.ev(e, ctx, depth, mask)
        seed = {}
        stack = [e]
        while stack:
            x = stack.pop()
            if id(x) in parent:
                seed[id(x)] = parent[id(x)]
            elif id(x) not in seed:
                seed[id(x)] = None  # (visited; removed below)
                stack.extend(evaluated_with(x))
        seed = {k: v for k, v in seed.items() if v is not None}
        self.frames[key] = (seed, ctx, mask)
        try:
            return self.ev(e, ctx, depth, mask)
        finally:
            del self.frames[key]

    def _read(self, t: Tensor, idx: List[np.ndarray], mask, depth: int) -> np.ndarray:
        arr = self.env[t.uid]
        if not idx:
            return _lift(arr, depth)
        idx = np.broadcast_arrays(*idx, *( [mask] if mask is not None else []))
        live = idx[-1] if mask is not None else None
        idx = idx[:len(arr.shape)]
        safe = []
        for d, (ix, n) in enumerate(zip(idx, arr.shape)):
            bad = (ix < 0) | (ix >= n)
            if live is not None:
                bad &= live
            if bad.any():
                pos = tuple(int(p[0]) for p in np.nonzero(bad)) if bad.ndim else ()
                raise IndexError(
                    f"tensor {self.owner.name!r} (defined at {self.owner.origin}) reads "
                    f"{t.name!r} at index {int(ix[pos])} in dimension {d}, outside its size {n}")
            safe.append(np.where(live, ix, 0) if live is not None else ix)
        if arr.size == 0:
            # An empty tensor (a size of 0) is read at no live point (each would have
            # failed above), and index 0 of it does not exist: the values are unused.
            return np.zeros(np.broadcast_shapes(*(np.shape(i) for i in safe)), arr.dtype)
        return arr[tuple(safe)]

    def _reduce(self, e: Reduce, ctx, depth, mask) -> np.ndarray:
        inner = dict(ctx)
        k = len(e.axes)
        for j, ax in enumerate(e.axes):
            lo = int(self.ev(ax.lo, ctx, 0, None))
            hi = int(self.ev(ax.hi, ctx, 0, None))
            shape = (1,) * (depth + j) + (max(hi - lo, 0),) + (1,) * (k - j - 1)
            inner[ax.uid] = np.arange(lo, max(hi, lo), dtype=np.int64).reshape(shape)
        d2 = depth + k
        ident = identity(e.op, e.dtype, self.types)
        if any(inner[ax.uid].size == 0 for ax in e.axes):
            # An empty domain (the bounds depend on sizes only) evaluates no body point: a
            # read of it at a constant index may be out of range, and is never made.
            return np.full((1,) * depth, ident, dtype=self.types[e.dtype])
        m = None if mask is None else _lift(mask, d2)
        if e.where is not None:
            m = _and(m, self.ev(e.where, inner, d2, m))
        body = self.ev(e.body, inner, d2, m)
        full = tuple(inner[ax.uid].shape[depth + j] for j, ax in enumerate(e.axes))
        target = np.broadcast_shapes(body.shape, (1,) * depth + full,
                                     *(() if m is None else (m.shape,)))
        body = np.broadcast_to(body, target)
        if m is not None:
            body = np.where(m, body, ident)
        red = tuple(range(depth, d2))
        if e.op == "sum":
            out = body.sum(axis=red, dtype=self.types[e.dtype])
        else:
            out = (body.max if e.op == "max" else body.min)(axis=red)
        return np.asarray(out, dtype=self.types[e.dtype])


def _distinct(nodes) -> list:
    """``nodes`` without repeats (by identity), in order."""
    return list({id(c): c for c in nodes}.values())


def _frame_nodes(e: Expr, memo: dict) -> Dict[int, Expr]:
    """The nodes evaluating ``e`` computes in its own frame (``evaluated_with``, not
    inside a select's branch or a reduction), by id, stopping at those in ``memo``."""
    out: Dict[int, Expr] = {}
    stack = [e]
    while stack:
        x = stack.pop()
        if id(x) in out or id(x) in memo:
            continue
        out[id(x)] = x
        stack.extend(evaluated_with(x))
    return out


def _uses(e: Expr, memo: dict) -> Dict[int, int]:
    """For each node that evaluating ``e`` computes (not in ``memo``) other than ``e``:
    how many of the nodes it computes read it (``evaluated_with``)."""
    uses: Dict[int, int] = {}
    seen = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if id(x) in seen or id(x) in memo:
            continue
        seen.add(id(x))
        for c in _distinct(evaluated_with(x)):
            if id(c) not in memo:
                uses[id(c)] = uses.get(id(c), 0) + 1
                stack.append(c)
    return uses


def _binary(op: str, x, y):
    if op == "add":
        return x + y
    if op == "sub":
        return x - y
    if op == "mul":
        return x * y
    if op == "div":
        return x / y
    if op in ("floordiv", "mod"):
        if np.issubdtype(np.result_type(x, y), np.integer):
            safe = np.where(y == 0, 1, y)
            r = (x // safe) if op == "floordiv" else (x % safe)
            return np.where(y == 0, 0, r)
        # numpy's float floor_divide and remainder are Python's (from the exact fmod:
        # 1.0 // 0.1 == 9, 3 % inf == 3), and x // 0 is x / 0, x % 0 NaN
        return np.floor_divide(x, y) if op == "floordiv" else np.remainder(x, y)
    if op == "pow":
        if np.issubdtype(np.result_type(x, y), np.integer):
            # x ** -k is the integer part of 1 / x**k: only x == 1 and x == -1 survive
            # (0 ** -k gives 0 too, so no backend can trap), as the IR's semantics say.
            neg = y < 0
            r = np.power(x, np.where(neg, 0, y))
            small = np.where(x == 1, 1, np.where(x == -1, np.where(y % 2 == 1, -1, 1), 0))
            return np.where(neg, small, r)
        r = np.asarray(np.power(x, y))
        half = np.asarray(y) == 0.5
        if half.any():
            # numpy takes an exponent 0.5 shared by all elements as sqrt (-inf -> nan,
            # -0 -> -0); the IR's pow is C's, as for any other exponent: +inf and +0 there
            r = np.where(half & (np.asarray(x) == -np.inf), np.inf,
                         np.where(half, r + 0, r)).astype(r.dtype, copy=False)
        return r
    if op == "max":
        return np.maximum(x, y)
    if op == "min":
        return np.minimum(x, y)
    return {"lt": np.less, "le": np.less_equal, "eq": np.equal, "ne": np.not_equal,
            "gt": np.greater, "ge": np.greater_equal, "and": np.logical_and,
            "or": np.logical_or}[op](x, y)


def _unary(op: str, x):
    if op == "neg":
        return -x
    if op == "not":
        return ~x
    if op == "stop_gradient":
        return x
    if not getattr(x, "flags", None) or not x.flags.c_contiguous:
        # numpy picks a SIMD or a libm loop by the operand's layout on some CPUs (e.g.
        # float64 exp on AVX-512), and a max's gradient compares this value with the
        # one the forward computed in another layout: always the contiguous loop
        x = np.array(x, order="C")
    if op == "sigmoid":
        return 1 / (1 + np.exp(-x))
    if op == "erf":  # numpy has none: libm's, as the C backend calls it
        return np.asarray(np.frompyfunc(math.erf, 1, 1)(x), dtype=x.dtype)
    return getattr(np, {"abs": "abs"}.get(op, op))(x)


def evaluate(t: Tensor, env: Dict[int, np.ndarray], sizes: Dict[str, int], shape,
             types=_NP) -> np.ndarray:
    """Evaluate one tensor definition given its producers' values in ``env`` (by uid),
    each IR dtype as the numpy type ``types`` gives (:data:`WIDE`: float64 as long double).

    >>> import tensorexpr as te
    >>> X = te.placeholder((3,), name="X")
    >>> Y = te.compute((3,), lambda i: X[2 - i] * 2.0, name="Y")
    >>> evaluate(Y, {X.uid: np.arange(3, dtype=np.float32)}, {}, (3,))
    array([4., 2., 0.], dtype=float32)
    """
    ev = _Eval(env, sizes, t, types)
    dt = types[t.dtype]
    n = len(shape)
    match t:
        case Compute(carry=None):
            ctx = {ax.uid: np.arange(s, dtype=np.int64).reshape((1,) * k + (s,) + (1,) * (n - k - 1))
                   for k, (ax, s) in enumerate(zip(t.axes, shape))}
            return np.array(np.broadcast_to(ev.ev(t.body, ctx, n, None), shape), dtype=dt)
        case Compute():
            out = np.zeros(shape, dtype=dt)
            env[t.self_ref.uid] = out
            c = t.carry.axis
            steps = range(shape[c]) if t.carry.step > 0 else range(shape[c] - 1, -1, -1)
            for v in steps:
                ctx = {}
                for k, (ax, s) in enumerate(zip(t.axes, shape)):
                    vals = np.array([v]) if k == c else np.arange(s)
                    ctx[ax.uid] = vals.astype(np.int64).reshape(
                        (1,) * k + (len(vals),) + (1,) * (n - k - 1))
                ev.frames.clear()  # the values of the previous step are not needed again
                slab = ev.ev(t.body, ctx, n, None)
                sl = tuple(slice(v, v + 1) if k == c else slice(None) for k in range(n))
                out[sl] = np.broadcast_to(slab, out[sl].shape)
            return out
        case ScatterAdd():
            out = np.zeros(shape, dtype=dt)
            m = len(t.axes)
            ctx = {}
            for k, ax in enumerate(t.axes):
                lo, hi = int(ev.ev(ax.lo, {}, 0, None)), int(ev.ev(ax.hi, {}, 0, None))
                ctx[ax.uid] = np.arange(lo, hi, dtype=np.int64).reshape(
                    (1,) * k + (hi - lo,) + (1,) * (m - k - 1))
            grid = tuple(ctx[ax.uid].shape[k] for k, ax in enumerate(t.axes))
            mask = np.ones(grid, dtype=bool)
            if t.where is not None:
                mask = mask & ev.ev(t.where, ctx, m, None)
            idx = [np.broadcast_to(ev.ev(i, ctx, m, mask), grid) for i in t.indices]
            val = np.broadcast_to(ev.ev(t.value, ctx, m, mask), grid)
            sel = tuple(i[mask] for i in idx)
            for d, (ix, s) in enumerate(zip(sel, shape)):
                if ix.size and (ix.min() < 0 or ix.max() >= s):
                    bad = int(ix[(ix < 0) | (ix >= s)][0])
                    raise IndexError(f"tensor {t.name!r} (defined at {t.origin}) scatters to "
                                     f"index {bad} in dimension {d}, outside its size {s}")
            np.add.at(out, sel, val[mask].astype(dt))
            return out
    raise TypeError(f"cannot evaluate {t!r}")


def run(outputs, inputs, arrays, sizes, shape_of, wide: bool = False) -> List[np.ndarray]:
    """Evaluate ``outputs`` given input arrays; ``shape_of(t)`` gives concrete shapes.

    ``wide=True`` computes float64 values in ``np.longdouble`` (:data:`WIDE`: the float64
    inputs are converted, exactly), its results long double: a float64 program's values
    with 11 more bits, to measure float64's own rounding error against (as a float32
    program's float64 twin measures float32's). numpy has every math function of the IR
    in long double but ``erf``, which is double's (libm's) there: its error is float64's.

    >>> import tensorexpr as te
    >>> X = te.placeholder((2,), name="X")
    >>> Y = te.compute((2,), lambda i: X[i] + 1.0, name="Y")
    >>> run([Y], [X], [np.ones(2, np.float32)], {}, lambda t: (2,))
    [array([2., 2.], dtype=float32)]
    >>> X = te.placeholder((3,), dtype="float64", name="X")
    >>> k = te.reduce_axis(3)
    >>> S = te.compute((), lambda: te.sum(X[k], axis=k), name="S", dtype="float64")
    >>> x = np.array([1.0, 2.0 ** -60, -1.0])   # 1 + 2**-60 is 1 in float64
    >>> [float(run([S], [X], [x], {}, lambda t: (), wide=w)[0]) * 2 ** 60 for w in (False, True)]
    [0.0, 1.0]
    """
    types = WIDE if wide else _NP
    if wide:
        arrays = [a.astype(np.longdouble) if a.dtype == np.float64 else a for a in arrays]
    env: Dict[int, np.ndarray] = {t.uid: a for t, a in zip(inputs, arrays)}
    with np.errstate(all="ignore"):
        for t in topo_order(outputs):
            if t.uid not in env:
                env[t.uid] = evaluate(t, env, sizes, shape_of(t), types)
    return [env[t.uid].copy() if isinstance(t, Placeholder) else env[t.uid] for t in outputs]


def widened(fn):
    """The numpy-backend function ``fn`` (``te.build(..., backend="numpy")``) evaluated
    wide (:func:`run`): its float64 values in long double, one array per output.

    >>> import tensorexpr as te
    >>> X = te.placeholder((2,), dtype="float64", name="X")
    >>> Y = te.compute((2,), lambda i: te.exp(X[i]), name="Y", dtype="float64")
    >>> (y,) = widened(te.build(Y, backend="numpy"))(np.zeros(2))
    >>> y.dtype == np.longdouble, [float(v) for v in y]
    (True, [1.0, 1.0])
    """
    sig = fn.signature

    def call(*args):
        arrays, sizes = sig.bind(args, {})
        return run(sig.outputs, sig.inputs, arrays, sizes, lambda t: sig.shape(t, sizes),
                   wide=True)
    return call
