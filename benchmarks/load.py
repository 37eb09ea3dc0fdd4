"""The run under a competing CPU load (``python -m benchmarks --load N``).

After a case is timed as usual, its forward and VJP are timed again, every system
interleaved as before, while ``N`` other processes spin on the CPU (:func:`busy`),
as on a machine shared with other work. What matters there is how much worse a
typical call gets than the best one: a runtime whose threads spin while waiting,
or that runs more threads than it gets cores, pays scheduler ticks at barriers,
and its median drifts far from its minimum. So each system's median/min ratio
under load is reported (``load`` in a case's JSON, :func:`table`), beside the
medians themselves.

>>> with busy(1) as procs:
...     alive = [p.poll() is None for p in procs]
>>> alive, [p.poll() is None for p in procs]
([True], [False])
"""
from __future__ import annotations

import contextlib
import subprocess
import sys
from typing import Callable, Dict, Iterator, List, Optional

from benchmarks.timing import Budget, interleaved, median

#: what each competing process runs: a pure-Python busy loop (no threads, no memory)
SPIN = "while True: pass"


@contextlib.contextmanager
def busy(n: int) -> Iterator[List[subprocess.Popen]]:
    """``n`` processes spinning on the CPU while the block runs; killed after it."""
    procs: List[subprocess.Popen] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", SPIN],
                                          stdin=subprocess.DEVNULL))
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def measure(fns: Dict[str, Dict[str, Callable[[], object]]], n: int,
            budget: Budget) -> Dict[str, Dict[str, float]]:
    """``fns`` (``{"fwd": {system: fn}, "vjp": {...}}``) timed interleaved under ``n``
    busy processes: ``{system: {"fwd_ms", "fwd_min_ms", "fwd_spread", ...}}``, the
    spread being median/min.

    >>> out = measure({"fwd": {"a": lambda: sum(range(1000))}}, 1, Budget(0.001, 3, 3, 0.1))
    >>> sorted(out["a"]), out["a"]["fwd_spread"] >= 1
    (['fwd_min_ms', 'fwd_ms', 'fwd_spread'], True)
    """
    out: Dict[str, Dict[str, float]] = {}
    with busy(n):
        for part, group in fns.items():
            if not group:
                continue
            for name, xs in interleaved(dict(group), budget).items():
                med, best = median(xs), min(min(r) for r in xs)
                row = out.setdefault(name, {})
                row[f"{part}_ms"], row[f"{part}_min_ms"] = med * 1e3, best * 1e3
                row[f"{part}_spread"] = med / best if best > 0 else None
    return out


def _cell(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1f}x"


def table(results: dict) -> str:
    """The cases timed under load: each system's median/min ratio of the forward and
    the VJP (empty if the run had no load).

    >>> case = {"id": 1, "title": "matmul", "load": {"n": 2, "systems": {
    ...     "te": {"fwd_spread": 1.5, "vjp_spread": 2.0}, "torch": {"fwd_spread": 3.0}}}}
    >>> print(table({"meta": {"systems": ["te", "torch"]}, "cases": [case]}))
    under a competing load of 2 busy processes: median / fastest call, forward | VJP
    case                      te              torch
    1. matmul                 1.5x | 2.0x     3.0x | -
    geometric mean            1.5x | 2.0x     3.0x | -
    """
    cases = [c for c in results["cases"] if c.get("load")]
    if not cases:
        return ""
    systems = [s for s in results["meta"]["systems"]
               if any(s in c["load"]["systems"] for c in cases)]
    n = cases[0]["load"]["n"]
    lines = [f"under a competing load of {n} busy processes: median / fastest call, "
             f"forward | VJP", f"{'case':26s}" + "".join(f"{s:16s}" for s in systems).rstrip()]
    for c in cases:
        rows = c["load"]["systems"]
        cells = [f"{_cell(rows.get(s, {}).get('fwd_spread'))} | "
                 f"{_cell(rows.get(s, {}).get('vjp_spread'))}" for s in systems]
        lines.append(f"{(str(c['id']) + '. ' + c['title'])[:25]:26s}"
                     + "".join(f"{x:16s}" for x in cells).rstrip())
    means = []
    for s in systems:
        parts = []
        for part in ("fwd", "vjp"):
            xs = [c["load"]["systems"].get(s, {}).get(f"{part}_spread") for c in cases]
            xs = [x for x in xs if x]
            parts.append(_cell(_geomean(xs)) if xs else "-")
        means.append(" | ".join(parts))
    lines.append(f"{'geometric mean':26s}" + "".join(f"{x:16s}" for x in means).rstrip())
    return "\n".join(lines)


def _geomean(xs: List[float]) -> float:
    import math
    return math.exp(sum(math.log(x) for x in xs) / len(xs))
