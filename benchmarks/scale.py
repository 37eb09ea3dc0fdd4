"""Chunked programs with Dask: throughput, peak memory and halo bytes.

    python -m benchmarks.scale              # a 16384 x 16384 float32 image (1 GiB)
    python -m benchmarks.scale --size 512   # seconds (what the smoke test runs)

Three programs over one image in chunks of ``--chunk`` (4096: 64 MiB):

* ``blur``: a clamped 5-point blur (``X[clamp(i - 1)] + 2 X[i] + ...``);
* ``conv``: a 3x3 convolution, zero padding (``te.nn.conv2d``, one channel);
* ``conv grad``: its gradients w.r.t. the image and the 3x3 weight, given the head.

Each runs as

* ``te whole``: ``te.build`` on the whole array (one call, the OpenMP team of all cores);
* ``te dask wN``: ``tensorexpr.dask.op`` on the chunked arrays, dask's threaded
  scheduler with N workers (each task's team capped at cores / N);
* ``numpy dask wN``: dask's own ``map_overlap`` with numpy block functions (shifted
  slices; the weight gradient as per-block sums added up), the usual way to write it.

What is measured: ``time`` is the wall time of one computation into preallocated
outputs (``da.store``; ``out=`` for the whole build), after a first run that builds
and warms up (best of ``--repeat``); ``GB/s`` is the image's bytes over that time.
``peak`` is the peak of numpy's allocations (``tracemalloc``, which numpy reports to)
during the timed run, beyond the inputs and outputs that exist before it: the chunks,
halos and scratch the run holds at once. ``halo`` is the bytes tasks read from chunks
other than their main one (ours from the plan; map_overlap's from the depth it adds to
each block). ``max |diff|`` compares with the whole build.
"""
from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

import tensorexpr as te

FULL, CHUNK = 16384, 4096


def clamp(i, n):
    """``i`` clamped into ``[0, n)``.

    >>> clamp(te.const(5), 4)
    min(max(5, 0), 3)
    """
    return te.minimum(te.maximum(i, 0), n - 1)


def programs(n: int):
    """``{name: (outputs, inputs)}`` of the three programs on an ``n x n`` image.

    >>> sorted(programs(8))
    ['blur', 'conv', 'conv grad']
    """
    X = te.placeholder((n, n), "float32", name="X")
    blur = te.compute((n, n), lambda i, j: (
        X[clamp(i - 1, n), j] + 2.0 * X[i, j] + X[clamp(i + 1, n), j]
        + X[i, clamp(j - 1, n)] + X[i, clamp(j + 1, n)]) * 0.25, name="blur")
    X4 = te.placeholder((1, 1, n, n), "float32", name="X")
    W = te.placeholder((1, 1, 3, 3), "float32", name="W")
    Y = te.nn.conv2d(X4, W, padding=1)
    H = te.placeholder((1, 1, n, n), "float32", name="H")
    dX, dW = te.differentiate(Y, [X4, W], head=H)
    return {"blur": ([blur], [X]), "conv": ([Y], [X4, W]), "conv grad": ([dX, dW], [X4, W, H])}


# {{{ dask's own: map_overlap with numpy blocks


def np_blur(b):
    """The 5-point blur of a block padded by 1 (edges: ``boundary="nearest"``)."""
    return (b[:-2, 1:-1] + 2.0 * b[1:-1, 1:-1] + b[2:, 1:-1] + b[1:-1, :-2] + b[1:-1, 2:]) * 0.25


def np_conv(b, w):
    """The 3x3 correlation of a block padded by 1 (``boundary=0``) with ``w``."""
    h, v = b.shape[0] - 2, b.shape[1] - 2
    out = np.zeros((h, v), b.dtype)
    for a in range(3):
        for c in range(3):
            out += w[a, c] * b[a:a + h, c:c + v]
    return out


def np_dw(b, hb):
    """The weight gradient's part of one block: ``sum H[i, j] X[i + a - 1, j + c - 1]``."""
    h, v = hb.shape
    return np.array([[np.vdot(hb, b[a:a + h, c:c + v]) for c in range(3)] for a in range(3)],
                    np.float32)


def numpy_graph(name: str, arrays, w):
    """Dask arrays (or a delayed sum) of the program with map_overlap and numpy."""
    import dask
    import dask.array as da
    if name == "blur":
        return [da.map_overlap(np_blur, arrays[0], depth=1, boundary="nearest", trim=False,
                               dtype=np.float32)]
    x2 = arrays[0][0, 0]
    if name == "conv":
        y = da.map_overlap(lambda b: np_conv(b, w), x2, depth=1, boundary=0, trim=False,
                           dtype=np.float32)
        return [y[None, None]]
    h2 = arrays[2][0, 0]
    dx = da.map_overlap(lambda b: np_conv(b, w[::-1, ::-1]), h2, depth=1, boundary=0,
                        trim=False, dtype=np.float32)
    xo = da.overlap.overlap(x2, depth=1, boundary=0)
    parts = [dask.delayed(np_dw)(b, hb) for b, hb in
             zip(xo.to_delayed().ravel(), h2.to_delayed().ravel())]
    dw = da.from_delayed(dask.delayed(sum)(parts), (3, 3), np.float32)
    return [dx[None, None], dw[None, None]]


def map_overlap_halo(chunks, itemsize: int, copies: int) -> int:
    """Bytes a depth-1 overlap adds around every block of a 2-d chunking."""
    out = 0
    for r in chunks[0]:
        for c in chunks[1]:
            out += ((r + 2) * (c + 2) - r * c) * itemsize
    return out * copies

# }}}


def measure(run, repeat: int):
    """``(best seconds, peak bytes of numpy allocations)`` of ``run()``."""
    best, peak = float("inf"), 0
    for _ in range(repeat):
        tracemalloc.start()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
        peak = max(peak, tracemalloc.get_traced_memory()[1] - base)
        tracemalloc.stop()
    return best, peak


def main(argv=None) -> list:
    """Run every program every way; print a table and return its rows.

    >>> rows = main(["--size", "64", "--chunk", "16", "--repeat", "1"])  # doctest: +ELLIPSIS
    program ...
    >>> sorted({r["engine"] for r in rows})
    ['numpy dask w1', 'numpy dask w2', 'te dask w1', 'te dask w2', 'te whole']
    """
    import dask
    import dask.array as da

    import tensorexpr.dask as ted
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=FULL)
    p.add_argument("--chunk", type=int, default=CHUNK)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args(argv)
    n, ch = args.size, args.chunk
    rng = np.random.default_rng(0)
    image = rng.standard_normal((n, n), dtype=np.float32)
    head = rng.standard_normal((n, n), dtype=np.float32)
    w = rng.standard_normal((3, 3), dtype=np.float32)
    rows = []
    print(f"image {n} x {n} float32 ({image.nbytes / 2**30:.2f} GiB), chunks {ch} x {ch}")
    print(f"{'program':10} {'engine':14} {'time s':>8} {'GB/s':>7} {'peak MiB':>9} "
          f"{'halo MiB':>9} {'max |diff|':>11}")
    for name, (outs, ins) in programs(n).items():
        arrays = {"blur": [image], "conv": [image[None, None], w[None, None]],
                  "conv grad": [image[None, None], w[None, None], head[None, None]]}[name]
        f = te.build(outs, inputs=ins)
        targets = [np.empty(t.shape, np.float32) for t in outs]
        measure(lambda: f(*arrays, out=tuple(targets) if len(targets) > 1 else targets[0]), 1)
        want = [t.copy() for t in targets]
        secs, peak = measure(lambda: f(*arrays, out=tuple(targets) if len(targets) > 1
                                        else targets[0]), args.repeat)
        engines = [("te whole", secs, peak, 0, 0.0)]
        chunks = [(1, 1, ch, ch) if a.ndim == 4 and a.shape[-1] == n else a.shape if
                  a.ndim == 4 else (ch, ch) for a in arrays]
        dsk = [da.from_array(a, chunks=c) for a, c in zip(arrays, chunks)]
        op = ted.op(outs, ins)
        for kind in ("te", "numpy"):
            for workers in (1, 2):
                with dask.config.set(num_workers=workers, scheduler="threads"):
                    if kind == "te":
                        graph = op(*dsk)
                        graph = list(graph) if isinstance(graph, tuple) else [graph]
                        halo = op.plan(*dsk).halo_bytes
                    else:
                        graph = numpy_graph(name, dsk, w)
                        halo = map_overlap_halo(dsk[0].chunks[-2:], 4,
                                                2 if name == "conv grad" else 1)
                    outs_np = [np.empty(t.shape, np.float32) for t in outs]
                    da.store(graph, outs_np, lock=False)  # builds and warms up
                    secs, peak = measure(lambda: da.store(graph, outs_np, lock=False),
                                         args.repeat)
                diff = max(float(np.max(np.abs(g - r))) for g, r in zip(outs_np, want))
                engines.append((f"{kind} dask w{workers}", secs, peak, halo, diff))
        for engine, secs, peak, halo, diff in engines:
            row = {"program": name, "engine": engine, "seconds": secs,
                   "gbps": image.nbytes / secs / 1e9, "peak": peak, "halo": halo, "diff": diff}
            rows.append(row)
            print(f"{name:10} {engine:14} {secs:8.3f} {row['gbps']:7.2f} {peak / 2**20:9.1f} "
                  f"{halo / 2**20:9.2f} {diff:11.3g}")
    return rows


if __name__ == "__main__":
    main()
