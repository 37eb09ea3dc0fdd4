"""Register tiles (codegen.rowsum_registers): row sums whose accumulators live in vector registers,
for the target of this machine and for other vector widths (codegen.target), against the
numpy backend and bit for bit against the accumulators in memory."""
from __future__ import annotations

import doctest
import importlib
import re
import shutil
import subprocess

import numpy as np
import pytest

import tensorexpr as te
from codegen import compiler, rowsum_registers, target
from codegen.target import Target

from .util import agree, rand

TARGETS = {"here": None, "avx512": Target(64, 32, True), "sse": Target(16, 16, False)}


@pytest.fixture(params=list(TARGETS))
def tgt(request):
    """Lower for each target in turn (the C is portable: vector extensions, and the fused
    multiply-add as a loop of fmaf where the instruction is absent)."""
    t = TARGETS[request.param] or target.current()
    with target.use(t):
        yield t


def _product(M, K, N, dtype="float32"):
    A = te.placeholder((M, K), dtype, "A")
    B = te.placeholder((K, N), dtype, "B")
    k = te.reduce_axis((0, K), name="k")
    return A, B, te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")


@pytest.mark.parametrize("name", ["codegen.rowsum_registers", "codegen.target", "codegen.loopast"])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize("M,K,N", [(24, 9, 64), (29, 7, 53), (13, 33, 200), (7, 5, 16)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_products_agree_with_numpy(tgt, M, K, N, dtype):
    A, B, C = _product(M, K, N, dtype)
    f, _ = agree([C], [A, B], rand((M, K), dtype, 1), rand((K, N), dtype, 2))
    if M >= 2 * tgt.row_block:  # row blocks, whole tiles: vector accumulators
        assert "te_vfma_" in f.source


def test_the_tile_follows_the_target():
    A, B, C = _product(32, 8, 64)
    with target.use(Target(64, 32, True)):
        src = te.build(C).source
    assert "i0 += 8" in src and "te_f32x16" in src  # 8 rows x 2 vectors of 16 lanes
    with target.use(Target(32, 16, True)):
        src = te.build(C).source
    assert "i0 += 6" in src and "te_f32x8 " in src  # 6 rows x 2 vectors of 8 lanes


def test_symbolic_sizes(tgt):
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, 12), name="A")
    B = te.placeholder((12, n), name="B")
    k = te.reduce_axis((0, 12), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    for M, N in [(1, 1), (tgt.row_block * 2 + 1, 40), (30, 17)]:
        agree([C], [A, B], rand((M, 12), seed=M), rand((12, N), seed=N))


def test_epilogue_and_arithmetic_around_the_terms(tgt):
    """A perceptron's layer: tanh(X W + b) with the term scaled and shifted."""
    X = te.placeholder((20, 16), name="X")
    W = te.placeholder((16, 48), name="W")
    b = te.placeholder((48,), name="b")
    k = te.reduce_axis(16, name="k")
    Y = te.compute((20, 48), lambda i, j: te.tanh(
        te.sum((X[i, k] * 0.5 - 1.0) * (W[k, j] + X[i, k]), axis=k) + b[j]), name="Y")
    f, _ = agree([Y], [X, W, b], rand((20, 16), seed=1), rand((16, 48), seed=2),
                 rand((48,), seed=3), rtol=1e-5, atol=1e-5)
    assert "te_vfma_" in f.source


def test_convolution_forward(tgt):
    N, C, F, H = 2, 3, 16, 10
    X = te.placeholder((N, C, H, H), name="X")
    W = te.placeholder((F, C, 3, 3), name="W")
    c, ky, kx = te.reduce_axis(C, "c"), te.reduce_axis(3, "ky"), te.reduce_axis(3, "kx")
    Y = te.compute((N, F, H - 2, H - 2), lambda n, f, y, x: te.sum(
        X[n, c, y + ky, x + kx] * W[f, c, ky, kx], axis=[c, ky, kx]), name="Y")
    agree([Y], [X, W], rand((N, C, H, H), seed=1), rand((F, C, 3, 3), seed=2))


def test_declined_terms_keep_the_accumulator_in_memory(tgt):
    """A read strided along the row, and a max: no vector rewrite, still exact."""
    A = te.placeholder((24, 6), name="A")
    B = te.placeholder((6, 96), name="B")
    k = te.reduce_axis(6, name="k")
    S = te.compute((24, 48), lambda i, j: te.sum(A[i, k] * B[k, 2 * j], axis=k), name="S")
    M = te.compute((24, 96), lambda i, j: te.max(A[i, k] * B[k, j], axis=k), name="M")
    for t in (S, M):
        f, _ = agree([t], [A, B], rand((24, 6), seed=1), rand((6, 96), seed=2))
        assert "te_vfma_" not in f.source


def test_same_bits_as_accumulators_in_memory(tgt, monkeypatch, tmp_path):
    """Every element sums the same terms in the same order, each with one rounding (fmaf
    or the vector FMA): the results are equal bit for bit, non-finite values included."""
    A, B, C = _product(26, 37, 70)
    a, b = rand((26, 37), seed=5), rand((37, 70), seed=6)
    a[3, 4], b[5, 6], b[7, 8] = np.inf, np.nan, -np.inf
    fast = te.build(C)
    assert "te_vfma_" in fast.source
    monkeypatch.setenv("TENSOREXPR_CACHE_DIR", str(tmp_path))  # a build of its own
    monkeypatch.setattr(rowsum_registers, "registerize", lambda *args, **kw: None)
    slow = te.build(C)
    assert "te_vfma_" not in slow.source
    np.testing.assert_array_equal(fast(a, b), slow(a, b))


def _machine_code(so: str) -> list:
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-j", ".text", so],
                         capture_output=True, text=True, check=True).stdout
    return [re.sub(r"^\s*[0-9a-f]+:\s*", "", line) for line in out.splitlines()[3:] if line.strip()]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_vector_fmas_skip_the_intrinsics_header_for_the_same_machine_code(tgt, dtype):
    # <immintrin.h> cost ~0.15 s of compiler time per kernel; the builtins its fmadd
    # intrinsics call are used instead where the compiler has them (GCC, clang)
    _, _, C = _product(32, 8, 64, dtype)
    src = te.build(C).source
    assert "te_vfma_" in src
    comp = compiler.find_compiler()
    if "Free Software Foundation" not in comp.identity and "clang" not in comp.identity:
        pytest.skip("the builtins are GCC's and clang's")
    flags = [f for f in comp.flags(src) if f != "-shared"]
    pre = subprocess.run(list(comp.argv) + flags + ["-E", "-x", "c", "-"], input=src,
                         capture_output=True, text=True, check=True).stdout
    assert "immintrin.h" not in pre and "#define TE_VFMA_BUILTINS 1" in src
    if shutil.which("objdump") is None:
        pytest.skip("objdump compares the machine code")
    with_header = src.replace("#define TE_VFMA_BUILTINS 1\n", "")
    assert with_header != src
    assert _machine_code(compiler.compile_shared(src, count=False)) == \
        _machine_code(compiler.compile_shared(with_header, count=False))
