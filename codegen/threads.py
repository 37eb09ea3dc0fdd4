"""When a loop nest is worth the thread team: a threshold measured on this machine.

A parallel loop pays for waking the OpenMP team and for the barrier at its end.
On an ordinary machine with spinning threads that is a few microseconds; with
``OMP_WAIT_POLICY=PASSIVE`` (idle threads sleep in the kernel) or in a sandbox
it can be tens of microseconds, longer than a whole 1 MB elementwise loop. A
fixed threshold is wrong on one of the two, so every generated parallel loop
carries its estimated work and runs on the team only when
``work >= te_min_work``, a variable of the library that the runtime sets to
:func:`min_work` when it loads it.

:func:`min_work` measures, once per process, the cost ``c`` of an empty
parallel region started after a short pause (so the team has gone to sleep, as
between kernel calls; a low quantile, so that a moment of contention does not
decide) and the cost ``o`` of one operation of a streaming loop, and
returns the work at which ``n`` threads break even: ``T (1 - 1/n) = c`` with
``T = work * o``. ``$TENSOREXPR_PARALLEL_WORK`` overrides it.

The measurement takes ~0.2 s, so its answer is kept in the kernel cache directory
(``threads-*.txt``), keyed by what decides it: the machine, the compiler (its
OpenMP runtime), the CPUs this process may run on and the OpenMP settings of the
environment (thread count, wait policy). A new process reads it instead of
measuring again; remove the file to measure anew.

>>> LOWEST <= DEFAULT <= HIGHEST
True
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import Optional

#: the threshold when nothing can be measured (no OpenMP, no compiler)
DEFAULT = 1 << 15
#: bounds of a measured threshold (a wild measurement must not serialize everything)
LOWEST, HIGHEST = 1 << 12, 1 << 24
#: the name of the threshold variable in every generated library
SYMBOL = "te_min_work"
#: a threshold no loop reaches: every loop runs serially
NEVER = (1 << 63) - 1

_SOURCE = r"""
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <time.h>

static double te_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* seconds of each of n empty parallel regions, each after a pause of gap seconds (as
   between kernel calls: the team has gone to sleep); returns the team size */
int te_regions(int n, double gap, double *out)
{
  int threads = 1;
  for (int k = 0; k < n; k++) {
    struct timespec pause = {0, (long)(gap * 1e9)};
    nanosleep(&pause, NULL);
    double t0 = te_now();
#ifdef _OPENMP
    #pragma omp parallel
    {
      if (omp_get_thread_num() == 0) threads = omp_get_num_threads();
    }
#endif
    out[k] = te_now() - t0;
  }
  return threads;
}

/* seconds per element of a serial streaming multiply-add over n floats */
double te_op_seconds(float *a, const float *b, int64_t n, int reps)
{
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    double t0 = te_now();
    for (int64_t i = 0; i < n; i++) a[i] = a[i] * 0.5f + b[i];
    double t = te_now() - t0;
    if (t < best) best = t;
  }
  return best / (double)n;
}
"""

_lock = threading.Lock()
_value: Optional[int] = None


def min_work() -> int:
    """Estimated operations above which a loop nest runs on the thread team.

    >>> 1 << 12 <= min_work() <= 1 << 24
    True
    """
    global _value
    if _value is None:
        with _lock:
            if _value is None:
                _value = _decide()
    return _value


def run_serially() -> None:
    """From now on :func:`min_work` is :data:`NEVER` (a forked child does this: the
    OpenMP team it inherited the record of is gone).

    >>> import os
    >>> pid = os.fork()  # doctest: +SKIP
    >>> if pid == 0: run_serially()  # doctest: +SKIP
    """
    global _value, _lock
    _lock = threading.Lock()  # a vanished thread of the parent may have held it
    _value = NEVER


def _decide() -> int:
    env = os.environ.get("TENSOREXPR_PARALLEL_WORK")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise ValueError(f"$TENSOREXPR_PARALLEL_WORK must be an integer number of "
                             f"operations, not {env!r}") from None
    try:
        path = _cache_path()
    except Exception:  # no compiler: nothing to measure with either
        return DEFAULT
    try:
        with open(path, encoding="ascii") as f:
            kept = int(f.read())
        if LOWEST <= kept <= HIGHEST:
            return kept
    except (OSError, ValueError):
        pass  # not measured yet on this machine (or a damaged file): measure
    try:
        value = _measure()
    except Exception:  # no OpenMP, an unwritable cache: keep the default, unrecorded
        return DEFAULT
    try:
        from .compiler import write_atomic
        write_atomic(path, f"{value}\n")
    except OSError:
        pass  # an unwritable cache only costs measuring again in the next process
    return value


#: bump when what the measurement means changes
_FORMAT = "1"
#: the environment settings the cost of a parallel region depends on
SETTINGS = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_PROC_BIND",
            "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_BLOCKTIME")


def _cache_path() -> str:
    """Where the measured threshold of this machine, compiler and settings is kept."""
    from . import compiler, openmp_env
    comp = compiler.find_compiler()
    try:
        cpus = str(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cpus = str(os.cpu_count())
    env = openmp_env.settings()
    key = compiler.digest(_FORMAT, compiler.machine(), comp.identity, cpus,
                          *(f"{k}={env.get(k, '')}" for k in SETTINGS))
    return os.path.join(compiler.cache_dir(), f"threads-{key[:24]}.txt")


def _measure() -> int:
    import numpy as np

    from . import compiler
    lib = compiler.load(compiler.compile_shared(_SOURCE, count=False))
    lib.te_regions.argtypes = (ctypes.c_int, ctypes.c_double, ctypes.c_void_p)
    lib.te_regions.restype = ctypes.c_int
    lib.te_op_seconds.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int)
    lib.te_op_seconds.restype = ctypes.c_double
    times = np.zeros(16)
    threads = lib.te_regions(len(times), 2e-4, times.ctypes.data)
    if threads <= 1:
        return HIGHEST  # one thread: a region is pure cost
    # the first regions start the team; a low quantile, not the median: other work on a
    # loaded machine delays some wake-ups, which is not what a region costs
    # (sorted, not np.quantile: that imports numpy.ma, tens of milliseconds)
    region = sorted(times[2:].tolist())[len(times[2:]) // 4]
    n = 1 << 19  # 4 MiB of operands: beyond the fast caches, as large tensors are
    a, b = np.ones(n, np.float32), np.ones(n, np.float32)
    op = lib.te_op_seconds(a.ctypes.data, b.ctypes.data, n, 3)
    if not op > 0:
        return DEFAULT
    work = region * threads / (threads - 1) / op
    return int(min(max(work, LOWEST), HIGHEST))
