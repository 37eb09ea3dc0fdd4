"""The C backend: IR -> loop-AST -> C -> shared library -> callable.

``te.build(..., backend="c")`` (the default) calls :func:`compile_program`.
The stages are separate modules so that schedule transformations can later be
added between lowering and emission, on the loop-AST:

* ``codegen.lower``: tensors to loop nests (isl for non-box domains);
* ``codegen.cemit``: loop-AST to C text;
* ``codegen.compiler``: the system compiler and the on-disk cache;
* ``codegen.runtime``: calling the kernel through ctypes.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Tuple

from . import compiler, runtime
from .cemit import emit
from .lower import Lowerer


def generate(sig, name: Optional[str] = None):
    """Lower and print a program: ``(program, C source)``; nothing is compiled.

    >>> import tensorexpr as te
    >>> from codegen.signature import Signature
    >>> A = te.placeholder((4,), name="A")
    >>> B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    >>> _, src = generate(Signature([B], [A]))
    >>> "b1[i0] = b0[i0] + 1.0f;" in src
    True
    """
    title = name if name is not None else ", ".join(t.name for t in sig.outputs)
    program = Lowerer(sig, title).program()
    return program, emit(program.kernel)


def compile_program(sig, name: Optional[str] = None
                    ) -> Tuple[Callable[..., List], str]:
    """``(impl, source)``: ``impl(arrays, sizes)`` runs the compiled program.

    >>> import numpy as np, tensorexpr as te
    >>> from codegen.signature import Signature
    >>> A = te.placeholder((3,), name="A")
    >>> B = te.compute((3,), lambda i: A[i] * 2.0, name="B")
    >>> impl, src = compile_program(Signature([B], [A]))
    >>> impl([np.arange(3, dtype=np.float32)], {})[0]
    array([0., 2., 4.], dtype=float32)
    """
    program, source = generate(sig, name)
    path = compiler.compile_shared(source, compiler.find_compiler())
    return runtime.KernelFunction(path, program, sig), source
