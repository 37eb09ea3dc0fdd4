"""polyhedral.renamed: isl answers shared between questions that differ only in axis uids.

Sharing must never change the C (the same bytes as asking every question again),
and questions that differ in anything but the uids (a bound, a constant, which
axes are the same axis) must not share an answer.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from benchmarks import recurrence_cells as rc
from codegen.pipeline import generate
from codegen.schedule import Options
from codegen.signature import Signature
from tensorexpr.ir import Axis, Const, SizeVar, fresh_uid, walk
from tensorexpr.polyhedral import (LoopBlock, LoopFor, LoopIf, LoopLet, LoopPoint, loop_nest,
                                   solve_fiber, within)
from tensorexpr.polyhedral import renamed


def _ax(name, hi, lo=0):
    hi = Const(hi, "int64") if isinstance(hi, int) else hi
    return Axis(name, Const(lo, "int64"), hi, fresh_uid())


@pytest.fixture
def unshared(monkeypatch):
    """A function running ``f()`` with sharing off (every new question asked of isl)."""
    def run(f):
        with monkeypatch.context() as m:
            m.setattr(renamed, "ENABLED", False)
            return f()
    return run


def test_shape_tells_apart_what_isl_sees():
    i, j = _ax("i", 8), _ax("i", 8)
    n = SizeVar("n")
    same_shape = [((i,), (i + 1,)), ((j,), (j + 1,))]
    assert renamed.shape(same_shape[0])[0] == renamed.shape(same_shape[1])[0]
    k = _ax("i", 8)
    others = [((i, i), ()),                # one axis twice ...
              ((i, k), ()),                # ... is not two axes
              ((_ax("i", 9),), ()),        # another bound
              ((_ax("i", 8, lo=1),), ()),  # another start
              ((_ax("i", n),), ()),        # a size
              ((_ax("i", SizeVar("m")),), ()),
              ((i,), (i + 2,)),            # another constant
              ((i,), (i - 1,)),            # another operation
              ((i,), (i // 2,)),
              ((i,), (i + n,))]
    shapes = [renamed.shape(q)[0] for q in others]
    assert len(set(shapes)) == len(shapes)


def test_same_axis_twice_is_not_two_axes():
    i, j, k = _ax("i", 8), _ax("i", 8), _ax("i", 8)
    assert renamed.shape((i, i + j))[0] != renamed.shape((i, j + k))[0]
    assert renamed.shape((i, i + j))[0] == renamed.shape((k, k + j))[0]


def test_within_not_shared_across_bounds():
    # i + 1 < 9 holds over [0, 8), not over [0, 9): the second question is another one
    for his in ((8, 9), (9, 8)):
        got = [within([a], [], [], a + 1, Const(9, "int64")) for a in (_ax("i", h) for h in his)]
        assert got == [h == 8 for h in his]


def test_loop_nest_renamed_to_the_callers_axes(unshared):
    def ask():
        i, k = _ax("i", 8), _ax("k", 8)
        tree, rest = loop_nest([k], [k <= i, k % 2 == 0], outer=[i])
        return i, tree, rest
    i1, t1, _ = ask()
    i2, t2, _ = ask()  # the same shape: a renamed answer
    i3, t3, _ = unshared(ask)
    uids = [{a.uid for a in _axes_of(t)} for t in (t1, t2, t3)]
    assert i1.uid in uids[0] and i2.uid in uids[1] and i1.uid not in uids[1]
    assert repr(t2) == repr(t1) == repr(t3)


def test_fiber_answers_get_axes_of_their_own(unshared):
    def ask():
        h, kh, y = _ax("h", 16), _ax("kh", 3), _ax("y", 33)
        return (y, h, kh), solve_fiber([y], [h, kh], [], [2 * h + kh])
    (y1, h1, k1), p1 = ask()
    (y2, h2, k2), p2 = ask()  # the same shape: renamed
    _, p3 = unshared(ask)
    free = [a.uid for p in p1 + p2 + p3 for a in p.free]
    assert free and len(set(free)) == len(free)  # never shared between two answers
    assert [set(p.subst) for p in p2] == [{h2.uid, k2.uid}] * len(p2)
    used = {a.uid for p in p2 for e in list(p.subst.values()) + [p.cond] if e is not None
            for a in _free(e)}
    assert y2.uid in used and not used & {y1.uid, h1.uid, k1.uid}
    shown = [[(str(p.subst[h.uid]), str(p.subst[k.uid]), str(p.cond)) for p in ps]
             for ps, (h, k) in ((p1, (h1, k1)), (p2, (h2, k2)))]
    assert shown[0] == shown[1] and len(p3) == len(p1)


def _axes_of(tree):
    match tree:
        case LoopBlock(items):
            return [a for x in items for a in _axes_of(x)]
        case LoopFor(_, lo, hi, _, body):
            return _free(lo, hi) + _axes_of(body)
        case LoopLet(_, value, body):
            return _free(value) + _axes_of(body)
        case LoopIf(cond, then, orelse):
            return _free(cond) + _axes_of(then) + ([] if orelse is None else _axes_of(orelse))
        case LoopPoint(values):
            return _free(*values)


def _free(*es):
    return [x for e in es for x in walk(e) if isinstance(x, Axis)]


def _sources(build):
    return [generate(Signature(outs, ins), options, name="g")[1:] for outs, ins, options in build()]


def _cells():
    out = []
    for cell, k, mode in [("lstm", None, True), ("lstm", 3, True), ("lstm", 3, "segments"),
                          ("gru", 3, True), ("rnn", None, True)]:
        ins, grads = rc.te_program(cell, 6, 2, 8, 4, k)
        out.append((grads, ins, Options(checkpoint=mode)))
    return out


def _two_sums():
    # the same sum twice but for the range of its reduction: one loop nest each
    X = te.placeholder((8, 16), name="X")
    k1, k2 = te.reduce_axis(16, name="k"), te.reduce_axis(12, name="k")
    A = te.compute((8,), lambda i: te.sum(X[i, k1], axis=k1, where=k1 % 2 == 0), name="A")
    B = te.compute((8,), lambda i: te.sum(X[i, k2], axis=k2, where=k2 % 2 == 0), name="B")
    return [([A, B], [X], Options())]


@pytest.mark.parametrize("build", [_cells, _two_sums])
def test_shared_answers_give_the_same_c(build, unshared):
    shared = _sources(build)
    alone = unshared(lambda: _sources(build))
    for (src, sched), (src2, sched2) in zip(shared, alone):
        assert src == src2
        assert str(sched) == str(sched2)


def test_other_bounds_other_loops():
    X = te.placeholder((8, 16), name="X")
    k1, k2 = te.reduce_axis(16, name="k"), te.reduce_axis(12, name="k")
    A = te.compute((8,), lambda i: te.sum(X[i, k1], axis=k1, where=k1 % 2 == 0), name="A")
    B = te.compute((8,), lambda i: te.sum(X[i, k2], axis=k2, where=k2 % 2 == 0), name="B")
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    a, b = te.build([A, B], [X])(x)
    np.testing.assert_allclose(a, x[:, 0:16:2].sum(1), rtol=1e-5)
    np.testing.assert_allclose(b, x[:, 0:12:2].sum(1), rtol=1e-5)


def test_large_questions_are_asked_as_themselves():
    i = _ax("i", 8)
    deep = i
    for _ in range(3000):
        deep = deep + 1
    assert renamed.shape((deep,)) is None  # too deep to walk: no shape, no error
    many = [i >= 0] * 1000  # too large to be worth a shape: asked of isl as it is
    assert renamed.shape((many,)) is None
    assert within([i], many, [], i, Const(8, "int64"))
    assert not within([i], many, [], i + 1, Const(8, "int64"))
