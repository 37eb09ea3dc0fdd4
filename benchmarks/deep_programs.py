"""Long programs: the gradients of deep expressions and long chains build, in linear time.

Issue 12 asks that chains of 1,000 tensors and expressions of depth 10,000 build,
with gradient size growing linearly. This script builds the gradient of each at
the sizes asked, checks its values against the numpy backend, and prints where
the time goes (differentiate, lowering to C, compiling) and the C source size,
per operation of depth, so linear growth reads off the table::

    python -m benchmarks.deep_programs                 # depth 1,000 and 10,000; chain 1,000
    python -m benchmarks.deep_programs --deep 500 2000 --chain 100

Kernels are compiled into a fresh cache directory: every figure is a cold build.

>>> X, T, L = deep(3)
>>> T.name, L.shape
('T', ())
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import tensorexpr as te

#: Elements of the input: the programs are about depth, not data.
N = 4


def deep(n: int, size: int = N):
    """``x = tanh(x) * 0.5 + x`` (or ``sin``) ``n`` times in one expression: each ``x``
    has two parents, so the expression is a DAG of depth ``n``; ``L = sum(T * T)``.

    >>> X, T, L = deep(2)
    >>> print(T)
    T[i] = (tanh((sin(X[i]) * 0.25d) + X[i]) * 0.5d) + ((sin(X[i]) * 0.25d) + X[i])    for i in [0, 4)    float64
    """
    X = te.placeholder((size,), name="X", dtype="float64")

    def body(i):
        x = X[i]
        for k in range(n):
            x = te.tanh(x) * 0.5 + x if k % 2 else te.sin(x) * 0.25 + x
        return x
    T = te.compute((size,), body, name="T")
    r = te.reduce_axis(size)
    L = te.compute((), lambda: te.sum(T[r] * T[r], axis=r), name="L")
    return X, T, L


def chain(n: int, size: int = N):
    """``n`` tensors, each an elementwise function of the one before; ``L = sum(T * T)``.

    >>> X, T, L = chain(5)
    >>> T.name
    'T4'
    """
    X = te.placeholder((size,), name="X", dtype="float64")
    # well conditioned: the gradient stays of order 1 along the chain
    ops = [lambda a: te.tanh(a) * 0.25 + a * 0.8, lambda a: te.sin(a) * 0.2 + a,
           lambda a: a * 0.9 + a * a * 0.05, lambda a: te.sigmoid(a) + a * 0.5]
    T = X
    for k in range(n):
        T = te.compute((size,), lambda i, T=T, k=k: ops[k % len(ops)](T[i]), name=f"T{k}")
    r = te.reduce_axis(size)
    L = te.compute((), lambda: te.sum(T[r] * T[r], axis=r), name="L")
    return X, T, L


def select_chain(depth: int, size: int = 8):
    """``Y[i]``: ``e = select(C[..] > 0, tanh(e) * 0.5, e * C[..])`` ``depth`` times from
    ``e = X[i]``, each select in both branches of the next (a DAG linear in ``depth``
    whose paths are ``2**depth``). Returns ``(Y, X, C)``.

    >>> Y, X, C = select_chain(1, size=4)
    >>> print(Y)
    Y[i] = select(C[(i + 0) % 4] > 0.0d, tanh(X[i]) * 0.5d, X[i] * C[((i + 0) + 1) % 4])    for i in [0, 4)    float64
    """
    X = te.placeholder((size,), "float64", "X")
    C = te.placeholder((size,), "float64", "C")

    def body(i):
        e = X[i]
        for d in range(depth):
            e = te.select(C[(i + d) % size] > 0.0, te.tanh(e) * 0.5, e * C[(i + d + 1) % size])
        return e
    return te.compute((size,), body, name="Y"), X, C


def measure(kind: str, n: int) -> dict:
    """Build the gradient of ``deep(n)`` or ``chain(n)`` with the C backend; its times
    (s), C source size and the largest C function; raises if its values differ
    from the numpy backend's.

    >>> m = measure("chain", 3)
    >>> sorted(m), m["n"]
    (['compile_s', 'differentiate_s', 'kind', 'largest_function', 'lower_s', 'n', 'source_bytes'], 3)
    """
    from codegen.compiler import compile_shared, largest_function
    from codegen.pipeline import generate
    from codegen.signature import Signature

    X, _, L = (deep if kind == "deep" else chain)(n)
    t0 = time.perf_counter()
    (g,) = te.differentiate(L, [X])
    t1 = time.perf_counter()
    _, source, _ = generate(Signature([g], [X]))
    t2 = time.perf_counter()
    compile_shared(source)
    t3 = time.perf_counter()
    x = np.random.default_rng(1).uniform(-1, 1, N)
    got = te.build(g)(x)  # the library just compiled, from the cache
    want = te.build(g, backend="numpy")(x)
    if not np.allclose(got, want, rtol=1e-9, atol=1e-12):
        raise AssertionError(f"{kind}({n}): C {got} != numpy {want}")
    return {"kind": kind, "n": n, "differentiate_s": t1 - t0, "lower_s": t2 - t1,
            "compile_s": t3 - t2, "source_bytes": len(source),
            "largest_function": largest_function(source)}


def table(rows) -> str:
    """The measurements as a text table, with per-unit figures (per level or tensor).

    >>> print(table([{"kind": "deep", "n": 10, "differentiate_s": 0.1, "lower_s": 0.2,
    ...               "compile_s": 1.0, "source_bytes": 3000, "largest_function": 90}]))
    program       n  differentiate s  lower s  compile s  total s  C bytes  bytes/n  ms/n
    deep         10             0.10     0.20       1.00     1.30     3000      300   130
    """
    head = (f"{'program':<8}{'n':>7}{'differentiate s':>17}{'lower s':>9}{'compile s':>11}"
            f"{'total s':>9}{'C bytes':>9}{'bytes/n':>9}{'ms/n':>6}")
    lines = [head]
    for r in rows:
        total = r["differentiate_s"] + r["lower_s"] + r["compile_s"]
        lines.append(f"{r['kind']:<8}{r['n']:>7}{r['differentiate_s']:>17.2f}{r['lower_s']:>9.2f}"
                     f"{r['compile_s']:>11.2f}{total:>9.2f}{r['source_bytes']:>9}"
                     f"{r['source_bytes'] // r['n']:>9}{1000 * total / r['n']:>6.0f}")
    return "\n".join(lines)


def main(argv=None) -> None:
    """Measure the sizes asked and print the table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.deep_programs")
    parser.add_argument("--deep", type=int, nargs="*", default=[1000, 10000])
    parser.add_argument("--chain", type=int, nargs="*", default=[1000])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TENSOREXPR_CACHE_DIR"] = cache
        rows = []
        for kind, sizes in (("deep", args.deep), ("chain", args.chain)):
            for n in sizes:
                rows.append(measure(kind, n))
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(rows))


if __name__ == "__main__":
    main()
