"""The compiler driver: finding the compiler, errors, and the on-disk kernel cache."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import tensorexpr as te
from codegen import compiler
from tensorexpr.errors import CompilerError, CompilerNotFoundError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYSTEM_CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
needs_cc = pytest.mark.skipif(SYSTEM_CC is None, reason="no C compiler on this machine")

_PROGRAM = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorexpr as te
    from codegen import c_backend, compiler
    n = te.var("n")
    A = te.placeholder((n, 3), name="A")
    k = te.reduce_axis(3, name="k")
    S = te.compute((n,), lambda i: te.sum(A[i, k] * A[i, k], axis=k, where=k != 1), name="S")
    f = te.build(S)
    out = f(np.arange(6, dtype=np.float32).reshape(2, 3))
    print(json.dumps({"stats": compiler.stats, "builds": c_backend.stats, "out": out.tolist()}))
""")


def _run_program(tmp_path, env):
    script = tmp_path / "program.py"
    script.write_text(_PROGRAM)
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                       cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@needs_cc
def test_a_second_process_reuses_the_compiled_kernel(tmp_path):
    # CC is a wrapper that logs every invocation: the second process must not run it
    # at all: its version (part of the cache key) is remembered under the compiler
    # file's identity, and the whole build is in the build cache.
    log = tmp_path / "cc.log"
    wrapper = tmp_path / "logging-cc"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{SYSTEM_CC}" "$@"\n')
    wrapper.chmod(0o755)
    env = dict(os.environ, CC=str(wrapper), TENSOREXPR_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=REPO)
    first = _run_program(tmp_path, env)
    calls_first = log.read_text().splitlines()
    second = _run_program(tmp_path, env)
    calls_second = log.read_text().splitlines()[len(calls_first):]

    assert first["out"] == second["out"] == [0.0 + 4.0, 9.0 + 25.0]
    seconds = [x["stats"].pop("compile_s") for x in (first, second)]
    assert seconds[0] > 0 and seconds[1] == 0  # the C compiler's time is counted
    assert first["stats"] == {"compiled": 1, "cache_hits": 0}
    assert any(" -o " in c for c in calls_first)
    assert first["builds"] == {"build_hits": 0, "lowered": 1}
    assert second["stats"] == {"compiled": 0, "cache_hits": 0}
    assert second["builds"] == {"build_hits": 1, "lowered": 0}
    assert calls_second == []
    # another compiler at the same path is asked for its version again
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{SYSTEM_CC}" "$@"\n\n')
    third = _run_program(tmp_path, env)
    calls_third = log.read_text().splitlines()[len(calls_first) + len(calls_second):]
    assert third["out"] == first["out"]
    assert calls_third and all(c.strip() == "--version" for c in calls_third), calls_third


def test_no_compiler_raises_compiler_not_found(monkeypatch, tmp_path):
    A = te.placeholder((3,), name="A")
    B = te.compute((3,), lambda i: A[i] + 1.0, name="B")
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(CompilerNotFoundError, match='backend="numpy"') as info:
        te.build(B)
    assert "no-such-cc" in str(info.value)
    monkeypatch.delenv("CC")
    with pytest.raises(CompilerNotFoundError, match="none of cc, gcc, clang is on PATH"):
        te.build(B)
    # the suggested fix works without a compiler
    np.testing.assert_array_equal(te.build(B, backend="numpy")(np.zeros(3, np.float32)), 1.0)


@needs_cc
def test_compiler_failure_shows_message_and_kept_source():
    bad = "int te_kernel(void) { return undeclared_variable; }\n"
    with pytest.raises(CompilerError) as info:
        compiler.compile_shared(bad)
    msg = str(info.value)
    assert "undeclared_variable" in msg and "a bug in tensorexpr" in msg
    kept = msg.rsplit("source kept at ", 1)[1].strip()
    assert os.path.isfile(kept) and open(kept).read() == bad
    assert kept.startswith(compiler.cache_dir())


@needs_cc
def test_cache_location_key_and_atomic_writes(monkeypatch, tmp_path):
    monkeypatch.setenv("TENSOREXPR_CACHE_DIR", str(tmp_path / "kernels"))
    src = "int te_kernel(void) { return 42; }\n"
    cc = compiler.find_compiler()
    paths = []

    def build():
        paths.append(compiler.compile_shared(src, cc))

    threads = [threading.Thread(target=build) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(paths)) == 1 and os.path.dirname(paths[0]) == str(tmp_path / "kernels")
    assert compiler.load(paths[0]).te_kernel() == 42
    leftovers = [f for f in os.listdir(tmp_path / "kernels") if f.startswith(".tmp")]
    assert not leftovers
    # another compiler (identity) or source gives another library
    other = compiler.Compiler(cc.argv, cc.identity + " (another version)", cc.openmp)
    assert compiler.compile_shared(src, other) != paths[0]
    assert compiler.compile_shared(src.replace("42", "43"), cc) != paths[0]


@needs_cc
def test_cc_may_carry_arguments(monkeypatch):
    monkeypatch.setenv("CC", f"{SYSTEM_CC} -g0")
    cc = compiler.find_compiler()
    assert cc.argv[1:] == ("-g0",) and os.path.isabs(cc.argv[0])
    A = te.placeholder((2,), name="A")
    f = te.build(te.compute((2,), lambda i: A[i] * 3.0, name="B"))
    np.testing.assert_array_equal(f(np.ones(2, np.float32)), 3.0)


@needs_cc
def test_unwritable_cache_dir_is_a_clear_error(monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TENSOREXPR_CACHE_DIR", str(blocker / "kernels"))
    with pytest.raises(compiler.CacheDirError, match="TENSOREXPR_CACHE_DIR"):
        compiler.compile_shared("int te_kernel(void) { return 1; }\n")


def test_gcc_only_flags_go_to_gcc_alone():
    # clang warns on GCC's optimization flags it does not know; only GCC gets them
    gcc = compiler.Compiler(("cc",), "/usr/bin/gcc-12\ncc (Debian 12.2.0) 12.2.0\n"
                            "Copyright (C) 2022 Free Software Foundation, Inc.", False)
    clang = compiler.Compiler(("cc",), "/usr/bin/clang-16\nDebian clang version 16.0.6",
                              False)
    assert set(compiler.GCC_FLAGS) <= set(gcc.flags())
    assert not set(compiler.GCC_FLAGS) & set(clang.flags())
    assert compiler.OPENMP_FLAG not in gcc.flags()
