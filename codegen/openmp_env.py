"""How the OpenMP runtime waits: passive by default, set before the runtime starts.

Between parallel regions OpenMP's worker threads wait for the next one. GNU
libgomp's default is to spin for a while first (``GOMP_SPINCOUNT`` 300,000 turns
of a pause loop, milliseconds on CPUs with a slow ``pause``), LLVM's libomp for
200 ms (``KMP_BLOCKTIME``). On a machine whose cores are busy with other work that
spinning takes CPU time from it (and from this process's own Python thread), and
a kernel's threads that find their cores taken wait a scheduler tick at each
barrier. So unless the environment says otherwise (any of :data:`USER_CHOICES`
set), the runtime is started with :data:`DEFAULTS`: idle threads sleep at once
(``OMP_WAIT_POLICY=PASSIVE``); waking them costs a few microseconds more per
region, which ``codegen.threads`` measures and charges to the decision to go
parallel at all.

The runtime reads these variables once, when it starts: libgomp when it is loaded
(with the first compiled kernel), libomp at its first parallel region. So
:func:`apply` sets them in the environment just before the first kernel library
is loaded, and :func:`restore` takes them out again once the runtime has read
them (libgomp), so child processes inherit the user's environment unchanged; a
runtime that reads them later keeps them set. Limits: if the process already runs
the same OpenMP runtime before tensorexpr loads a kernel (another library brought
it in), its settings are already fixed and these defaults have no effect; set
``OMP_WAIT_POLICY=PASSIVE`` before starting Python to have it there too.
(PyTorch's and JAX's wheels bring their own copies of their runtimes, which are
not affected either way.)

>>> effective({"OMP_WAIT_POLICY": "active"})["OMP_WAIT_POLICY"]
'active'
>>> effective({})["OMP_WAIT_POLICY"]
'PASSIVE'
"""
from __future__ import annotations

import os
from typing import Dict, List, Mapping, Optional

#: what the runtime gets when the environment does not say how to wait
DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE"}
#: variables by which a user chooses how threads wait (any of them set: no defaults)
USER_CHOICES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "KMP_LIBRARY")


def effective(env: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The OpenMP settings a runtime started now would get: ``env`` (default
    ``os.environ``) with :data:`DEFAULTS` where the user chose nothing.

    >>> effective({"GOMP_SPINCOUNT": "1000"}).get("OMP_WAIT_POLICY") is None
    True
    """
    env = dict(os.environ if env is None else env)
    if not any(env.get(k) for k in USER_CHOICES):
        for k, v in DEFAULTS.items():
            env[k] = v
    return env


#: the settings the OpenMP runtime of this process started with (None: not started yet)
_started: Optional[Dict[str, str]] = None


def started() -> None:
    """Record the settings in force as those the runtime started with (the compiler
    calls it when the first library bringing an OpenMP runtime has been loaded).

    >>> isinstance(settings(), dict)
    True
    """
    global _started
    if _started is None:
        _started = effective()


def settings() -> Dict[str, str]:
    """The settings of this process's OpenMP runtime: those it started with, or those
    it would start with now (later changes of the environment do not reach it).

    >>> settings()["OMP_WAIT_POLICY"] in ("PASSIVE", os.environ.get("OMP_WAIT_POLICY"))
    True
    """
    return dict(_started) if _started is not None else effective()


def apply() -> List[str]:
    """Set :data:`DEFAULTS` in ``os.environ`` where the user chose nothing; the names
    set (for :func:`restore`).

    >>> restore(apply())
    """
    if any(os.environ.get(k) for k in USER_CHOICES):
        return []
    for k, v in DEFAULTS.items():
        os.environ[k] = v
    return list(DEFAULTS)


def restore(names: List[str]) -> None:
    """Take the variables :func:`apply` set out of ``os.environ`` again.

    >>> restore([])
    """
    for k in names:
        os.environ.pop(k, None)


def reads_at_load(runtime_path: str) -> bool:
    """Does the OpenMP runtime at ``runtime_path`` read its settings when it is loaded
    (GNU libgomp), so that they can be taken out of the environment afterwards?

    >>> reads_at_load("/usr/lib/x86_64-linux-gnu/libgomp.so.1"), reads_at_load("libomp.so")
    (True, False)
    """
    return "libgomp" in os.path.basename(runtime_path)
