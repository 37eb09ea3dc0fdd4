"""A lowered program: its kernel, the tensor behind each buffer, its run-time error sites.

What the lowering (``codegen.lower``, ``codegen.checkpoint``) hands to the C emitter
and the runtime, which reports a failed check by its site.

>>> Site(None, None).read is None
True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from tensorexpr.ir import Read, Tensor

from .loopast import Kernel

#: error codes of :class:`loopast.Fail` records
READ_OUT_OF_RANGE = 1
SCATTER_OUT_OF_RANGE = 2


@dataclass(frozen=True)
class Site:
    """Where a run-time check can fail: ``owner`` reads ``read`` (or scatters, read=None)."""

    owner: Tensor
    read: Optional[Read]


@dataclass
class Program:
    """A lowered program: the kernel, the tensor behind each buffer, the error sites."""

    kernel: Kernel
    tensors: List[Tensor]
    sites: List[Site]
