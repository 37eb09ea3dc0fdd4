"""Non-temporal stores (``codegen.streaming``) against the numpy backend: random shapes
(rows whose starts fall at every alignment, rows shorter than a vector, a chunk and a
half), float32 and float64, threads; which outputs stream and which do not (read back,
accumulated, costly, small, turned off); one fence per thread, not per row."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensorexpr as te
from codegen import streaming, target
from codegen.schedule import Options

from .util import agree, rand


def with_cache(llc_bytes: int, stream_bytes: int = target.Target.stream_bytes):
    """This machine's target with a last-level cache of ``llc_bytes``, streaming outputs
    of at least ``stream_bytes``."""
    return target.use(replace(target.current(), llc_bytes=llc_bytes, stream_bytes=stream_bytes))


@pytest.fixture
def stream_all():
    """Every output streams, whatever its size (the tests' shapes are small)."""
    with with_cache(0, 0):
        yield


def long_row(dtype):
    """The shortest row that streams."""
    return streaming.MIN_VECTORS * target.current().lanes(dtype)


def max_pool_grad(shape):
    """A global max pool's gradient (``dX`` written once, never read: it streams)."""
    X = te.placeholder(shape, name="X")
    t = te.reduce_axis((0, shape[-1]), name="t")
    Y = te.compute(shape[:-1], lambda n, c: te.max(X[n, c, t], axis=t), name="Y")
    H = te.placeholder(Y.shape, name="H")
    dX, = te.differentiate(Y, [X], head=H)
    return X, H, dX


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 9), length=st.integers(1, 400))
def test_max_pool_gradient_matches(n, c, length):
    with with_cache(0, 0):
        X, H, dX = max_pool_grad((n, c, length))
        x = rand(X.shape, low=-2, high=2)
        x[..., ::7] = 2.0  # ties
        fc, (got,) = agree([dX], [X, H], x, rand(H.shape, seed=1))
    assert bool(fc.schedule.streamed) == (length >= long_row("float32"))


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 700),
       dtype=st.sampled_from(["float32", "float64"]))
def test_elementwise_matches(rows, cols, dtype):
    with with_cache(0, 0):
        A = te.placeholder((rows, cols), dtype, name="A")
        B = te.placeholder((cols,), dtype, name="B")
        Y = te.compute((rows, cols), lambda i, j: A[i, j] * 2.0 - B[j], name="Y")
        fc, (got,) = agree([Y], [A, B], rand(A.shape, dtype), rand(B.shape, dtype, seed=1))
    if cols >= long_row(dtype):
        assert fc.schedule.streamed == ("Y (%.3g MiB written once)" % (got.nbytes / (1 << 20)),)
        assert fc.source.count("te_store_fence();") == 1  # once per thread, not per row
    else:  # short rows: a few vectors between other loops' stores
        assert fc.schedule.streamed == ()


def test_large_output_streams_by_default():
    """At the default threshold a 16 MiB gradient beside its 16 MiB input (more than
    a 32 MiB last-level cache in all) streams; the same program's streaming turned
    off gives the same bits."""
    X, H, dX = max_pool_grad((8, 256, 2048))
    x, h = rand(X.shape), rand(H.shape, seed=1)
    with with_cache(32 << 20):
        f = te.build([dX], [X, H])
    assert f.schedule.streamed == ("dX (16 MiB written once)",)
    assert "#pragma omp for nowait" in f.source and "te_vstream_f32x" in f.source
    off = te.build([dX], [X, H], options=Options(streaming=False))
    assert off.schedule.streamed == () and "te_vstream" not in off.source
    np.testing.assert_array_equal(f(x, h), off(x, h))


def test_small_output_does_not_stream():
    X, H, dX = max_pool_grad((2, 8, 64))
    assert te.build([dX], [X, H]).schedule.streamed == ()


def test_a_kernel_whose_data_fits_the_last_level_cache_does_not_stream():
    """A row L2 normalization writing 8 MiB from 8 MiB: plain stores keep the output
    cached for its reader (and hit the lines the previous call left there); with a
    smaller last-level cache the same program streams."""
    X = te.placeholder((4096, 512), name="X")
    k = te.reduce_axis(512, name="k")
    norm = te.compute((4096,), lambda i: te.sqrt(te.sum(X[i, k] * X[i, k], axis=k)), name="n")
    Y = te.compute((4096, 512), lambda i, j: X[i, j] / te.maximum(norm[i], 1e-12), name="Y")
    with with_cache(32 << 20):
        assert te.build(Y).schedule.streamed == ()
    with with_cache(8 << 20):
        assert te.build(Y).schedule.streamed == ("Y (8 MiB written once)",)


def test_output_read_back_does_not_stream(stream_all):
    """``Y`` is read by ``Z`` in the same kernel: it stays in cache; ``Z`` streams."""
    A = te.placeholder((64, 300), name="A")
    Y = te.compute((64, 300), lambda i, j: A[i, j] + 1.0, name="Y")
    k = te.reduce_axis((0, 300), name="k")
    S = te.compute((64,), lambda i: te.sum(Y[i, k], axis=k), name="S")
    Z = te.compute((64, 300), lambda i, j: Y[i, j] * S[i], name="Z")
    fc, _ = agree([Y, Z], [A], rand(A.shape), rtol=1e-4)
    streamed = " ".join(fc.schedule.streamed)
    assert "Z" in streamed and "Y" not in streamed


def test_costly_body_does_not_stream(stream_all):
    """A tanh per element is bound by arithmetic: streaming gains nothing there."""
    A = te.placeholder((64, 300), name="A")
    Y = te.compute((64, 300), lambda i, j: te.tanh(A[i, j]) * 0.5, name="Y")
    fc, _ = agree([Y], [A], rand(A.shape))
    assert fc.schedule.streamed == ()


def test_sums_match(stream_all):
    """A matmul's register-tiled epilogue and its remainders, streamed or not, are right."""
    A = te.placeholder((48, 64), name="A")
    B = te.placeholder((64, 80), name="B")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((48, 80), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    agree([C], [A, B], rand(A.shape), rand(B.shape, seed=1), rtol=1e-4)


def test_contiguous_offsets():
    from codegen.loopast import Lit, Op, Var
    i, j = Var("i", "int64"), Var("j", "int64")
    row = Op("mul", (i, Lit(64, "int64")), "int64")
    assert streaming.contiguous(Op("add", (row, j), "int64"), j) == row
    assert streaming.contiguous(j, j) == Lit(0, "int64")
    assert streaming.contiguous(Op("add", (row, Op("mul", (j, Lit(2, "int64")), "int64")),
                                        "int64"), j) is None  # stride 2
    assert streaming.contiguous(Op("add", (j, j), "int64"), j) is None
