"""The programs whose generated C is snapshotted (``test_snapshots``).

A refactor of the code generator must not change the C it generates; a change
that is meant to happen is its own, explained commit, which regenerates the
hashes with ``python -m tests.codegen.snapshot_programs --update``.

The programs: every tier-1 benchmark case's forward, its VJP given the saved forward
values, and its VJP recomputing them (the suite's own sizes), and a few dozen
smaller programs that take the other schedule strategies (symbolic sizes,
recurrences and checkpoints, gathers and scatters, selects and where-clauses,
clamps, flattens, float64, integers). Each is generated for two fixed targets
(AVX2 and AVX-512 register shapes), so the hashes do not depend on this machine.

>>> names = [name for name, _ in programs()]
>>> len(names) == len(set(names)) and "01_matmul/fwd" in names
True
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from typing import Callable, Dict, List, Tuple

import tensorexpr as te
from codegen import target
from codegen.pipeline import source_text
from codegen.signature import Signature
from tensorexpr.build import program

HERE = os.path.dirname(os.path.abspath(__file__))
#: where the hashes live
SNAPSHOT_FILE = os.path.join(HERE, "snapshots", "c_sources.json")
#: the targets every program is generated for
TARGETS = {"avx2": target.Target(32, 16, True), "avx512": target.Target(64, 32, True)}

Program = Tuple[List[te.Tensor], List[te.Tensor]]  # (outputs, inputs)


# {{{ the benchmark cases


def _case_programs() -> List[Tuple[str, Callable[[], Program]]]:
    from benchmarks.cases import TIER1
    from benchmarks.systems import te_sys

    out = []
    for case in TIER1:  # tier 2's programs are not snapshotted (yet): issue 14
        p = case.params()

        def forward(case=case, p=p):
            ph, Y = te_sys.define(case, p)
            return [Y], ph

        def vjp(case=case, p=p, recompute=False):
            ph, Y, override = te_sys.define_with_override(case, p)
            H = te.placeholder(Y.shape, dtype=Y.dtype, name="H")
            by_name = {t.name: t for t in ph}
            grads = list(te.differentiate(Y, [by_name[n] for n in case.wrt], head=H,
                                          override=override))
            saved = [] if recompute else te.saved_values(grads, Y)
            return grads, ph + [H] + saved

        name = f"{case.id:02d}_{case.key}"
        out += [(f"{name}/fwd", forward), (f"{name}/vjp", vjp),
                (f"{name}/vjp_recompute", lambda f=vjp: f(recompute=True))]
    return out


# }}}

# {{{ smaller programs


def _small_programs() -> List[Tuple[str, Callable[[], Program]]]:
    n, m = te.var("n"), te.var("m")
    progs: Dict[str, Callable[[], Program]] = {}

    def reg(fn):
        progs[fn.__name__] = fn
        return fn

    @reg
    def matmul_symbolic():
        A = te.placeholder((n, 64), name="A")
        B = te.placeholder((64, 32), name="B")
        k = te.reduce_axis(64, name="k")
        C = te.compute((n, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        i2, j2 = te.reduce_axis((0, n), name="i2"), te.reduce_axis((0, 32), name="j2")
        s = te.compute((), lambda: te.sum(C[i2, j2] * C[i2, j2], axis=[i2, j2]), name="s")
        return [C, s], [A, B]

    @reg
    def matmul_symbolic_vjp():
        (C, s), (A, B) = matmul_symbolic()
        return list(te.differentiate(s, [A, B])), [A, B]

    @reg
    def matmul_float64_vjp():
        A = te.placeholder((37, 29), "float64", "A")
        B = te.placeholder((29, 41), "float64", "B")
        k = te.reduce_axis(29, name="k")
        C = te.compute((37, 41), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        H = te.placeholder((37, 41), "float64", "H")
        return list(te.differentiate(C, [A, B], head=H)), [A, B, H]

    def _conv(stride, pad, dil, batch=2, hw=13, dtype="float32"):
        X = te.placeholder((batch, 3, hw, hw), dtype, "X")
        W = te.placeholder((4, 3, 3, 3), dtype, "W")
        o = (hw + 2 * pad - dil * 2 - 1) // stride + 1
        c, ky, kx = (te.reduce_axis(3, name=nm) for nm in ("c", "ky", "kx"))

        def body(b, f, y, x):
            iy, ix = y * stride + ky * dil - pad, x * stride + kx * dil - pad
            term = X[b, c, iy, ix] * W[f, c, ky, kx]
            if pad:
                term = te.select((iy >= 0) & (iy < hw) & (ix >= 0) & (ix < hw), term, 0.0)
            return te.sum(term, axis=[c, ky, kx])
        Y = te.compute((batch, 4, o, o), body, name="Y")
        H = te.placeholder(Y.shape, dtype, "H")
        return Y, H, X, W

    for stride, pad, dil in ((1, 1, 1), (2, 0, 1), (1, 0, 2), (2, 1, 1), (3, 2, 2)):
        def conv_vjp(stride=stride, pad=pad, dil=dil):
            Y, H, X, W = _conv(stride, pad, dil)
            return [Y] + list(te.differentiate(Y, [X, W], head=H)), [X, W, H]
        progs[f"conv_s{stride}_p{pad}_d{dil}"] = conv_vjp

    @reg
    def conv_symbolic_batch_vjp():
        Y, H, X, W = _conv(1, 1, 1, batch=n)
        return list(te.differentiate(Y, [X, W], head=H)), [X, W, H]

    @reg
    def conv_float64_vjp():
        Y, H, X, W = _conv(2, 1, 1, dtype="float64")
        return list(te.differentiate(Y, [X, W], head=H)), [X, W, H]

    @reg
    def pooling():
        X = te.placeholder((2, 3, 9, 9), name="X")
        ry, rx = te.reduce_axis(3, name="ry"), te.reduce_axis(3, name="rx")
        Mx = te.compute((2, 3, 3, 3), lambda b, c, y, x: te.max(
            X[b, c, 3 * y + ry, 3 * x + rx], axis=[ry, rx]), name="Mx")
        Av = te.compute((2, 3, 7, 7), lambda b, c, y, x: te.sum(
            X[b, c, y + ry, x + rx], axis=[ry, rx]) / 9.0, name="Av")
        H1, H2 = te.placeholder(Mx.shape, name="H1"), te.placeholder(Av.shape, name="H2")
        (g1,) = te.differentiate(Mx, [X], head=H1)
        (g2,) = te.differentiate(Av, [X], head=H2)
        return [Mx, Av, g1, g2], [X, H1, H2]

    @reg
    def softmax_recompute():
        X = te.placeholder((n, 70), name="X")
        k1, k2 = te.reduce_axis(70, name="k1"), te.reduce_axis(70, name="k2")
        mx = te.compute((n,), lambda i: te.max(X[i, k1], axis=k1), name="m")
        e = te.compute((n, 70), lambda i, j: te.exp(X[i, j] - mx[i]), name="e")
        s = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="s")
        Y = te.compute((n, 70), lambda i, j: e[i, j] / s[i], name="Y")
        H = te.placeholder((n, 70), name="H")
        return [Y] + list(te.differentiate(Y, [X], head=H)), [X, H]

    @reg
    def layer_norm_where():
        X = te.placeholder((16, 33), name="X")
        k = te.reduce_axis(33, name="k")
        mean = te.compute((16,), lambda i: te.sum(X[i, k], axis=k, where=X[i, k] > 0) / 33.0,
                          name="mean")
        Y = te.compute((16, 33), lambda i, j: te.tanh(X[i, j] - mean[i]), name="Y")
        H = te.placeholder((16, 33), name="H")
        return [Y] + list(te.differentiate(Y, [X], head=H)), [X, H]

    @reg
    def blur_symbolic():
        X = te.placeholder((n,), name="X")
        Y = te.compute((n,), lambda i: (X[te.maximum(i - 1, 0)] + X[i]
                                        + X[te.minimum(i + 1, n - 1)]) / 3.0, name="Y")
        H = te.placeholder((n,), name="H")
        return [Y] + list(te.differentiate(Y, [X], head=H)), [X, H]

    @reg
    def blur_2d_clamped():
        X = te.placeholder((n, m), name="X")

        def at(y, x):
            return X[te.minimum(te.maximum(y, 0), n - 1), te.minimum(te.maximum(x, 0), m - 1)]
        Y = te.compute((n, m), lambda y, x: (at(y - 1, x) + at(y + 1, x) + at(y, x - 1)
                                             + at(y, x + 1)) * 0.25, name="Y")
        H = te.placeholder((n, m), name="H")
        return [Y] + list(te.differentiate(Y, [X], head=H)), [X, H]

    @reg
    def flatten_unflatten():
        X = te.placeholder((4, 6, 5), name="X")
        F = te.compute((4, 30), lambda b, k: X[b, k // 5, k % 5] * 2.0, name="F")
        U = te.compute((4, 6, 5), lambda b, i, j: F[b, i * 5 + j] + 1.0, name="U")
        H = te.placeholder((4, 6, 5), name="H")
        return [F, U] + list(te.differentiate(U, [X], head=H)), [X, H]

    @reg
    def transpose_diag_reverse():
        X = te.placeholder((9, 9), name="X")
        T = te.compute((9, 9), lambda i, j: X[j, i] + X[8 - i, j], name="T")
        D = te.compute((9,), lambda i: X[i, i] * T[i, 8 - i], name="D")
        H = te.placeholder((9,), name="H")
        return [T, D] + list(te.differentiate(D, [X], head=H)), [X, H]

    @reg
    def embedding_scatter():
        E = te.placeholder((50, 24), name="E")
        idx = te.placeholder((n,), "int32", "idx")
        Y = te.compute((n, 24), lambda i, d: E[idx[i], d] * 3.0, name="Y")
        H = te.placeholder((n, 24), name="H")
        return [Y] + list(te.differentiate(Y, [E], head=H)), [E, idx, H]

    @reg
    def gather_rows_data():
        X = te.placeholder((20, 40), "float64", "X")
        idx = te.placeholder((7,), "int64", "idx")
        Y = te.compute((7, 40), lambda i, d: te.exp(X[idx[i], d]) + X[idx[i], 39 - d], name="Y")
        H = te.placeholder((7, 40), "float64", "H")
        return [Y] + list(te.differentiate(Y, [X], head=H)), [X, idx, H]

    @reg
    def ewma_checkpointed():
        T, R = 64, 5
        d = te.placeholder((R, T), name="d")
        acc = te.recurrence((T, R), lambda a, s, r: te.select(
            s == 0, d[r, 0], (1.0 - a[s - 1, r]) * d[r, s] + a[s - 1, r]), name="acc",
            checkpoints=8)
        r = te.reduce_axis(R, name="r")
        L = te.compute((), lambda: te.sum(acc[T - 1, r] ** 2, axis=r), name="L")
        return [L] + list(te.differentiate(L, [d])), [d]

    @reg
    def ewma_ring():
        T, R = 40, 6
        d = te.placeholder((R, T), name="d")
        e = te.recurrence((T, R), lambda e, t, r: te.select(
            t == 0, d[r, 0], 0.5 * d[r, t] + 0.5 * e[t - 1, r]), name="e")
        Y = te.compute((R,), lambda r: e[T - 1, r], name="Y")
        H = te.placeholder((R,), name="H")
        return [Y] + list(te.differentiate(Y, [d], head=H)), [d, H]

    @reg
    def rnn_tanh():
        T, B, Hd = 8, 2, 4
        u = te.placeholder((T, B, Hd), name="u")
        Wh = te.placeholder((Hd, Hd), name="Wh")
        k = te.reduce_axis(Hd, name="k")
        h = te.recurrence((T, B, Hd), lambda h, t, b, j: te.tanh(u[t, b, j] + te.select(
            t == 0, 0.0, te.sum(h[t - 1, b, k] * Wh[k, j], axis=k))), name="h")
        H = te.placeholder((T, B, Hd), name="H")
        return [h] + list(te.differentiate(h, [u, Wh], head=H)), [u, Wh, H]

    @reg
    def recurrence_order2_last_axis():
        X = te.placeholder((5, 12), "float64", "X")
        Y = te.recurrence((5, 12), lambda y, r, t: X[r, t] + te.select(
            t >= 2, 0.5 * y[r, t - 1] - 0.25 * y[r, t - 2], 0.0), name="Y", dtype="float64")
        H = te.placeholder((5, 12), "float64", "H")
        return [Y] + list(te.differentiate(Y, [X], head=H)), [X, H]

    @reg
    def select_and_integers():
        X = te.placeholder((6,), name="X")
        I = te.placeholder((6,), "int32", "I")
        Y = te.compute((6,), lambda i: te.select(X[i] > 0, te.log(X[i]), 0.0) + I[i] // 2,
                       name="Y")
        Z = te.compute((6,), lambda i: (I[i] * 2).astype("float64") + te.const(0.5, "float64"),
                       name="Z")
        B = te.compute((6,), lambda i: (X[i] > 0.5) & ~(I[i] % 3 == 0), name="B")
        return [Y, Z, B], [X, I]

    @reg
    def minmax_where_reductions():
        X = te.placeholder((10, 9), name="X")
        r = te.reduce_axis((2, 9), name="r")
        M = te.compute((10,), lambda i: te.max(X[i, r], axis=r, where=r % 2 == 0), name="M")
        N = te.compute((10,), lambda i: te.min(X[i, r] * X[i, r], axis=r), name="N")
        H1, H2 = te.placeholder((10,), name="H1"), te.placeholder((10,), name="H2")
        return ([M, N] + list(te.differentiate(M, [X], head=H1))
                + list(te.differentiate(N, [X], head=H2))), [X, H1, H2]

    @reg
    def mlp_small_second_order():
        X = te.placeholder((5, 8), "float64", "X")
        W = te.placeholder((8, 3), "float64", "W")
        k = te.reduce_axis(8, name="k")
        h = te.compute((5, 3), lambda i, j: te.tanh(te.sum(X[i, k] * W[k, j], axis=k)), name="h")
        i2, j2 = te.reduce_axis(5, name="i2"), te.reduce_axis(3, name="j2")
        L = te.compute((), lambda: te.sum(h[i2, j2] * h[i2, j2], axis=[i2, j2]), name="L")
        (gW,) = te.differentiate(L, [W])
        V = te.placeholder((8, 3), "float64", "V")
        a, b = te.reduce_axis(8, name="a"), te.reduce_axis(3, name="b")
        L2 = te.compute((), lambda: te.sum(gW[a, b] * V[a, b], axis=[a, b]), name="L2")
        return [gW] + list(te.differentiate(L2, [W])), [X, W, V]

    @reg
    def views_and_kernel():
        X = te.placeholder((4, 6), name="X")
        T = te.compute((6, 4), lambda i, j: X[j, i], name="T")
        S = te.compute((4, 3), lambda i, j: X[i, 2 * j], name="S")
        E = te.compute((4, 6), lambda i, j: te.exp(X[i, j]), name="E")
        return [T, S, E], [X]

    @reg
    def bias_transpose_pow():
        X = te.placeholder((33, 17), name="X")
        b = te.placeholder((17,), name="b")
        Y = te.compute((17, 33), lambda j, i: (X[i, j] + b[j]) ** 2, name="Y")
        H = te.placeholder((17, 33), name="H")
        return [Y] + list(te.differentiate(Y, [X, b], head=H)), [X, b, H]

    @reg
    def conv1d_long_rows_vjp():
        # a 1-D convolution's weight gradient over rows of many vectors (flat positions)
        X = te.placeholder((2, 6, 200), name="X")
        W = te.placeholder((8, 6, 5), name="W")
        c, k = te.reduce_axis(6, name="c"), te.reduce_axis(5, name="k")

        def body(nn, f, t):
            i = t + k - 2
            return te.sum(te.select((i >= 0) & (i < 200), X[nn, c, i] * W[f, c, k], 0.0),
                          axis=[c, k])
        Y = te.compute((2, 8, 200), body, name="Y")
        H = te.placeholder(Y.shape, name="H")
        return list(te.differentiate(Y, [X, W], head=H)), [X, W, H]

    @reg
    def rnn_step_sums_transposed_vjp():
        # an RNN adjoint's step sums read a transposed copy of the recurrent weight
        x = te.placeholder((6, 8, 24), name="x")
        Wh = te.placeholder((24, 24), name="Wh")
        kh = te.reduce_axis(24, name="kh")
        h = te.recurrence((6, 8, 24), lambda h, t, i, j: te.tanh(x[t, i, j] + te.select(
            t == 0, 0.0, te.sum(h[t - 1, i, kh] * Wh[kh, j], axis=kh))), name="h")
        H = te.placeholder(h.shape, name="H")
        return list(te.differentiate(h, [x, Wh], head=H)), [x, Wh, H]

    return sorted(progs.items())


# }}}


def programs() -> List[Tuple[str, Callable[[], Program]]]:
    """``(name, make)`` for every snapshotted program; ``make()`` gives (outputs, inputs)."""
    return _case_programs() + _small_programs()


def sources(names=None) -> Dict[str, str]:
    """``{"<program>@<target>": C source}`` for the named programs (all by default)."""
    out = {}
    for name, make in programs():
        if names is not None and name not in names:
            continue
        outputs, inputs = make()
        for tname, tgt in TARGETS.items():
            with target.use(tgt):
                outs, ins = program(outputs, inputs)
                out[f"{name}@{tname}"] = source_text(Signature(outs, ins), name=name)
    return out


def digest(source: str) -> str:
    """A short hash of a C source (the first 16 hex digits of its SHA-256).

    >>> digest("int x;")
    'fc60eb1a4d2e0b75'
    """
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def load() -> Dict[str, str]:
    """The recorded hashes (empty if none were recorded)."""
    if not os.path.exists(SNAPSHOT_FILE):
        return {}
    with open(SNAPSHOT_FILE) as f:
        return json.load(f)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--update", action="store_true", help="record the current hashes")
    ap.add_argument("--show", metavar="PROGRAM@TARGET", help="print one program's C source")
    args = ap.parse_args(argv)
    if args.show:
        name = args.show.split("@")[0]
        print(sources([name])[args.show])
        return 0
    now = {k: digest(v) for k, v in sources().items()}
    old = load()
    changed = sorted(k for k in now if old.get(k) != now[k])
    gone = sorted(set(old) - set(now))
    for k in changed:
        print(f"{'changed' if k in old else 'new':8s} {k}")
    for k in gone:
        print(f"removed  {k}")
    if args.update:
        os.makedirs(os.path.dirname(SNAPSHOT_FILE), exist_ok=True)
        with open(SNAPSHOT_FILE, "w") as f:
            json.dump(now, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"recorded {len(now)} hashes in {os.path.relpath(SNAPSHOT_FILE)}")
        return 0
    print(f"{len(now) - len(changed)} of {len(now)} unchanged")
    return 1 if changed or gone else 0


if __name__ == "__main__":
    sys.exit(main())
