"""Parallel regions (codegen.regions): consecutive loop nests run in one
``#pragma omp parallel`` region, waiting between nests only where the next one
depends on the previous. Run with the thread threshold at 1, so that the team
really shares every nest, and compared with the numpy backend."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te

from .util import agree, rand, without_comments


pytestmark = pytest.mark.usefixtures("every_loop_on_threads")


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


# {{{ nests under an if on a flag set before the region (codegen.finite_flags)

I64 = "int64"


def _nest(var, store, load=None):
    """A parallel loop storing into ``store`` (reading ``load`` if given)."""
    from codegen.loopast import Block, For, Lit, Load, Store, Var
    i = Var(var, I64)
    value = Lit(1.0, "float32") if load is None else Load(load, i, "float32")
    return For(i, Lit(0, I64), Lit(9, I64), 1, Block((Store(store, i, value),)),
               parallel=True)


def _teams(s) -> list:
    """The ``team`` of every loop of ``s``, in order (both branches of an if)."""
    from codegen.loopast import Block, For, If, Region
    match s:
        case Region(body, _) | Block(body):
            return [t for x in (body.stmts if isinstance(body, Block) else body)
                    for t in _teams(x)]
        case If(_, then, orelse):
            return _teams(then) + (_teams(orelse) if orelse is not None else [])
        case For():
            return [s.team]
    return []


def test_versions_under_a_flag_set_before_share_the_region():
    from codegen.loopast import Block, If, Op, Var
    from codegen.regions import merge
    fin = Var("fin", "float32")
    ok = Op("eq", (fin, fin), "bool")
    units = [If(ok, Block((_nest("i", "b1"),)), Block((_nest("j", "b1"),))),
             If(ok, Block((_nest("k", "b2"),)), Block((_nest("l", "b2"),))),
             Block((_nest("m", "b3", load="b1"),))]
    (region,) = merge(units)
    # b2's nests do not touch b1: no wait before them; b3's reads b1: a wait before it
    assert _teams(region) == ["for nowait", "for nowait", "for", "for", "for"]


def test_an_if_reading_memory_or_a_flag_set_inside_ends_the_run():
    from codegen.loopast import Assign, Block, For, If, Lit, Load, Op, Region, Var
    from codegen.regions import merge
    a, b = Block((_nest("i", "b1"),)), Block((_nest("j", "b2"),))
    on_memory = If(Op("gt", (Load("b0", Lit(0, I64), "float32"), Lit(0.0, "float32")), "bool"),
                   a)
    assert not any(isinstance(s, Region) for s in merge([a, on_memory, b]))
    # a loop of the run sets the flag the if reads: the if is not uniform there
    flag = Var("flag", I64)
    k = Var("k", I64)
    sets = For(k, Lit(0, I64), Lit(1, I64), 1, Block((Assign(flag, k),)))
    on_flag = If(Op("eq", (flag, Lit(0, I64)), "bool"), b)
    out = merge([Block((sets, _nest("m", "b3"))), on_flag, a])
    assert isinstance(out[0], Block) and isinstance(out[1], Region), out


def test_padded_convolutions_run_their_versions_in_one_region():
    # the copy, the sum over it and the exact version (non-finite weights) for the team
    from .test_conv import conv2d
    X, W = te.placeholder((2, 8, 20, 20), name="X"), te.placeholder((16, 8, 3, 3), name="W")
    Y = conv2d(X, W, pad=1)
    H = te.placeholder(Y.shape, name="H")
    dX, dW = te.differentiate(Y, [X, W], head=H)
    x, w, h = rand(X.shape), rand(W.shape, seed=1), rand(Y.shape, seed=2)
    for spoil in (False, True):
        if spoil:
            w[0, 0, 0, 0], w[1, 2, 1, 1] = np.inf, np.nan
        fy, _ = agree([Y], [X, W], x, w)
        fg, _ = agree([dX, dW], [X, W, H], x, w, h)
        for f in (fy, fg):
            assert f.schedule.choices[0].strategy == "padded-copy"
            assert sum(p.startswith("#pragma omp parallel") for p in _pragmas(f)) == 1
            assert f.source.count("are the values of W finite?") == 1

# }}}
