"""Row sums alike but for their tensors, lowered once (``codegen.alike``): the C is what
lowering each again gives, a replay happens where tensors are alike, and tensors that
differ in anything the lowering reads (a constant, an index, a dtype, the sharing of a
sub-expression, a size) are never merged: each computes its own values."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from benchmarks.recurrence_cells import te_program
from codegen import alike, replay
from tensorexpr.ir import Reduce, walk
from codegen.lower import Lowerer
from codegen.pipeline import generate
from codegen.schedule import Options
from codegen.signature import Signature

from .util import agree, both_ways

CELLS = [("lstm", 13, 3), ("gru", 13, 3), ("rnn", 9, 2), ("lstm", 6, 8)]


@pytest.mark.parametrize("mode", [False, True, "segments"])
@pytest.mark.parametrize("cell,T,k", CELLS)
def test_cells_lowered_alike_give_the_c_of_lowering_each(cell, T, k, mode, monkeypatch):
    ins, grads = te_program(cell, T, 2, 8, 4, k)
    (a, sa), (b, sb) = both_ways(Signature(grads, ins), Options(checkpoint=mode), monkeypatch,
                                     alike)
    assert sa == sb
    assert a == b


def _count(sig, options=Options()):
    """(asked, lowered) of the row sums keyed alike while ``sig`` is lowered."""
    counts = {"asked": 0, "lowered": 0}
    real = replay.Replays.get

    def get(self, key, lower, slots=(), **holes):
        if not slots:
            return real(self, key, lower, slots, **holes)
        counts["asked"] += 1

        def counted(**h):
            counts["lowered"] += 1
            return lower(**h)
        return real(self, key, counted, slots, **holes)
    replay.Replays.get = get
    try:
        _, source, _ = generate(sig, options)
    finally:
        replay.Replays.get = real
    return counts, source


def test_an_lstms_gates_are_lowered_once_each_kind():
    ins, grads = te_program("lstm", 13, 2, 8, 4, 3)
    counts, _ = _count(Signature(grads, ins), Options())
    # the four gates' step sums, their terms of dW and dU: each kind lowered once
    assert counts["lowered"] <= counts["asked"] - 9, counts


def _projections(make_second, x_shape=(9, 16), w2_dtype="float32"):
    """Two row sums over one ``x``: ``P = (x @ W1) * 2`` and the one ``make_second(x, W2)``
    builds, each its own output."""
    x = te.placeholder(x_shape, name="x")
    W1 = te.placeholder((16, 16), name="W1")
    W2 = te.placeholder((16, 16), dtype=w2_dtype, name="W2")
    k = te.reduce_axis(16, name="k")
    P = te.compute((8, 16), lambda i, j: te.sum(x[i, k] * W1[k, j], axis=k) * 2.0, name="P")
    Q = make_second(x, W2)
    return [x, W1, W2], [P, Q]


def _sum(body, dtype="float32", name="Q"):
    k = te.reduce_axis(16, name="k")
    return te.compute((8, 16), lambda i, j: body(i, j, k), name=name, dtype=dtype)


# each second tensor is P's twin but for one thing a key that forgot it would merge
TWINS = {
    "same": lambda x, W: _sum(lambda i, j, k: te.sum(x[i, k] * W[k, j], axis=k) * 2.0),
    "constant": lambda x, W: _sum(lambda i, j, k: te.sum(x[i, k] * W[k, j], axis=k) * 3.0),
    "index offset": lambda x, W: _sum(
        lambda i, j, k: te.sum(x[i + 1, k] * W[k, j], axis=k) * 2.0),
    "reduction offset": lambda x, W: _sum(
        lambda i, j, k: te.sum(x[i, 15 - k] * W[k, j], axis=k) * 2.0),
}


@pytest.mark.parametrize("twin", sorted(TWINS))
def test_twins_differing_in_one_thing_compute_their_own_values(twin):
    ins, outs = _projections(TWINS[twin])
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in ins]
    agree(outs, ins, *arrays)
    counts, _ = _count(Signature(outs, ins))
    assert counts["asked"] == 2
    assert counts["lowered"] == (1 if twin == "same" else 2), counts


def test_twins_differing_in_a_dtype_compute_their_own_values():
    def second(x, W):
        k = te.reduce_axis(16, name="k")
        return te.compute((8, 16), lambda i, j: te.sum(
            te.cast(x[i, k], "float64") * W[k, j], axis=k) * 2.0, name="Q")
    ins, outs = _projections(second, w2_dtype="float64")
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(t.shape).astype(np.float32 if t.dtype == "float32"
                                                   else np.float64) for t in ins]
    agree(outs, ins, *arrays)


def _key(outs, ins, name):
    lw = Lowerer(Signature(outs, ins))
    t = next(t for t in lw.tensors if t.name == name)
    return alike.shape(lw, t, next(x for x in walk(t.body) if isinstance(x, Reduce)))


def test_the_key_tells_apart_what_the_lowering_reads():
    def key_of(body):
        x = te.placeholder((9, 16), name="x")
        W = te.placeholder((16, 16), name="W")
        Q = _sum(lambda i, j, k: body(x, W, i, j, k))
        return _key([Q], [x, W], "Q")[0]

    base = key_of(lambda x, W, i, j, k: te.sum(x[i, k] * W[k, j], axis=k) + 0.0)
    assert base == key_of(lambda x, W, i, j, k: te.sum(x[i, k] * W[k, j], axis=k) + 0.0)
    # 0.0 and -0.0 are equal in Python, not in C
    assert base != key_of(lambda x, W, i, j, k: te.sum(x[i, k] * W[k, j], axis=k) + -0.0)
    assert base != key_of(lambda x, W, i, j, k: te.sum(x[i + 1, k] * W[k, j], axis=k) + 0.0)
    # one sub-expression used twice (computed once, into a local) or two equal ones

    def shared(x, W, i, j, k):
        e = te.exp(x[i, k])
        return te.sum(e * W[k, j] + e, axis=k)

    def unshared(x, W, i, j, k):
        return te.sum(te.exp(x[i, k]) * W[k, j] + te.exp(x[i, k]), axis=k)
    assert key_of(shared) != key_of(unshared)


def test_the_key_tells_apart_the_same_tensor_read_twice_from_two_tensors():
    x = te.placeholder((8, 16), name="x")
    W1, W2 = (te.placeholder((16, 16), name=n) for n in ("W1", "W2"))
    k = te.reduce_axis(16, name="k")
    A = te.compute((8, 16), lambda i, j: te.sum(x[i, k] * W1[k, j] + W1[k, j], axis=k),
                   name="A")
    k2 = te.reduce_axis(16, name="k")
    B = te.compute((8, 16), lambda i, j: te.sum(x[i, k2] * W1[k2, j] + W2[k2, j], axis=k2),
                   name="B")
    lw = Lowerer(Signature([A, B], [x, W1, W2]))
    assert alike.shape(lw, A, A.body)[0] != alike.shape(lw, B, B.body)[0]
    rng = np.random.default_rng(3)
    agree([A, B], [x, W1, W2], *[rng.standard_normal(t.shape).astype(np.float32)
                                  for t in (x, W1, W2)])


def test_sizes_are_told_apart():
    # row sums over other sizes: each lowered (a step's size variable, the last isl
    # parameter of each sum over an adjoint's steps, is shared: test_cells_...)
    n, m = te.var("n"), te.var("m")
    x, y = te.placeholder((n, 16), name="x"), te.placeholder((m, 16), name="y")
    z = te.placeholder((3, 16), name="z")
    W1, W2 = (te.placeholder((16, 16), name=w) for w in ("W1", "W2"))

    def proj(x, W, rows, name):
        k = te.reduce_axis(16, name="k")
        return te.compute((rows, 16), lambda i, j: te.sum(x[i, k] * W[k, j], axis=k), name=name)
    A, B, C = proj(x, W1, n, "A"), proj(y, W2, m, "B"), proj(z, W2, 3, "C")
    lw = Lowerer(Signature([A, B, C], [x, y, z, W1, W2]))
    keys = [alike.shape(lw, t, t.body)[0] for t in (A, B, C)]
    assert len(set(keys)) == 3
    counts, _ = _count(Signature([A, B, C], [x, y, z, W1, W2]))
    assert counts == {"asked": 3, "lowered": 3}
    rng = np.random.default_rng(4)
    agree([A, B, C], [x, y, z, W1, W2], *[rng.standard_normal(s).astype(np.float32) for s in
                                           ((6, 16), (4, 16), (3, 16), (16, 16), (16, 16))])


def _renamed_twins(second_axis):
    """``P = x @ W1`` over reduction axis ``k`` and ``Q = x @ W2`` over the axis
    ``second_axis()`` makes (its name, bounds, the way ``x`` reads it may differ)."""
    x = te.placeholder((8, 16), name="x")
    W1, W2 = (te.placeholder((16, 16), name=n) for n in ("W1", "W2"))
    k = te.reduce_axis(16, name="k")
    P = te.compute((8, 16), lambda i, j: te.sum(x[i, k] * W1[k, j], axis=k), name="P")
    Q = second_axis(x, W2)
    return [x, W1, W2], [P, Q]


def _over(name, lo=0, stride=1):
    def second(x, W):
        d = te.reduce_axis((lo, 16 // stride), name=name)
        return te.compute((8, 16), lambda i, j: te.sum(
            x[i, d if stride == 1 else stride * d] * W[d, j], axis=d), name="Q")
    return second


def test_sums_differing_only_in_their_axes_names_share_a_lowering(monkeypatch):
    # an LSTM's gate projections: sum_{di} x[.., di] * Wi[di, j], sum_{df} ... (alike but
    # for the names: one lowering, the replay's loop notes naming its own axis)
    ins, outs = _renamed_twins(_over("d_other"))
    sig = Signature(outs, ins)
    assert _key(outs, ins, "P")[0] == _key(outs, ins, "Q")[0]
    assert _key(outs, ins, "Q")[2] == ("i", "j", "d_other")
    counts, source = _count(sig)
    assert counts == {"asked": 2, "lowered": 1}, counts
    assert "/* d_other */" in source and "/* k */" in source
    (a, sa), (b, sb) = both_ways(sig, Options(), monkeypatch, alike)
    assert (a, sa) == (b, sb)
    rng = np.random.default_rng(5)
    agree(outs, ins, *[rng.standard_normal(t.shape).astype(np.float32) for t in ins])


@pytest.mark.parametrize("second", [_over("k", lo=1), _over("k", stride=2),
                                    _over("d", lo=1), _over("d", stride=2)],
                         ids=["bounds", "stride", "renamed bounds", "renamed stride"])
def test_sums_over_other_bounds_or_strides_are_told_apart(second):
    ins, outs = _renamed_twins(second)
    assert _key(outs, ins, "P")[0] != _key(outs, ins, "Q")[0]
    counts, _ = _count(Signature(outs, ins))
    assert counts == {"asked": 2, "lowered": 2}, counts
    rng = np.random.default_rng(6)
    agree(outs, ins, *[rng.standard_normal(t.shape).astype(np.float32) for t in ins])


def test_two_axes_of_one_name_are_not_renamed_to_two():
    # the template's two axes share the name "k", the caller's are "a" and "b": its prose
    # cannot say which "k" is which, so the caller is lowered as itself
    x = te.placeholder((8, 4, 16), name="x")
    W1, W2 = (te.placeholder((4, 16, 16), name=n) for n in ("W1", "W2"))

    def two_sums(W, n1, n2, name):
        a, b = te.reduce_axis(4, name=n1), te.reduce_axis(16, name=n2)
        return te.compute((8, 16), lambda i, j: te.sum(x[i, a, b] * W[a, b, j], axis=[a, b]),
                          name=name)
    P, Q = two_sums(W1, "k", "k", "P"), two_sums(W2, "a", "b", "Q")
    ins, outs = [x, W1, W2], [P, Q]
    assert _key(outs, ins, "P")[0] == _key(outs, ins, "Q")[0]
    counts, source = _count(Signature(outs, ins))
    assert counts == {"asked": 2, "lowered": 2}, counts
    rng = np.random.default_rng(7)
    agree(outs, ins, *[rng.standard_normal(t.shape).astype(np.float32) for t in ins])
