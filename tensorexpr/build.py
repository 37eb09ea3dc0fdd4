"""``te.build``: turn tensors into a callable on numpy arrays, on a chosen backend."""
from __future__ import annotations

from typing import Optional, Sequence, Union

from .ir import Placeholder, Tensor, topo_order

BACKENDS = ("c", "numpy")


class Function:
    """A built program: call it with numpy arrays (positionally or by input name).

    One output gives an array, several a tuple. ``source`` is the generated code
    (C for the C backend, the program text for the numpy backend).
    """

    def __init__(self, outputs, signature, impl, source: str, backend: str):
        self.outputs = list(outputs)
        self.signature = signature
        self.inputs = signature.inputs
        self._impl = impl
        self.source = source
        self.backend = backend

    def __call__(self, *args, **kwargs):
        arrays, sizes = self.signature.bind(args, kwargs)
        outs = list(self._impl(arrays, sizes))
        if len(outs) == 1:
            return outs[0]
        seen = set()
        for k, a in enumerate(outs):  # te.build([C, C]): two arrays, not one aliased twice
            if id(a) in seen:
                outs[k] = a.copy()
            seen.add(id(a))
        return tuple(outs)

    def __repr__(self):
        ins = ", ".join(t.name for t in self.inputs)
        outs = ", ".join(t.name for t in self.outputs)
        return f"<tensorexpr.Function ({ins}) -> ({outs}) on {self.backend}>"


def build(outputs: Union[Tensor, Sequence[Tensor]], inputs: Optional[Sequence[Tensor]] = None,
          backend: str = "c", name: Optional[str] = None) -> Function:
    """Compile ``outputs`` into a function of ``inputs``.

    ``inputs=None`` takes every placeholder the outputs read, in creation order.
    ``backend`` is ``"c"`` (generated C, compiled by the system compiler, cached
    on disk) or ``"numpy"`` (the reference interpreter).

    >>> import numpy as np, tensorexpr as te
    >>> A = te.placeholder((3,), name="A")
    >>> B = te.compute((3,), lambda i: A[i] * 2.0, name="B")
    >>> f = te.build(B, backend="numpy")
    >>> f(np.arange(3, dtype=np.float32))
    array([0., 2., 4.], dtype=float32)
    """
    from codegen.signature import Signature

    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    if not outs or not all(isinstance(t, Tensor) for t in outs):
        raise TypeError("te.build takes a tensor or a list of tensors")
    if inputs is None:
        inputs = sorted((t for t in topo_order(outs) if isinstance(t, Placeholder)),
                        key=lambda t: t.uid)
    elif isinstance(inputs, Tensor):
        inputs = [inputs]
    inputs = list(inputs)
    bad = [x for x in inputs if not isinstance(x, Tensor)]
    if bad:
        raise TypeError(f"inputs= takes the placeholders of the program, not "
                        f"{type(bad[0]).__name__}; pass arrays when calling the built function")
    sig = Signature(outs, inputs)
    if backend == "numpy":
        from codegen import reference
        from .printer import program_str

        def impl(arrays, sizes):
            return reference.run(sig.outputs, sig.inputs, arrays, sizes,
                                 lambda t: sig.shape(t, sizes))
        return Function(outs, sig, impl, program_str(outs), "numpy")
    if backend == "c":
        from codegen.c_backend import compile_program
        impl, source = compile_program(sig, name=name)
        return Function(outs, sig, impl, source, "c")
    raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
