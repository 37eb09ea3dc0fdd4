"""The run: per case, build every system, check it against the reference, time it.

Timings of the systems are interleaved (``timing.interleaved``) and the
tensorexpr/peer ratios are taken round by round. The tensorexpr programs are
compiled into a fresh on-disk cache (``$TENSOREXPR_CACHE_DIR``) unless one is
given, so the first build is a cold compile; after all cases, a new process
builds them again with that cache warm (``benchmarks.rebuild``). Each case's
tensorexpr forward and VJP are also timed at a grown size (``benchmarks.growth``).
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from benchmarks import IDLE_THREADS, THREADS, growth, load
from benchmarks.cases import CASES, Case, by_id
from benchmarks.report import NOISY, status_text, tier_summary
from benchmarks.reference import DEFINITION, TOLERANCE, reference, rel_err
from benchmarks.systems import ORDER, Prepared, first_line, module
from benchmarks.timing import (FULL, GROWTH, QUICK, copy_gbps, interleaved, machine_peak,
                               median, paired_ratio, peak_gflops)

FWD_INCLUDES = ("one call of the forward on given inputs, output materialised (torch under "
                "no_grad, JAX jitted, tensorexpr the built forward program), except where a "
                "system returns a view of an input (numpy's reshape and transpose, tensorexpr's "
                "outputs that re-index an input, also in gradients: flatten, a transpose's "
                "gradient)")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Options:
    """What to run (the command line, parsed)."""

    cases: Sequence[int] = tuple(c.id for c in CASES)
    systems: Sequence[str] = ORDER
    quick: bool = False
    te_backend: str = "c"
    cache_dir: Optional[str] = None  # None: a fresh temporary cache, removed afterwards
    rebuild: bool = True
    growth: bool = True  # time tensorexpr at the grown size too
    load: int = 0  # > 0: time every case again under this many busy processes


def run(opts: Options, log: Callable[[str], None] = lambda s: None) -> dict:
    """Run the selected cases on the selected systems; returns the results document."""
    skipped, systems = {}, []
    for name in opts.systems:
        why = module(name).missing()
        if why:
            skipped[name] = why
            log(f"skipping {name}: {why}")
        else:
            systems.append(name)
    log("measuring the machine's peak FLOP/s and bandwidth ...")
    peak = machine_peak(opts.quick)
    own_cache = opts.cache_dir is None and "te" in systems and opts.te_backend == "c"
    cache = tempfile.mkdtemp(prefix="te-bench-cache-") if own_cache else opts.cache_dir
    if cache:
        os.environ["TENSOREXPR_CACHE_DIR"] = cache
    try:
        meta = _meta(opts, systems, skipped, peak, cache, own_cache)
        if "te" in systems:
            meta["te_warm_up_s"] = _warm_up_compiler(opts.te_backend)
        results = []
        for case_id in opts.cases:
            case = by_id(case_id)
            log(f"case {case.id}: {case.title} ...")
            results.append(run_case(case, systems, opts, log))
        if "te" in systems and opts.rebuild and results:
            log("cached rebuild of the tensorexpr programs in a new process ...")
            _add_cached_rebuild(results, opts, meta)
    finally:
        if own_cache:
            shutil.rmtree(cache, ignore_errors=True)
    # A burst of load elsewhere can spoil one measurement of the peak: take the better.
    peak["gflops"] = max(peak["gflops"], peak_gflops(opts.quick))
    _add_peak_fractions(results, peak)
    return {"meta": meta, "cases": results, "tiers": tier_summary(results)}


def run_case(case: Case, systems: Sequence[str], opts: Options,
             log: Callable[[str], None] = lambda s: None) -> dict:
    """Build, check and time one case on every system; one entry of ``cases``."""
    p = case.params(opts.quick)
    inputs = case.inputs(p)
    Y, H, grads = reference(case, p, inputs)
    preps: Dict[str, Prepared] = {}
    rows: Dict[str, dict] = {}
    for name in systems:
        preps[name], rows[name] = _prepare_and_check(name, case, p, inputs, H, Y, grads, opts)
    budget = QUICK if opts.quick else FULL
    samples = {}
    for part in ("fwd", "vjp"):
        fns = {n: getattr(pr, part) for n, pr in preps.items() if getattr(pr, part) is not None}
        samples[part] = interleaved(fns, budget) if fns else {}
        for n, xs in samples[part].items():
            rows[n][f"{part}_ms"] = median(xs) * 1e3
            rows[n][f"{part}_min_ms"] = min(min(r) for r in xs) * 1e3
            rows[n][f"{part}_rounds"] = len(xs)
    for row in rows.values():
        if row.get("fwd_ms") and row.get("vjp_ms"):
            row["vjp_fwd"] = row["vjp_ms"] / row["fwd_ms"]
    _time_te_recompute(preps.get("te"), rows.get("te"), opts)
    under_load = None
    if opts.load > 0:
        log(f"case {case.id}: timed again under {opts.load} busy processes ...")
        fns = {part: {n: getattr(pr, part) for n, pr in preps.items()
                      if getattr(pr, part) is not None} for part in ("fwd", "vjp")}
        under_load = {"n": opts.load, "systems": load.measure(fns, opts.load, budget)}
    ratios = {}
    for peer in systems:
        if peer == "te":
            continue
        pair = {part: paired_ratio(samples[part]["te"], samples[part][peer])
                if "te" in samples[part] and peer in samples[part] else None
                for part in ("fwd", "vjp")}
        ratios[f"te/{peer}"] = pair
    work = vars(case.work(p, inputs, Y.size * np.dtype(np.float32).itemsize))
    if work["unit"] == "byte":
        work["roof_gbps"] = {part: copy_gbps(work[part], opts.quick) for part in ("fwd", "vjp")}
    out = {"id": case.id, "tier": case.tier, "key": case.key, "title": case.title, "params": p,
           "work": work,
           "systems": rows, "ratios": ratios}
    if under_load is not None:
        out["load"] = under_load
    if opts.growth and "te" in preps:
        log(f"case {case.id}: growth check at "
            + ", ".join(f"{k} x{v}" for k, v in case.grow.items()) + " ...")
        t0 = time.perf_counter()
        out["growth"] = measure_growth(case, preps["te"], work["fwd"], opts)
        out["growth"]["seconds"] = time.perf_counter() - t0
    return out


def measure_growth(case: Case, small: Prepared, small_work: int, opts: Options) -> dict:
    """tensorexpr's forward and VJP at the case's size (``small``, already built and
    checked) and at its grown size, timed interleaved; see ``benchmarks.growth``."""
    p = case.params(opts.quick, grown=True)
    out = {"grow": dict(case.grow), "params": {k: p[k] for k in case.grow}}
    if small.fwd is None or small.vjp is None:
        out["status"] = "not measured (no working forward and VJP at the base size)"
        return out
    inputs = case.inputs(p)
    Y, H, grads = reference(case, p, inputs)
    big, row = _prepare_and_check("te", case, p, inputs, H, Y, grads, opts)
    out.update({k: row[k] for k in ("fwd_build_s", "build_s", "err") if k in row})
    if big.fwd is None or big.vjp is None or row["status"] != "ok" or row["fwd_status"] != "ok":
        out["status"] = status_text(row)
        return out
    budget = QUICK if opts.quick else GROWTH
    fns = {"fwd": small.fwd, "vjp": small.vjp, "fwd_big": big.fwd, "vjp_big": big.vjp}
    samples = interleaved(fns, budget)
    ms = {k: median(xs) * 1e3 for k, xs in samples.items()}
    fastest = {k: min(min(r) for r in xs) * 1e3 for k, xs in samples.items()}
    for part in ("fwd", "vjp"):
        out[f"{part}_min_ms"] = (fastest[part], fastest[f"{part}_big"])
        out[f"{part}_ms"] = (ms[part], ms[f"{part}_big"])
    work = case.work(p, inputs, Y.size * np.dtype(np.float32).itemsize)
    roof = None
    if work.unit == "byte":  # the grown VJP's bandwidth against a copy of as many bytes
        moved = work.vjp / (fastest["vjp_big"] / 1e3) / 1e9
        roof = moved / copy_gbps(work.vjp, opts.quick)
    out.update(growth.judge(out["fwd_min_ms"], out["vjp_min_ms"], work.fwd / small_work, roof))
    out["noisy"] = any(ms[k] > NOISY * fastest[k] for k in ms)
    return out



def _prepare_and_check(name, case, p, inputs, H, Y, grads, opts):
    sysmod = module(name)
    row = {"label": sysmod.LABEL}
    try:
        prep = (sysmod.prepare(case, p, inputs, H, backend=opts.te_backend) if name == "te"
                else sysmod.prepare(case, p, inputs, H))
    except Exception as exc:  # one system failing must not stop the others
        why = f"unsupported ({first_line(exc)})"
        prep = Prepared(fwd=None, vjp=None, fwd_status=why, vjp_status=why)
    row["fwd_build_s"], row["build_s"] = prep.fwd_build_s, prep.build_s
    if prep.codegen_s is not None or prep.fwd_codegen_s is not None:
        row["fwd_codegen_s"], row["codegen_s"] = prep.fwd_codegen_s, prep.codegen_s
    if prep.fwd is not None:
        try:
            row["fwd_err"] = rel_err([prep.forward_output()], [Y])
            if not row["fwd_err"] <= TOLERANCE:
                prep.fwd_status = f"wrong (forward max rel err {row['fwd_err']:.2g})"
        except Exception as exc:
            prep.fwd, prep.fwd_status = None, f"unsupported (running: {first_line(exc)})"
    if prep.vjp is not None:
        try:
            row["err"] = rel_err(prep.gradients(), grads)
            if not row["err"] <= TOLERANCE:
                prep.vjp_status = f"wrong (max rel err {row['err']:.2g})"
        except Exception as exc:
            prep.vjp, prep.vjp_status = None, f"unsupported (running: {first_line(exc)})"
    row["fwd_status"], row["status"] = prep.fwd_status, prep.vjp_status
    return prep, row


def _time_te_recompute(prep: Optional[Prepared], row: Optional[dict], opts: Options) -> None:
    """Hook of ``te_sys``: tensorexpr's VJP is timed given the forward's saved values;
    the gradient recomputing them (``prep.vjp_recompute``) is timed too, interleaved
    with the given-values one, into ``vjp_recompute_ms`` (JSON only)."""
    recompute = getattr(prep, "vjp_recompute", None)
    if recompute is None or prep.vjp is None:
        return
    try:
        xs = interleaved({"given": prep.vjp, "recompute": recompute},
                         QUICK if opts.quick else GROWTH)
        row["vjp_recompute_ms"] = median(xs["recompute"]) * 1e3
    except Exception as exc:  # a reference figure: its failure is noted, not fatal
        row["vjp_recompute_ms"] = None
        row["vjp_recompute_status"] = f"unsupported ({first_line(exc)})"


def _warm_up_compiler(backend: str) -> Optional[float]:
    """Build one tiny program so that finding the compiler and probing OpenMP (once per
    process and cache) is not charged to the first case's build time."""
    import tensorexpr as te
    from benchmarks.systems import timed
    x = te.placeholder((4,), name="x")
    y = te.compute((4,), lambda i: x[i] + 1.0, name="y")
    try:
        return timed(lambda: te.build(y, backend=backend)(np.zeros(4, np.float32)))[1]
    except Exception:
        return None  # the cases will report the failure themselves


def _add_cached_rebuild(results: List[dict], opts: Options, meta: dict) -> None:
    cmd = [sys.executable, "-m", "benchmarks.rebuild", "--te-backend", opts.te_backend]
    cmd += ["--quick"] if opts.quick else []
    cmd += [str(r["id"]) for r in results]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [x for x in [env.get("PYTHONPATH")] if x])
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        meta["cached_rebuild_error"] = f"the rebuild process failed: {tail}"
        return
    times = json.loads(proc.stdout.strip().splitlines()[-1])
    for r in results:
        got = times.get(str(r["id"]), {})
        row = r["systems"]["te"]
        row["fwd_build_cached_s"] = got.get("fwd_build_s")
        row["build_cached_s"] = got.get("build_s")


def _add_peak_fractions(results: List[dict], peak: dict) -> None:
    """Achieved GFLOP/s or GB/s (``*_rate``) and that as a % of the roof (``*_peak_pct``)."""
    for r in results:
        work = r["work"]
        for part in ("fwd", "vjp"):
            roof = peak["gflops"] if work["unit"] == "flop" else work["roof_gbps"][part]
            for row in r["systems"].values():
                ms = row.get(f"{part}_ms")
                if ms:
                    row[f"{part}_rate"] = work[part] / (ms * 1e-3) / 1e9
                    row[f"{part}_peak_pct"] = 100 * row[f"{part}_rate"] / roof


def _meta(opts, systems, skipped, peak, cache, own_cache) -> dict:
    versions = {"python": platform.python_version(), "numpy": np.__version__}
    for name in systems:
        if name in ("torch", "jax"):
            versions[name] = __import__(name).__version__
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                         capture_output=True, text=True)
    versions["tensorexpr"] = git.stdout.strip() or "unknown"
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "processor": platform.machine(),
                    "cpus": os.cpu_count()},
        "versions": versions,
        "threads": THREADS,
        "quick": opts.quick,
        "systems": list(systems),
        "skipped": skipped,
        "te_backend": opts.te_backend,
        "te_cache": ("fresh temporary cache: first build is a cold compile" if own_cache else
                     f"cache {cache or 'default'}: first build may hit it"),
        "err": DEFINITION,
        "fwd_includes": FWD_INCLUDES,
        "vjp_includes": {n: module(n).VJP_INCLUDES for n in systems},
        "build": ("build_s: VJP program (differentiate + compile, or trace + jit) with its "
                  "first call; fwd_build_s: forward program with its first call; *_cached_s: "
                  "the same in a new process with tensorexpr's on-disk cache warm"),
        "timing": ("medians of every call, timed one by one over interleaved rounds after a "
                   "warm-up call (the fastest call is kept as *_min_ms); te/peer ratios are "
                   "medians of per-round ratios"),
        "work": ("matmuls, convolutions, MLP, attention, distances and recurrent cells: "
                 "analytic FLOPs, as a % of the peak GFLOP/s; the "
                 "others: bytes of the arrays that must be read and written once, as a % of "
                 "a numpy copy moving as many bytes (the bandwidth of the cache level or DRAM "
                 "that this much data lives in)"),
        "growth": growth.RULE if opts.growth and "te" in systems else None,
        "idle_threads": {k: os.environ.get(k) for k in IDLE_THREADS},
        "load": (f"each case timed again while {opts.load} processes spin on the CPU "
                 f"(benchmarks.load); load.systems.*_spread: median / fastest call"
                 if opts.load else None),
        "peak": peak,
    }
