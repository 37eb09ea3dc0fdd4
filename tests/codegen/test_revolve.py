"""The binomial checkpointing schedule: optimal for its slots, and a valid reversal."""
from __future__ import annotations

from functools import lru_cache

import pytest

from codegen.revolve import (Action, Schedule, encode, least_forward_steps, max_steps,
                             repetitions, schedule, simulate, KINDS)


@lru_cache(maxsize=None)
def fewest(n: int, free: int) -> int:
    """The fewest advances reversing ``n`` steps whose first state is kept, with ``free``
    more slots, by exhaustive search over where the next snapshot goes."""
    if n == 1:
        return 0
    if free == 0:
        return n * (n - 1) // 2
    return min(m + fewest(m, free) + fewest(n - m, free - 1) for m in range(1, n))


@pytest.mark.parametrize("k", [1, 2, 3, 4, 6])
def test_schedule_is_valid_and_optimal(k):
    for T in range(1, 90):
        run = simulate(schedule(T, k), T, k)
        assert run.advanced == fewest(T, k - 1) == least_forward_steps(T, k), (T, k)
        assert run.slots_used <= k


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
def test_repetitions_meet_the_binomial_bound(k):
    # with r repetitions k slots reverse exactly the T <= C(k + r, k) steps
    for T in list(range(1, 60)) + [4096]:
        r = repetitions(T, k)
        assert max_steps(k, r - 1) < T <= max_steps(k, r)
        if T <= 200 or k >= 5:
            assert simulate(schedule(T, k), T, k).most_repeated <= r


def test_long_schedules():
    for T, k in [(4096, 8), (4096, 64), (1000, 1000), (5000, 3)]:
        run = simulate(schedule(T, k), T, k)
        assert run.advanced == least_forward_steps(T, k)
    # enough slots: one forward sweep, nothing recomputed
    assert simulate(schedule(50, 50), 50, 50).most_repeated == 1


def test_simulate_rejects_invalid_schedules():
    good = schedule(4, 2)
    cases = [
        good.actions[:-1],  # step 0 never reversed
        (Action("takeshot", 0), Action("restore", 1)) + good.actions[1:],  # empty slot
        (Action("takeshot", 2),) + good.actions[1:],  # slot out of range
        (Action("takeshot", 0), Action("firsturn", 3)),  # from the state at 0, not 3
        tuple(a if a.kind != "firsturn" else Action("youturn", a.arg) for a in good.actions),
    ]
    for acts in cases:
        with pytest.raises(ValueError):
            simulate(Schedule(4, 2, tuple(acts)), 4, 2)


def test_bad_sizes_and_encoding():
    with pytest.raises(ValueError, match="at least one step"):
        schedule(0, 3)
    with pytest.raises(ValueError, match="slot"):
        schedule(5, 0)
    s = schedule(7, 3)
    codes = encode(s)
    assert [Action(KINDS[c], a) for c, a in zip(codes[::3], codes[1::3])] == list(s.actions)
    assert "firsturn 6" in str(s)
