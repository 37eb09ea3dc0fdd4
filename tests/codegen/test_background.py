"""codegen.background: ``te.build(..., wait=False)`` compiles on a thread, joined at the
first call; results, errors, the caches and forks behave as with a build that waits."""
from __future__ import annotations

import multiprocessing
import shutil

import numpy as np
import pytest

import tensorexpr as te
from codegen import background, c_backend, compiler
from tensorexpr.errors import CompilerError

SYSTEM_CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
needs_cc = pytest.mark.skipif(SYSTEM_CC is None, reason="no C compiler on this machine")


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TENSOREXPR_CACHE_DIR", str(tmp_path / "kernels"))
    return tmp_path / "kernels"


def _program(scale: float):
    X = te.placeholder((5, 7), name="X")
    k = te.reduce_axis(7, name="k")
    S = te.compute((5,), lambda i: te.sum(te.exp(X[i, k]) * scale, axis=k), name="S")
    return te.compute((5, 7), lambda i, j: X[i, j] / S[i], name="Y"), X


@needs_cc
def test_a_background_build_gives_what_a_waiting_one_gives(cache):
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    Y, X = _program(1.5)
    later = te.build(Y, [X], wait=False)
    other = te.build(_program(2.5)[0], wait=False)  # compiles beside the first one
    now = te.build(Y, [X])
    np.testing.assert_array_equal(later(x), now(x))
    assert type(later.impl).__name__ == "KernelFunction"  # joined, loaded
    want = te.build(_program(2.5)[0], backend="numpy")(x)
    np.testing.assert_allclose(other(x), want, rtol=1e-6)


@needs_cc
def test_the_same_program_built_twice_while_compiling_compiles_once(cache):
    compiled, hits = compiler.stats["compiled"], c_backend.stats["build_hits"]
    Y, X = _program(3.5)
    f = te.build(Y, [X], wait=False)
    g = te.build(*_program(3.5), wait=False)  # another graph of the same program
    x = np.ones((5, 7), np.float32)
    np.testing.assert_array_equal(f(x), g(x))
    assert compiler.stats["compiled"] == compiled + 1
    assert c_backend.stats["build_hits"] == hits + 1
    # the entry is on disk: a new build is a hit that compiles nothing
    te.build(*_program(3.5))(x)
    assert compiler.stats["compiled"] == compiled + 1


@needs_cc
def test_a_compiler_error_is_raised_by_the_first_call(cache, monkeypatch, tmp_path):
    cc = tmp_path / "failing-cc"
    cc.write_text(f'#!/bin/sh\ncase "$*" in *te_*.c*) echo "no such luck" >&2; exit 1;; esac\n'
                  f'exec "{SYSTEM_CC}" "$@"\n')
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    Y, X = _program(4.5)
    f = te.build(Y, [X], wait=False)  # returns: the failure is on the thread
    with pytest.raises(CompilerError, match="no such luck"):
        f(np.ones((5, 7), np.float32))
    with pytest.raises(CompilerError, match="no such luck"):
        te.build(*_program(5.5))  # a build that waits raises at once


@needs_cc
def test_a_build_after_a_failed_compile_compiles_again(cache, monkeypatch, tmp_path):
    flag = tmp_path / "fail-once"
    flag.write_text("")
    cc = tmp_path / "flaky-cc"
    cc.write_text(f'#!/bin/sh\ncase "$*" in *te_*.c*) if [ -e "{flag}" ]; then rm "{flag}"; '
                  f'echo "transient trouble" >&2; exit 1; fi;; esac\nexec "{SYSTEM_CC}" "$@"\n')
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    f = te.build(*_program(7.5), wait=False)
    with pytest.raises(CompilerError, match="transient trouble"):
        f(np.ones((5, 7), np.float32))
    g = te.build(*_program(7.5), wait=False)  # the same program: not the failed compile
    want = te.build(_program(7.5)[0], backend="numpy")(np.ones((5, 7), np.float32))
    np.testing.assert_allclose(g(np.ones((5, 7), np.float32)), want, rtol=1e-6)


def _call_in_child(f, q):
    q.put(float(f(np.ones((5, 7), np.float32)).sum()))


@needs_cc
def test_a_child_forked_during_the_compile_runs_the_program(cache):
    Y, X = _program(6.5)
    f = te.build(Y, [X], wait=False)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_call_in_child, args=(f, q))
    p.start()
    got = q.get(timeout=120)
    p.join(timeout=60)
    assert p.exitcode == 0
    assert got == pytest.approx(float(f(np.ones((5, 7), np.float32)).sum()))


def test_docstring_examples():
    import doctest
    assert doctest.testmod(background).failed == 0
