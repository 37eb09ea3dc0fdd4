"""The systems compared, behind one interface the runner drives.

Each system module (``te_sys``, ``torch_sys``, ``jax_sys``, ``numpy_sys``) has
``LABEL``, ``VJP_INCLUDES`` (what its VJP time covers, printed with the results),
``missing()`` (None, or why the system cannot run here) and
``prepare(case, p, inputs, H) -> Prepared``. Forward definitions inside a module
are keyed by ``Case.key``, so a case is written once per system.

>>> sorted(SYSTEMS)
['jax', 'numpy', 'te', 'torch']
"""
from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import numpy as np

SYSTEMS = {"te": "te_sys", "torch": "torch_sys", "jax": "jax_sys", "numpy": "numpy_sys"}
#: The order systems are listed and measured in; tensorexpr first.
ORDER = ("te", "torch", "jax", "numpy")


def module(name: str):
    """The module implementing system ``name`` (imports only that module)."""
    return importlib.import_module(f"{__name__}.{SYSTEMS[name]}")


@dataclass
class Prepared:
    """One case built for one system, ready to be timed.

    ``fwd()`` and ``vjp()`` run once each and return the system's own arrays
    (already computed: asynchronous systems block inside); ``to_numpy`` turns
    one such array into numpy. A part that cannot run has ``None`` and a status
    ``"unsupported (why)"``. Build times are seconds (None: not applicable).
    """

    fwd: Optional[Callable[[], object]]
    vjp: Optional[Callable[[], object]]
    to_numpy: Callable[[object], np.ndarray] = np.asarray
    fwd_status: str = "ok"
    vjp_status: str = "ok"
    fwd_build_s: Optional[float] = None
    build_s: Optional[float] = None
    #: tensorexpr: the build seconds without the C compiler's (differentiate + lowering)
    fwd_codegen_s: Optional[float] = None
    codegen_s: Optional[float] = None

    def forward_output(self) -> np.ndarray:
        """One forward call, as a numpy array."""
        return self.to_numpy(self.fwd())

    def gradients(self) -> List[np.ndarray]:
        """One VJP call, as numpy arrays in the case's ``wrt`` order."""
        out = self.vjp()
        return [self.to_numpy(g) for g in (out if isinstance(out, (tuple, list)) else (out,))]


def forward_table(namespace: dict) -> Dict[str, Callable]:
    """Every case key mapped to the function ``_<key>`` of a system module's namespace
    (a KeyError at import time if the module misses a case)."""
    from benchmarks.cases import CASES
    return {key: namespace[f"_{key}"] for key in dict.fromkeys(c.key for c in CASES)}


def missing_module(name: str) -> Optional[str]:
    """None if the peer package ``name`` imports, else why not and how to install it."""
    try:
        importlib.import_module(name)
    except ImportError as exc:
        return f"{name} not installed ({first_line(exc)}); pip install -e '.[bench]'"
    return None


def timed(fn: Callable[[], object]):
    """``(result, seconds)`` of one call."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name if it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
