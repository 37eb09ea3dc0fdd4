"""Interleaved median timing, and the machine's peak FLOP/s and memory bandwidth.

Systems are timed round by round: each round takes one sample of every system
(in a rotating order), so a burst of load from elsewhere lands on all of them
alike, and a tensorexpr/peer ratio can be taken round by round.

>>> s = interleaved({"a": lambda: None, "b": lambda: None}, Budget(0.001, 3, 3, 0.1))
>>> sorted(s), len(s["a"])
(['a', 'b'], 3)
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import numpy as np


@dataclass(frozen=True)
class Budget:
    """How long to measure: each sample lasts at least ``sample_s`` (several calls
    if one is shorter), ``min_rounds`` to ``max_rounds`` rounds, stopping after
    ``total_s`` once ``min_rounds`` are done."""

    sample_s: float
    min_rounds: int
    max_rounds: int
    total_s: float


FULL = Budget(sample_s=0.05, min_rounds=5, max_rounds=15, total_s=4.0)
QUICK = Budget(sample_s=0.005, min_rounds=3, max_rounds=5, total_s=0.3)
#: the growth check (four tensorexpr programs per case): a shorter total than FULL
GROWTH = Budget(sample_s=0.05, min_rounds=5, max_rounds=15, total_s=2.0)


def interleaved(fns: Dict[str, Callable[[], object]],
                budget: Budget) -> Dict[str, List[List[float]]]:
    """Seconds of every call of each function, in rounds; systems interleaved.

    Each round runs every function for about ``budget.sample_s`` (at least one
    call), timing each call on its own; the order of the functions rotates from
    round to round. Every function is called once first (warm-up). Returns
    ``{name: [[seconds of each call] for each round]}``.
    """
    names = list(fns)
    for n in names:
        fns[n]()
    samples: Dict[str, List[List[float]]] = {n: [] for n in names}
    clock = time.perf_counter
    start = clock()
    for r in range(budget.max_rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            fn, calls = fns[n], []
            end = clock() + budget.sample_s
            while True:
                t0 = clock()
                fn()
                t1 = clock()
                calls.append(t1 - t0)
                if t1 >= end:
                    break
            samples[n].append(calls)
        if r + 1 >= budget.min_rounds and clock() - start > budget.total_s:
            break
    return samples


def median(rounds: List[List[float]]) -> Optional[float]:
    """Median of all calls of all rounds: robust to the occasional descheduled call."""
    calls = [x for r in rounds for x in r]
    return statistics.median(calls) if calls else None


def paired_ratio(a: List[List[float]], b: List[List[float]]) -> Optional[float]:
    """Median over rounds of (median call of ``a``) / (median call of ``b``) in that round."""
    ratios = [statistics.median(x) / statistics.median(y) for x, y in zip(a, b) if x and y]
    return statistics.median(ratios) if ratios else None


def _best(fn: Callable[[], object], repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def peak_gflops(quick: bool = False) -> float:
    """Best float32 GFLOP/s of numpy matmuls (2n^3 FLOP) over a few sizes, threads in force.

    Several sizes because the best one differs between machines (cache sizes), and
    many runs because a single one is easily slowed by other load.
    """
    best = 0.0
    for n in (256, 512, 1024) if quick else (256, 512, 1024, 2048):
        a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
        c = np.empty_like(a)
        runs = int(max(3, (1e9 if quick else 4e9) / (2 * n ** 3)))
        best = max(best, 2 * n ** 3 / _best(lambda: np.matmul(a, a, out=c), runs) / 1e9)
    return best


def copy_gbps(nbytes: int, quick: bool = False) -> float:
    """Best GB/s of a numpy copy moving ``nbytes`` in all (half read, half written).

    Measured at the size of a case's own data, it is the bandwidth of the memory
    level (cache or DRAM) that data lives in.
    """
    words = max(1, nbytes // 8)
    src = np.ones(words, dtype=np.float32)
    dst = np.empty_like(src)
    moved = 2e7 if quick else 2e8  # bytes moved in all, over the repeats
    repeats = int(min(200, max(5, moved / max(nbytes, 1))))
    return 2 * src.nbytes / _best(lambda: np.copyto(dst, src), repeats) / 1e9


DRAM_BYTES = 512 * 2 ** 20


def machine_peak(quick: bool = False) -> dict:
    """Peak float32 FLOP/s and DRAM bandwidth (best of several runs)."""
    dram = DRAM_BYTES // (8 if quick else 1)
    return {
        "gflops": peak_gflops(quick),
        "gbps": copy_gbps(dram, quick),
        "how": ("GFLOP/s: best numpy float32 matmul of sizes 256^3 to "
                f"{1024 if quick else 2048}^3, measured at the start and the end of the run; "
                f"GB/s: best numpy copy of {dram // 2 ** 21} MiB (read + write); a system "
                "beating these best runs shows over 100%"),
    }
