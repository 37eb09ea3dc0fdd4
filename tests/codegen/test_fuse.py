"""Row fusion (codegen.fuse): chains of tensors that read each other only at their own
row run in one loop over slabs of rows. Checked against the numpy backend at sizes that
leave ragged slabs, with symbolic sizes, and with the schedules a member may use (row
blocking, split reads, partial sums); chains that read another row must not fuse."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from codegen import fuse
from codegen.pipeline import generate
from codegen.signature import Signature

from .util import agree, rand


def _slab_loops(f) -> int:
    return f.source.count("slabs of")


def _softmax(X, B, D):
    k1, k2 = te.reduce_axis((0, D), name="k1"), te.reduce_axis((0, D), name="k2")
    m = te.compute((B,), lambda i: te.max(X[i, k1], axis=k1), name="m")
    e = te.compute((B, D), lambda i, j: te.exp(X[i, j] - m[i]), name="e")
    s = te.compute((B,), lambda i: te.sum(e[i, k2], axis=k2), name="s")
    return te.compute((B, D), lambda i, j: e[i, j] / s[i], name="Y")


@pytest.mark.parametrize("b,d", [(1, 5), (13, 40), (67, 9)])
def test_softmax_is_one_slab_loop(b, d):
    X = te.placeholder((b, d), name="X")
    Y = _softmax(X, b, d)
    f, _ = agree([Y], [X], rand((b, d)))
    assert _slab_loops(f) == 1
    assert f"slabs of {fuse.slab_rows(te.const(b, 'int64'))} rows" in f.source
    assert "#pragma omp parallel" not in f.source.split("slabs of")[1]  # no nested regions


def test_softmax_gradient_fuses_and_agrees():
    X = te.placeholder((19, 33), name="X")
    Y = _softmax(X, 19, 33)
    H = te.placeholder(Y.shape, name="H")
    [dX] = te.differentiate(Y, [X], head=H)
    f, _ = agree([dX], [X, H], rand((19, 33)), rand((19, 33), seed=1))
    assert _slab_loops(f) >= 1


def test_symbolic_rows_fuse_and_agree_at_every_size():
    n = te.var("n")
    X = te.placeholder((n, 12), name="X")
    Y = _softmax(X, n, 12)
    fc, fn = te.build(Y), te.build(Y, backend="numpy")
    assert _slab_loops(fc) == 1
    for rows in (1, 7, 8, 9, 64, 101):
        x = rand((rows, 12), seed=rows)
        np.testing.assert_allclose(fc(x), fn(x), rtol=1e-5, atol=1e-6)


def test_row_blocked_members_fuse():
    # a two-layer perceptron: both products are blocked ROW_BLOCK rows at a time
    X = te.placeholder((37, 24), name="X")
    W1 = te.placeholder((24, 40), name="W1")
    W2 = te.placeholder((40, 11), name="W2")
    k1, k2 = te.reduce_axis((0, 24), name="k1"), te.reduce_axis((0, 40), name="k2")
    h = te.compute((37, 40), lambda i, j: te.tanh(te.sum(X[i, k1] * W1[k1, j], axis=k1)),
                   name="h")
    Y = te.compute((37, 11), lambda i, o: te.sum(h[i, k2] * W2[k2, o], axis=k2), name="Y")
    f, _ = agree([Y, h], [X, W1, W2], rand((37, 24)), rand((24, 40), seed=1),
                 rand((40, 11), seed=2))
    assert _slab_loops(f) == 1


def test_a_read_of_another_row_does_not_fuse():
    X = te.placeholder((20, 8), name="X")
    k = te.reduce_axis((0, 8), name="k")
    s = te.compute((20,), lambda i: te.sum(X[i, k], axis=k), name="s")
    # row i reads row i + 1 of s: another slab may not have computed it yet
    Y = te.compute((19, 8), lambda i, j: X[i, j] * s[i + 1], name="Y")
    f, _ = agree([Y], [X], rand((20, 8)))
    assert _slab_loops(f) == 0


def test_a_read_of_another_row_through_an_inlined_intermediate_does_not_fuse():
    X = te.placeholder((20, 8), name="X")
    k = te.reduce_axis((0, 8), name="k")
    s = te.compute((20, 8), lambda i, j: te.exp(X[i, j]), name="s")  # stored (costly)
    shifted = te.compute((20, 8), lambda i, j: s[19 - i, j] + 1.0, name="shifted")  # inlined
    Y = te.compute((20,), lambda i: te.sum(shifted[i, k], axis=k), name="Y")
    f, _ = agree([Y], [X], rand((20, 8)))
    assert "shifted" in f.source and "[computed where it is read]" in f.source
    assert _slab_loops(f) == 0


def test_a_whole_column_read_does_not_fuse():
    X = te.placeholder((16, 8), name="X")
    r = te.reduce_axis((0, 16), name="r")
    e = te.compute((16, 8), lambda i, j: te.exp(X[i, j]), name="e")
    # every row of Y reads every row of e
    Y = te.compute((16, 8), lambda i, j: te.sum(e[r, j], axis=r) * X[i, j], name="Y")
    agree([Y], [X], rand((16, 8)))
    sig = Signature([Y], [X])
    assert [len(g) for g in fuse.plan([e, Y], set())] == [1, 1]
    assert "slabs of" not in generate(sig, name="t")[1]


def test_first_axes_of_different_extent_do_not_fuse():
    X = te.placeholder((10, 6), name="X")
    a = te.compute((10, 6), lambda i, j: te.exp(X[i, j]), name="a")
    b = te.compute((6, 10), lambda j, i: te.exp(a[i, j]), name="b")
    f, _ = agree([b, a], [X], rand((10, 6)))
    assert _slab_loops(f) == 0


def test_slab_rows():
    assert fuse.slab_rows(te.const(1, "int64")) == 1
    assert fuse.slab_rows(te.const(4096, "int64")) % fuse.slab_align() == 0
    assert fuse.slab_rows(te.var("n")) == fuse.slab_align()


# {{{ slabs of planes (two axes)

def _maxpool(X, shape, k=2):
    ry, rx = te.reduce_axis((0, k), name="ry"), te.reduce_axis((0, k), name="rx")
    n, c, h, w = shape
    return te.compute((n, c, h // k, w // k), lambda i, j, y, x: te.max(
        X[i, j, y * k + ry, x * k + rx], axis=[ry, rx]), name="Y")


def _plane_loops(f) -> int:
    return f.source.count("planes of")


def _pool_inputs(shape, seed=0):
    # repeated values: ties inside windows, so the tie count is not always 1
    rng = np.random.default_rng(seed)
    return rng.integers(-3, 3, size=shape).astype(np.float32)


def test_pooling_gradient_slabs_over_two_axes_with_a_ragged_last_block():
    shape = (8, 7, 10, 14)  # 8 images: 4 blocks of 2, 2, 2 and 1 channels
    X = te.placeholder(shape, name="X")
    Y = _maxpool(X, shape)
    H = te.placeholder(Y.shape, name="H")
    [dX] = te.differentiate(Y, [X], head=H)
    f, _ = agree([dX], [X, H, Y], _pool_inputs(shape), rand((8, 7, 5, 7), seed=1),
                 _pool_inputs(shape).reshape(8, 7, 5, 2, 7, 2).max(axis=(3, 5)))
    assert _plane_loops(f) == 1 and "slabs of 2 planes" in f.source
    assert fuse.plane_blocks(te.const(8, "int64"), te.const(7, "int64"),
                             te.const(1024, "int64")) == (4, 2)


def test_pooling_forward_and_backward_in_one_plane_loop():
    shape = (3, 4, 6, 8)  # 3 images: slabs of rows would leave a thread idle
    X = te.placeholder(shape, name="X")
    Y = _maxpool(X, shape)
    H = te.placeholder(Y.shape, name="H")
    [dX] = te.differentiate(Y, [X], head=H)
    f, _ = agree([Y, dX], [X, H], _pool_inputs(shape, 2), rand(Y.shape, seed=3))
    assert _plane_loops(f) == 1 and _slab_loops(f) == 1
    assert "Y, " in f.source.split("planes of")[1].split("*/")[0]  # Y is a member


def test_symbolic_sizes_slab_planes_and_agree_at_every_size():
    n, c = te.var("n"), te.var("c")
    X = te.placeholder((n, c, 6, 6), name="X")
    Y = _maxpool(X, (n, c, 6, 6), k=3)
    H = te.placeholder(Y.shape, name="H")
    [dX] = te.differentiate(Y, [X], head=H)
    fc, fn = te.build([dX], [X, H, Y]), te.build([dX], [X, H, Y], backend="numpy")
    assert _plane_loops(fc) == 1
    for rows, chans in ((1, 1), (1, 9), (3, 5), (10, 7), (33, 2)):
        x = _pool_inputs((rows, chans, 6, 6), seed=rows)
        y = x.reshape(rows, chans, 2, 3, 2, 3).max(axis=(3, 5))
        h = rand(y.shape, seed=chans)
        np.testing.assert_allclose(fc(x, h, y), fn(x, h, y), rtol=1e-6, atol=1e-6)


def test_many_rows_keep_slabs_of_rows():
    shape = (64, 2, 4, 4)  # 64 small images: 32 slabs of 2 rows fit the cache
    X = te.placeholder(shape, name="X")
    Y = _maxpool(X, shape)
    H = te.placeholder(Y.shape, name="H")
    [dX] = te.differentiate(Y, [X], head=H)
    f, _ = agree([dX], [X, H], _pool_inputs(shape, 4), rand(Y.shape, seed=5))
    assert _slab_loops(f) == 1 and _plane_loops(f) == 0


def test_a_member_not_looping_over_the_second_axis_next_falls_back_to_rows():
    # B reads X transposed over (c, w): a blocked transpose whose loop after n is h, so
    # it cannot take narrowed channel blocks; the group fuses by rows of n instead
    X = te.placeholder((3, 64, 2, 64), name="X")
    A = te.compute((3, 64, 2, 64), lambda n, c, h, w: te.exp(X[n, c, h, w]), name="A")
    B = te.compute((3, 64, 2, 64), lambda n, c, h, w: A[n, c, h, w] * X[n, w, h, c], name="B")
    f, _ = agree([A, B], [X], rand((3, 64, 2, 64)))  # A an output: stored
    assert fuse.planes([A, B], set()) is not None
    assert _slab_loops(f) == 1 and _plane_loops(f) == 0 and "rows of A, B" in f.source


def test_a_read_of_another_channel_does_not_slab_planes():
    X = te.placeholder((3, 4, 8), name="X")
    k = te.reduce_axis((0, 8), name="k")
    A = te.compute((3, 4, 8), lambda n, c, w: te.exp(X[n, c, w]), name="A")
    # channel c reads channel 3 - c of A: another block's planes
    B = te.compute((3, 4, 1), lambda n, c, o: te.sum(A[n, 3 - c, k], axis=k), name="B")
    f, _ = agree([B], [X], rand((3, 4, 8)))
    assert fuse.planes([A, B], set()) is None
    assert _slab_loops(f) == 1 and _plane_loops(f) == 0

# }}}


def test_a_long_chain_is_fused_in_groups_of_at_most_max_members():
    # one slab loop of 1,000 members was one huge C function: 15 s of compiling
    X = te.placeholder((4, 3), name="X", dtype="float64")
    T, chain = X, []
    for k in range(2 * fuse.MAX_MEMBERS + 5):
        T = te.compute((4, 3), lambda i, j, T=T: te.tanh(T[i, j]) * 0.5 + T[i, j] * 0.75,
                       name=f"T{k}")
        chain.append(T)
    groups = fuse.plan(chain, set())
    assert [len(g) for g in groups] == [fuse.MAX_MEMBERS] * 2 + [5]
    x = np.random.default_rng(0).uniform(-1, 1, (4, 3))
    np.testing.assert_allclose(te.build(T)(x), te.build(T, backend="numpy")(x), rtol=1e-12)


def test_the_schedule_records_the_slabs_decided_before_lowering():
    # B runs by rows of n (its blocked transpose over (c, w) cannot take channel blocks)
    X = te.placeholder((3, 64, 2, 64), name="X")
    A = te.compute((3, 64, 2, 64), lambda n, c, h, w: te.exp(X[n, c, h, w]), name="A")
    B = te.compute((3, 64, 2, 64), lambda n, c, h, w: A[n, c, h, w] * X[n, w, h, c], name="B")
    f = te.build([A, B], [X])
    assert f.schedule.groups == (("A", "B"),) and f.schedule.slabs == ("rows",)
    assert "fused: A + B (slabs of rows)" in str(f.schedule)
    shape = (3, 4, 6, 8)
    P = te.placeholder(shape, name="P")
    Y = _maxpool(P, shape)
    H = te.placeholder(Y.shape, name="H")
    [dP] = te.differentiate(Y, [P], head=H)
    assert te.build([Y, dP], [P, H]).schedule.slabs == ("planes",)


def test_a_member_whose_strategy_blocks_the_first_axis_ends_the_group_in_the_plan():
    from codegen.lower import Lowerer
    X = te.placeholder((64, 64), name="X")
    Y = te.compute((64, 64), lambda i, j: te.exp(X[i, j]), name="Y")
    T = te.compute((64, 64), lambda i, j: Y[i, j] * X[j, i], name="T")  # blocks of (i, j)
    f, _ = agree([Y, T], [X], rand((64, 64)))
    assert f.schedule.groups == () and f.schedule.unfused == ((("Y", "T"), "T"),)
    assert f.schedule["T"].strategy == "blocks" and "not fused: Y + T" in str(f.schedule)
    # decided from the strategy table alone: nothing is lowered, no name is taken
    lw = Lowerer(Signature([Y, T], [X]))
    assert fuse.decide(lw, [Y, T])[0] == 0 and lw.record.choices == [] and lw.counters == {}
    assert fuse.decide(lw, [Y]) == (0, None)  # a group of one is lowered alone


def test_slabs_hold_whole_register_tiles_of_a_row_tiled_member():
    # an LSTM's gates at a batch of 64: 32 slabs of 2 rows never ran the 8-row tiles of
    # its products (forward 12.6 ms; with slabs of 8 rows, 0.73 ms)
    from codegen import target
    from codegen.target import Target
    with target.use(Target(64, 32, True)):  # AVX-512: tiles of 8 rows
        X = te.placeholder((64, 48), name="X")
        W = te.placeholder((48, 64), name="W")
        k = te.reduce_axis(48, name="k")
        S = te.compute((64, 64), lambda i, j: te.sum(X[i, k] * W[k, j], axis=k), name="S")
        Y = te.compute((64, 64), lambda i, j: te.tanh(S[i, j]) * X[i, j % 48], name="Y")
        f, _ = agree([S, Y], [X, W], rand((64, 48)), rand((48, 64), seed=1))
        assert f.schedule["S"].strategy == "rows" and "slabs of 8 rows of S, Y" in f.source
        # a group of elementwise members keeps its finer slabs
        Z = te.compute((64, 64), lambda i, j: te.exp(X[i, j % 48]), name="Z")
        V = te.compute((64, 64), lambda i, j: Z[i, j] * 2.0, name="V")
        g, _ = agree([Z, V], [X], rand((64, 48)))
        assert "slabs of 2 rows of Z, V" in g.source


def test_a_later_tensor_that_would_join_moves_ahead_of_one_that_ends_the_group():
    # batch norm's gradient: dgamma and dbeta are sums over the channels, like dvar and
    # dmean, but come after dX (images first), which ends their group: they move ahead
    # of it (with the inlined factor dgamma reads), all their inputs being computed
    N, C, HH, W = 3, 5, 4, 6
    X = te.placeholder((N, C, HH, W), name="X")
    gamma, beta = te.placeholder((C,), name="gamma"), te.placeholder((C,), name="beta")
    (n1, y1, x1), (n2, y2, x2) = [[te.reduce_axis((0, s), name=f"{a}{i}")
                                   for a, s in (("n", N), ("y", HH), ("x", W))] for i in (1, 2)]
    mean = te.compute((C,), lambda c: te.sum(X[n1, c, y1, x1], axis=[n1, y1, x1]) / (N * HH * W),
                      name="mean")
    var = te.compute((C,), lambda c: te.sum((X[n2, c, y2, x2] - mean[c]) ** 2,
                                            axis=[n2, y2, x2]) / (N * HH * W), name="var")
    Y = te.compute(X.shape, lambda n, c, y, x: (X[n, c, y, x] - mean[c])
                   / te.sqrt(var[c] + 1e-5) * gamma[c] + beta[c], name="Y")
    H = te.placeholder(Y.shape, name="H")
    grads = te.differentiate(Y, [X, gamma, beta], head=H)
    f, _ = agree(list(grads), [X, gamma, beta, H], rand(X.shape), rand((C,), seed=1),
                 rand((C,), seed=2), rand(Y.shape, seed=3))
    fused = [line for line in str(f.schedule).splitlines() if line.startswith("fused:")]
    assert len(fused) == 1 and "dgamma" in fused[0] and "dbeta" in fused[0], fused
    # the same program without moving: two groups (the plan's order is the program's)
    order = [g for g in fuse.plan([t for t in te.ir.topo_order(list(grads))
                                   if not isinstance(t, te.ir.Placeholder)], set(),
                                  fixed={t.uid for t in te.ir.topo_order(list(grads))})]
    assert [t.name for g in order for t in g] == [t.name for t in te.ir.topo_order(list(grads))
                                                  if not isinstance(t, te.ir.Placeholder)]
