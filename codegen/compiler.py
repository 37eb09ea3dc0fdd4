"""The system C compiler: finding it, probing OpenMP, compiling into an on-disk cache.

The compiler is ``$CC`` if set (it may carry arguments, e.g. ``"ccache gcc"``),
else the first of ``cc``, ``gcc``, ``clang`` on ``PATH``. Shared libraries are
cached in ``$TENSOREXPR_CACHE_DIR`` (default ``~/.cache/tensorexpr``) under a
hash of the source, the compiler's identity and version, the flags and the
machine, so another process reuses them without compiling. Files are written
under a temporary name and renamed into place, so concurrent processes never
see half-written files; each library's size and SHA-256 are recorded beside
it (``.sum``) and checked before it is loaded, so a truncated or corrupted
library is compiled again instead of being mapped into the process. A compile
runs in a temporary directory of its own (also the compiler's ``$TMPDIR``),
removed whatever happens, Ctrl-C included.

Loaded libraries are :class:`Library` objects: when the last one of a file is
freed, the file is unloaded (``dlclose``). The OpenMP runtime a library brings
in is never unloaded (its worker threads live on in it).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import shutil
import signal
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple, Union

from tensorexpr.errors import CompilerError, CompilerNotFoundError, TensorExprError

from . import openmp_env

#: IEEE semantics are promised: no -ffast-math, no contraction into FMA (the code
#: generator writes ``fma`` itself where ir.py allows it: a sum's product terms); signed
#: integer overflow wraps as in numpy. ``-march=native`` lets loops use this CPU's
#: vector units, so the cache key names the CPU (``machine``).
FLAGS = ("-O3", "-march=native", "-std=gnu11", "-fPIC", "-shared", "-fno-math-errno",
         "-fno-trapping-math",
         "-fwrapv", "-ffp-contract=off")
#: GCC's predictive commoning keeps values loaded in one iteration of a loop in
#: registers for the next ones. In a register tile whose tap loop has bounds that
#: move with the tile (a convolution's input gradient) it rotated the weights of
#: the taps through registers and spilled the tile's accumulators: conv dilation-2
#: dX ran at 1.43 ms with it, 0.82 ms without; no other benchmark case changed.
GCC_FLAGS = ("-fno-predictive-commoning",)
#: GCC's points-to analysis takes time quadratic in a function's statements. The
#: gradient of an expression 10,000 operations deep is one loop body of 60,000
#: statements (``cemit`` cannot split a single statement): 134 s to compile with it,
#: 37 s without. Only functions that large lose it; their loops keep ``omp simd``.
LARGE_FUNCTION_FLAGS = ("-fno-tree-pta",)
LARGE_FUNCTION_LINES = 10_000
#: A checkpointed program whose steps are functions (``codegen.step_functions``) is half
#: the C of its copies, and GCC lets a unit grow by inlining in proportion to its size:
#: the math helpers (``te_tanhf``, ``te_sigmoid_f32``) in the hot loops of the reversal
#: then stayed calls (the LSTM's segments gradient: 0.100 s a call with the copies,
#: 0.132 s so). The budget the copies had, for such sources only.
STEP_FUNCTION_FLAGS = ("--param", "inline-unit-growth=100")
STEP_FUNCTION_MARK = "static void te_step"
OPENMP_FLAG = "-fopenmp"
LIBS = ("-lm",)
#: the C++ helper libraries (tensorexpr.jax's XLA FFI handler): ``-x c++`` because the
#: cache keeps every source as ``.c``; no -march=native, the handler only moves pointers
CXX_FLAGS = ("-O2", "-std=c++17", "-fPIC", "-shared", "-x", "c++")
#: bump when the calling convention or file layout of cached libraries changes
CACHE_FORMAT = "1"

_stats_lock = threading.Lock()
#: what this process did, for tests and curious users: compilations, cache hits, the
#: seconds spent waiting for the C compiler (the benchmark reports build time without
#: them) and the CPU seconds the compiler's processes used (``compile_cpu_s``: on a loaded
#: machine the wait is longer, the CPU time is not; compiles running at once share it)
stats: Dict[str, float] = {"compiled": 0, "cache_hits": 0, "compile_s": 0.0,
                           "compile_cpu_s": 0.0}


class CacheDirError(TensorExprError, OSError):
    """The kernel cache directory cannot be written."""


@dataclass(frozen=True)
class Compiler:
    """A resolved compiler: command prefix, identity text (path and version), OpenMP
    support, and the language it compiles (``"c"``, or ``"c++"`` for helper libraries)."""

    argv: Tuple[str, ...]
    identity: str
    openmp: bool
    language: str = "c"

    def flags(self, source: str = "") -> Tuple[str, ...]:
        """The command-line flags for ``source`` (those for any source if omitted)."""
        if self.language == "c++":
            return CXX_FLAGS
        gcc = "Free Software Foundation" in self.identity and "clang" not in self.identity
        large = gcc and largest_function(source) > LARGE_FUNCTION_LINES
        steps = gcc and STEP_FUNCTION_MARK in source
        return (FLAGS + (GCC_FLAGS if gcc else ()) + ((OPENMP_FLAG,) if self.openmp else ())
                + (LARGE_FUNCTION_FLAGS if large else ()) + (STEP_FUNCTION_FLAGS if steps else ()))


def largest_function(source: str) -> int:
    """Lines of the longest function in C ``source`` (the emitter opens and closes
    each function body with a ``{`` and ``}`` alone on a line).

    >>> largest_function("int f(void)\\n{\\n  int a = 1;\\n  return a;\\n}\\n")
    2
    """
    best, start = 0, None
    for n, line in enumerate(source.splitlines()):
        if line == "{":
            start = n
        elif line == "}" and start is not None:
            best, start = max(best, n - start - 1), None
    return best


_compilers: Dict[tuple, Compiler] = {}


def cache_dir() -> str:
    """Where compiled kernels live: ``$TENSOREXPR_CACHE_DIR`` or ``~/.cache/tensorexpr``.

    >>> isinstance(cache_dir(), str)
    True
    """
    d = os.environ.get("TENSOREXPR_CACHE_DIR") or os.path.join("~", ".cache", "tensorexpr")
    return os.path.abspath(os.path.expanduser(d))


def _not_found(why: str) -> CompilerNotFoundError:
    return CompilerNotFoundError(
        f"the C backend needs a C compiler: {why}. Install one (e.g. gcc or clang), point $CC "
        f"at it, or build with te.build(..., backend=\"numpy\") (slower, no compiler needed)")


def find_compiler() -> Compiler:
    """The compiler to use (resolved once per process for a given ``$CC`` and ``PATH``).

    Raises :class:`CompilerNotFoundError` if there is none.

    >>> find_compiler().argv[0]  # doctest: +SKIP
    '/usr/bin/cc'
    """
    cc = os.environ.get("CC", "").strip()
    key = (cc, os.environ.get("PATH", ""))
    if key in _compilers:
        return _compilers[key]
    if cc:
        argv = shlex.split(cc)
        path = shutil.which(argv[0])
        if path is None:
            raise _not_found(f"$CC is {cc!r}, which is not an executable program")
    else:
        argv, path = [], None
        for name in ("cc", "gcc", "clang"):
            path = shutil.which(name)
            if path:
                argv = [name]
                break
        if path is None:
            raise _not_found("none of cc, gcc, clang is on PATH and $CC is not set")
    argv = [path] + argv[1:]
    identity = _identity(argv)
    openmp = _probe_openmp(tuple(argv), identity)
    comp = Compiler(tuple(argv), identity, bool(openmp))
    if openmp is not None:  # unknown (the compiler failed this time): ask again next build
        _compilers[key] = comp
    return comp


def find_cxx_compiler() -> Compiler:
    """The C++ compiler for helper libraries: ``$CXX`` if set, else the first of ``c++``,
    ``g++``, ``clang++`` on ``PATH`` (resolved once per process for a given ``$CXX``
    and ``PATH``). Raises :class:`CompilerNotFoundError` if there is none.

    >>> find_cxx_compiler().language  # doctest: +SKIP
    'c++'
    """
    cxx = os.environ.get("CXX", "").strip()
    key = ("c++", cxx, os.environ.get("PATH", ""))
    if key in _compilers:
        return _compilers[key]
    argv: List[str] = shlex.split(cxx) if cxx else []
    path = shutil.which(argv[0]) if argv else None
    if cxx and path is None:
        raise CompilerNotFoundError(f"$CXX is {cxx!r}, which is not an executable program; "
                                    f"point it at a C++ compiler (g++ or clang++)")
    if not cxx:
        for name in ("c++", "g++", "clang++"):
            path = shutil.which(name)
            if path:
                argv = [name]
                break
        if path is None:
            raise CompilerNotFoundError(
                "none of c++, g++, clang++ is on PATH and $CXX is not set: install one "
                "(e.g. g++) or point $CXX at it")
    argv = [path] + argv[1:]
    comp = Compiler(tuple(argv), _identity(argv), False, "c++")
    _compilers[key] = comp
    return comp


def _identity(argv) -> str:
    """The compiler's path, arguments and ``--version`` text. Running it costs a few
    milliseconds per process, so the answer is kept in the cache directory under the
    compiler file's path, size, time and inode (a new compiler there is asked again)."""
    path = argv[0]
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
        stamp = f"{real} {st.st_size} {st.st_mtime_ns} {st.st_ino} {shlex.join(argv)}"
    except OSError:
        stamp = None
    marker = None
    if stamp is not None:
        marker = os.path.join(cache_dir(), f"compiler-{digest(stamp, CACHE_FORMAT)[:24]}.txt")
        try:
            with open(marker, encoding="utf-8") as f:
                text = f.read()
            if text.startswith(stamp + "\n") and text.endswith("\n"):
                return text[len(stamp) + 1:-1]
        except OSError:
            pass
    try:
        import subprocess  # imported when needed: a cached build never runs the compiler
        ver = subprocess.run(list(argv) + ["--version"], capture_output=True, text=True,
                             timeout=60)
    except OSError as exc:
        raise _not_found(f"{path} cannot be run ({exc})") from None
    if ver.returncode != 0:
        raise _not_found(f"`{shlex.join(argv)} --version` failed: {ver.stderr.strip()[:200]}")
    identity = f"{real} {shlex.join(argv[1:])}\n{ver.stdout.strip()}"
    if marker is not None:
        try:
            write_atomic(marker, f"{stamp}\n{identity}\n")
        except OSError:
            pass  # an unwritable cache only costs asking again
    return identity


def machine() -> str:
    """This machine as a cache key: platform, architecture, word size and CPU (code built
    with -march=native for one CPU may not run on another).

    >>> machine().startswith(sys.platform)
    True
    """
    machine = os.uname().machine if hasattr(os, "uname") else __import__("platform").machine()
    return (f"{sys.platform} {machine} {ctypes.sizeof(ctypes.c_void_p) * 8}bit "
            f"{_cpu()}")


_cpu_text: Optional[str] = None


def _cpu() -> str:
    """This CPU's model and feature flags: code built with -march=native for one CPU
    may not run on another, so cached libraries are keyed by it."""
    global _cpu_text
    if _cpu_text is None:
        keep = []
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    key = line.split(":", 1)[0].strip()
                    if key in ("vendor_id", "model name", "flags", "Features", "CPU part",
                               "CPU implementer") and line not in keep:
                        keep.append(line)
                    if not line.strip() and keep:
                        break  # the first processor describes them all
        except OSError:
            import platform
            keep = [platform.processor(), platform.version()]
        _cpu_text = "".join(keep)
    return _cpu_text


def digest(*parts: str) -> str:
    """The SHA-256 of ``parts`` (each ended by a NUL, so that the parts' boundaries count).

    >>> digest("a", "b") != digest("ab")
    True
    """
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


_OPENMP_PROBE = """#include <omp.h>
int te_probe(int n) { int s = 0;
#pragma omp parallel for reduction(+:s)
  for (int i = 0; i < n; i++) s += i;
  return s + omp_get_max_threads() * 0; }
"""
#: the same without OpenMP: tells "no OpenMP" apart from a compiler failing for another reason
_PLAIN_PROBE = """int te_probe(int n) { int s = 0;
  for (int i = 0; i < n; i++) s += i;
  return s; }
"""


def _probe_openmp(argv: Tuple[str, ...], identity: str) -> Optional[bool]:
    """Can this compiler build and load an OpenMP library? ``None`` when the failure
    says nothing about OpenMP: the compiler could not be run, timed out or was killed,
    its message does not name OpenMP, or it cannot even build the same probe without
    OpenMP (a transient failure: that answer is not kept, so OpenMP is not turned off
    for good). A definite answer is kept on disk next to the kernels, so it is asked
    once per compiler."""
    d = cache_dir()
    marker = os.path.join(d, f"openmp-{digest(identity, machine(), CACHE_FORMAT)[:24]}.txt")
    try:
        with open(marker) as f:
            return f.read().strip() == "yes"
    except OSError:
        pass
    import re
    import tempfile
    with tempfile.TemporaryDirectory(prefix="te-probe-") as tmp:
        got, why = _try_probe(argv, tmp, _OPENMP_PROBE, (OPENMP_FLAG,))
        answer: Optional[bool] = True if got == "ok" else None
        if got == "rejected" and re.search(r"openmp|omp", why, re.I) and \
                _try_probe(argv, tmp, _PLAIN_PROBE, ())[0] == "ok":
            answer = False
    if answer is not None:
        try:
            write_atomic(marker, "yes\n" if answer else "no\n")
        except OSError:
            pass  # an unwritable cache only costs probing again; compile_shared says why
    return answer


def _try_probe(argv: Tuple[str, ...], tmp: str, source: str,
               extra: Tuple[str, ...]) -> Tuple[str, str]:
    """``("ok", "")``; ``("rejected", message)``: the compiler ran and refused, or the
    library does not load or compute; ``("failed", message)``: the compiler could not be
    run, timed out or was killed."""
    import subprocess
    src, so = os.path.join(tmp, "probe.c"), os.path.join(tmp, f"probe{len(extra)}.so")
    with open(src, "w") as f:
        f.write(source)
    try:
        r = subprocess.run(list(argv) + list(FLAGS) + list(extra) + ["-o", so, src] + list(LIBS),
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        return "failed", str(exc)
    if r.returncode < 0:  # killed by a signal (e.g. the OOM killer): says nothing of OpenMP
        return "failed", f"signal {-r.returncode}"
    if r.returncode != 0:
        return "rejected", r.stderr + r.stdout
    try:
        return ("ok", "") if Library(so)["te_probe"](10) == 45 else ("rejected", "wrong sum")
    except (OSError, AttributeError) as exc:
        return "rejected", str(exc)  # e.g. libgomp.so.1: cannot open shared object file


def write_atomic(path: str, text: Union[str, bytes]) -> None:
    """Write ``text`` (or bytes) to ``path`` through a temporary file renamed over it: a
    reader sees the old file or the whole new one, never a part (another process may be
    reading).

    >>> import os, tempfile
    >>> d = tempfile.mkdtemp(); write_atomic(os.path.join(d, "x.txt"), "hi")
    >>> open(os.path.join(d, "x.txt")).read()
    'hi'
    """
    import tempfile
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def compile_shared(source: str, compiler: Optional[Compiler] = None, count: bool = True) -> str:
    """Path of a shared library built from ``source`` (from the cache when possible).

    ``count=False`` leaves ``stats`` alone (the runtime's own helper libraries are not
    the user's kernels). A cached library is used only if it matches the size and
    hash recorded beside it (:func:`verify`); otherwise it is compiled again.

    Raises :class:`CompilerError` (with the compiler's message and the path of
    the kept source) if the compiler rejects the source.

    >>> path = compile_shared("int te_kernel(void) { return 0; }")  # doctest: +SKIP
    """
    so, job = prepare(source, compiler, count)
    return so if job is None else job()


def prepare(source: str, compiler: Optional[Compiler] = None, count: bool = True
            ) -> Tuple[str, Optional[Callable[[], str]]]:
    """``(path, job)``: where :func:`compile_shared` puts the library of ``source``, and
    None if the cache holds it, else the function that compiles it there (and returns
    the path; ``codegen.background`` runs it on a thread). The compiler, its flags and
    the cache directory are resolved now, by the caller.

    >>> so, job = prepare("int te_kernel(void) { return 0; }")  # doctest: +SKIP
    """
    compiler = compiler or find_compiler()
    flags = compiler.flags(source)
    key = digest(CACHE_FORMAT, source, compiler.identity, shlex.join(flags + LIBS), machine())
    d = cache_dir()
    so = os.path.join(d, f"te_{key[:40]}.so")
    if verify(so):
        stats["cache_hits"] += count
        return so, None
    return so, lambda: _compile(source, compiler, flags, d, key, count)


def _compile(source: str, compiler: Compiler, flags: Tuple[str, ...], d: str, key: str,
             count: bool) -> str:
    so = os.path.join(d, f"te_{key[:40]}.so")
    src = os.path.join(d, f"te_{key[:40]}.c")
    import subprocess
    import tempfile
    try:
        write_atomic(src, source)
        work = tempfile.mkdtemp(dir=d, prefix=".tmp-")
    except OSError as exc:
        raise CacheDirError(
            f"cannot write compiled kernels to {d} ({exc}); set $TENSOREXPR_CACHE_DIR to a "
            f"writable directory") from None
    try:
        tmp = os.path.join(work, "out.so")
        cmd = list(compiler.argv) + list(flags) + ["-o", tmp, src] + list(LIBS)
        t0, cpu0 = time.perf_counter(), _children_cpu()
        try:
            r = _run(cmd, work)
        except (OSError, subprocess.SubprocessError) as exc:
            raise CompilerError(f"running the C compiler failed: {exc}\n"
                                f"command: {shlex.join(cmd)}\nsource kept at {src}") from None
        finally:
            with _stats_lock:  # compiles may run on several threads (codegen.background)
                stats["compile_s"] += time.perf_counter() - t0
                stats["compile_cpu_s"] += _children_cpu() - cpu0
        if r.returncode != 0:
            msg = (r.stderr or r.stdout).strip()
            if len(msg) > 8000:
                msg = msg[:8000] + "\n... (truncated)"
            raise CompilerError(
                f"the C compiler rejected the generated code (a bug in tensorexpr; please report "
                f"it with the source file below)\ncommand: {shlex.join(cmd)}\n{msg}\n"
                f"source kept at {src}")
        # The checksum first: a reader never finds a new library without one (it would
        # compile it again); one of another writer's library fails the check, never loads.
        write_atomic(_sum_path(so), _sum_text(tmp))
        os.replace(tmp, so)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with _stats_lock:
        stats["compiled"] += count
    return so


def _children_cpu() -> float:
    """CPU seconds (user and system) of this process's finished child processes."""
    try:
        import resource
    except ImportError:  # not a POSIX system: no figure
        return 0.0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _run(cmd: List[str], work: str):
    """Run the compiler in a process group of its own, its temporary files in ``work``.
    On any exception (a timeout, Ctrl-C) the whole group is killed before the caller
    removes ``work``, so no compiler pass writes there afterwards."""
    import subprocess
    # Ctrl-C is held back while the compiler starts: arriving inside Popen, after the
    # fork, it would leave a compiler nobody kills (seen under load). Released once
    # ``p`` is known, a pending one is raised inside the try that kills the group.
    hold = threading.current_thread() is threading.main_thread()
    if hold:
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    p = None
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, TMPDIR=work), start_new_session=True)
        _running.add(p)
        if hold:
            hold = False
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        out, err = communicate(p, 600)
    except BaseException:
        if hold:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if p is not None:
            _kill_group(p)
        raise
    finally:
        _running.discard(p)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


#: compiler processes running now (on any thread)
_running: set = set()


def stop_running() -> None:
    """Kill every compiler process running now (its whole group): a program ended by
    Ctrl-C must not wait, at exit, for compiles on other threads
    (``codegen.background``); each one's thread then fails and cleans up."""
    for p in list(_running):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass


def communicate(p, timeout: float) -> Tuple[str, str]:
    """``p.communicate(timeout=timeout)`` in short waits. A Ctrl-C that arrives while this
    thread holds SIGINT back (as ``_run`` does around ``Popen``) goes to another thread
    (an OpenMP or BLAS one), whose handler only flags it: a single long wait would not
    return to Python, which raises ``KeyboardInterrupt``, before the compiler ends
    (seen under load: a minute). Retrying loses no output (``subprocess`` says so).

    >>> import subprocess, sys
    >>> p = subprocess.Popen([sys.executable, "-c", "print(7)"], stdout=subprocess.PIPE,
    ...                      stderr=subprocess.PIPE, text=True)
    >>> communicate(p, 60)
    ('7\\n', '')
    """
    import subprocess
    end = time.monotonic() + timeout
    while True:
        try:
            return p.communicate(timeout=min(0.25, max(end - time.monotonic(), 0.0)))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= end:
                raise


def _kill_group(p) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    p.kill()
    p.communicate()
    # the driver is reaped; its passes (cc1, as, ld) are gone once the group is empty
    for _ in range(200):
        try:
            os.killpg(p.pid, 0)
        except OSError:
            return
        time.sleep(0.01)


# {{{ checksums of cached libraries

def _sum_path(so: str) -> str:
    return so + ".sum"


def _sum_text(path: str) -> str:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
            size += len(block)
    return f"{size} {h.hexdigest()}\n"


#: libraries checked in this process, by path: their and their checksums' file stamps
_verified: Dict[str, tuple] = {}


def verify(so: str) -> bool:
    """Does the library at ``so`` exist and match the size and SHA-256 recorded beside it?

    >>> verify("/nonexistent/te_0.so")
    False
    """
    try:
        st, sst = os.stat(so), os.stat(_sum_path(so))
        stamp = (st.st_size, st.st_mtime_ns, st.st_ino, sst.st_mtime_ns, sst.st_ino)
        if _verified.get(so) == stamp:
            return True
        with open(_sum_path(so), encoding="ascii") as f:
            recorded = f.read()
        size = int(recorded.split()[0])
        if size != st.st_size or recorded != _sum_text(so):
            return False
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return False
    _verified[so] = stamp
    return True


def discard(so: str) -> None:
    """Remove a cached library (and its checksum): it is compiled again when next asked for.

    >>> discard("/nonexistent/te_0.so")
    """
    _verified.pop(so, None)
    _unlink(so)
    _unlink(_sum_path(so))


class DamagedLibraryError(OSError):
    """A cached library does not match its recorded checksum (it is not loaded)."""


# }}}

# {{{ loading and unloading

class Library(ctypes.CDLL):
    """A loaded shared library, unloaded (``dlclose``) when the object is freed.

    Whatever calls into it must hold it (a function pointer taken with ``lib[name]``
    does). An OpenMP runtime it brings in is made permanent first: its worker threads
    sleep in its code, which must stay mapped.

    >>> lib = Library(compile_shared("int te_kernel(void) { return 7; }"))  # doctest: +SKIP
    >>> lib["te_kernel"]()  # doctest: +SKIP
    7
    """

    def __init__(self, path: str):
        # the first library may start the OpenMP runtime: it reads how to wait then
        # (codegen.openmp_env); the settings are taken out again once it has read them
        first = not _openmp_runtimes
        names = openmp_env.apply() if first else []
        try:
            super().__init__(path)
            pinned = _pin_openmp(self)
        finally:
            if first and _openmp_runtimes:
                openmp_env.started()
            later = [p for p in _openmp_runtimes if not openmp_env.reads_at_load(p)]
            if names and not (first and later):
                openmp_env.restore(names)
        weakref.finalize(self, _dlclose, self._handle, pinned)


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


try:
    _process = ctypes.CDLL(None)
    _dladdr = _process.dladdr
    _dladdr.argtypes = (ctypes.c_void_p, ctypes.POINTER(_DlInfo))
    _dladdr.restype = ctypes.c_int
    _dlclose_fn = _process.dlclose
    _dlclose_fn.argtypes = (ctypes.c_void_p,)
    _dlclose_fn.restype = ctypes.c_int
except (OSError, AttributeError):  # not a dlopen platform we know: libraries stay loaded
    _dladdr = _dlclose_fn = None

#: files of the OpenMP runtimes made permanent in this process
_openmp_runtimes: Dict[str, ctypes.CDLL] = {}


def _pin_openmp(lib: ctypes.CDLL) -> bool:
    """Make the OpenMP runtime ``lib`` depends on (if any) permanent; False if there is
    one that could not be (then ``lib`` must never be unloaded either)."""
    try:
        fn = lib["omp_get_max_threads"]  # looked up in lib and its dependencies
    except AttributeError:
        return True  # no OpenMP runtime
    if _dladdr is None:
        return False
    info = _DlInfo()
    if not _dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info)) or not info.dli_fname:
        return False
    path = info.dli_fname.decode()
    if path not in _openmp_runtimes:
        mode = getattr(os, "RTLD_NOLOAD", 4) | getattr(os, "RTLD_NODELETE", 0x1000) | \
            getattr(os, "RTLD_LAZY", 1)
        try:
            _openmp_runtimes[path] = ctypes.CDLL(path, mode=mode)
        except OSError:
            return False
    return True


def _dlclose(handle: int, may_unload: bool) -> None:
    if may_unload and _dlclose_fn is not None:
        _dlclose_fn(handle)


def openmp_runtime_loaded() -> bool:
    """Has this process loaded an OpenMP runtime (through some library)?

    >>> isinstance(openmp_runtime_loaded(), bool)
    True
    """
    return bool(_openmp_runtimes)


#: live libraries by path (a freed one is unloaded; its dead reference is replaced)
_libs: Dict[str, "weakref.ref[Library]"] = {}
_libs_lock = threading.Lock()


def load(path: str) -> Library:
    """The loaded library at ``path``, shared by its users while any is alive.

    Raises :class:`DamagedLibraryError` (an ``OSError``) if the file does not match its
    recorded checksum, ``OSError`` if it cannot be loaded.

    >>> lib = load(compile_shared("int te_kernel(void) { return 7; }"))  # doctest: +SKIP
    """
    with _libs_lock:
        ref = _libs.get(path)
        lib = ref() if ref is not None else None
        if lib is None:
            if not verify(path):
                raise DamagedLibraryError(
                    f"the cached library {path} is missing, damaged or has no checksum; "
                    f"it is compiled again (remove it if this repeats)")
            lib = Library(path)
            _libs[path] = weakref.ref(lib)
        return lib


def loaded() -> List[Library]:
    """The libraries loaded in this process now.

    >>> all(isinstance(lib, Library) for lib in loaded())
    True
    """
    return [lib for lib in (r() for r in list(_libs.values())) if lib is not None]


def _reset_after_fork() -> None:
    global _libs_lock
    _libs_lock = threading.Lock()  # another thread of the parent may have held it


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)

# }}}
