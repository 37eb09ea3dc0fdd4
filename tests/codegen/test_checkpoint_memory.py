"""A checkpointed gradient never keeps more memory than the full tape it replaces
(``codegen.checkpoint_memory``): where its plan would, the build keeps the full tape and
the schedule says so, with both figures. Gradients stay the full tape's bit for bit."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from codegen.checkpoint_memory import Buffer, Memory
from tensorexpr.ir import Const, INDEX_DTYPE
import tensorexpr as te
from tests.codegen.recurrence_programs import (STEPS, agrees_with_its_full_tape, batch_first,
                                               bidirectional, bidirectional_product,
                                               checkpointed, larger_plans, layers, rnn,
                                               scratch_bytes)

MODES = [True, "segments"]


@pytest.mark.parametrize("mode", MODES)
def test_a_bidirectional_gru_product_keeps_its_tape_and_says_why(mode):
    # y[t] = h[t] * g[T - 1 - t]: dh[t] reads g[T - 1 - t], dg[t] reads h[T - 1 - t]. In
    # lockstep a turn is up to T - 1 steps from the row of the other layer it reads: a
    # checkpoint of 48 rows of each at T = 13 (revolve), a ring of 49, where the tape
    # keeps 13; apart, each adjoint reads the other layer, which no turn of its own
    # reversal holds. The full tape, and the schedule says why, with the figures
    T, k = 13, 3
    ins, grads = bidirectional_product(T, 2, 3, k, "gru")
    f = agrees_with_its_full_tape(ins, grads, mode, seed=7)
    assert "checkpointed gradient" not in f.source
    h, g = f.schedule.full_tape
    how = ("revolve, 3 checkpoints x 48 rows" if mode is True else
           "segments, 3 checkpoints x 12 rows")
    assert h.startswith(f"h (checkpoints=3: its plan (h, g in lockstep: {how}) keeps no less "
                        f"than the full tape: "), h
    (plan, tape), again = larger_plans(f)  # (h's, and g's: the same plan)
    assert plan > tape and again == (plan, tape)
    assert g == "g" + h[1:]  # (apart, no plan: each layer is read by both adjoints)
    assert scratch_bytes(ins, grads, mode) == scratch_bytes(ins, grads, False)


@pytest.mark.parametrize("mode", MODES)
def test_a_bidirectional_tanh_product_is_no_group(mode):
    # (tanh layers of their own weights: no lockstep group is tried, each layer is read
    # by both adjoints)
    ins, grads = bidirectional_product(13, 2, 3, 3, "rnn")
    f = agrees_with_its_full_tape(ins, grads, mode, seed=8)
    assert f.schedule.full_tape == tuple(
        f"{n} (checkpoints=3: several descending recurrences read it (dg, dh): no turn could "
        f"run them)" for n in "hg")


def test_the_schedule_prints_each_plans_memory():
    ins, grads = rnn(40, 2, 3, 4)
    f = te.build(grads, inputs=ins)
    # h (4 checkpoints of 2 rows, a ring of 3), dh (a ring of 2): 13 rows of 6 floats;
    # whole, 40 rows each
    assert ("h: 312 bytes in 3 buffers (13 rows), the full tape 1,920 bytes (80 rows)"
            in f.schedule.checkpoint), f.schedule.checkpoint
    assert "checkpointed: h: 312 bytes" in str(f.schedule)


def test_memory_of_symbolic_sizes_is_not_compared():
    n = te.var("n")
    x = te.placeholder((n, 3), name="x")
    m = Memory((Buffer(x, Const(2, INDEX_DTYPE)),), (Buffer(x, n),))
    assert m.smaller() is None
    assert str(m) == "24 bytes in 1 buffers (2 rows), the full tape (n * 12) bytes (n rows)", str(m)


def _program(kind, T, k):
    if kind == "rnn":
        return rnn(T, 2, 3, k)
    if kind == "gru":
        return layers(("gru",), T, 2, 3, k)
    if kind == "stacked":
        return layers(("rnn", "rnn"), T, 2, 3, k)
    if kind == "lstm":
        return batch_first("lstm", T, 2, 3, k, dtype="float32")
    if kind == "bidirectional":
        return bidirectional(T, 2, 3, k)
    return bidirectional_product(T, 2, 3, k, "rnn")


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["rnn", "gru", "stacked", "lstm", "bidirectional", "product"]),
       st.integers(1, 14), st.integers(1, 16), st.sampled_from(MODES))
def test_no_plan_keeps_more_than_the_full_tape(kind, T, k, mode):
    # what a call allocates (every buffer but its inputs and outputs), measured on the
    # programs themselves, not from the plan's own count; the gradients bit for bit
    ins, grads = _program(kind, T, k)
    f = agrees_with_its_full_tape(ins, grads, mode, seed=T * 17 + k)
    ours, tape = scratch_bytes(ins, grads, mode), scratch_bytes(ins, grads, False)
    assert ours <= tape, (kind, T, k, mode, ours, tape, f.schedule.checkpoint)
    if "checkpointed gradient" in f.source:
        assert any(" bytes in " in c for c in f.schedule.checkpoint)
    elif kind != "product" and checkpointed(T, k, mode):
        assert larger_plans(f), f.schedule.full_tape


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("T,k", STEPS)
def test_a_plan_kept_is_smaller_than_the_tape_at_every_step_count(T, k, mode):
    ins, grads = rnn(T, 2, 3, k)
    f = agrees_with_its_full_tape(ins, grads, mode, seed=T + k)
    assert ("checkpointed gradient" in f.source) == checkpointed(T, k, mode, f)
    assert scratch_bytes(ins, grads, mode) <= scratch_bytes(ins, grads, False)
