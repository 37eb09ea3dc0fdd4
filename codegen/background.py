"""Compiles that run while Python goes on: a program's C compiler in the background.

``te.build`` spends most of a cold build waiting for the C compiler, a separate process.
A user building a forward and its gradient (or any two programs) would wait for both
compiles one after the other, with the second program's differentiation and lowering
in between. Here :func:`start` resolves everything a compile depends on (the compiler,
its flags, the cache directory, a cache hit) on the caller's thread and runs the
compiler on a thread of its own; :class:`PendingKernel` is the built program, which joins
its compile when it is first called (or anything else is asked of it). So the next
program is lowered while the first one compiles, and two compiles run at once on two
cores (at most one per core the process may use: ``os.sched_getaffinity``).

Nothing changes for a caller that calls a program right after building it. A compiler
error is raised by that first call, with the same message ``codegen.compiler`` gives.
A compile in flight when the process forks is run again, in the child, if the child asks
for it; one in flight at exit is waited for (no compiler is left running).
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Callable, Dict, List, Optional

from . import compiler, runtime


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


_slots = threading.BoundedSemaphore(_cores())
_lock = threading.Lock()
#: compiles in flight, by library path (a second build of the same program joins the first)
_pending: Dict[str, "Compilation"] = {}


class Compilation:
    """The library of one C source, compiled on a thread (or found in the cache).

    >>> c = start("int te_kernel(void) { return 7; }")  # doctest: +SKIP
    >>> c.result().endswith(".so")  # doctest: +SKIP
    True
    """

    def __init__(self, path: str, job: Optional[Callable[[], str]]):
        self.path = path
        self._job = job
        self._pid = os.getpid()
        self._done = threading.Event()
        self._error: Optional[BaseException] = None
        self._then: List[Callable[[], None]] = []
        self._finished = job is None  # the callbacks are taken (or there is nothing to do)
        #: to run by the first caller of result() (``start(..., wait=True)``)
        self._unstarted = False
        if job is None:
            self._done.set()

    def failed(self) -> bool:
        """Has the compile ended with an error (a later build must compile again)?"""
        return self._done.is_set() and self._error is not None

    def then(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once the library is compiled (now if it is; never if it fails)."""
        with _lock:
            if not self._finished:
                self._then.append(fn)
                return
        if self._error is None:
            fn()

    def _run(self, inline: bool = False) -> None:
        """Compile, record, and wake the waiters; ``inline``: the caller's own thread,
        where what the compiler raises (or Ctrl-C) goes on at once."""
        try:
            with _slots:
                self._job()
        except BaseException as exc:  # raised again by result(), on the caller's thread
            self._error = exc
        with _lock:
            self._finished = True
            if _pending.get(self.path) is self:
                del _pending[self.path]
            then, self._then = self._then, []
        # before the waiting caller goes on: it may look for what they record
        for fn in then if self._error is None else ():
            try:
                fn()
            except Exception:
                pass  # only bookkeeping (a cache entry): the library itself is fine
        self._done.set()
        if inline and self._error is not None:
            raise self._error

    def result(self) -> str:
        """The library's path, once compiled; raises what the compiler raised."""
        with _lock:
            run, self._unstarted = self._unstarted, False
        if run:
            self._run(inline=True)
        if os.getpid() != self._pid and not self._done.is_set():
            # forked while it compiled: that thread is not in this process (nor, maybe,
            # the event's lock), so this one compiles
            self._pid, self._error, self._done = os.getpid(), None, threading.Event()
            try:
                self._job()
            except BaseException as exc:
                self._error = exc
            self._finished = True
            self._done.set()
        while not self._done.wait(0.25):
            pass  # short waits: a Ctrl-C flagged by another thread is raised here
        if self._error is not None:
            raise self._error
        return self.path


def start(source: str, comp: Optional[compiler.Compiler] = None, wait: bool = False
          ) -> Compilation:
    """The compile of ``source`` (``codegen.compiler.compile_shared``'s), started on a
    thread unless the cache holds its library; ``wait``: run by the first thread that
    asks for its ``result()``, on that thread (as ``compile_shared``: Ctrl-C stops the
    compiler and cleans up), not before (a build pauses the cyclic collector while it
    lowers, not while the compiler runs).

    >>> start("int te_kernel(void) { return 7; }").result().endswith(".so")
    True
    """
    path, job = compiler.prepare(source, comp)
    with _lock:
        running = _pending.get(path)
        if running is not None:
            return running
        c = Compilation(path, job)
        if job is None:
            return c
        if not wait:
            _pending[path] = c
    if wait:
        c._unstarted = True
    else:
        threading.Thread(target=c._run, name="tensorexpr-cc", daemon=True).start()
    return c


class PendingKernel:
    """A built program whose library may still be compiling: calling it (or reading any
    attribute of ``codegen.runtime.KernelFunction``) waits for the compile and loads the
    library (``again()`` compiles it once more if it does not load)."""

    def __init__(self, compilation: Compilation, layout, sig, again: Callable[[], str]):
        self._compilation = compilation
        self._layout, self._sig = layout, sig
        self._again = again
        self._kernel: Optional[runtime.KernelFunction] = None
        self._resolve_lock = threading.Lock()

    def resolve(self) -> runtime.KernelFunction:
        """The loaded kernel function (compiled and loaded at the first call)."""
        k = self._kernel
        if k is not None:
            return k
        with self._resolve_lock:
            if self._kernel is None:
                path = self._compilation.result()
                try:
                    k = runtime.KernelFunction(path, self._layout, self._sig)
                except OSError:
                    # damaged between its check and loading, or it does not load: compiled
                    # once more (a second failure is not the cache's fault and is raised)
                    compiler.discard(path)
                    k = runtime.KernelFunction(self._again(), self._layout, self._sig)
                self._kernel = k
        return self._kernel

    #: ``__call__`` takes ``into=`` (see ``KernelFunction.__call__``)
    writes_into = True

    def __call__(self, arrays, sizes, into=None):
        return self.resolve()(arrays, sizes, into=into)

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("_kernel", "_compilation", "_resolve_lock"):
            raise AttributeError(name)
        return getattr(self.resolve(), name)


def _join_all() -> None:
    """At exit: let compiles on threads finish (their libraries are cached for the next
    process), unless the program ends on Ctrl-C: then they are stopped first."""
    if getattr(sys, "last_type", None) is KeyboardInterrupt:  # set for an uncaught one
        compiler.stop_running()
    with _lock:
        running = list(_pending.values())
    for c in running:
        if c._pid == os.getpid():
            while not c._done.wait(0.25):
                pass  # short waits, as Compilation.result: Ctrl-C still ends the process


def _reset_after_fork() -> None:
    global _slots, _lock
    _slots = threading.BoundedSemaphore(_cores())  # held by threads this child has not
    _lock = threading.Lock()
    _pending.clear()


atexit.register(_join_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
