"""``python -m benchmarks.build_time``: where a cold build's time goes, case by case.

For every benchmark case (both tiers; ``--tier``, ``--case`` choose), in a fresh
kernel cache, the programs the suite builds (``benchmarks.systems.te_sys``: the
forward, the forward that also returns the saved values, the VJP given them) are
built step by step and each step is timed:

- ``diff``: ``te.differentiate`` and ``te.saved_values``;
- ``lower``, ``emit``: steps 3-7 and 8 of ``codegen.pipeline`` (``codegen.c_backend.stats``);
- ``cc``: the C compiler's wall time, and ``cpu`` the CPU seconds it used (on a loaded
  machine the wait grows, the CPU time does not; ``codegen.compiler.stats``); the VJP's
  two programs are built with ``wait=False`` as the suite does (``codegen.background``),
  so their compiles overlap each other and the lowering, and ``cc`` may exceed the time
  waited;
- ``C KB``: the size of the generated C of all programs;
- ``rest``: the remainder of the builds and first calls (fingerprints, cache entries,
  loading the libraries, the calls themselves), less the compile time that overlapped
  (so it may be negative);
- ``fwd``, ``vjp``: the suite's cold ``fwd_build_s`` and ``build_s`` (the VJP build
  covers differentiating, the saving forward and the VJP program, and a call of each);
- ``cached``: the same two builds in a new process with the cache warm
  (``benchmarks.rebuild``), and, once, a whole new process importing tensorexpr,
  defining a case, building and calling it (interpreter start excluded).

The goals of issue 14 are printed beside: differentiate + lowering of a case under
0.5 s, its cold build under 1.5 s, a cached build in a new process under 50 ms.

    python -m benchmarks.build_time --quick --case 1
    python -m benchmarks.build_time --cells          # the recurrent cells (issue 15)

``--cells``: differentiate + lowering of the GRU's and the LSTM's gradient
(``benchmarks.recurrence_cells``, T=64, B=32, H=128, D=128) in each mode of
:data:`CELL_MODES`, against issue 15's goal of 0.5 s, each in a fresh process with an
empty kernel cache: the CPU seconds of ``te.differentiate`` (``diff``) and of
``te.build`` up to the C compiler (``build``: fingerprint, lowering, emission; the
compiler runs on a thread, ``wait=False``, and is not counted), the least of
``--repeats`` processes. The same at T=4096 (one process) shows the lowering does
not grow with the number of steps; ``C`` is a digest of the generated C.

>>> row = measure_case(by_id(1), quick=True)
>>> sorted(row)  # doctest: +NORMALIZE_WHITESPACE
['c_kb', 'cc_cpu_s', 'cc_s', 'diff_s', 'emit_s', 'fwd_build_s', 'id', 'lower_s', 'programs',
 'rest_s', 'title', 'vjp_build_s']
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

from benchmarks import pin_threads
from benchmarks.cases import CASES, TIERS, by_id

#: the goals of issue 14, item 3 (seconds)
DIFF_LOWER_GOAL, COLD_GOAL, CACHED_GOAL = 0.5, 1.5, 0.05
#: ``--cells``: the recurrent cells' modes (full tape; ``checkpoints=8`` by the default
#: revolve schedule, or by segments) and sizes (T, B, H, D) of issue 15, item 3
CELL_MODES = ("tape", "revolve:8", "segments:8")
CELL_SIZES = (64, 32, 128, 128)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _counters() -> Dict[str, float]:
    from codegen import c_backend, compiler
    return {"lower_s": c_backend.stats["lower_s"], "emit_s": c_backend.stats["emit_s"],
            "cc_s": compiler.stats["compile_s"], "cc_cpu_s": compiler.stats["compile_cpu_s"]}


def measure_case(case, quick: bool = False) -> dict:
    """The steps of building ``case``'s forward and VJP programs cold (the kernel cache
    must not hold them: :func:`measure` gives each run a fresh one), in seconds."""
    import tensorexpr as te
    from benchmarks.systems import te_sys
    p = case.params(quick)
    inputs = case.inputs(p)
    args = [inputs[a.name] for a in case.args]
    before = _counters()
    t0 = time.perf_counter()
    ph, Y = te_sys.define(case, p)
    f = te.build(Y, inputs=ph)
    f(*args)
    fwd_s = time.perf_counter() - t0
    sources = [f.source]
    ph, Y, override = te_sys.define_with_override(case, p)
    H = te.placeholder(Y.shape, dtype=Y.dtype, name="H")
    head = case.head(Y.shape)
    t1 = time.perf_counter()
    grads = te_sys.gradients(case, ph, Y, H, override)
    saved = te.saved_values(grads, Y)
    diff_s = time.perf_counter() - t1
    vals = ()
    # as the suite builds them: the saving forward compiles while the gradient is lowered
    save = te.build([Y] + saved, inputs=ph, wait=False) if saved else None
    g = te.build(grads, inputs=ph + [H] + saved, wait=False)
    if save is not None:
        vals = save(*args)[1:]
        sources.append(save.source)
    g(*args, head, *vals)
    vjp_s = time.perf_counter() - t1
    sources.append(g.source)
    after = _counters()
    row = {"id": case.id, "title": case.title, "diff_s": diff_s, "fwd_build_s": fwd_s,
           "vjp_build_s": vjp_s, "programs": len(sources),
           "c_kb": sum(len(s) for s in sources) / 1024}
    row.update({k: after[k] - before[k] for k in after})
    row["rest_s"] = fwd_s + vjp_s - diff_s - sum(row[k] for k in ("lower_s", "emit_s", "cc_s"))
    return row


def cached_rebuild(ids: List[int], quick: bool) -> Dict[int, dict]:
    """``{case id: {"fwd_build_s", "build_s"}}`` built again in a new process (the
    cache of this one, ``$TENSOREXPR_CACHE_DIR``, is warm)."""
    out = _child(["-m", "benchmarks.rebuild"] + (["--quick"] if quick else [])
                 + [str(i) for i in ids])
    return {int(k): v for k, v in out.items()}


#: a new process: import tensorexpr, define a case, build it (cache warm), call it once
_NEW_PROCESS = """
import json, sys, time
t0 = time.perf_counter()
import numpy
t1 = time.perf_counter()
import tensorexpr as te
t2 = time.perf_counter()
from benchmarks.cases import by_id
from benchmarks.systems import te_sys
case = by_id(int(sys.argv[1])); p = case.params(sys.argv[2] == "quick")
inputs = case.inputs(p)
args = [inputs[a.name] for a in case.args]
t3 = time.perf_counter()
ph, Y = te_sys.define(case, p)
te.build(Y, inputs=ph)(*args)
t4 = time.perf_counter()
print(json.dumps({"numpy_s": t1 - t0, "import_s": t2 - t1, "build_s": t4 - t3,
                  "isl": "islpy" in sys.modules}))
"""


def new_process(case_id: int, quick: bool) -> dict:
    """A new process's seconds importing numpy, importing tensorexpr, and defining,
    building (cache warm) and calling case ``case_id``'s forward; ``isl``: whether
    the build imported isl."""
    return _child(["-c", _NEW_PROCESS, str(case_id), "quick" if quick else "full"])


def _child(argv: List[str]) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [x for x in [env.get("PYTHONPATH")] if x])
    proc = subprocess.run([sys.executable] + argv, cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1800)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the new process failed: {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(ids: List[int], quick: bool = False, log=lambda s: None) -> dict:
    """Every case of ``ids`` built cold in a fresh kernel cache, then again in a new
    process with the cache warm: ``{"cases": [row, ...], "new_process": {...}}``."""
    import numpy as np

    import tensorexpr as te
    cache = tempfile.mkdtemp(prefix="te-build-time-")
    old = os.environ.get("TENSOREXPR_CACHE_DIR")
    os.environ["TENSOREXPR_CACHE_DIR"] = cache
    try:
        # one tiny program first: finding the compiler, probing OpenMP and importing the
        # lowering are once per process and cache, not any case's
        X = te.placeholder((64, 64), name="X")
        k = te.reduce_axis(64, name="k")
        te.build(te.compute((64,), lambda i: te.sum(X[i, k], axis=k)))(
            np.zeros((64, 64), np.float32))
        rows = []
        for cid in ids:
            case = by_id(cid)
            log(f"case {cid}: {case.title} ...")
            rows.append(measure_case(case, quick))
        log("the same builds in a new process, cache warm ...")
        for row, (cid, got) in zip(rows, sorted(cached_rebuild(ids, quick).items())):
            row["fwd_cached_s"], row["vjp_cached_s"] = got["fwd_build_s"], got["build_s"]
        fresh = new_process(ids[0], quick)
        fresh["case"] = ids[0]
    finally:
        if old is None:
            os.environ.pop("TENSOREXPR_CACHE_DIR", None)
        else:
            os.environ["TENSOREXPR_CACHE_DIR"] = old
        shutil.rmtree(cache, ignore_errors=True)
    return {"cases": rows, "new_process": fresh}


def measure_cell_build(cell: str, mode: str, T: int, B: int, H: int, D: int) -> dict:
    """CPU seconds (this thread's) of differentiating ``cell``'s gradient in ``mode`` (see
    :data:`CELL_MODES`) and of building it up to the C compiler, which is left running on
    its thread; the lowering's own wall-clock ``lower_s`` and ``emit_s``; ``sha``: a digest
    of the C. Meant for a fresh process with an empty kernel cache (a cache hit skips
    the lowering: then ``lower_s`` is 0).

    >>> row = measure_cell_build("rnn", "revolve:2", 4, 2, 3, 2)
    >>> sorted(row), row["build_s"] > 0
    (['build_s', 'diff_s', 'emit_s', 'lower_s', 'sha'], True)
    """
    import hashlib

    import tensorexpr as te
    from benchmarks import recurrence_cells as rc
    kind, _, k = mode.partition(":")
    options = te.ScheduleOptions(checkpoint="segments") if kind == "segments" else None
    before = _counters()
    t0 = time.thread_time()
    ins, grads = rc.te_program(cell, T, B, H, D, int(k) if k else None)
    t1 = time.thread_time()
    f = te.build(grads, inputs=ins, options=options, wait=False)
    t2 = time.thread_time()
    after = _counters()
    return {"diff_s": t1 - t0, "build_s": t2 - t1,
            "lower_s": after["lower_s"] - before["lower_s"],
            "emit_s": after["emit_s"] - before["emit_s"],
            "sha": hashlib.sha256(f.source.encode()).hexdigest()[:12]}


#: a fresh process for :func:`measure_cell_build`, after the once-per-process set-up:
#: finding the compiler, probing OpenMP, importing the lowering and the differentiation
#: (a tiny program built and differentiated) and the cells' module (their import is
#: ~65 ms without bytecode caches, once per process: no cell's differentiation)
_CELL_PROCESS = """
import json, sys
import numpy as np
import tensorexpr as te
from benchmarks import recurrence_cells
from benchmarks.build_time import measure_cell_build
X = te.placeholder((64, 64), name="X")
k = te.reduce_axis(64, name="k")
Y = te.compute((64,), lambda i: te.sum(X[i, k], axis=k))
te.build(Y)(np.zeros((64, 64), np.float32))
te.differentiate(Y, [X])
print(json.dumps(measure_cell_build(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:]))))
"""


def measure_cells(cells=("gru", "lstm"), modes=CELL_MODES, sizes=CELL_SIZES,
                  long_T: Optional[int] = 4096, repeats: int = 3, log=lambda s: None
                  ) -> List[dict]:
    """A row per cell and mode: :func:`measure_cell_build` in ``repeats`` fresh processes
    (each with an empty kernel cache, one thread), the least of each figure, and the
    least total of as many more with ``T = long_T`` (``long_s``) if given."""
    rows = []
    for cell in cells:
        for mode in modes:
            log(f"{cell} {mode} ...")
            runs = [_cell_child(cell, mode, sizes) for _ in range(repeats)]
            row = {"cell": cell, "mode": mode, "T": sizes[0], "sha": runs[0]["sha"]}
            row.update({key: min(r[key] for r in runs)
                        for key in ("diff_s", "build_s", "lower_s", "emit_s")})
            if long_T is not None:
                runs = [_cell_child(cell, mode, (long_T,) + tuple(sizes[1:]))
                        for _ in range(repeats)]
                row.update({"long_T": long_T,
                            "long_s": min(r["diff_s"] + r["build_s"] for r in runs)})
            rows.append(row)
    return rows


def _cell_child(cell: str, mode: str, sizes) -> dict:
    cache = tempfile.mkdtemp(prefix="te-cell-build-")
    old = {k: os.environ.get(k) for k in ("TENSOREXPR_CACHE_DIR", "OMP_NUM_THREADS")}
    os.environ.update({"TENSOREXPR_CACHE_DIR": cache, "OMP_NUM_THREADS": "1"})
    try:
        return _child(["-c", _CELL_PROCESS, cell, mode] + [str(n) for n in sizes])
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(cache, ignore_errors=True)


def cells_report(rows: List[dict]) -> str:
    """The table of :func:`measure_cells` (milliseconds of CPU time), ``!`` where
    differentiate + build is over the goal of 0.5 s (at either T).

    >>> print(cells_report([{"cell": "gru", "mode": "tape", "T": 64, "diff_s": 0.1,
    ...     "build_s": 0.5, "lower_s": 0.4, "emit_s": 0.05, "sha": "ab12", "long_T": 4096,
    ...     "long_s": 0.61}]))  # doctest: +NORMALIZE_WHITESPACE
    cell  mode         diff  build  total  goal  (lower  emit wall)  T=4096      C
    gru   tape          100    500   600!   500     400    50         610!   ab12
    over 0.5 s: 2 of 2
    """
    lines = [f"{'cell':5s} {'mode':10s} {'diff':>6s} {'build':>6s} {'total':>6s} {'goal':>5s}"
             f"  {'(lower':>6s} {'emit wall)':>5s}  {'T=' + str(rows[0].get('long_T', '')):>6s}"
             f" {'C':>6s}"]
    over = runs = 0
    for r in rows:
        total, long = r["diff_s"] + r["build_s"], r.get("long_s")
        over += (total > DIFF_LOWER_GOAL) + (long is not None and long > DIFF_LOWER_GOAL)
        runs += 1 + (long is not None)
        mark = "!" if long is not None and long > DIFF_LOWER_GOAL else ""
        lines.append(f"{r['cell']:5s} {r['mode']:10s} {_ms(r['diff_s']):>6s} "
                     f"{_ms(r['build_s']):>6s} "
                     f"{_ms(total) + ('!' if total > DIFF_LOWER_GOAL else ''):>6s} "
                     f"{_ms(DIFF_LOWER_GOAL):>5s}  {_ms(r['lower_s']):>6s} {_ms(r['emit_s']):>5s}"
                     f"       {_ms(long) + mark:>6s} {r['sha']:>6s}")
    lines.append(f"over {DIFF_LOWER_GOAL} s: {over} of {runs}")
    return "\n".join(lines)


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x * 1e3:.0f}"


def report(result: dict) -> str:
    """The table of :func:`measure` (milliseconds), each goal missed marked with ``!``,
    and a summary line per goal."""
    cols = ("diff", "lower", "emit", "cc", "cpu", "C KB", "rest", "fwd", "vjp",
            "cached fwd", "cached vjp")
    lines = [f"{'case':28s}" + "".join(f"{c:>11s}" for c in cols)]
    rows = result["cases"]
    for r in rows:
        dl = r["diff_s"] + r["lower_s"] + r["emit_s"]
        cells = [_ms(r["diff_s"]), _ms(r["lower_s"]) + ("!" if dl > DIFF_LOWER_GOAL else ""),
                 _ms(r["emit_s"]), _ms(r["cc_s"]), _ms(r["cc_cpu_s"]), f"{r['c_kb']:.0f}",
                 _ms(r["rest_s"]),
                 _ms(r["fwd_build_s"]) + ("!" if r["fwd_build_s"] > COLD_GOAL else ""),
                 _ms(r["vjp_build_s"]) + ("!" if r["vjp_build_s"] > COLD_GOAL else "")]
        for key in ("fwd_cached_s", "vjp_cached_s"):
            x = r.get(key)
            cells.append(_ms(x) + ("!" if x is not None and x > CACHED_GOAL else ""))
        lines.append(f"{r['id']:3d} {r['title'][:24]:24s}" + "".join(f"{c:>11s}" for c in cells))
    lines.append("")
    over = [r["id"] for r in rows if r["diff_s"] + r["lower_s"] + r["emit_s"] > DIFF_LOWER_GOAL]
    lines.append(f"differentiate + lowering + emission over {DIFF_LOWER_GOAL} s: "
                 f"{len(over)} of {len(rows)} {over or ''}")
    slow = [r["id"] for r in rows if max(r["fwd_build_s"], r["vjp_build_s"]) > COLD_GOAL]
    lines.append(f"cold build (forward or VJP, C compiler included) over {COLD_GOAL} s: "
                 f"{len(slow)} of {len(rows)} {slow or ''}; the C compiler's CPU time "
                 f"{sum(r['cc_cpu_s'] for r in rows):.1f} s, its wall time "
                 f"{sum(r['cc_s'] for r in rows):.1f} s in all")
    cached = [r["id"] for r in rows if max(r.get("fwd_cached_s") or 0,
                                           r.get("vjp_cached_s") or 0) > CACHED_GOAL]
    lines.append(f"cached build in a new process over {CACHED_GOAL * 1e3:.0f} ms: "
                 f"{len(cached)} of {len(rows)} {cached or ''}")
    n = result.get("new_process")
    if n:
        lines.append(f"a new process (cache warm): import numpy {_ms(n['numpy_s'])} ms, "
                     f"import tensorexpr {_ms(n['import_s'])} ms, define + build + call of "
                     f"case {n['case']} {_ms(n['build_s'])} ms (isl "
                     f"{'imported' if n['isl'] else 'not imported'})")
    return "\n".join(lines)


def main(argv=None) -> int:
    """Measure, print the table; ``--json PATH`` also writes the figures."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.build_time")
    parser.add_argument("--quick", action="store_true", help="the cases' reduced sizes")
    parser.add_argument("--tier", type=int, action="append", choices=sorted(TIERS))
    parser.add_argument("--case", type=int, action="append", metavar="N",
                        choices=[c.id for c in CASES])
    parser.add_argument("--json", metavar="PATH", help="also write the figures here")
    parser.add_argument("--cells", action="store_true",
                        help="the GRU and LSTM gradients' differentiate + lowering instead")
    parser.add_argument("--repeats", type=int, default=3,
                        help="--cells: fresh processes per cell and mode (the least counts)")
    args = parser.parse_args(argv)
    pin_threads()
    if args.cells:
        rows = measure_cells(repeats=args.repeats,
                             log=lambda s: print(s, file=sys.stderr, flush=True))
        print(cells_report(rows))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0
    tiers = set(args.tier or TIERS)
    ids = sorted(set(args.case)) if args.case else [c.id for c in CASES if c.tier in tiers]
    result = measure(ids, args.quick, log=lambda s: print(s, file=sys.stderr, flush=True))
    print(report(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
