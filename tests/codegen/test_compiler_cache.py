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
    for stats, key in (("stats", "compile_s"), ("stats", "compile_cpu_s"),
                       ("builds", "lower_s"), ("builds", "emit_s")):
        seconds = [x[stats].pop(key) for x in (first, second)]
        # the C compiler's time (waited and CPU), the lowering's and emission's are counted
        assert seconds[0] > 0 and seconds[1] == 0, (key, seconds)
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


def test_only_a_function_past_the_limit_loses_points_to_analysis():
    # GCC's points-to analysis is quadratic in a function's statements (a deep
    # expression's gradient is one loop body); smaller functions keep it
    gcc = compiler.Compiler(("cc",), "cc (Debian 12.2.0) 12.2.0\nFree Software Foundation", False)
    clang = compiler.Compiler(("cc",), "Debian clang version 16.0.6", False)

    def source(lines):
        return "int f(void)\n{\n" + "  x();\n" * lines + "}\n"
    small, large = source(compiler.LARGE_FUNCTION_LINES), source(compiler.LARGE_FUNCTION_LINES + 1)
    assert compiler.largest_function(large) == compiler.LARGE_FUNCTION_LINES + 1
    assert set(compiler.LARGE_FUNCTION_FLAGS) <= set(gcc.flags(large))
    assert not set(compiler.LARGE_FUNCTION_FLAGS) & set(gcc.flags(small) + clang.flags(large))


# {{{ damaged libraries, transient compiler failures, interrupted compiles


def _damage(path, how):
    data = open(path, "rb").read()
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "zeroed-tail":
        data = data[: len(data) // 3] + b"\0" * (len(data) - len(data) // 3)
    elif how == "one-byte":
        data = data[:200] + bytes([data[200] ^ 0xFF]) + data[201:]
    if how == "no-checksum":
        os.unlink(path + ".sum")
    elif how == "bad-checksum":
        open(path + ".sum", "w").write("12 not-a-hash\n")
    else:
        open(path, "wb").write(data)


_DAMAGES = ["truncated", "zeroed-tail", "one-byte", "no-checksum", "bad-checksum"]


@needs_cc
@pytest.mark.parametrize("how", _DAMAGES)
def test_a_damaged_cached_library_is_compiled_again(monkeypatch, tmp_path, how):
    monkeypatch.setenv("TENSOREXPR_CACHE_DIR", str(tmp_path / "kernels"))
    src = "int te_kernel(void) { return 42; }\n"
    path = compiler.compile_shared(src)
    assert compiler.verify(path)
    _damage(path, how)
    assert not compiler.verify(path)
    with pytest.raises(compiler.DamagedLibraryError, match="compiled again"):
        compiler.load(path)  # never mapped
    compiled = compiler.stats["compiled"]
    assert compiler.compile_shared(src) == path
    assert compiler.stats["compiled"] == compiled + 1
    assert compiler.verify(path) and compiler.load(path)["te_kernel"]() == 42


@needs_cc
@pytest.mark.parametrize("how", _DAMAGES)
@pytest.mark.parametrize("entry", ["with-entry", "without-entry"])
def test_a_build_over_a_damaged_library_rebuilds_it(tmp_path, how, entry):
    # in a new process each time: this one would keep the library it loaded
    script = tmp_path / "program.py"
    script.write_text(_PROGRAM)
    # a fixed threshold: no measuring library, the kernel's is the only one
    env = dict(os.environ, TENSOREXPR_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=REPO,
               TENSOREXPR_PARALLEL_WORK="100000")
    first = _run_program(tmp_path, env)
    (lib,) = (tmp_path / "cache").glob("te_*.so")
    _damage(str(lib), how)
    if entry == "without-entry":
        for p in (tmp_path / "cache").glob("build_*.json"):
            p.unlink()
    again = _run_program(tmp_path, env)
    assert again["out"] == first["out"] == [4.0, 34.0]
    assert again["stats"]["compiled"] == 1
    assert compiler.verify(str(lib))


def _wrapper(tmp_path, body: str):
    """A $CC that answers --version as the system compiler and runs ``body`` otherwise."""
    w = tmp_path / "wrapped-cc"
    w.write_text(f'#!/bin/sh\ncase "$*" in *--version*) exec "{SYSTEM_CC}" "$@";; esac\n'
                 f'echo "$@" >> "{tmp_path}/cc.log"\n{body}\nexec "{SYSTEM_CC}" "$@"\n')
    w.chmod(0o755)
    return w


def _compiles(tmp_path):
    log = tmp_path / "cc.log"
    return log.read_text().splitlines() if log.exists() else []


@needs_cc
@pytest.mark.parametrize("fails", [1, 2, 3])
def test_a_compiler_failing_for_a_while_does_not_turn_openmp_off_for_good(
        monkeypatch, tmp_path, fails):
    # the first `fails` compiles die as a loaded machine's would (out of memory)
    count = tmp_path / "count"
    cc = _wrapper(tmp_path, f'n=$(cat "{count}" 2>/dev/null || echo 0); '
                            f'echo $((n+1)) > "{count}"\n'
                            f'if [ "$n" -lt {fails} ]; then echo "cc1: out of memory" >&2; '
                            f'exit 1; fi')
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("TENSOREXPR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(compiler, "_compilers", {})
    answers = [compiler.find_compiler().openmp for _ in range(fails + 1)]
    # unknown answers are not kept: asked again until the compiler works, then kept
    assert answers == [False] * fails + [True]
    n = len(_compiles(tmp_path))
    monkeypatch.setattr(compiler, "_compilers", {})
    assert compiler.find_compiler().openmp is True and len(_compiles(tmp_path)) == n


@needs_cc
def test_a_compiler_without_openmp_is_remembered_as_such(monkeypatch, tmp_path):
    cc = _wrapper(tmp_path, 'case "$*" in *-fopenmp*) '
                            'echo "error: unsupported option \'-fopenmp\'" >&2; exit 1;; esac')
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("TENSOREXPR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(compiler, "_compilers", {})
    assert compiler.find_compiler().openmp is False
    n = len(_compiles(tmp_path))
    assert n == 2  # the OpenMP probe, and the same without OpenMP, which works
    monkeypatch.setattr(compiler, "_compilers", {})  # a new process: the answer is on disk
    assert compiler.find_compiler().openmp is False and len(_compiles(tmp_path)) == n
    A = te.placeholder((3,), name="A")
    np.testing.assert_array_equal(
        te.build(te.compute((3,), lambda i: A[i] - 1.0, name="B"))(np.ones(3, np.float32)), 0)


_SLOW_BUILD = textwrap.dedent("""
    import numpy as np
    import tensorexpr as te
    A = te.placeholder((3,), name="A")
    te.build(te.compute((3,), lambda i: A[i] * 11.0, name="B"))
""")


@needs_cc
def test_ctrl_c_during_a_compile_leaves_no_temporary_files(tmp_path):
    # KNOWN FLAKE (open): in full runs of the suite shuffled by pytest-randomly (not in the
    # test extra: 4 of 4 such runs on 2026-11-26/27; never alone, never in the file order CI
    # uses, nor shuffled over tests/codegen alone on 2026-11-28) the program sometimes runs
    # on after SIGINT until the fake compiler ends. Not reproduced on demand; a second try
    # in a fresh directory is allowed, the first failure is reported as a warning with
    # both processes' signal state (_signal_state), not hidden.
    try:
        _ctrl_c_once(tmp_path / "first")
    except subprocess.TimeoutExpired as exc:
        import warnings
        warnings.warn(f"Ctrl-C test timed out once (known flake), trying again: {exc}; "
                      f"{' '.join(getattr(exc, '__notes__', []))}")
        _ctrl_c_once(tmp_path / "second")


def _signal_state(pid: int) -> str:
    """The signal masks of process ``pid`` (ignored, blocked, caught: inherited from this
    worker if something left SIGINT ignored or blocked) and this thread's SIGINT state."""
    import signal
    with open(f"/proc/{pid}/status") as f:
        masks = [line for line in f.read().splitlines() if line.startswith(("SigBlk", "SigIgn",
                                                                              "SigCgt"))]
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    return (f"child {' '.join(masks)}; this worker: SIGINT handler "
            f"{signal.getsignal(signal.SIGINT)!r}, blocked {blocked}")


def _ctrl_c_once(tmp_path):
    import signal
    import time
    tmp_path.mkdir()
    pidfile = tmp_path / "cc.pid"
    # a kernel compile writes part of its output, then takes long (the OpenMP probe's do not)
    cc = _wrapper(tmp_path, 'case "$*" in *te_*.c*)\n'
                            '  while [ "$1" != "-o" ]; do shift; done; echo partial > "$2"\n'
                            f'  echo $$ > "{pidfile}"; exec sleep 60;;\nesac')
    script = tmp_path / "slow.py"
    script.write_text(_SLOW_BUILD)
    cache = tmp_path / "cache"
    env = dict(os.environ, CC=str(cc), TENSOREXPR_CACHE_DIR=str(cache), PYTHONPATH=REPO,
               TENSOREXPR_PARALLEL_WORK="100000")
    p = subprocess.Popen([sys.executable, str(script)], env=env, cwd=REPO,
                         stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            assert p.poll() is None, p.stderr.read()
            time.sleep(0.05)
        cc_pid = int(pidfile.read_text())
        p.send_signal(signal.SIGINT)  # what Ctrl-C sends the program
        try:
            err = p.communicate(timeout=60)[1]
        except subprocess.TimeoutExpired as exc:
            exc.add_note(_signal_state(p.pid))  # what the flake's report must tell
            raise
    finally:
        p.kill()
    assert p.returncode != 0 and "KeyboardInterrupt" in err
    assert [f for f in os.listdir(cache) if f.startswith(".tmp")] == []
    assert [f for f in os.listdir(cache) if f.endswith(".so")] == []
    for _ in range(100):  # the compiler was stopped too (it was in the middle of a pass)
        try:
            with open(f"/proc/{cc_pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the compiler (pid {cc_pid}) still runs")


# }}}
