"""Run the fuzzer for a time or a number of programs; report throughput and shrunk failures.

Each hypothesis example is a *batch* of programs checked with one C build (the
compile dominates); a failing batch shrinks to the one program (and the smallest
program) that still fails, whose reproducer is in the failure's message.
"""
from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, given, seed as hseed, settings, strategies as st

from .coverage import Coverage
from .harness import check_programs
from .programs import programs, to_source

BATCH = 4


def batches(max_size: int = BATCH, **kw):
    """Lists of 1..max_size programs (hypothesis shrinks a failing list to its culprit);
    a third of them without recurrences: one recurrence in a build leaves every sum of it
    without transposed and zero-padded copies (``codegen.layout``, ``codegen.padcopy``),
    and most batches of four programs would hold one (half of them: the recurrences'
    strategies were taken half as often, adjoint-steps 22 -> 5 builds in 3 minutes)."""
    def of(recurrences):  # (shrinks towards a batch without)
        return st.lists(programs(**kw, recurrences=bool(recurrences)), min_size=1,
                        max_size=max_size)
    if "recurrences" in kw:
        return st.lists(programs(**kw), min_size=1, max_size=max_size)
    return st.integers(0, 2).flatmap(of)


def signature(exc: BaseException) -> str:
    """A coarse class of a failure, to tell distinct bugs apart in a report.

    >>> signature(ValueError("not a closed integer expression: I0[(i1 + 2) // 3]"))
    'ValueError: not a closed integer expression: I[(i + N) // N]'
    """
    first = str(exc).splitlines()[0] if str(exc) else ""
    first = re.sub(r"p\d+_", "", first)  # batch prefixes
    if isinstance(exc, AssertionError):
        first = re.sub(r" of program \w*:", ":", first)
        first = re.split(r" by | at |\n", first)[0]
    first = re.sub(r"'[^']*'", "'_'", first)
    first = re.sub(r"\b([A-Za-z]+)\d+\b", r"\1", first)
    first = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "N", first)
    return f"{type(exc).__name__}: {first[:160]}"


@dataclass
class Stats:
    programs: int = 0          # programs checked while exploring
    shrink_programs: int = 0   # programs checked while shrinking failures
    failures: dict = field(default_factory=dict)  # signature -> full message
    coverage: Coverage = field(default_factory=Coverage)  # schedule decisions explored

    def add_failure(self, exc: BaseException) -> bool:
        sig = signature(exc)
        new = sig not in self.failures
        if new:
            notes = "\n".join(getattr(exc, "__notes__", []))
            self.failures[sig] = f"{type(exc).__name__}: {exc}\n{notes}"
        return new


#: (Python 3.11's; hypothesis reports several failures as one under 3.10 too, as its
#: backport's class, which ``exceptiongroup`` provides)
try:
    _GROUP = BaseExceptionGroup
except NameError:  # Python 3.10
    from exceptiongroup import BaseExceptionGroup as _GROUP


def _leaves(exc):
    if isinstance(exc, _GROUP):
        for e in exc.exceptions:
            yield from _leaves(e)
    else:
        yield exc


def run(minutes: float = 1.0, max_programs: int = 0, seed: int = 0, batch: int = BATCH,
        examples_per_round: int = 25, out=None, shrink_seconds: float = 90.0,
        sizes: str = "small") -> Stats:
    """Fuzz until ``minutes`` pass or ``max_programs`` (if nonzero) were checked, with
    programs of size profile ``sizes`` (``tests.fuzz.programs.SIZES``).

    Shrinking a failure rebuilds C for every candidate; after ``shrink_seconds`` every
    further candidate passes, so hypothesis reports the smallest failure found by then.
    """
    out = out or sys.stdout
    stats = Stats()
    start = time.time()
    deadline = start + 60 * minutes
    round_no = 0
    while time.time() < deadline and not (max_programs and stats.programs >= max_programs):
        first = {}  # the round's first failure: when, its class and stage
        outcomes = {}  # while shrinking: a program's source -> its failure (or None)

        def shrink_check(progs):
            """Check one program at a time, each once, only up to the failing stage."""
            for prog in progs:
                key = (to_source(prog), prog.seed, prog.second_order)
                if key not in outcomes:
                    stats.shrink_programs += 1
                    try:
                        check_programs([prog], upto=first["stage"])
                        outcomes[key] = None
                    except Exception as exc:  # noqa: BLE001 - replayed below
                        outcomes[key] = exc
                exc = outcomes[key]
                # another bug is not this one: shrinking chases the first only (the
                # others come back in later rounds)
                if exc is not None and signature(exc) == first["sig"]:
                    raise exc

        def body(progs):
            now = time.time()
            if first:
                if now > first["at"] + shrink_seconds:
                    return  # shrink budget spent: hypothesis keeps the smallest so far
                shrink_check(progs)
                return
            if now > deadline or (max_programs and stats.programs >= max_programs):
                return  # out of time: the rest of this round passes trivially
            stats.programs += len(progs)
            try:
                check_programs(progs, observe=stats.coverage.observe)
            except Exception as exc:
                sig = signature(exc)
                # a class already reported is not shrunk again: its time goes to exploring
                at = time.time() - (shrink_seconds + 1 if sig in stats.failures else 0)
                first.update(at=at, sig=sig, stage=getattr(exc, "fuzz_stage", "second"))
                raise

        phases = [Phase.generate] + ([Phase.shrink] if shrink_seconds > 0 else [])
        test = settings(max_examples=examples_per_round, deadline=None, database=None,
                        phases=phases, suppress_health_check=list(HealthCheck),
                        report_multiple_bugs=False)(given(batches(batch, sizes=sizes))(body))
        test = hseed(seed * 100003 + round_no)(test)
        round_no += 1
        try:
            test()
        except Exception as exc:  # noqa: BLE001 - every failure is reported, the run goes on
            for leaf in _leaves(exc):
                new = stats.add_failure(leaf)
                tag = "NEW" if new else "again"
                print(f"\n=== failure ({tag}) {signature(leaf)}", file=out)
                if new:
                    print(stats.failures[signature(leaf)], file=out)
        elapsed = (time.time() - start) / 60
        print(f"[{elapsed:6.1f} min] {stats.programs} programs "
              f"({stats.programs / max(elapsed, 1e-9):.0f}/min), "
              f"{stats.shrink_programs} while shrinking, {len(stats.failures)} failure classes",
              file=out, flush=True)
    return stats
