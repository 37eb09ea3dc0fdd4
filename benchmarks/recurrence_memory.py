"""Memory and time of recurrence gradients: full tape vs ``checkpoints=k``.

    python -m benchmarks.recurrence_memory            # R=1024, T=4096, float32
    python -m benchmarks.recurrence_memory --quick    # R=64, T=256 (seconds)

Two recurrences, an exponentially weighted moving average and front-to-back
alpha compositing, each with the loss ``sum_r e[T-1, r]**2``; the gradient
w.r.t. the input ``d[R, T]`` is built with the C backend and run once per
configuration:

* ``tape``: every recurrence stored whole (rings and checkpointing switched
  off with ``te.ScheduleOptions(checkpoint=False)``), the reference;
* ``rolling``: the default lowering without ``checkpoints``: a recurrence read
  only at its last steps is a ring (EWMA's forward ``e``: its adjoint reads only
  ``e[T-1]``), the rest is a full tape;
* ``k=8``, ``k=64``: ``checkpoints=k``.

What is measured, honestly:

* ``buffers``: the bytes the runtime allocates for one call of the kernel
  (every intermediate and output buffer, inputs excluded), from the lowered
  program's buffer shapes: exact. The gradient itself (``R*T`` floats, 16 MiB
  at full size) is included in every row; ``scratch`` is the rest (the
  recurrences, their rings and checkpoints), the part checkpointing changes.
* ``peak RSS``: how far the process's peak resident set size rises above its
  resident size during one call, in a fresh subprocess per configuration, after
  building, loading the library and creating the input. On Linux the kernel's
  peak counter is reset just before the call (``/proc/self/clear_refs``) and
  read after it (``VmHWM``), so earlier peaks (compilation, data generation) do
  not hide it; elsewhere it is the growth of ``ru_maxrss``, which they can hide
  (then reported as measured, possibly 0). It counts what numpy and the
  allocator actually touch (the output, the kernel's buffers, thread stacks),
  in pages.
* ``time``: the median of several calls after that first one (same process).
* ``max |diff|``: the largest absolute difference of the gradient from the full
  tape's; checkpointing recomputes with the same C code, so it must be 0.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

CASES = ("ewma", "alpha")
FULL = (1024, 4096, (8, 64))  # R, T, checkpoint counts
QUICK = (64, 256, (4, 16))


def program(case: str, R: int, T: int, checkpoints: Optional[int]):
    """``(d, dd)``: the input placeholder and the gradient of the last-step loss.

    >>> d, dd = program("ewma", 2, 8, 4)
    >>> dd.shape
    (2, 8)
    """
    import tensorexpr as te
    d = te.placeholder((R, T), "float32", "d")
    if case == "ewma":
        e = te.recurrence((T, R), lambda e, t, r: te.select(
            t == 0, d[r, 0], 0.5 * d[r, t] + 0.5 * e[t - 1, r]),
            name="e", checkpoints=checkpoints)
    elif case == "alpha":
        e = te.recurrence((T, R), lambda a, s, r: te.select(
            s == 0, d[r, 0], (1.0 - a[s - 1, r]) * d[r, s] + a[s - 1, r]),
            name="acc", checkpoints=checkpoints)
    else:
        raise ValueError(f"unknown case {case!r}; use one of {', '.join(CASES)}")
    r = te.reduce_axis(R)
    L = te.compute((), lambda: te.sum(e[T - 1, r] * e[T - 1, r], axis=r), name="L")
    (dd,) = te.differentiate(L, [d])
    return d, dd


def buffer_bytes(d, dd, options=None) -> int:
    """Bytes of every buffer the C kernel's runtime allocates per call (inputs excluded).

    >>> d, dd = program("alpha", 4, 64, None)
    >>> buffer_bytes(d, dd)  # dL (1 float), acc, dacc and dd (4*64 floats each)
    3076
    """
    from codegen.pipeline import generate
    from codegen.signature import Signature
    sig = Signature([dd], [d])
    prog, _, _ = generate(sig, options) if options is not None else generate(sig)
    total = 0
    for t in prog.tensors[len(sig.inputs):]:
        total += _nbytes(sig.shape(t, {}), t.dtype)
    return total


def _nbytes(shape, dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _status_kib(field: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> Optional[int]:
    """Reset the kernel's peak-RSS counter; the current RSS in bytes, or None if
    the counter cannot be reset (not Linux)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return None
    rss = _status_kib("VmRSS")
    return None if rss is None else rss * 1024


def _peak_rss_bytes() -> int:
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def peak_growth(fn) -> int:
    """Bytes by which the resident set size peaks above its level before ``fn()``.

    >>> import numpy as np
    >>> peak_growth(lambda: np.ones(1 << 22).sum()) >= 30 * 2**20  # 32 MiB touched
    True
    """
    base = _reset_peak()
    if base is None:
        before = _peak_rss_bytes()
        fn()
        return _peak_rss_bytes() - before
    fn()
    # The kernel syncs its per-thread RSS counters lazily (every 64 page faults), so
    # VmHWM can read a few pages below the VmRSS taken at the reset: a peak above the
    # level before is never negative.
    return max(0, _status_kib("VmHWM") * 1024 - base)


def measure(case: str, R: int, T: int, mode: str, out_path: str, repeats: int = 5) -> Dict:
    """Build, run once for the peak-RSS growth, then time ``repeats`` calls; the
    gradient is saved to ``out_path`` (.npy). ``mode``: "tape", "rolling" or the
    number of checkpoints. Meant to run in a fresh process."""
    import tensorexpr as te
    options = te.ScheduleOptions(checkpoint=mode != "tape")
    checkpoints = None if mode in ("tape", "rolling") else int(mode)
    d, dd = program(case, R, T, checkpoints)
    f = te.build(dd, inputs=[d], options=options)
    data = np.random.default_rng(0).uniform(0.0, 0.5, (R, T)).astype(np.float32)
    got = []
    grown = peak_growth(lambda: got.append(f(data)))
    np.save(out_path, got.pop())
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f(data)
        times.append(time.perf_counter() - t0)
    buffers = buffer_bytes(d, dd, options)
    return {"case": case, "R": R, "T": T, "mode": mode, "checkpoints": checkpoints,
            "buffers": buffers, "scratch": buffers - _nbytes(dd.shape, dd.dtype),
            "peak_rss_growth": grown,
            "time": float(np.median(times)),
            "checkpointed": "checkpointed gradient" in f.source}


def _child(case: str, R: int, T: int, mode: str, out_path: str,
           threads: Optional[int] = None) -> Dict:
    cmd = [sys.executable, "-m", "benchmarks.recurrence_memory", "--child", case, str(R), str(T),
           mode, out_path]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from benchmarks import pin_threads
    env = pin_threads(dict(os.environ))
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"benchmark subprocess failed ({' '.join(cmd)}):\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def run(R: int, T: int, ks: Sequence[int], cases: Sequence[str] = CASES,
        threads: Optional[int] = None) -> List[Dict]:
    """One fresh subprocess per (case, configuration); rows with ``max_diff`` filled in.
    ``threads``: OpenMP threads of the kernels (default: the suite's, ``benchmarks.THREADS``)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            ref = None
            for mode in ["tape", "rolling"] + [str(k) for k in ks]:
                path = os.path.join(tmp, f"{case}_{mode}.npy")
                row = _child(case, R, T, mode, path, threads)
                g = np.load(path)
                if ref is None:
                    ref = g
                row["max_diff"] = float(np.max(np.abs(g.astype(np.float64) - ref)))
                row["bit_identical"] = bool(np.array_equal(g, ref))
                rows.append(row)
    return rows


def table(rows: Sequence[Dict]) -> str:
    """The rows as a text table."""
    mib = 1024.0 * 1024.0
    lines = [f"{'case':6} {'R':>5} {'T':>5} {'memory':>13} {'buffers MiB':>12} "
             f"{'scratch MiB':>12} {'peak RSS +MiB':>14} {'time ms':>9} {'max |diff|':>10}"]
    for r in rows:
        mode = r["mode"] if r["checkpoints"] is None else f"k={r['checkpoints']}"
        if r["checkpoints"] is not None and not r["checkpointed"]:
            mode += " (tape!)"
        lines.append(f"{r['case']:6} {r['R']:5d} {r['T']:5d} {mode:>13} "
                     f"{r['buffers'] / mib:12.2f} {r['scratch'] / mib:12.2f} "
                     f"{r['peak_rss_growth'] / mib:14.2f} "
                     f"{r['time'] * 1e3:9.2f} {r['max_diff']:10.3g}")
    return "\n".join(lines)


def main(argv=None) -> List[Dict]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.recurrence_memory",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"R={QUICK[0]}, T={QUICK[1]}")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--threads", type=int, help="OpenMP threads (default: the suite's 2)")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        case, R, T, k, path = args.child
        row = measure(case, int(R), int(T), k, path)
        print(json.dumps(row))
        return [row]
    R, T, ks = QUICK if args.quick else FULL
    rows = run(R, T, ks, threads=args.threads)
    print(table(rows))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    bad = [r for r in rows if not r["bit_identical"]]
    if bad:
        print(f"ERROR: {len(bad)} checkpointed gradient(s) differ from the full tape",
              file=sys.stderr)
        sys.exit(1)
    return rows


if __name__ == "__main__":
    main()
