"""Calling a compiled kernel: buffers, sizes, and error records turned into exceptions.

Every call allocates the outputs and intermediates as numpy arrays (freed with
them), passes all buffers, the size values and an error record to the kernel
through ctypes, and raises ``IndexError`` if the kernel met an out-of-range
data-dependent index.
"""
from __future__ import annotations

import ctypes
from typing import Dict, List, Sequence

import numpy as np

from tensorexpr.errors import describe
from tensorexpr.ir import Placeholder, Read, walk
from tensorexpr.printer import expr_str

from . import compiler
from .cemit import ENTRY
from .lower import READ_OUT_OF_RANGE, SCATTER_OUT_OF_RANGE, Program

_ERR_WORDS = 5  # code, site, dim, index, size


class KernelFunction:
    """``impl(arrays, sizes) -> outputs`` for a lowered and compiled program.

    ``arrays`` are the validated inputs (C-contiguous, right dtype) and
    ``sizes`` maps size names to values (see ``codegen.signature``).
    """

    def __init__(self, library_path: str, program: Program, sig):
        self.program = program
        self.sig = sig
        fn = getattr(compiler.load(library_path), ENTRY)
        fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
        fn.restype = ctypes.c_int
        self._fn = fn
        self._n_inputs = len(sig.inputs)
        self._computed = program.tensors[self._n_inputs:]

    def __call__(self, arrays: Sequence[np.ndarray], sizes: Dict[str, int]) -> List[np.ndarray]:
        bufs: List[np.ndarray] = list(arrays)
        for t in self._computed:
            bufs.append(np.empty(self.sig.shape(t, sizes), dtype=t.dtype))
        ptrs = (ctypes.c_void_p * max(len(bufs), 1))(*[b.ctypes.data for b in bufs])
        size_vals = np.array([sizes[n] for n in self.sig.size_names] or [0], dtype=np.int64)
        err = np.zeros(_ERR_WORDS, dtype=np.int64)
        rc = self._fn(ptrs, size_vals.ctypes.data, err.ctypes.data)
        if rc != 0 or err[0] != 0:
            raise self._error(err)
        by_uid = {t.uid: b for t, b in zip(self.program.tensors, bufs)}
        return [by_uid[t.uid].copy() if isinstance(t, Placeholder) else by_uid[t.uid]
                for t in self.sig.outputs]

    def _error(self, err: np.ndarray) -> Exception:
        code, site, dim, index, size = (int(x) for x in err)
        if not 0 <= site < len(self.program.sites):
            return RuntimeError(f"the compiled kernel reported error code {code} at an "
                                f"unknown site {site} (a bug in tensorexpr)")
        s = self.program.sites[site]
        if code == READ_OUT_OF_RANGE:
            data = any(isinstance(x, Read) for x in walk(s.read.indices[dim]))
            hint = "; the index comes from data: check the index tensor's values" if data else ""
            return IndexError(
                f"{describe(s.owner)} reads {s.read.tensor.name!r} at index {index} in dimension "
                f"{dim}, outside its size {size} (in {expr_str(s.read)}){hint}")
        if code == SCATTER_OUT_OF_RANGE:
            return IndexError(f"{describe(s.owner)} scatters to index {index} in dimension {dim}, "
                              f"outside its size {size}")
        return RuntimeError(f"the compiled kernel reported unknown error code {code}")
