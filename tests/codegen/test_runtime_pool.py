"""Intermediate buffers are reused across calls; outputs never are."""
from __future__ import annotations

import threading

import numpy as np

import tensorexpr as te


def _program():
    n = te.var("n")
    X = te.placeholder((n,), "float64", "X")
    T = te.compute((n,), lambda i: te.exp(X[i]) * 2.0, name="T")  # an intermediate
    k = te.reduce_axis(n, "k")
    S = te.compute((), lambda: te.sum(T[k], axis=k), name="S")
    Y = te.compute((n,), lambda i: T[i] / S[()], name="Y")
    return te.build(Y, inputs=[X])


def test_repeated_calls_with_new_inputs_and_sizes_stay_right():
    f = _program()
    rng = np.random.default_rng(0)
    outs = []
    for size in (5, 5, 9, 5, 1):
        x = rng.standard_normal(size)
        y = f(x)
        np.testing.assert_allclose(y, np.exp(x) / np.exp(x).sum())
        outs.append((x, y))
    for x, y in outs:  # earlier outputs were not overwritten by later calls
        np.testing.assert_allclose(y, np.exp(x) / np.exp(x).sum())


def test_concurrent_calls_do_not_share_buffers():
    f = _program()
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(20000) for _ in range(8)]
    results = [None] * len(xs)

    def work(k):
        for _ in range(5):
            results[k] = f(xs[k])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, y in zip(xs, results):
        np.testing.assert_allclose(y, np.exp(x) / np.exp(x).sum())


def _impl_of(*outputs_and_inputs):
    from codegen.pipeline import build
    from codegen.signature import Signature
    impl, _, _ = build(Signature(*outputs_and_inputs))
    return impl


def _softmax_parts():
    n = te.var("n")
    X = te.placeholder((n,), "float64", "X")
    T = te.compute((n,), lambda i: te.exp(X[i]) * 2.0, name="T")
    k = te.reduce_axis(n, "k")
    S = te.compute((), lambda: te.sum(T[k], axis=k), name="S")
    return [te.compute((n,), lambda i: T[i] / S[()], name="Y")], [X]


def test_eight_threads_making_first_calls_at_new_sizes(monkeypatch):
    # Evaluating a new size's shapes is slowed down so that the threads' first calls at
    # the same new sizes overlap: each must get, and keep for its call, a size array that
    # lives as long as the call (small int64 arrays made meanwhile take freed memory).
    import time

    import tensorexpr.transform as transform
    evaluate = transform.eval_int

    def slow_eval_int(*args):
        time.sleep(0.0005)
        return evaluate(*args)

    monkeypatch.setattr(transform, "eval_int", slow_eval_int)
    f = te.build(*_softmax_parts())
    barrier = threading.Barrier(8)
    wrong = []

    def work(t):
        for r in range(25):
            x = np.linspace(-1, 1, 3 + r) + t
            barrier.wait()
            for _ in range(3):
                y = f(x)
                keep = [np.array([1 << 40], dtype=np.int64) for _ in range(30)]
                if y.shape != x.shape or not np.allclose(y, np.exp(x) / np.exp(x).sum()):
                    wrong.append((t, r))
                del keep

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_the_pool_is_bounded_by_bytes_not_one_set_per_size(monkeypatch):
    from codegen import runtime
    impl = _impl_of(*_softmax_parts())
    sizes = [100_000 + 1000 * k for k in range(9)]  # ~0.8 MB of intermediate per size
    impl([np.zeros(sizes[0])], {"n": sizes[0]})
    extra = impl.pool_bytes() - 8 * sizes[0]  # T's 8 bytes per element, and S's
    assert 0 <= extra <= 64
    for size in sizes:
        x = np.linspace(-1, 1, size)
        impl([x], {"n": size})
    # the default bound holds all of these
    assert impl.pool_bytes() == sum(8 * s + extra for s in sizes)
    monkeypatch.setattr(runtime, "POOL_BYTES", 2 * 8 * 100_000 + 1)
    for size in sizes:  # nine sets that do not fit: only the latest ones are kept
        impl([np.linspace(-1, 1, size + 1)], {"n": size + 1})
        assert impl.pool_bytes() <= runtime.POOL_BYTES
    assert impl.pool_bytes() == 8 * (sizes[-1] + 1) + extra
    monkeypatch.setattr(runtime, "POOL_BYTES", 1000)
    big = sizes[0] + 7  # one set over the bound: kept alone (it is this call's)
    x = np.linspace(-1, 1, big)
    y = impl([x], {"n": big})[0]
    assert impl.pool_bytes() == 8 * big + extra
    np.testing.assert_allclose(y, np.exp(x) / np.exp(x).sum())
    # the latest sizes are still right when called again after evictions
    for size in sizes[::-1]:
        x = np.linspace(-2, 1, size)
        np.testing.assert_allclose(impl([x], {"n": size})[0], np.exp(x) / np.exp(x).sum())


def test_nine_sizes_of_100_mib_keep_at_most_the_bound():
    from codegen import runtime
    impl = _impl_of(*_softmax_parts())
    big = (100 << 20) // 8
    for k in range(9):
        size = big + k
        impl([np.zeros(size)], {"n": size})
        assert 8 * size <= impl.pool_bytes() <= 8 * size + 64  # the latest set alone
    small = 1000
    impl([np.zeros(small)], {"n": small})
    assert 8 * small <= impl.pool_bytes() <= 8 * small + 64 <= runtime.POOL_BYTES


def test_a_tensor_inlined_into_its_readers_gets_no_buffer():
    """``T`` is cheap and inlined into ``Y``; the kernel never touches its buffer, so
    neither a call nor the pool holds the tensor's size for it (``E``, stored, does)."""
    X = te.placeholder((100_000,), name="X")
    T = te.compute((100_000,), lambda i: X[i] * 2.0, name="T")
    E = te.compute((100_000,), lambda i: te.exp(X[i]), name="E")
    Y = te.compute((100_000,), lambda i: T[i] + T[99_999 - i] + E[i] * E[99_999 - i], name="Y")
    f = te.build(Y)
    x = np.random.default_rng(0).random(100_000, dtype=np.float32)
    want = 2 * x + 2 * x[::-1] + np.exp(x) * np.exp(x)[::-1]
    np.testing.assert_allclose(f(x), want, rtol=1e-5)
    assert f.impl.pool_bytes() == 400_000 + 4  # E's buffer, and one element for T's
    np.testing.assert_allclose(f(x), want, rtol=1e-5)
