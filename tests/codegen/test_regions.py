"""Parallel regions (codegen.regions): consecutive loop nests run in one
``#pragma omp parallel`` region, waiting between nests only where the next one
depends on the previous. Run with the thread threshold at 1, so that the team
really shares every nest, and compared with the numpy backend."""
from __future__ import annotations

import pytest

import tensorexpr as te
from codegen import threads

from .util import agree, rand, without_comments


@pytest.fixture(autouse=True)
def every_loop_on_threads(monkeypatch):
    monkeypatch.setenv("TENSOREXPR_PARALLEL_WORK", "1")
    monkeypatch.setattr(threads, "_value", None)
    yield
    threads._value = None


def _pragmas(f):
    return [line.strip().replace(" simd", "") for line in
            without_comments(f.source).splitlines()
            if line.strip().startswith("#pragma omp") and line.strip() != "#pragma omp simd"
            and "declare" not in line and "reduction" not in line]


def test_independent_nests_share_a_region_without_waiting():
    X = te.placeholder((64, 600), name="X")
    r = te.reduce_axis((0, 64), name="r")
    colsum = te.compute((600,), lambda j: te.sum(X[r, j], axis=r), name="colsum")
    T = te.compute((600, 64), lambda j, i: te.exp(X[i, j]), name="T")
    f, _ = agree([colsum, T], [X], rand((64, 600)))
    p = _pragmas(f)
    assert p[0].startswith("#pragma omp parallel if(parallel:")
    assert "#pragma omp for nowait" in p and p.count("#pragma omp parallel for") == 0


def test_a_nest_reading_the_previous_one_waits_for_it():
    X = te.placeholder((96, 600), name="X")
    r = te.reduce_axis((0, 96), name="r")
    E = te.compute((96, 600), lambda i, j: te.exp(X[i, j]), name="E")
    S = te.compute((600,), lambda j: te.sum(E[r, j] * X[r, j], axis=r), name="S")
    f, _ = agree([S, E], [X], rand((96, 600)))
    p = _pragmas(f)
    assert p[0].startswith("#pragma omp parallel if(parallel:")
    assert "#pragma omp for nowait" not in p and p.count("#pragma omp for") == 2


def test_gradients_with_several_nests_agree():
    # (large enough for threads: a tiled product counts its work per vector)
    B, I, O = 133, 64, 48
    X = te.placeholder((B, I), name="X")
    W = te.placeholder((I, O), name="W")
    b = te.placeholder((O,), name="b")
    k = te.reduce_axis((0, I), name="k")
    Y = te.compute((B, O), lambda i, o: te.tanh(te.sum(X[i, k] * W[k, o], axis=k) + b[o]),
                   name="Y")
    H = te.placeholder(Y.shape, name="H")
    grads = te.differentiate(Y, [X, W, b], head=H)
    f, _ = agree(list(grads), [X, W, b, H], rand((B, I)), rand((I, O), seed=1),
                 rand((O,), seed=2), rand((B, O), seed=3))
    assert any(x.startswith("#pragma omp parallel if") for x in _pragmas(f))


def test_a_parallel_sum_into_a_scalar_keeps_its_own_loop():
    X = te.placeholder((300, 50), name="X")
    i, j = te.reduce_axis((0, 300), name="i"), te.reduce_axis((0, 50), name="j")
    s = te.compute((), lambda: te.sum(X[i, j] * X[i, j], axis=[i, j]), name="s")
    T = te.compute((50, 300), lambda a, c: X[c, a] * 2.0, name="T")
    agree([s, T], [X], rand((300, 50)))


def test_a_recurrence_between_nests_keeps_its_parallel_steps():
    T, R = 3, 5000  # each step alone is worth the threads
    d = te.placeholder((T, R), name="d")
    a = te.compute((T, R), lambda t, r: te.exp(d[t, r]), name="a")
    e = te.recurrence((T, R), lambda e, t, r: te.select(t == 0, a[0, r], a[t, r] + e[t - 1, r]),
                      name="e")
    b = te.compute((R, T), lambda r, t: e[t, r] * 2.0, name="b")
    f, _ = agree([b, a], [d], rand((T, R)))
    seq = f.source.split("(sequential)")[1]
    assert seq.split("/* b[")[0].count("#pragma omp parallel for") == 1  # inside the steps
    assert "omp single" not in f.source
