"""tensorexpr.dask: chunked programs equal the whole-array build, block by block."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import tensorexpr as te

da = pytest.importorskip("dask.array")
import dask  # noqa: E402
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import tensorexpr.dask as ted  # noqa: E402
from tensorexpr.blocks import BlockProgram, WholeRead  # noqa: E402

rng = np.random.default_rng(0)


def clamp(i, n):
    return te.minimum(te.maximum(i, 0), n - 1)


def blur(n, m, dtype="float32"):
    X = te.placeholder((n, m), dtype, name="X")
    B = te.compute((n, m), lambda i, j: (
        X[clamp(i - 1, n), j] + 2.0 * X[i, j] + X[clamp(i + 1, n), j]
        + X[i, clamp(j - 1, m)] + X[i, clamp(j + 1, m)]) * 0.25, name="blur")
    return X, B


def run(outputs, inputs, arrays, chunks, **kw):
    """The chunked results and the whole-array build's, as tuples."""
    f = ted.op(outputs, inputs, **kw)
    ds = [da.from_array(a, chunks=c) for a, c in zip(arrays, chunks)]
    got = f(*ds)
    got = got if isinstance(got, tuple) else (got,)
    want = te.build(outputs, inputs=inputs)(*arrays)
    want = want if isinstance(want, tuple) else (want,)
    return dask.compute(*got, scheduler="threads"), want, f.plan(*ds)


@pytest.mark.parametrize("chunks", [(10, 7), (37, 29), ((5, 20, 12), (1, 28)), (1, 29)])
def test_clamped_blur_is_bit_identical_on_any_chunking(chunks):
    X, B = blur(37, 29)
    x = rng.standard_normal((37, 29)).astype(np.float32)
    (got,), (want,), plan = run(B, [X], [x], [chunks])
    assert np.array_equal(got, want)
    # per side: a clamped border has no halo there; interior blocks have 1 on each side
    assert plan.outputs[0].halos(X) == [(1 if len(c) > 1 else 0,) * 2
                                        for c in da.from_array(x, chunks=chunks).chunks]


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.integers(1, 9), min_size=1, max_size=6))
def test_any_partition_of_a_stencil(sizes):
    n = sum(sizes)
    X = te.placeholder((n,), "float64", name="X")
    Y = te.compute((n,), lambda i: X[clamp(i - 2, n)] - 3.0 * X[i] + X[clamp(i + 1, n)],
                   name="Y")
    x = rng.standard_normal(n)
    (got,), (want,), _ = run(Y, [X], [x], [(tuple(sizes),)])
    assert np.array_equal(got, want)


def conv_program(stride=2, dilation=2, padding=1):
    X = te.placeholder((2, 2, 15, 13), "float64", name="X")
    W = te.placeholder((3, 2, 3, 3), "float64", name="W")
    Y = te.nn.conv2d(X, W, stride=stride, padding=padding, dilation=dilation)
    H = te.placeholder(Y.shape, "float64", name="H")
    return X, W, Y, H


def test_strided_dilated_convolution_and_its_gradients():
    X, W, Y, H = conv_program()
    dX, dW = te.differentiate(Y, [X, W], head=H)
    x, w, h = (rng.standard_normal(t.shape) for t in (X, W, H))
    chunks = [(1, 2, 6, 5), W.shape, (1, 3, 3, 2)]
    got, want, plan = run([Y, dX, dW], [X, W, H], [x, w, h], chunks)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-12)
    # the weight gradient sums over the batch and the image, in pieces combined by a tree
    dw_plan = plan.outputs[2]
    assert dw_plan.bp.op == "sum" and dw_plan.chunks == tuple((n,) for n in W.shape)
    assert max(len(c) for c in dw_plan.split_chunks) > 1
    assert plan.halo_bytes > 0


def test_gradient_of_a_loss_with_its_head_as_an_input():
    n = 30
    X = te.placeholder((n,), "float64", name="X")
    Y = te.compute((n,), lambda i: te.tanh(X[clamp(i - 1, n)] * X[i]), name="Y")
    Hd = te.placeholder((n,), "float64", name="Hd")
    (dX,) = te.differentiate(Y, [X], head=Hd)
    x, h = rng.standard_normal(n), rng.standard_normal(n)
    (got,), (want,), _ = run(dX, [X, Hd], [x, h], [(7,), (11,)])
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)


def test_max_pool_gradient():
    X = te.placeholder((1, 2, 12, 10), "float64", name="X")
    P = te.nn.max_pool2d(X, 2)
    HP = te.placeholder(P.shape, "float64", name="HP")
    (dX,) = te.differentiate(P, [X], head=HP)
    x, hp = rng.standard_normal(X.shape), rng.standard_normal(HP.shape)
    (got,), (want,), _ = run(dX, [X, HP], [x, hp], [(1, 1, 5, 3), (1, 2, 3, 2)])
    assert np.array_equal(got, want)


@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_reductions_over_a_chunked_axis_combine_by_a_tree(op):
    A = te.placeholder((50, 3), "float64", name="A")
    k = te.reduce_axis(50, name="k")
    S = te.compute((3,), lambda j: getattr(te, op)(A[k, j] * 2.0, axis=k), name="S")
    a = rng.standard_normal((50, 3))
    (got,), (want,), plan = run(S, [A], [a], [(3, 3)])  # 17 pieces: two levels of combining
    np.testing.assert_allclose(got, want, rtol=1e-13)
    assert plan.outputs[0].split_chunks == ((3,) * 16 + (2,),)
    assert len(plan.outputs[0].blocks) == 17


def test_transpose_across_chunks_reads_the_matching_chunk():
    A = te.placeholder((12, 9), "float32", name="A")
    T = te.compute((9, 12), lambda i, j: A[j, i] + 1.0, name="T")
    a = rng.standard_normal((12, 9)).astype(np.float32)
    (got,), (want,), plan = run(T, [A], [a], [(5, 4)])
    assert np.array_equal(got, want) and plan.halo_bytes == 0
    assert plan.outputs[0].chunks == ((4, 4, 1), (5, 5, 2))


def test_a_data_dependent_gather_of_a_chunked_table_is_refused_or_gathered():
    E = te.placeholder((12, 3), "float64", name="E")
    idx = te.placeholder((8,), "int32", name="idx")
    emb = te.compute((8, 3), lambda i, d: E[idx[i], d], name="emb")
    e, ids = rng.standard_normal((12, 3)), rng.integers(0, 12, 8).astype(np.int32)
    with pytest.raises(WholeRead, match=r"input 'E' along its dimension 0 .*E\[int64\(idx\[i\]\), d\]"
                       r".*data-dependent.*E.rechunk\(\{0: -1\}\)"):
        run(emb, [E, idx], [e, ids], [(4, 3), (2,)])
    (got,), (want,), _ = run(emb, [E, idx], [e, ids], [(4, 3), (2,)], rechunk=True)
    assert np.array_equal(got, want)
    (got,), (want,), _ = run(emb, [E, idx], [e, ids], [(12, 3), (2,)])  # one chunk: fine
    assert np.array_equal(got, want)


def test_symbolic_sizes_bound_from_the_dask_arrays():
    n = te.var("n")
    X = te.placeholder((n,), "float64", name="X")
    Y = te.compute((n - 2,), lambda i: X[i] + X[i + 1] + X[i + 2], name="Y")
    f = ted.op(Y)
    for size, ch in [(20, 6), (9, 2)]:
        x = rng.standard_normal(size)
        got = f(da.from_array(x, chunks=ch)).compute()
        np.testing.assert_allclose(got, x[:-2] + x[1:-1] + x[2:], rtol=1e-15)


def test_output_chunks_can_be_chosen():
    X, B = blur(16, 16)
    x = rng.standard_normal((16, 16)).astype(np.float32)
    y = ted.op(B, chunks=[(5, 16)])(da.from_array(x, chunks=8))
    assert y.chunks == ((5, 5, 5, 1), (16,))
    assert np.array_equal(y.compute(), te.build(B)(x))


def test_wrong_inputs_say_what_to_do():
    X, B = blur(8, 8)
    f = ted.op(B)
    with pytest.raises(TypeError, match="input 'X' must be a 2-d float32 array"):
        f(da.zeros((8, 8), chunks=4))
    with pytest.raises(ValueError, match=r"input 'X' has shape \(8, 9\), expected \(8, 8\)"):
        f(da.zeros((8, 9), chunks=4, dtype=np.float32))


def test_block_programs_pickle_as_their_ir():
    X, B = blur(12, 12)
    bp = BlockProgram(B, [X])
    again = pickle.loads(pickle.dumps(bp))
    assert again.output.uid == B.uid and "_hash" not in again.output.body.__dict__
    win = again.windows([(4, 8), (0, 12)], [])
    x = rng.standard_normal((12, 12)).astype(np.float32)
    lo, hi = win.boxes[X.uid][0]
    assert (lo, hi) == (3, 9)
    assert np.array_equal(again.run(win, [x[lo:hi]]), te.build(B)(x)[4:8])
    assert te.ir.fresh_uid() > max(B.uid, X.uid)
    assert pickle.loads(pickle.dumps(bp)).__dict__ is again.__dict__  # one per process


def test_block_programs_pickle_without_what_is_cached_on_their_nodes():
    import io
    from tensorexpr import blocks
    from tensorexpr.ir import tensor_inputs
    from tensorexpr.transform import free_axes
    from passes.contexts import contexts
    X, B = blur(12, 12)
    tensor_inputs(B), free_axes(B.body), contexts(B), hash(B.body)  # as a build leaves them
    assert {"_inputs", "_contexts"} <= set(B.__dict__) and "_free_axes" in B.body.__dict__
    buf = io.BytesIO()
    blocks._IRPickler(buf).dump(B)  # (what a block program's pickle holds)
    out = pickle.loads(buf.getvalue())
    assert not [k for k in out.__dict__ if k.startswith("_")]
    assert not [k for k in out.body.__dict__ if k.startswith("_")]
    assert te.ir.same(out.body, B.body)
    assert [a.uid for a in free_axes(out.body)] == [a.uid for a in free_axes(B.body)]


def test_tasks_times_threads_fit_the_cores():
    import os
    cores = os.cpu_count()
    with dask.config.set(num_workers=cores):
        assert ted.task_threads() == 1
    with dask.config.set(num_workers=1):
        assert ted.task_threads() == cores


def test_distributed_processes_build_the_program_in_the_workers():
    distributed = pytest.importorskip("distributed")
    X, B = blur(40, 24)
    x = rng.standard_normal((40, 24)).astype(np.float32)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        y = ted.op(B)(da.from_array(x, chunks=(10, 12))).compute()
    assert np.array_equal(y, te.build(B)(x))


def test_the_scale_out_note_runs_and_prints_what_it_says(capsys):
    import os

    from tests.test_docs import DOCS, expected_output
    from tests.test_readme import python_blocks
    path = os.path.join(DOCS, "scale_out.md")
    namespace = {"__name__": "scale_out"}
    for line, code in python_blocks(path):
        exec(compile("\n" * (line - 1) + code, path, "exec"), namespace)
        assert capsys.readouterr().out.splitlines() == expected_output(code)
