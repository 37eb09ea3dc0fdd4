"""A process forked after kernels ran (a data-loader worker) runs them correctly.

GNU libgomp keeps a record of the forking thread's team, whose threads the child does
not have: its first parallel region would wait for them forever. Each case runs in a
subprocess whose parent waits for its forked child with a timeout, so a hang fails the
test instead of hanging it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from codegen import compiler

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_PROGRAM = textwrap.dedent("""
    import ctypes, json, os, sys, time
    import numpy as np
    import tensorexpr as te
    from codegen import compiler, threads
    case = sys.argv[1]
    n = te.var("n")
    X = te.placeholder((n, 256), name="X")
    k = te.reduce_axis(256, name="k")
    f = te.build(te.compute((n,), lambda i: te.sum(X[i, k] * X[i, k], axis=k), name="Y"))
    x = np.random.default_rng(0).random((4000, 256), dtype=np.float32)
    want = (x.astype(np.float64) ** 2).sum(axis=1)
    assert np.allclose(f(x), want, rtol=1e-4)  # the parent's team now exists
    # a library with a parallel region that has no work threshold
    raw = compiler.load(compiler.compile_shared(
        "#include <omp.h>\\nint te_team(void) { int s = 0;\\n"
        "#pragma omp parallel reduction(+:s)\\n  s += 1;\\n  return s; }\\n", count=False))
    assert raw["te_team"]() >= 1
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            ok = np.allclose(f(x), want, rtol=1e-4)
            if case == "unthresholded":
                ok = ok and raw["te_team"]() == 1
            elif case == "built-in-child":
                g = te.build(te.compute((n,), lambda i: te.max(X[i, k], axis=k), name="M"))
                ok = ok and np.array_equal(g(x), x.max(axis=1))
            elif case == "thread-in-child":
                import threading
                out = []
                t = threading.Thread(target=lambda: out.append(f(x)))
                t.start(); t.join()
                ok = ok and np.allclose(out[0], want, rtol=1e-4)
            code = 0 if ok else 3
        finally:
            os._exit(code)
    for _ in range(600):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        status = "hang"
    # the parent keeps its threshold and its team
    kept = []
    for lib in compiler.loaded():
        try:
            kept.append(ctypes.c_int64.in_dll(lib, threads.SYMBOL).value)
        except ValueError:
            pass
    child = status if status == "hang" else os.waitstatus_to_exitcode(status)
    print(json.dumps({"child": child, "parent_threshold": sorted(set(kept)), "again": bool(np.allclose(f(x), want, rtol=1e-4)),
                      "openmp": compiler.find_compiler().openmp}))
""")


@pytest.mark.parametrize("case", ["kernel", "unthresholded", "built-in-child", "thread-in-child"])
def test_a_forked_child_runs_its_kernels(tmp_path, case):
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    script = tmp_path / "fork.py"
    script.write_text(_PROGRAM)
    # every loop with a threshold runs on the team in the parent
    env = dict(os.environ, PYTHONPATH=REPO, TENSOREXPR_PARALLEL_WORK="1", OMP_NUM_THREADS="2")
    r = subprocess.run([sys.executable, str(script), case], env=env, capture_output=True,
                       text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"child": 0, "parent_threshold": [1], "again": True,
                   "openmp": compiler.find_compiler().openmp}
