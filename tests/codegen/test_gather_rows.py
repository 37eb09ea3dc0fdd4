"""Gather rows (codegen.gather_rows): each row's data-dependent index checked once, the
rows shared by the thread team as the threads come (``schedule(guided, ...)``). Run with
the thread threshold at 1, so that the team really shares the rows, and compared with
numpy's ``take``."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensorexpr as te
from codegen import gather_rows

from .util import agree, rand, without_comments


pytestmark = pytest.mark.usefixtures("every_loop_on_threads")


def _embedding(V, D, shape, dtype):
    E = te.placeholder((V, D), name="E")
    idx = te.placeholder(shape, dtype, name="idx")
    Y = te.compute(tuple(shape) + (D,), lambda *ax: E[idx[ax[:-1]], ax[-1]], name="Y")
    return E, idx, Y


def test_the_rows_are_shared_as_the_threads_come():
    E, idx, Y = _embedding(50, 24, (300,), "int64")
    f = te.build(Y)
    assert str(f.schedule) == "Y: gather-rows (hoisted=1, share=guided)"
    assert f"#pragma omp parallel for schedule({gather_rows.SHARE}) if(parallel:" \
        in without_comments(f.source)


_shapes = st.tuples(st.integers(1, 40), st.integers(1, 70),
                    st.lists(st.integers(1, 90), min_size=1, max_size=2),
                    st.sampled_from(["int32", "int64"]), st.integers(0, 2 ** 32 - 1))


@settings(max_examples=25, deadline=None)
@given(_shapes)
def test_random_gathers_agree_with_numpy(case):
    V, D, shape, dtype, seed = case
    rng = np.random.default_rng(seed)
    e = rng.standard_normal((V, D)).astype(np.float32)
    ids = rng.integers(0, V, shape).astype(dtype)
    E, idx, Y = _embedding(V, D, shape, dtype)
    f = te.build(Y)
    assert f.schedule["Y"].strategy == "gather-rows"
    np.testing.assert_array_equal(f(e, ids), np.take(e, ids, axis=0))


@settings(max_examples=20, deadline=None)
@given(_shapes, st.booleans())
def test_an_out_of_range_index_raises_the_same_error_wherever_it_is(case, negative):
    V, D, shape, dtype, seed = case
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, V, shape).astype(dtype)
    bad = -1 - int(rng.integers(0, 5)) if negative else V + int(rng.integers(0, 5))
    ids.flat[int(rng.integers(0, ids.size))] = bad
    E, idx, Y = _embedding(V, D, shape, dtype)
    f = te.build(Y)
    with pytest.raises(IndexError) as info:
        f(rand((V, D)), ids)
    msg = str(info.value)
    for part in ("'Y'", "'E'", f"index {bad}", "dimension 0", f"size {V}"):
        assert part in msg, (part, msg)
    # the kernel records the error afresh: a good call after it still computes
    good = np.clip(ids, 0, V - 1)
    e = rand((V, D))
    np.testing.assert_array_equal(f(e, good), np.take(e, good, axis=0))


def test_a_gather_fused_with_another_nest_shares_its_slabs_as_the_threads_come():
    E, idx, Y = _embedding(30, 40, (200,), "int64")
    Z = te.compute((200,), lambda i: idx[i] * 2, name="Z")
    f, _ = agree([Y, Z], [E, idx], rand((30, 40)), np.arange(200, dtype=np.int64) % 30)
    assert "fused: Y + Z" in str(f.schedule)
    assert f"#pragma omp parallel for schedule({gather_rows.SHARE}) if(parallel:" \
        in without_comments(f.source)


def test_a_gather_beside_another_nest_shares_its_rows_in_their_region():
    E, idx, Y = _embedding(30, 40, (200,), "int64")
    Z = te.compute((40, 600), lambda j, k: te.exp(E[k % 30, j]), name="Z")
    f, _ = agree([Y, Z], [E, idx], rand((30, 40)), np.arange(200, dtype=np.int64)[::-1] % 30)
    code = without_comments(f.source)
    assert "#pragma omp parallel if(parallel:" in code
    assert f"#pragma omp for schedule({gather_rows.SHARE}) nowait" in code
