"""Calling compiled kernels from XLA without Python: an FFI handler and call plans.

``tensorexpr.jax`` can run a program as an XLA FFI custom call (``jax.ffi.ffi_call``)
instead of ``jax.pure_callback``. One small C++ handler serves every program: it is
compiled once per machine, compiler and XLA FFI headers (:func:`handler_library`,
cached like kernels by ``codegen.compiler``), and registered with XLA under
:data:`TARGET`. A call's attributes, fixed at trace time by :func:`call_plan`, say
which kernel to run and how to lay out its buffers:

- ``entry``: the address of the kernel's C entry point (``codegen.runtime``);
- ``sizes``: the size variables' values (bound from the shapes when tracing);
- ``slots``: for each buffer the kernel computes, the XLA result it is written into,
  or its offset in the scratch block, the call's last result (an XLA-allocated
  ``uint8`` workspace the caller drops, so nothing is allocated in the handler);
- ``copies``: results that are inputs, views of inputs (``codegen.views``) or a
  second copy of a result, gathered with strides after the kernel ran;
- ``messages``: the text of every error the kernel can report, with marks for the
  values it reports (``KernelFunction.error_template``), so an out-of-range
  data-dependent index becomes an XLA error with the same message as the numpy
  path's ``IndexError``, composed without Python.

This module does not import jax: the caller passes the FFI headers' directory.
"""
from __future__ import annotations

import glob
import hashlib
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import compiler, runtime

#: the name the handler is registered under with XLA
TARGET = "tensorexpr_kernel"
#: the handler's exported symbol
SYMBOL = "TensorexprKernel"
#: alignment of each buffer in the scratch block (a cache line; kernels need an element's)
ALIGN = 64
#: separators of the ``messages`` attribute: between sites, between one site's templates
SITE_SEP, FIELD_SEP = "\x1e", "\x1f"

HANDLER_SOURCE = r"""
// tensorexpr's XLA FFI handler: runs a compiled kernel on XLA's buffers.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

// codegen.cemit's entry point (codegen.runtime.ENTRY)
typedef int (*Entry)(void *const *bufs, const int64_t *sizes, int64_t *err);

enum { READ_OUT_OF_RANGE = 1, SCATTER_OUT_OF_RANGE = 2 };

// The k-th part of `text` between separators `sep`, or an empty view.
static std::string_view Part(std::string_view text, char sep, int64_t k) {
  size_t start = 0;
  for (int64_t i = 0; i < k; i++) {
    size_t next = text.find(sep, start);
    if (next == std::string_view::npos) return {};
    start = next + 1;
  }
  size_t end = text.find(sep, start);
  return text.substr(start, end == std::string_view::npos ? text.size() - start : end - start);
}

// The field-th template of site `site` in the messages blob (sites separated by \x1e,
// fields by \x1f), or an empty view.
static std::string_view Field(std::string_view blob, int64_t site, int64_t field) {
  return Part(Part(blob, '\x1e', site), '\x1f', field);
}

// codegen.runtime's message for the error record `err` (the same text as its IndexError).
static std::string Message(std::string_view blob, int64_t n_sites, const int64_t *err) {
  int64_t code = err[0], site = err[1], dim = err[2];
  if (site < 0 || site >= n_sites)
    return "the compiled kernel reported error code " + std::to_string(code) +
           " at an unknown site " + std::to_string(site) + " (a bug in tensorexpr)";
  std::string_view tmpl;
  if (code == SCATTER_OUT_OF_RANGE) {
    tmpl = Field(blob, site, 0);
  } else if (code == READ_OUT_OF_RANGE) {
    tmpl = Field(blob, site, 2 + dim);  // this dimension's read message, else the default
    if (dim < 0 || tmpl.empty()) tmpl = Field(blob, site, 1);
  }
  if (tmpl.empty())
    return "the compiled kernel reported unknown error code " + std::to_string(code);
  std::string out;
  for (char c : tmpl) {
    if (c == '\x01') out += std::to_string(err[3]);       // the index
    else if (c == '\x02') out += std::to_string(err[4]);  // the size
    else if (c == '\x03') out += std::to_string(dim);
    else out += c;
  }
  return out;
}

static ffi::Error Call(ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t entry,
                       ffi::Span<const int64_t> sizes, ffi::Span<const int64_t> slots,
                       ffi::Span<const int64_t> copies, ffi::Span<const uint8_t> messages,
                       int64_t n_sites) {
  // Pointers of the inputs, then of the results (the last one is the scratch block).
  const size_t n_in = args.size(), n_ret = rets.size();
  void *stack[32];
  std::vector<void *> heap;
  void **ptr = stack;
  size_t n_bufs = n_in + (size_t)slots[0];
  if (n_in + n_ret + n_bufs > 32) {
    heap.resize(n_in + n_ret + n_bufs);
    ptr = heap.data();
  }
  void **ret_ptr = ptr + n_in, **bufs = ptr + n_in + n_ret;
  std::vector<size_t> width(n_ret);
  for (size_t k = 0; k < n_in; k++) {
    auto a = args.get<ffi::AnyBuffer>(k);
    if (!a.has_value()) return a.error();
    ptr[k] = a->untyped_data();
  }
  for (size_t k = 0; k < n_ret; k++) {
    auto r = rets.get<ffi::AnyBuffer>(k);
    if (!r.has_value()) return r.error();
    ret_ptr[k] = (*r)->untyped_data();
    width[k] = ffi::ByteWidth((*r)->element_type());
  }
  if (entry != 0) {
    char *scratch = static_cast<char *>(ret_ptr[n_ret - 1]);
    for (size_t k = 0; k < n_in; k++) bufs[k] = ptr[k];
    for (int64_t j = 0; j < slots[0]; j++) {
      int64_t s = slots[1 + j];
      bufs[n_in + j] = s >= 0 ? ret_ptr[s] : scratch + (-1 - s);
    }
    int64_t err[5] = {0, 0, 0, 0, 0};
    int rc = reinterpret_cast<Entry>(entry)(bufs, sizes.begin(), err);
    if (rc != 0 || err[0] != 0) {
      std::string_view blob(reinterpret_cast<const char *>(messages.begin()),
                            messages.size() - 1);  // without the closing NUL
      return ffi::Error(ffi::ErrorCode::kOutOfRange, Message(blob, n_sites, err));
    }
  }
  // Copies: (result, from an input (0) or a result (1), which, element offset, rank,
  // shape, element strides), in order, after the kernel wrote the results they read.
  const int64_t *c = copies.begin() + 1;
  for (int64_t r = 0; r < copies[0]; r++) {
    int64_t dst = c[0], kind = c[1], src = c[2], offset = c[3], rank = c[4];
    const int64_t *shape = c + 5, *stride = c + 5 + rank;
    c += 5 + 2 * rank;
    size_t w = width[dst];
    char *out = static_cast<char *>(ret_ptr[dst]);
    const char *in = static_cast<const char *>(kind == 0 ? ptr[src] : ret_ptr[src]);
    int64_t count = 1;
    bool dense = true;  // row-major strides: one memcpy
    for (int64_t d = rank - 1, want = 1; d >= 0; d--) {
      count *= shape[d];
      if (shape[d] != 1 && stride[d] != want) dense = false;
      want *= shape[d];
    }
    if (count == 0) continue;
    if (dense) {
      std::memcpy(out, in + offset * w, count * w);
      continue;
    }
    std::vector<int64_t> at(rank, 0);
    int64_t pos = offset;
    for (int64_t e = 0; e < count; e++) {
      std::memcpy(out + e * w, in + pos * w, w);
      for (int64_t d = rank - 1; d >= 0; d--) {  // the next index, last axis fastest
        pos += stride[d];
        if (++at[d] < shape[d]) break;
        pos -= stride[d] * shape[d];
        at[d] = 0;
      }
    }
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(TensorexprKernel, Call,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int64_t>("entry")
                                  .Attr<ffi::Span<const int64_t>>("sizes")
                                  .Attr<ffi::Span<const int64_t>>("slots")
                                  .Attr<ffi::Span<const int64_t>>("copies")
                                  .Attr<ffi::Span<const uint8_t>>("messages")
                                  .Attr<int64_t>("n_sites"));
"""


def _headers_digest(include_dir: str) -> str:
    """A digest of the FFI headers: a new jaxlib with other headers builds anew."""
    h = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(include_dir, "xla", "ffi", "api", "*.h"))):
        h.update(os.path.basename(path).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def handler_source(include_dir: str) -> str:
    """The handler's C++ source for the FFI headers in ``include_dir``: a first line
    naming the headers' digest keys the build cache by them (the ``-I`` path alone
    would not tell two jaxlib versions installed at one place apart).

    >>> handler_source("/nonexistent").splitlines()[0].startswith("// XLA FFI headers ")
    True
    """
    return f"// XLA FFI headers {_headers_digest(include_dir)}\n" + HANDLER_SOURCE


def handler_library(include_dir: str) -> str:
    """The path of the handler library built against the FFI headers in ``include_dir``
    (``jax.ffi.include_dir()``), compiled by the C++ compiler on first use and cached.

    Raises ``CompilerNotFoundError`` without a C++ compiler, ``CompilerError`` if it
    rejects the source (e.g. headers of an FFI version this source does not know).

    >>> import jax
    >>> handler_library(jax.ffi.include_dir()).endswith(".so")  # doctest: +SKIP
    True
    """
    cxx = compiler.find_cxx_compiler()
    comp = compiler.Compiler(cxx.argv + ("-I" + include_dir,), cxx.identity, False, "c++")
    return compiler.compile_shared(handler_source(include_dir), comp, count=False)


@dataclass(frozen=True)
class CallPlan:
    """A program's FFI call at one set of size values: the custom call's attributes,
    the scratch block's size in bytes (its last result), and the kernel function
    whose entry point the attributes name (the caller keeps it alive for as long as
    a compiled XLA program may call it).

    >>> CallPlan({"entry": 0}, 1, None).scratch_bytes
    1
    """

    attributes: Dict[str, object]
    scratch_bytes: int
    kernel: Optional[runtime.KernelFunction]


def _row_major(shape: Sequence[int]) -> List[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return strides[::-1]


def messages(kernel: runtime.KernelFunction) -> bytes:
    """Every error message ``kernel`` can report, as the handler reads them: per site
    (separated by :data:`SITE_SEP`) the scatter message, the read message for a
    dimension whose index is not from data, then the read message of each dimension
    (separated by :data:`FIELD_SEP`); UTF-8, closed by a NUL.

    >>> import tensorexpr as te
    >>> from codegen.pipeline import build
    >>> from codegen.signature import Signature
    >>> X = te.placeholder((2,), name="X")
    >>> impl, _, _ = build(Signature([te.compute((2,), lambda i: X[i] * 2.0)], [X]))
    >>> messages(impl)
    b'\\x00'
    """
    R, S = runtime.READ_OUT_OF_RANGE, runtime.SCATTER_OUT_OF_RANGE
    sites = []
    for s in range(len(kernel.layout.sites)):
        fields = [kernel.error_template(S, s, 0), kernel.error_template(R, s, None)]
        fields += [kernel.error_template(R, s, d) for d in range(kernel.read_dims(s))]
        for f in fields:
            if SITE_SEP in f or FIELD_SEP in f:
                raise ValueError(f"an error message of site {s} contains a separator: {f!r}")
        sites.append(FIELD_SEP.join(fields))
    return SITE_SEP.join(sites).encode() + b"\0"


def call_plan(impl, sizes: Dict[str, int], input_shapes: Sequence[Tuple[int, ...]],
              n_results: int) -> CallPlan:
    """The FFI call of ``impl`` (a ``te.Function``'s ``impl`` on the C backend: a
    ``KernelFunction`` or a ``WithViews``) at ``sizes``, for inputs of ``input_shapes``
    and ``n_results`` results (then the scratch block).

    >>> import tensorexpr as te
    >>> X = te.placeholder((2,), name="X")
    >>> T = te.compute((2,), lambda i: X[i] * 2.0, name="T")
    >>> f = te.build([te.compute((2,), lambda i: T[i] + T[1 - i], name="Y"), X])
    >>> p = call_plan(f.impl, {}, [(2,)], 2)
    >>> p.attributes["slots"].tolist(), p.attributes["copies"].tolist(), p.scratch_bytes
    ([2, -1, 0], [1, 1, 0, 0, 0, 1, 2, 1], 64)
    """
    from .views import WithViews

    views = {}
    kernel = impl
    if isinstance(impl, WithViews):
        views, kernel = impl.views, impl.rest
    copies: List[int] = []
    n_copies = 0

    def copy(dst: int, kind: int, src: int, offset: int, shape, strides):
        nonlocal n_copies
        copies.extend([dst, kind, src, offset, len(shape), *shape, *strides])
        n_copies += 1

    slots: List[int] = []
    size_values = [0]
    scratch = 0
    entry = 0
    blob, n_sites = b"\0", 0
    if kernel is not None:
        layout = kernel.layout
        n = layout.n_inputs
        shapes = kernel.buffer_shapes(sizes)
        bound: Dict[int, int] = {}  # buffer -> the result it is written into
        computed = (r for r in range(n_results) if r not in views)
        for slot, r in zip(layout.outputs, computed):
            if slot < n:
                shape = input_shapes[slot]
                copy(r, 0, slot, 0, shape, _row_major(shape))
            elif slot in bound:
                shape = shapes[slot - n][0]
                copy(r, 1, bound[slot], 0, shape, _row_major(shape))
            else:
                bound[slot] = r
        for j, (shape, dtype) in enumerate(shapes):
            if n + j in bound:
                slots.append(bound[n + j])
            else:
                slots.append(-1 - scratch)
                nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                scratch += -(-nbytes // ALIGN) * ALIGN
        size_values = [int(sizes[name]) for name in layout.size_names] or [0]
        entry = kernel.entry_address()
        blob, n_sites = messages(kernel), len(layout.sites)
    for r, v in sorted(views.items()):
        copy(r, 0, v.input, v.offset, v.shape, v.strides)
    attributes = {
        "entry": np.int64(entry),
        "sizes": np.array(size_values, np.int64),
        "slots": np.array([len(slots)] + slots, np.int64),
        "copies": np.array([n_copies] + copies, np.int64),
        "messages": np.frombuffer(blob, np.uint8).copy(),
        "n_sites": np.int64(n_sites),
    }
    return CallPlan(attributes, max(scratch, 1), kernel)
