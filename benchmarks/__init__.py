"""The benchmark suite: the 14 cases of ``shared/benchmark-suite.md`` (tier 1) and the
19 common kernels of issue 14 (tier 2), side by side.

Run it as ``python -m benchmarks`` (``--help`` lists the options). For every case
and every installed system (tensorexpr, PyTorch eager autograd, JAX, hand-written
numpy) it reports build time, forward and VJP medians, their ratio, the gradient's
error against a float64 reference, a status, and how far each timing is from the
machine's measured peak FLOP/s or memory bandwidth.

Layout, one concern per module:

- ``cases``: what each case is (tier, sizes, inputs, which inputs are differentiated,
  analytic work); data, not code per system.
- ``systems/``: one module per system defining a forward function per case, and the
  common interface the runner drives (``systems.prepare``).
- ``reference``: the float64 reference gradient and the error measure.
- ``timing``: interleaved median timing and the machine's peak figures.
- ``report``: the terminal table, the JSON file and the PNG chart.
- ``runner``: the run itself; ``rebuild``: the cached rebuild in a new process.

>>> from benchmarks.cases import CASES
>>> len(CASES), CASES[0].title, sum(c.tier == 2 for c in CASES)
(33, 'matmul', 19)
"""

#: Every system runs with this many threads (torch.set_num_threads, XLA flags,
#: OMP/BLAS environment variables), so timings compare like with like.
THREADS = 2


#: How idle worker threads wait (set unless the environment already says): see pin_threads.
IDLE_THREADS = {"OMP_WAIT_POLICY": "PASSIVE", "OPENBLAS_THREAD_TIMEOUT": "24"}


def pin_threads(env=None) -> dict:
    """Set every thread-count knob to :data:`THREADS` in ``env`` (default ``os.environ``),
    and make idle OpenMP and OpenBLAS threads sleep soon instead of spinning (:data:`IDLE_THREADS`).

    Must run before numpy, torch or jax are imported: their thread pools read
    these variables once. ``torch.set_num_threads`` is called where torch is used.

    Why the idle policy: tensorexpr and PyTorch each bring an OpenMP runtime, and
    by default their idle threads spin, holding the 2 cores while another system
    (or the other runtime) runs. Measured on this project's 2-core machine, calls
    then stalled by 4-16 ms (scheduler ticks), 10-100x their time, even with one
    system alone; with passive waiting most of those stalls were gone. Small
    kernels pay some wake-up latency instead. OpenBLAS (numpy) spins its idle
    threads, yielding, before they sleep: by default for 2^28 cycles, and measured
    here its worker held half a core through the whole next sample of whichever
    system followed numpy (tensorexpr's 256x512x256 matmul 0.52 -> 0.88 ms, numpy's
    own calls unchanged). OPENBLAS_THREAD_TIMEOUT=24 (2^24 cycles, a few ms) ends
    that within the first calls of the next sample and keeps numpy's pool awake
    through its own back-to-back calls (matmul 0.38 ms, its two-matmul VJP 0.77 ms,
    as with the default); much shorter timeouts made two successive matmuls wait
    ~8 ms for a sleeping thread. A value already in the environment is kept, so a
    run can choose.

    >>> env = pin_threads({"OMP_WAIT_POLICY": "ACTIVE"})
    >>> env["OMP_NUM_THREADS"], env["OMP_WAIT_POLICY"], pin_threads({})["OMP_WAIT_POLICY"]
    ('2', 'ACTIVE', 'PASSIVE')
    >>> env["OPENBLAS_THREAD_TIMEOUT"]
    '24'
    """
    import os
    env = os.environ if env is None else env
    n = str(THREADS)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = n
    for var, value in IDLE_THREADS.items():
        env.setdefault(var, value)
    xla = env.get("XLA_FLAGS", "")
    if "intra_op_parallelism_threads" not in xla:
        env["XLA_FLAGS"] = (xla + " --xla_cpu_multi_thread_eigen=true "
                            f"intra_op_parallelism_threads={n}").strip()
    return env
