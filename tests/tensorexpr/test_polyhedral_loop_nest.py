"""polyhedral.loop_nest: isl's loops, in our terms, visit exactly the points of a domain."""
from __future__ import annotations

import itertools

import pytest

import tensorexpr as te
from tensorexpr.ir import Axis, Const, SizeVar
from tensorexpr.polyhedral import (LoopBlock, LoopFor, LoopIf, LoopLet, LoopPoint, conjuncts,
                                   loop_nest, may_fail)
from tensorexpr.transform import eval_int, substitute


def _ax(name, hi, uid, lo=0):
    hi = Const(hi, "int64") if isinstance(hi, int) else hi
    return Axis(name, Const(lo, "int64"), hi, uid)


def _value(e, env):
    return eval_int(substitute(e, {k: Const(v, "int64") for k, v in env.items()}))


def _points(tree, env):
    """Interpret a loop tree: the list of visited points (tuples of axis values)."""
    match tree:
        case LoopBlock(items):
            return [p for item in items for p in _points(item, env)]
        case LoopFor(it, lo, hi, step, body):
            assert step >= 1
            out = []
            for v in range(_value(lo, env), _value(hi, env), step):
                out += _points(body, {**env, it: v})
            return out
        case LoopLet(it, value, body):
            return _points(body, {**env, it: _value(value, env)})
        case LoopIf(cond, then, orelse):
            if _value(cond, env):
                return _points(then, env)
            return [] if orelse is None else _points(orelse, env)
        case LoopPoint(values):
            return [tuple(_value(v, env) for v in values)]
    raise TypeError(tree)


def _brute(axes, cond, env):
    ranges = [range(_value(a.lo, env), _value(a.hi, env)) for a in axes]
    out = []
    for p in itertools.product(*ranges):
        e = {**env, **dict(zip(axes, p))}
        if cond is None or _value(cond, e):
            out.append(p)
    return out


def test_modulo_gives_a_strided_loop():
    k = _ax("k", 9, 1)
    tree, rest = loop_nest([k], [k % 2 == 0])
    assert rest == [] and isinstance(tree, LoopFor) and tree.step == 2
    assert _points(tree, {}) == [(0,), (2,), (4,), (6,), (8,)]


def test_transposed_convolution_domain_with_outer_axis_and_size_as_parameters():
    H = te.var("H")
    y = _ax("y", 2 * H + 1, 2)
    kh = _ax("kh", 3, 3)
    cond = ((y - kh) % 2 == 0) & ((y - kh) // 2 >= 0) & ((y - kh) // 2 < H)
    tree, rest = loop_nest([kh], conjuncts(cond), outer=[y])
    assert rest == [] and tree.step == 2  # tight: one parity only, no test inside
    for h in (1, 3):
        for yv in range(2 * h + 1):
            env = {SizeVar("H"): h, y: yv}
            assert _points(tree, env) == _brute([kh], cond, env)


def test_data_dependent_conjuncts_are_left_to_the_caller():
    X = te.placeholder((6,), name="X")
    k = _ax("k", 6, 4)
    data = X[k] > 0
    tree, rest = loop_nest([k], [k >= 2, data])
    assert len(rest) == 1 and rest[0] is data
    assert _points(tree, {}) == [(v,) for v in range(2, 6)]


def test_an_affine_conjunct_after_one_that_may_fail_is_tested_in_order():
    # ``&`` is left to right: a loop bound from ``k < 3`` would skip the check of
    # X[I[k]] at k >= 3, which the program makes (ir.py); a failure-free data
    # conjunct lets the affine ones after it still become bounds.
    X = te.placeholder((6,), name="X")
    I = te.placeholder((6,), dtype="int32", name="I")
    k = _ax("k", 6, 4)
    checked, plain = X[I[k]] > 0, X[k] > 0
    assert may_fail(checked) and not may_fail(plain) and not may_fail(k < 3)
    tree, rest = loop_nest([k], [k >= 1, checked, k < 3])
    assert [str(c) for c in rest] == [str(checked), str(k < 3)]
    assert _points(tree, {}) == [(v,) for v in range(1, 6)]
    tree, rest = loop_nest([k], [k >= 1, plain, k < 3])
    assert rest == [plain] and _points(tree, {}) == [(1,), (2,)]


@pytest.mark.parametrize("make", [
    lambda i, k, l: (k + l == i),
    lambda i, k, l: (k == i) | (l == 2 * k),
    lambda i, k, l: (k < l) & ((k + l + i) % 3 != 1),
    lambda i, k, l: (k > 10),
])
def test_two_dimensional_domains_visit_each_point_once(make):
    n = te.var("n")
    i = _ax("i", n, 5)
    k, l = _ax("k", n, 6), _ax("l", 4, 7, lo=1)
    cond = make(i, k, l)
    tree, rest = loop_nest([k, l], conjuncts(cond), outer=[i], facts=[i < n])
    assert rest == []
    for nv in (1, 3, 5):
        for iv in range(nv):
            env = {SizeVar("n"): nv, i: iv}
            assert _points(tree, env) == _brute([k, l], cond, env)


def test_the_conditions_left_are_the_callers_own_not_a_kept_nests():
    # found by the fuzzer: a kept nest is found by structural equality, where a tensor
    # compares by uid; passes rewrite tensors keeping their uids (a squeezed M_sum reads
    # M_sum_sq, made anew by each build), so the conditions a kept nest left read the
    # tensor as another build rewrote it: the second build of one program in a process
    # read M_sum_sq of the first ("internal error: 'M_sum_sq' has no buffer")
    from dataclasses import replace
    from tensorexpr.ir import Read
    X = te.placeholder((4,), name="X")
    k = _ax("k", 4, 901)
    first = [Read(X, (k,), "float32") > 0.0]
    X2 = replace(X, name="X")  # the same uid, another object
    mine = [Read(X2, (k,), "float32") > 0.0]
    assert first == mine
    loop_nest([k], first)
    _, rest = loop_nest([k], mine)
    assert rest[0] is mine[0] and rest[0].a.tensor is X2


def test_a_program_whose_passes_rewrite_tensors_lowers_twice_in_a_process():
    from codegen import pipeline
    from codegen.signature import Signature
    T, K = 6, 5
    x = te.placeholder((T, K), dtype="float64", name="x")
    W = te.placeholder((K, 1), dtype="float64", name="W")
    h = te.recurrence((T, K), lambda S, t, c: te.sin(
        x[t, c] + 0.5 * te.select(t >= 1, S[t - 1, c], 0.0)), name="h", dtype="float64")
    kk, j = te.reduce_axis(K, "k"), te.reduce_axis(1, "j")
    M = te.compute((T,), lambda t: te.min(te.sum(h[t, kk] * W[kk, j], axis=kk), axis=j),
                   name="M", dtype="float64")   # its tie test reads M_sum, squeezed
    Y = te.compute((T, K), lambda t, c: 0.5 * h[t, c] + 0.5 * M[t], name="Y", dtype="float64")
    H = te.placeholder(Y.shape, dtype="float64", name="H")
    outs = [Y, *te.differentiate(Y, [x, W], head=H)]
    for _ in range(2):
        _, schedule = pipeline.lower(Signature(outs, [x, W, H]))
        assert any("M_sum_sq" in line for line in schedule.hoisted)
