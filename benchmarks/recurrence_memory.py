"""Memory and time of recurrence gradients: full tape vs ``checkpoints=k``.

    python -m benchmarks.recurrence_memory            # R=1024, T=4096, float32
    python -m benchmarks.recurrence_memory --quick    # R=64, T=256 (seconds)
    python -m benchmarks.recurrence_memory --cells gru,lstm --systems te,jax

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

Then recurrent cells over time (``benchmarks.recurrence_cells``: a tanh RNN, a GRU
and an LSTM, T=4096, B=16, H=64, input size 32, float32; ``--quick``: T=64, B=2,
H=8, input 4, k=4), the loss ``sum(h[T-1]**2)``, the gradient w.r.t. the input and
every weight, one row per system and mode:

* tensorexpr (C backend): ``tape`` (``checkpoint=False``, the reference),
  ``segments:k`` and ``revolve:k`` (``checkpoints=k`` with
  ``ScheduleOptions(checkpoint="segments")`` or the default revolve); ``buffers``
  exact as above; the note lists the schedule's ``checkpoint`` lines, or says
  ``NOT checkpointed: full tape`` when the build keeps every step (the GRU and the
  LSTM are checkpointed in both modes: their forward sums, hoisted gates and per-step
  gradients in rings of a turn's rows);
* JAX: ``lax.scan`` under ``jax.jit`` with ``jax.grad``, the body plain
  (``scan``), in ``jax.checkpoint`` (``remat``) or with ``nothing_saveable``
  (``remat0``); ``buffers`` is XLA's own estimate (temp + output of
  ``memory_analysis``);
* PyTorch: a Python loop with autograd (``loop``), or ``torch.utils.checkpoint``
  (``use_reentrant=False``) on each of k blocks of T/k steps (``ckpt:k``);
  ``buffers`` unknown (``-``).

Each in a fresh subprocess (``--quick``: one per cell and system, its modes in
turn), peak RSS and time as above (median of 3 calls); JAX and PyTorch first run
the mode at T=2 so their lazy set-up is not counted. ``max |diff|`` and
``rel diff`` (relative to each gradient's largest magnitude) are against
tensorexpr's tape: 0 for its checkpointed modes (a failure otherwise), rounding
for the peers, which add in another order. A plot of peak RSS against time per
cell goes to ``benchmarks/results/recurrence_cells.png`` (``--png``) if
matplotlib is installed.
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
#: the recurrent cells (``benchmarks.recurrence_cells``): T, B, H, D (input size), ks
CELL_FULL = (4096, 16, 64, 32, (8, 64))
CELL_QUICK = (64, 2, 8, 4, (4,))
SYSTEMS = ("te", "jax", "torch")


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
    """Bytes of every buffer the C kernel's runtime allocates per call (inputs excluded);
    ``d`` and ``dd`` may be lists (several inputs and outputs).

    >>> d, dd = program("alpha", 4, 64, None)
    >>> buffer_bytes(d, dd)  # dL (1 float), acc, dacc and dd (4*64 floats each)
    3076
    """
    from codegen.pipeline import generate
    from codegen.signature import Signature
    sig = Signature(list(dd) if isinstance(dd, (list, tuple)) else [dd],
                    list(d) if isinstance(d, (list, tuple)) else [d])
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


def _spawn(args: Sequence[str], threads: Optional[int] = None) -> Dict:
    """Run ``python -m benchmarks.recurrence_memory *args`` in a fresh process; its
    last line of output, as JSON."""
    cmd = [sys.executable, "-m", "benchmarks.recurrence_memory"] + list(args)
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


def _child(case: str, R: int, T: int, mode: str, out_path: str,
           threads: Optional[int] = None) -> Dict:
    return _spawn(["--child", case, str(R), str(T), mode, out_path], threads)


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


def cell_modes(ks: Sequence[int], systems: Sequence[str] = SYSTEMS) -> List[tuple]:
    """``(system, mode)`` pairs measured for each cell, the reference (tensorexpr's
    full tape) first.

    >>> cell_modes([8], ["te", "torch"])
    [('te', 'tape'), ('te', 'segments:8'), ('te', 'revolve:8'), ('torch', 'loop'), ('torch', 'ckpt:8')]
    """
    modes = []
    if "te" in systems:
        modes += [("te", "tape")] + [("te", f"{m}:{k}") for m in ("segments", "revolve")
                                     for k in ks]
    if "jax" in systems:
        modes += [("jax", m) for m in ("scan", "remat", "remat0")]
    if "torch" in systems:
        modes += [("torch", "loop")] + [("torch", f"ckpt:{k}") for k in ks]
    return modes


def measure_cell(cell: str, T: int, B: int, H: int, D: int, system: str, mode: str,
                 out_path: str, ks: Sequence[int] = (8,), repeats: int = 3) -> Dict:
    """Build (or jit-compile) ``cell``'s gradient in ``system`` (see :func:`cell_modes`),
    run it once for the peak-RSS growth, then time ``repeats`` calls; the gradients
    are saved to ``out_path`` (.npz). tensorexpr's ``tape`` is the program with
    ``checkpoints=ks[0]`` built with ``checkpoint=False``: its weight gradients are
    added a step at a time like the checkpointed builds', so these must match it
    bit for bit. JAX and PyTorch first run the same mode at ``T=2`` (their lazy
    imports and runtime set-up, ~80 MiB for a first ``torch.utils.checkpoint``, are
    not the gradient's memory). Meant to run in a fresh process.

    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     row = measure_cell("rnn", 8, 1, 2, 2, "te", "revolve:2", os.path.join(tmp, "g.npz"))
    >>> row["checkpointed"], row["buffers"] > 0, row["note"].startswith("h (")
    (True, True, True)
    """
    from benchmarks import THREADS
    from benchmarks import recurrence_cells as rc
    data = rc.arrays(cell, T, B, H, D)
    kind, _, k = mode.partition(":")
    buffers, checkpointed, note = None, None, ""
    if system == "te":
        import tensorexpr as te
        ins, grads = rc.te_program(cell, T, B, H, D, int(k) if k else int(ks[0]))
        options = te.ScheduleOptions(checkpoint={"tape": False, "segments": "segments",
                                                 "revolve": True}[kind])
        f = te.build(grads, inputs=ins, options=options)
        buffers = buffer_bytes(ins, grads, options)
        checkpointed = "checkpointed gradient" in f.source
        kept = [line for line in f.schedule.checkpoint if "schedule:" not in line]
        if checkpointed:
            note = "; ".join(kept)
        elif kind != "tape":
            note = "NOT checkpointed: full tape"
        call = lambda: f(*data)
    elif system == "jax":
        import jax
        import jax.numpy as jnp
        compiled = rc.jax_grad(cell, T, B, H, kind).lower(*data).compile()
        try:
            ma = compiled.memory_analysis()
            buffers = int(ma.temp_size_in_bytes + ma.output_size_in_bytes)
            note = "buffers: XLA temp + output"
        except Exception:  # not every jax version or backend has the analysis
            note = "buffers: n/a"
        def runner(fn, arrays):
            args = [jax.device_put(jnp.asarray(a)) for a in arrays]
            return lambda: [np.asarray(g) for g in jax.block_until_ready(fn(*args))]
        tiny = rc.arrays(cell, 2, B, H, D)
        runner(rc.jax_grad(cell, 2, B, H, kind).lower(*tiny).compile(), tiny)()
        call = runner(compiled, data)
    elif system == "torch":
        import torch
        torch.set_num_threads(THREADS)
        fn = rc.torch_grad(cell, T, B, H, int(k) if k else None)
        call = lambda: fn(*data)
        rc.torch_grad(cell, 2, B, H, 1 if k else None)(*rc.arrays(cell, 2, B, H, D))
    else:
        raise ValueError(f"unknown system {system!r}; use one of {', '.join(SYSTEMS)}")
    got = []
    grown = peak_growth(lambda: got.append(call()))
    np.savez(out_path, *got.pop())
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return {"cell": cell, "T": T, "B": B, "H": H, "D": D, "system": system, "mode": mode,
            "buffers": buffers, "peak_rss_growth": grown, "time": float(np.median(times)),
            "checkpointed": checkpointed, "note": note}


def available(systems: Sequence[str]) -> List[str]:
    """The systems among ``systems`` that are installed (tensorexpr always is).

    >>> available(["te"])
    ['te']
    """
    import importlib.util
    return [s for s in systems if s == "te" or importlib.util.find_spec(s) is not None]


def run_cells(T: int, B: int, H: int, D: int, ks: Sequence[int],
              cells: Sequence[str] = ("rnn", "gru", "lstm"),
              systems: Sequence[str] = SYSTEMS, threads: Optional[int] = None,
              shared: bool = False) -> List[Dict]:
    """One fresh subprocess per (cell, system, mode); rows with ``max_diff`` (and
    ``rel_diff``, relative to each gradient's largest magnitude) against the first
    row of the cell (tensorexpr's full tape when ``te`` is among ``systems``).
    ``shared``: one subprocess per (cell, system) runs all its modes in turn
    (``--quick``: far fewer process starts; the peak RSS of the later modes is then
    not that of a fresh process).

    >>> rows = run_cells(4, 1, 2, 2, [2], ["rnn"], ["te"])  # doctest: +SKIP
    >>> [(r["mode"], r["bit_identical"]) for r in rows]  # doctest: +SKIP
    [('tape', True), ('segments:2', True), ('revolve:2', True)]
    """
    from benchmarks.recurrence_cells import compare
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for cell in cells:
            ref = None
            pairs = cell_modes(ks, systems)
            groups = ([[(s, m) for s, m in pairs if s == sys_] for sys_ in
                       dict.fromkeys(s for s, _ in pairs)] if shared else [[p] for p in pairs])
            measured = []
            for group in groups:
                system = group[0][0]
                modes = "+".join(m for _, m in group)
                path = os.path.join(tmp, f"{cell}_{system}.npz")
                measured += [(r, path.replace(".npz", f"_{i}.npz")) for i, r in enumerate(
                    _spawn(["--cell-child", cell, str(T), str(B), str(H), str(D), system,
                            modes, path, ",".join(map(str, ks))], threads))]
            for row, path in measured:
                with np.load(path) as z:
                    g = [z[n] for n in sorted(z.files, key=lambda n: int(n.split("_")[1]))]
                if ref is None:
                    ref = g
                row["max_diff"], row["rel_diff"] = compare(g, ref)
                row["bit_identical"] = all(np.array_equal(a, b) for a, b in zip(g, ref))
                rows.append(row)
    return rows


def cells_table(rows: Sequence[Dict]) -> str:
    """The rows of :func:`run_cells` as a text table.

    >>> row = {"cell": "gru", "T": 8, "B": 1, "H": 2, "system": "te", "mode": "revolve:4",
    ...        "buffers": 2**20, "peak_rss_growth": 0, "time": 1e-3, "max_diff": 0.0,
    ...        "rel_diff": 0.0, "note": "NOT checkpointed: full tape"}
    >>> print(cells_table([row]).splitlines()[1])  # doctest: +NORMALIZE_WHITESPACE
    gru 8 1 2 te revolve:4 1.00 0.00 1.00 0 0  NOT checkpointed: full tape
    """
    mib = 1024.0 * 1024.0
    lines = [f"{'cell':5} {'T':>5} {'B':>3} {'H':>4} {'system':>6} {'mode':>12} "
             f"{'buffers MiB':>12} {'peak RSS +MiB':>14} {'time ms':>9} {'max |diff|':>10} "
             f"{'rel diff':>9}  note"]
    for r in rows:
        buf = "-" if r["buffers"] is None else f"{r['buffers'] / mib:.2f}"
        lines.append(f"{r['cell']:5} {r['T']:5d} {r['B']:3d} {r['H']:4d} {r['system']:>6} "
                     f"{r['mode']:>12} {buf:>12} {r['peak_rss_growth'] / mib:14.2f} "
                     f"{r['time'] * 1e3:9.2f} {r['max_diff']:10.3g} {r['rel_diff']:9.2g}  "
                     f"{r['note']}")
    return "\n".join(lines)


def plot_cells(rows: Sequence[Dict], path: str) -> str:
    """Peak RSS growth against time, one panel per cell, to ``path``; a note saying
    what was done (or why not: matplotlib not installed).

    >>> import os, tempfile
    >>> row = {"cell": "rnn", "T": 8, "system": "te", "mode": "tape", "time": 1e-3,
    ...        "peak_rss_growth": 0}
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     note = plot_cells([row], os.path.join(tmp, "p.png"))
    >>> note.startswith(("plot written", "matplotlib not installed"))
    True
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not installed: no plot (pip install -e '.[bench]')"
    cells = list(dict.fromkeys(r["cell"] for r in rows))
    fig, axes = plt.subplots(1, len(cells), figsize=(5 * len(cells), 4), squeeze=False)
    marks = {"te": "o", "jax": "s", "torch": "^"}
    for ax, cell in zip(axes[0], cells):
        for r in (r for r in rows if r["cell"] == cell):
            x, y = r["time"] * 1e3, r["peak_rss_growth"] / 2**20
            ax.scatter([x], [y], marker=marks.get(r["system"], "x"))
            ax.annotate(f"{r['system']} {r['mode']}", (x, y), fontsize=7)
        ax.set_title(f"{cell} T={rows[0]['T']}")
        ax.set_xlabel("time (ms)")
        ax.set_ylabel("peak RSS growth (MiB)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return f"plot written to {path}"


def main(argv=None) -> List[Dict]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.recurrence_memory",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"R={QUICK[0]}, T={QUICK[1]}; cells at T={CELL_QUICK[0]}, "
                             f"B={CELL_QUICK[1]}, H={CELL_QUICK[2]}")
    parser.add_argument("--cells", default=",".join(CASES + ("rnn", "gru", "lstm")),
                        help="comma-separated cases among ewma,alpha,rnn,gru,lstm "
                             "(default: all)")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help="systems for rnn/gru/lstm among te,jax,torch (default: all "
                             "installed)")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--png", metavar="PATH",
                        help="plot memory against time of rnn/gru/lstm (default: "
                             "benchmarks/results/recurrence_cells.png)")
    parser.add_argument("--threads", type=int, help="OpenMP threads (default: the suite's 2)")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--cell-child", nargs=9, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        case, R, T, k, path = args.child
        row = measure(case, int(R), int(T), k, path)
        print(json.dumps(row))
        return [row]
    if args.cell_child:  # modes joined by "+", gradients to path's stem + _<i>.npz
        cell, T, B, H, D, system, modes, path, ks = args.cell_child
        rows = [measure_cell(cell, int(T), int(B), int(H), int(D), system, mode,
                             path.replace(".npz", f"_{i}.npz"), [int(k) for k in ks.split(",")])
                for i, mode in enumerate(modes.split("+"))]
        print(json.dumps(rows))
        return rows
    chosen = [c for c in args.cells.split(",") if c]
    unknown = set(chosen) - set(CASES + ("rnn", "gru", "lstm"))
    if unknown:
        parser.error(f"unknown case(s) {', '.join(sorted(unknown))}")
    wanted = [s for s in args.systems.split(",") if s]
    if set(wanted) - set(SYSTEMS):
        parser.error(f"unknown system(s) among {args.systems}")
    systems = available(wanted)
    rows: List[Dict] = []
    cases = [c for c in CASES if c in chosen]
    if cases:
        R, T, ks = QUICK if args.quick else FULL
        rows = run(R, T, ks, cases, threads=args.threads)
        print(table(rows))
    cells = [c for c in ("rnn", "gru", "lstm") if c in chosen]
    cell_rows: List[Dict] = []
    if cells:
        missing = [s for s in wanted if s not in systems]
        if missing:
            print(f"not installed, skipped: {', '.join(missing)}")
        T, B, H, D, ks = CELL_QUICK if args.quick else CELL_FULL
        cell_rows = run_cells(T, B, H, D, ks, cells, systems, threads=args.threads,
                              shared=args.quick)
        if rows:
            print()
        print(cells_table(cell_rows))
        png = args.png or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                       "recurrence_cells.png")
        os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
        print(plot_cells(cell_rows, png))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows + cell_rows, fh, indent=1)
    bad = [r for r in rows if not r["bit_identical"]]
    bad += [r for r in cell_rows if r["system"] == "te" and not r["bit_identical"]]
    if bad:
        print(f"ERROR: {len(bad)} checkpointed gradient(s) differ from the full tape",
              file=sys.stderr)
        sys.exit(1)
    return rows + cell_rows


if __name__ == "__main__":
    main()
