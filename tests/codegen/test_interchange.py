"""Loop interchange of recurrences (codegen.interchange): the loop order each shape gets,
and the values agree with the numpy backend whatever the shape."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

import tensorexpr as te
from codegen import interchange

from .util import agree, rand

SETTINGS = settings(max_examples=12, deadline=None)


def _scan(R, N):
    X = te.placeholder((R, N), name="X")
    return X, te.recurrence((R, N), lambda c, r, t: te.select(
        t == 0, X[r, 0], c[r, t - 1] + X[r, t]), name="c")


@SETTINGS
@given(st.integers(1, 40), st.integers(2, 70))
def test_a_scan_along_rows_runs_blocks_of_rows_and_agrees(R, N):
    X, c = _scan(R, N)
    f, _ = agree([c], [X], rand((R, N)))
    choice = f.schedule["c"]
    assert choice.strategy == "interchange", str(f.schedule)
    assert choice.param("order").startswith("r (blocks of "), str(f.schedule)


@SETTINGS
@given(st.integers(1, 12), st.integers(2, 9), st.integers(1, 20))
def test_a_scan_along_a_middle_axis_runs_the_outer_axis_outside(B, T, D):
    X = te.placeholder((B, T, D), name="X")
    h = te.recurrence((B, T, D), lambda h, b, t, d: te.select(
        t == 0, X[b, 0, d], te.tanh(h[b, t - 1, d]) + X[b, t, d]), name="h")
    f, _ = agree([h], [X], rand((B, T, D)))
    if B >= interchange.MIN_OUTER:
        assert str(f.schedule) == "h: interchange (order=b, t (sequential), d)"
    else:  # too few outer rows: the carried loop stays outermost
        assert f.schedule["h"].strategy == "loops"


@SETTINGS
@given(st.integers(1, 20), st.integers(2, 5), st.integers(2, 30))
def test_an_axis_read_at_other_points_stays_inside_the_carried_loop(R, K, N):
    # h[r, k, t] reads h[r, (k + 1) % K, t - 1]: k is not independent, r is
    X = te.placeholder((R, K, N), name="X")
    h = te.recurrence((R, K, N), lambda h, r, k, t: te.select(
        t == 0, X[r, k, 0], h[r, (k + 1) % K, t - 1] * 0.5 + X[r, k, t]), name="h")
    f, _ = agree([h], [X], rand((R, K, N)))
    order = f.schedule["h"].param("order")
    assert order.startswith("r (blocks of ") and order.endswith("t (sequential), k, r")


def test_no_independent_axis_keeps_the_carried_loop_outermost():
    X = te.placeholder((30, 12), name="X")
    h = te.recurrence((30, 12), lambda h, r, t: te.select(
        t == 0, X[r, 0], h[(r + 1) % 30, t - 1] + X[r, t]), name="h")
    f, _ = agree([h], [X], rand((30, 12)))
    assert f.schedule["h"].strategy == "loops"


def test_symbolic_sizes():
    R, N = te.var("R"), te.var("N")
    X = te.placeholder((R, N), name="X")
    c = te.recurrence((R, N), lambda c, r, t: te.select(t == 0, X[r, 0], c[r, t - 1] + X[r, t]),
                      name="c")
    for shape in ((3, 5), (37, 2), (1, 2)):
        f, _ = agree([c], [X], rand(shape))
        assert f.schedule["c"].strategy == "interchange"


@SETTINGS
@given(st.integers(1, 30), st.integers(2, 40))
def test_the_gradient_of_a_scan_along_rows_agrees(R, N):
    X, c = _scan(R, N)
    H = te.placeholder((R, N), name="H")
    dX, = te.differentiate(c, [X], head=H)
    f, _ = agree([dX], [X, H], rand((R, N)), rand((R, N), seed=1))
    assert any(k.strategy == "interchange" for k in f.schedule.choices), str(f.schedule)


def test_rows_whose_lines_share_a_cache_set_run_fewer_at_a_time():
    assert interchange.block_rows(_scan(64, 2048)[1], 0, 16) == 4   # 8 KiB apart
    assert interchange.block_rows(_scan(64, 2000)[1], 0, 16) == 16  # spread over the sets
    assert interchange.block_rows(_scan(64, 48)[1], 0, 16) == 16    # 3 lines apart


@SETTINGS
@given(st.integers(1, 3), st.integers(1, 37), st.integers(2, 50), st.booleans())
def test_a_scan_reading_its_previous_step_carries_it_in_registers_and_agrees(B, R, N, affine):
    # an affine step (two reads of the previous value) or a nonlinear one
    X = te.placeholder((B, R, N), name="X")
    if affine:
        body = lambda c, b, r, t: te.select(  # noqa: E731
            t == 0, X[b, r, 0], c[b, r, t - 1] * 0.5 + X[b, r, t] * c[b, r, t - 1])
    else:
        body = lambda c, b, r, t: te.select(  # noqa: E731
            t == 0, X[b, r, 0], te.tanh(c[b, r, t - 1]) + X[b, r, t])
    c = te.recurrence((B, R, N), body, name="c")
    f, _ = agree([c], [X], rand((B, R, N)))
    order = f.schedule["c"].param("order")
    assert order.startswith("b, r (blocks of "), str(f.schedule)
    assert "t (sequential, previous step in registers), r" in order, str(f.schedule)
    assert "carry" in f.source


@SETTINGS
@given(st.integers(1, 20), st.integers(3, 30))
def test_a_scan_reading_two_steps_back_reads_its_output(R, N):
    # c[r, t - 2] is not the value the step before computed: no carry
    X = te.placeholder((R, N), name="X")
    c = te.recurrence((R, N), lambda c, r, t: te.select(
        t < 2, X[r, t], c[r, t - 2] + c[r, t - 1] * 0.5 + X[r, t]), name="c")
    f, _ = agree([c], [X], rand((R, N)))
    order = f.schedule["c"].param("order")
    assert order.startswith("r (blocks of ") and "t (sequential), r" in order, order
    assert "carry" not in f.source


def test_previous_step_reads_are_own_row_at_the_step_before():
    X, c = _scan(8, 16)
    assert [str(r) for r in interchange.previous_step_reads(c)] == ["c[r, t - 1]"]
    h = te.recurrence((8, 16), lambda h, r, t: te.select(
        t == 0, X[r, 0], h[(r + 1) % 8, t - 1] + X[r, t]), name="h")
    assert interchange.previous_step_reads(h) is None
