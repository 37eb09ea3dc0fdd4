"""Binomial checkpointing (Griewank's revolve): the schedule of a reversal, as data.

Reversing ``T`` steps of a recurrence (its adjoint runs from step ``T - 1`` down to 0,
and reversing step ``t`` needs the state before step ``t``) with room for ``k``
states (*slots*) is a sequence of actions:

``advance n``
    run the forward steps from the current position up to ``n`` (exclusive);
``takeshot s``
    copy the state at the current position into slot ``s``;
``restore s``
    copy slot ``s`` back: the current position is the one it was taken at;
``firsturn t`` / ``youturn t``
    run forward step ``t`` and then reverse it (``firsturn``: the last step, the
    first reversed; the current position must be ``t``).

:func:`schedule` places the states where Griewank's binomial rule says, so that the
number of forward steps run again is the least possible for ``T`` steps and ``k``
slots (slot 0 holds the initial state, so ``k = 1`` recomputes from the start for
every step). With ``r`` *repetitions* (no step advanced more than ``r`` times), ``k``
slots reverse at most ``C(k + r, k)`` steps (:func:`max_steps`); the least number of
forward steps is ``r * T - C(k + r, r - 1)`` for the least such ``r``
(:func:`least_forward_steps`). :func:`simulate` runs a schedule on counters and
checks it (every step reversed once, in order, from the right state).

>>> s = schedule(6, 2)
>>> print(s)
takeshot 0, advance 3, takeshot 1, advance 5, firsturn 5, restore 1, advance 4, youturn 4,
restore 1, youturn 3, restore 0, advance 1, takeshot 1, advance 2, youturn 2, restore 1,
youturn 1, restore 0, youturn 0
>>> simulate(s, 6, 2).advanced == least_forward_steps(6, 2)
True
"""
from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import List, NamedTuple, Tuple

#: the action kinds, in the order of their codes in :func:`encode`
KINDS = ("advance", "takeshot", "restore", "firsturn", "youturn")


class Action(NamedTuple):
    """One action of a schedule: ``kind`` (one of :data:`KINDS`) and its argument (a
    position for ``advance``, a slot for ``takeshot``/``restore``, a step for the turns).

    >>> str(Action("advance", 3))
    'advance 3'
    """

    kind: str
    arg: int

    def __str__(self) -> str:
        return f"{self.kind} {self.arg}"


@dataclass(frozen=True)
class Schedule:
    """The actions reversing ``steps`` steps with ``slots`` slots; printable.

    >>> len(schedule(3, 3).actions), schedule(1, 1).actions[-1]
    (9, Action(kind='firsturn', arg=0))
    """

    steps: int
    slots: int
    actions: Tuple[Action, ...]

    def __str__(self) -> str:
        text, line = [], []
        for a in self.actions:  # ~90 columns a line: long schedules stay readable
            line.append(str(a))
            if sum(len(x) + 2 for x in line) > 80:
                text.append(", ".join(line))
                line = []
        if line:
            text.append(", ".join(line))
        return ",\n".join(text)


def max_steps(slots: int, reps: int) -> int:
    """``C(slots + reps, slots)``: the most steps ``slots`` slots reverse when no step
    is advanced more than ``reps`` times (0 for ``reps < 0``).

    >>> max_steps(2, 3), max_steps(1, 5), max_steps(4, 0)
    (10, 6, 1)
    """
    return comb(slots + reps, slots) if reps >= 0 else 0


def repetitions(steps: int, slots: int) -> int:
    """The least ``r`` with ``steps <= C(slots + r, slots)``.

    >>> repetitions(10, 2), repetitions(11, 2), repetitions(1, 1)
    (3, 4, 0)
    """
    r = 0
    while max_steps(slots, r) < steps:
        r += 1
    return r


def least_forward_steps(steps: int, slots: int) -> int:
    """The fewest forward steps (advances; the turns not counted) that reverse ``steps``
    steps with ``slots`` slots: ``r * steps - C(slots + r, r - 1)``.

    >>> least_forward_steps(5, 1), least_forward_steps(6, 6)  # T (T - 1) / 2; T - 1
    (10, 5)
    """
    r = repetitions(steps, slots)
    return r * steps - max_steps(slots + 1, r - 1)


def auto_slots(steps: int) -> int:
    """The slots ``checkpoints="auto"`` takes: the fewest with which no step is advanced
    more than twice (the forward pass run about once more in all), ``~sqrt(2 T)``.

    >>> auto_slots(1), auto_slots(10), auto_slots(4096)
    (1, 3, 90)
    """
    k = 1
    while repetitions(steps, k) > 2:
        k += 1
    return k


def split(steps: int, free: int) -> int:
    """How many steps to advance before the next snapshot, reversing ``steps`` steps whose
    first state is kept, with ``free`` more slots (``steps >= 2``, ``free >= 1``): the
    left part then takes ``r - 1`` repetitions with ``free + 1`` slots and the right
    one ``r`` with ``free``, which is optimal.

    >>> split(10, 1), split(2, 5)
    (6, 1)
    """
    c = free + 1
    r = repetitions(steps, c)
    return max(1, min(max_steps(c, r - 1), steps - max_steps(c - 1, r - 1)))


def schedule(steps: int, slots: int) -> Schedule:
    """The binomial schedule reversing ``steps`` steps with ``slots`` slots (both >= 1).

    >>> print(schedule(3, 1))
    takeshot 0, advance 2, firsturn 2, restore 0, advance 1, youturn 1, restore 0, youturn 0
    """
    if steps < 1 or slots < 1:
        raise ValueError(f"a schedule needs at least one step and one slot, not "
                         f"{steps} steps and {slots} slots")
    acts: List[Action] = [Action("takeshot", 0)]
    pos = [0]  # the position each slot in use holds (a stack: the latest is the nearest)
    cur = 0
    for t in range(steps - 1, -1, -1):
        while pos[-1] > t:
            pos.pop()
        if cur != pos[-1]:
            acts.append(Action("restore", len(pos) - 1))
            cur = pos[-1]
        while cur < t:
            free = slots - len(pos)
            if free > 0:
                cur += split(t + 1 - cur, free)
                acts.append(Action("advance", cur))
                if cur < t:  # a state at t itself would serve this turn only
                    acts.append(Action("takeshot", len(pos)))
                    pos.append(cur)
            else:
                cur = t
                acts.append(Action("advance", cur))
        acts.append(Action("firsturn" if t == steps - 1 else "youturn", t))
        cur = t + 1
    return Schedule(steps, slots, tuple(acts))


@dataclass(frozen=True)
class Run:
    """What running a schedule did: forward steps advanced in all, the most times one
    step was advanced, and the most slots in use at once."""

    advanced: int
    most_repeated: int
    slots_used: int


def simulate(s: Schedule, steps: int, slots: int) -> Run:
    """Run ``s`` on counters; raises ``ValueError`` if it is not a valid reversal of
    ``steps`` steps in ``slots`` slots (each step reversed once, last first, from the
    state before it; slots in range and filled before they are restored).

    >>> simulate(schedule(4, 2), 4, 2)
    Run(advanced=4, most_repeated=2, slots_used=2)
    """
    cur = None
    held = {}
    count = [0] * steps
    turn = steps - 1
    advanced = 0
    for n, a in enumerate(s.actions):
        def bad(why):
            return ValueError(f"action {n} ({a}): {why}")
        if a.kind == "takeshot" or a.kind == "restore":
            if not 0 <= a.arg < slots:
                raise bad(f"slot out of [0, {slots})")
        if a.kind == "takeshot":
            if n == 0:
                cur = 0
            if cur is None:
                raise bad("no state to store")
            held[a.arg] = cur
        elif a.kind == "restore":
            if a.arg not in held:
                raise bad("the slot is empty")
            cur = held[a.arg]
        elif a.kind == "advance":
            if cur is None or not cur < a.arg <= steps:
                raise bad(f"cannot advance from {cur}")
            for t in range(cur, a.arg):
                count[t] += 1
            advanced += a.arg - cur
            cur = a.arg
        elif a.kind in ("firsturn", "youturn"):
            if (a.kind == "firsturn") != (a.arg == steps - 1):
                raise bad("firsturn reverses the last step, youturn the others")
            if a.arg != turn or cur != a.arg:
                raise bad(f"expected to reverse step {turn} from its state, at {cur}")
            turn -= 1
            cur = a.arg + 1
        else:
            raise bad("unknown action")
    if turn != -1:
        raise ValueError(f"steps {turn} down to 0 are never reversed")
    return Run(advanced, max(count, default=0), len(held))


def encode(s: Schedule) -> List[int]:
    """The actions as C data: ``kind code, argument, position after it`` triples (codes:
    index in :data:`KINDS`; the position, so a ``restore`` need not look up its slot's).

    >>> encode(schedule(2, 1))
    [1, 0, 0, 0, 1, 1, 3, 1, 2, 2, 0, 0, 4, 0, 1]
    """
    out: List[int] = []
    cur, held = 0, {}
    for a in s.actions:
        if a.kind == "advance":
            cur = a.arg
        elif a.kind == "takeshot":
            held[a.arg] = cur
        elif a.kind == "restore":
            cur = held[a.arg]
        else:
            cur = a.arg + 1
        out += [KINDS.index(a.kind), a.arg, cur]
    return out
