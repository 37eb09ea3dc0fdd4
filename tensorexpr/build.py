"""``te.build``: turn tensors into a callable on numpy arrays, on a chosen backend."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .ir import (Binary, Compute, Placeholder, Read, Reduce, ScatterAdd, SelfRef, Tensor,
                 Unary, COSTLY_OPS, fresh_uid, same, tensor_inputs, topo_order, walk)

from .names import names_apart

BACKENDS = ("c", "numpy")


class Function:
    """A built program: call it with numpy arrays (positionally or by input name).

    One output gives an array, several a tuple. ``out=`` (keyword only) writes the
    results into arrays you own instead: one array for one output, a tuple with
    one array (or None: a new one) per output for several; each must have the
    output's dtype and shape and be C-contiguous and writeable. The C backend
    writes the results straight into them (no new array, no copy); an ``out`` array
    that overlaps an input or another ``out`` array gets the results computed first
    and then copied, so it may also be an input (an in-place update). A call that
    raises may leave an ``out`` array partly written. The call returns the arrays
    written. ``inspect.signature(f)`` lists the inputs by name. ``source`` is the generated code (C for the C backend, the
    program text for the numpy backend).

    >>> import inspect, numpy as np, tensorexpr as te
    >>> X = te.placeholder((3,), name="X")
    >>> f = te.build(te.compute((3,), lambda i: X[i] + 1.0, name="Y"), backend="numpy")
    >>> inspect.signature(f)
    <Signature (X, *, out=None)>
    >>> x = np.zeros(3, np.float32)
    >>> _ = f(x, out=x); _ = f(x, out=x)
    >>> x
    array([2., 2., 2.], dtype=float32)
    """

    def __init__(self, outputs, signature, impl, source: str, backend: str, schedule=None):
        self.outputs = list(outputs)
        self._schedule = schedule  # C backend: a function giving the Schedule (made lazily)
        self.signature = signature
        self.inputs = signature.inputs
        self._impl = impl
        self.source = source
        self.backend = backend
        # An input named "out" keeps its name: such a function has no out= option.
        self._takes_out = "out" not in signature.input_names

    @property
    def impl(self):
        """What a call runs, ``impl(arrays, sizes) -> outputs`` on validated arrays: on the
        C backend a ``codegen.runtime.KernelFunction`` (or a ``codegen.views.WithViews``
        around one), which tensorexpr.jax's XLA FFI path calls without Python.

        >>> import tensorexpr as te
        >>> X = te.placeholder((2,), name="X")
        >>> type(te.build(te.compute((2,), lambda i: X[i] * X[i])).impl).__name__
        'KernelFunction'
        """
        resolve = getattr(self._impl, "resolve", None)  # a compile in the background, joined
        if resolve is not None:
            self._impl = resolve()
        return self._impl

    @property
    def schedule(self):
        """What the C backend chose for each tensor (``codegen.schedule.Schedule``:
        print it, or look a tensor up by name); None for the numpy backend.

        >>> import tensorexpr as te
        >>> A = te.placeholder((64, 64), name="A")
        >>> f = te.build(te.compute((64, 64), lambda i, j: A[j, i] * 2.0, name="T"))
        >>> print(f.schedule)
        T: blocks (axis=0)
        >>> f.schedule["T"].strategy
        'blocks'
        """
        if callable(self._schedule):
            self._schedule = self._schedule()
        return self._schedule

    @property
    def __signature__(self):
        import inspect
        import keyword
        names = [t.name for t in self.inputs]
        named = all(n.isidentifier() and not keyword.iskeyword(n) for n in names) \
            and len(set(names)) == len(names)
        # Names that cannot be keywords (or repeat) can only be passed by position.
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if named else \
            inspect.Parameter.POSITIONAL_ONLY
        params = [inspect.Parameter(n if named else f"input{k}", kind)
                  for k, n in enumerate(names)]
        if self._takes_out:
            params.append(inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None))
        return inspect.Signature(params)

    def __call__(self, *args, **kwargs):
        out = kwargs.pop("out", None) if self._takes_out else None
        targets = None if out is None else self._out_arrays(out)
        arrays, sizes = self.signature.bind(args, kwargs)
        if targets is not None:
            for t, dst in zip(self.signature.outputs, targets):
                want = None if dst is None else self.signature.shape(t, sizes)
                if dst is not None and dst.shape != want:
                    raise ValueError(f"out= array for output {t.name!r} has shape {dst.shape}; "
                                     f"the output's shape is {want}")
        into = None
        if targets is not None and getattr(self._impl, "writes_into", False):
            # the kernel writes straight into an out= array that overlaps no input (an
            # in-place update is computed first and copied, so it reads the old values)
            # and no other out= array (the kernel may read back an output it wrote)
            into = [None if dst is None or not dst.flags.aligned
                    or any(np.may_share_memory(dst, a) for a in arrays)
                    or any(o is not None and o is not dst and np.may_share_memory(dst, o)
                           for o in targets) else dst
                    for dst in targets]
        outs = list(self._impl(arrays, sizes) if into is None
                    else self._impl(arrays, sizes, into=into))
        if targets is not None:
            for k, (dst, a) in enumerate(zip(targets, outs)):
                if dst is not None:
                    if a is not dst:
                        np.copyto(dst, a)
                    outs[k] = dst
        if len(outs) == 1:
            return outs[0]
        seen = set()
        for k, a in enumerate(outs):  # te.build([C, C]): two arrays, not one aliased twice
            if id(a) in seen and (targets is None or targets[k] is None):
                outs[k] = a.copy()
            seen.add(id(a))
        return tuple(outs)

    def _out_arrays(self, out) -> list:
        """The out= arrays, one per output (None: allocate), checked before computing."""
        n = len(self.outputs)
        if n == 1 and not isinstance(out, (tuple, list)):
            out = (out,)
        if not isinstance(out, (tuple, list)) or len(out) != n:
            raise TypeError(f"out= takes {'an array' if n == 1 else f'a tuple of {n} arrays'} "
                            f"(one per output: {', '.join(t.name for t in self.signature.outputs)}; None "
                            f"for a new array)")
        for t, dst in zip(self.signature.outputs, out):  # named apart (tensorexpr.names)
            if dst is None:
                continue
            if not isinstance(dst, np.ndarray):
                raise TypeError(f"out= for output {t.name!r} must be a numpy array; "
                                f"got {type(dst).__name__}")
            if dst.dtype != np.dtype(t.dtype):
                raise TypeError(f"out= array for output {t.name!r} is {dst.dtype}; the output "
                                f"is {t.dtype} (allocate it with dtype=np.{t.dtype})")
            if not (dst.flags.c_contiguous and dst.flags.writeable):
                raise ValueError(f"out= array for output {t.name!r} must be C-contiguous and "
                                 f"writeable (np.ascontiguousarray, or a new np.empty)")
        if len({id(d) for d in out if d is not None}) != sum(d is not None for d in out):
            raise ValueError("out= gives the same array for two outputs")
        return list(out)

    def __repr__(self):
        ins = ", ".join(t.name for t in self.inputs)
        outs = ", ".join(t.name for t in self.outputs)
        return f"<tensorexpr.Function ({ins}) -> ({outs}) on {self.backend}>"


def build(outputs: Union[Tensor, Sequence[Tensor]], inputs: Optional[Sequence[Tensor]] = None,
          backend: str = "c", name: Optional[str] = None, options=None,
          wait: bool = True) -> Function:
    """Compile ``outputs`` into a function of ``inputs``.

    ``inputs=None`` takes every placeholder the outputs read, in creation order.
    A *computed* tensor (a compute, recurrence or scatter-add) in ``inputs`` is a
    given value: its array is passed at call time and the program reads it instead
    of computing it, so whatever only it needed need not be passed (a backward
    pass given the values its forward saved; see :func:`saved_values`). If it is
    also an output, that output is a copy of the array passed.
    ``backend`` is ``"c"`` (generated C, compiled by the system compiler, cached
    on disk) or ``"numpy"`` (the reference interpreter). ``options`` (a
    ``te.ScheduleOptions``) set the C backend's schedule: checkpointing, register
    tiles, fusion, copies, hoisting (costly parts stored once, ``passes.hoist``), or
    a strategy forced on a tensor; the built function's
    ``schedule`` says what was chosen. ``wait=False`` returns as soon as the C is
    generated, the compiler running on a thread until the function's first call waits
    for it (a compiler error is raised there): build the next program meanwhile (a
    forward, then its gradient) and two compiles share two cores.

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
        bad = next((t for t in outs if not isinstance(t, Tensor)), None)
        kind = "tuple" if isinstance(bad, tuple) else type(bad).__name__
        got = "an empty list" if not outs else f"a {kind} among them"
        hint = ""
        if isinstance(bad, (list, tuple)):
            # te.build([dX]) with dX = te.differentiate(Y, [X]): a tuple inside the list
            hint = (f"; a {kind} inside the list (te.differentiate(y, [x, ...]) returns one "
                    "gradient per input as a tuple): unpack it, te.build([*grads, ...]), "
                    "or write dx, = te.differentiate(y, [x])")
        raise TypeError(f"te.build takes a tensor or a list of tensors; got {got}{hint}")
    inputs_inferred = inputs is None
    if inputs is None:
        inputs = sorted((t for t in topo_order(outs) if isinstance(t, Placeholder)),
                        key=lambda t: t.uid)
    elif isinstance(inputs, Tensor):
        inputs = [inputs]
    inputs = list(inputs)
    bad = [x for x in inputs if not isinstance(x, Tensor)]
    if bad:
        raise TypeError(f"inputs= takes the tensors of the program (placeholders, or computed "
                        f"tensors given as values), not {type(bad[0]).__name__}; pass arrays "
                        f"when calling the built function")
    cut_outs, cut_inputs = program(outs, inputs)
    sig = Signature(cut_outs, cut_inputs, inferred=inputs_inferred)
    if backend == "numpy":
        from codegen import reference
        from .printer import program_str

        def impl(arrays, sizes):
            return reference.run(sig.outputs, sig.inputs, arrays, sizes,
                                 lambda t: sig.shape(t, sizes))
        fn = Function(outs, sig, impl, program_str(cut_outs), "numpy")
    elif backend == "c":
        from codegen import pipeline
        from codegen.schedule import DEFAULT, Options

        if options is not None and not isinstance(options, Options):
            raise TypeError(f"options= takes a te.ScheduleOptions, not {type(options).__name__}")
        impl, source, schedule = pipeline.build(sig, options or DEFAULT, name=name, wait=wait)
        fn = Function(outs, sig, impl, source, "c", schedule)
    else:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    fn.inputs = inputs  # the caller's tensors (given ones included), not their stand-ins
    return fn


def program(outputs: Sequence[Tensor], inputs: Sequence[Tensor]
            ) -> Tuple[List[Tensor], List[Tensor]]:
    """The program ``te.build(outputs, inputs)`` compiles: the given tensors of ``inputs``
    :func:`cut` out, and its tensors named apart (:func:`tensorexpr.names.names_apart`).

    >>> import tensorexpr as te
    >>> X = te.placeholder((4,), name="X")
    >>> dX1 = te.compute((4,), lambda i: X[i] * 2.0, name="dX")
    >>> dX2 = te.compute((4,), lambda i: X[i] * 3.0, name="dX")
    >>> [t.name for t in program([dX1, dX2], [X])[0]]
    ['dX', 'dX_2']
    """
    return names_apart(*cut(outputs, inputs))


def cut(outputs: Sequence[Tensor], inputs: Sequence[Tensor]
        ) -> Tuple[List[Tensor], List[Tensor]]:
    """``(outputs, inputs)`` with every computed tensor of ``inputs`` given: each becomes
    a placeholder of the same name, shape and dtype (a fresh uid, the same origin), and
    every read of it, in everything ``outputs`` reach, reads that placeholder instead.

    Rewritten tensors keep their uids (they hold the same values); tensors nothing
    given reaches are returned unchanged, so a program without given tensors is the
    caller's own graph.

    >>> import tensorexpr as te
    >>> X = te.placeholder((4,), name="X")
    >>> E = te.compute((4,), lambda i: te.exp(X[i]), name="E")
    >>> Y = te.compute((4,), lambda i: E[i] * 2.0, name="Y")
    >>> (y,), ins = cut([Y], [E])
    >>> [type(t).__name__ for t in ins], str(y.body)
    (['Placeholder'], '(E[i] * 2.0)')
    >>> y.body.a.tensor is ins[0]
    True
    """
    given: Dict[int, Tensor] = {}
    stand_in: List[Tensor] = []
    for t in inputs:
        if isinstance(t, (Compute, ScatterAdd)) and t.uid not in given:
            given[t.uid] = Placeholder(t.name, t.dims, t.dtype, fresh_uid(), t.origin)
        elif isinstance(t, SelfRef):
            raise TypeError(f"inputs= cannot take the self-reference of a recurrence "
                            f"({t.name!r}); list the recurrence tensor itself")
        stand_in.append(given.get(t.uid, t))
    if not given:
        return list(outputs), list(inputs)
    new: Dict[int, Tensor] = dict(given)

    def redirect(r: Read):
        t = new.get(r.tensor.uid)
        return r if t is None or t is r.tensor else Read(t, r.indices, r.dtype)

    from .transform import map_tensor_reads
    # Topological order: a tensor's producers are rewritten before its own reads are.
    for t in topo_order(list(outputs)):
        if t.uid in new or not any(p.uid in new for p in tensor_inputs(t)):
            continue
        if isinstance(t, (Compute, ScatterAdd)):
            new[t.uid] = map_tensor_reads(t, redirect)
    return [new.get(t.uid, t) for t in outputs], stand_in


# {{{ which forward values a gradient should be given



def _worth_saving(t: Tensor) -> bool:
    """A recurrence, a scatter-add, or a compute with a reduction or a transcendental
    function: not the cheap elementwise arithmetic the C backend computes where it is
    read anyway."""
    if isinstance(t, ScatterAdd):
        return True
    if not isinstance(t, Compute):
        return False
    if t.self_ref is not None:
        return True
    return any(isinstance(x, Reduce) or (isinstance(x, (Binary, Unary)) and x.op in COSTLY_OPS)
               for x in walk(t.body, unique=True))


def saved_values(gradients: Union[Tensor, Sequence[Tensor]],
                 forward: Union[Tensor, Sequence[Tensor]]) -> List[Tensor]:
    """The tensors of the forward graph that a backward pass should be given instead
    of recomputing (PyTorch's "saved tensors", JAX's "residuals").

    ``gradients`` are tensors from :func:`te.differentiate` of ``forward``'s
    outputs. The answer lists, in the forward graph's topological order, the
    user's own tensor objects (found by uid) that the gradients read and that are
    costly to recompute: reductions, recurrences, scatter-adds and tensors whose
    body calls ``exp``, ``log``, ``tanh``, ``sigmoid``, ``sqrt``, ``sin``, ``cos``,
    ``**``, ``//`` or ``%``. Cheap elementwise tensors are not listed; the gradient
    recomputes them (from saved values where they read one). Placeholders never
    are. Build the forward with them as extra outputs, once, and the gradient with
    them as inputs::

        saved = te.saved_values(grads, Y)
        forward = te.build([Y] + saved, inputs=params)
        backward = te.build(grads, inputs=params + [H] + saved)

    ``te.differentiate`` first moves a reduction written inside a body (the sum
    in ``te.sqrt(te.sum(...))``) into a tensor of its own (named like ``T_sum``).
    When the gradient reads such a tensor directly, the answer lists that
    extracted tensor (it is not one of the user's objects, but it reads only
    forward values, so the forward program can return it too); reductions nested
    inside other extracted reductions are not recognized and are recomputed.

    >>> import numpy as np, tensorexpr as te
    >>> X = te.placeholder((2, 3), name="X")
    >>> k = te.reduce_axis(3, name="k")
    >>> E = te.compute((2, 3), lambda i, j: te.exp(X[i, j]), name="E")
    >>> S = te.compute((2,), lambda i: te.sum(E[i, k], axis=k), name="S")
    >>> Y = te.compute((2, 3), lambda i, j: E[i, j] / S[i], name="Y")
    >>> H = te.placeholder((2, 3), name="H")
    >>> (dX,) = te.differentiate(Y, [X], head=H)
    >>> saved = te.saved_values(dX, Y)
    >>> [t.name for t in saved]
    ['E', 'S']
    >>> x, h = np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)
    >>> y, e, s = te.build([Y] + saved, inputs=[X], backend="numpy")(x)
    >>> g = te.build(dX, inputs=[X, H] + saved, backend="numpy")(x, h, e, s)
    >>> bool(np.allclose(g, te.build(dX, inputs=[X, H], backend="numpy")(x, h), atol=1e-6))
    True
    """
    grads = [gradients] if isinstance(gradients, Tensor) else list(gradients)
    fwd_outs = [forward] if isinstance(forward, Tensor) else list(forward)
    if not all(isinstance(t, Tensor) for t in grads + fwd_outs):
        raise TypeError("te.saved_values takes tensors: saved_values(gradients, forward_outputs)")
    fwd = {t.uid: t for t in topo_order(fwd_outs)}
    extracted = _extracted_reductions(fwd_outs)
    saved: Dict[int, Tensor] = {}
    owner_of: Dict[int, int] = {}
    seen: set = set()
    stack = list(grads)
    while stack:
        t = stack.pop()
        if t.uid in seen:
            continue
        seen.add(t.uid)
        own = fwd.get(t.uid)
        if own is not None and _worth_saving(own):
            saved[t.uid] = own
            continue  # given: nothing behind it is computed by the gradient
        if own is None and isinstance(t, Compute) and isinstance(t.body, Reduce):
            owner = _find_extracted(t, extracted)
            if owner is not None:
                saved[t.uid], owner_of[t.uid] = t, owner
                continue
        # A cheap forward tensor is recomputed from what its user-written body reads
        # (differentiate may hold a normalized copy of it; the uids it reads agree).
        stack.extend(tensor_inputs(own if own is not None else t))
    order = {t.uid: k for k, t in enumerate(fwd.values())}
    # An extracted reduction goes just before the tensor it came from.
    return sorted(saved.values(), key=lambda t: (order[owner_of[t.uid]], 0) if t.uid in owner_of
                  else (order[t.uid], 1))


def _extracted_reductions(outputs: Sequence[Tensor]) -> list:
    """``[(shape key, owner uid)]`` of the reductions normalization extracts from the
    bodies of ``outputs``' graph, as ``te.differentiate`` does (deterministically,
    so a gradient's own copies have the same keys)."""
    from passes.extract import is_canonical
    if all(is_canonical(t) for t in topo_order(list(outputs))):
        return []  # nothing to extract: no need of normalize (nor of isl, which it imports)
    from passes.normalize import reduction_key, normalize
    owners: Dict[int, int] = {}
    norm = normalize(list(outputs), owners)
    return [(reduction_key(norm[uid]), owner) for uid, owner in owners.items()]


def _find_extracted(t: Compute, extracted: list) -> Optional[int]:
    """The uid of the forward tensor ``t`` was extracted from, if it is one of ``extracted``."""
    if not extracted:
        return None
    from passes.normalize import reduction_key
    key = reduction_key(t)
    for k, owner in extracted:
        if same(k, key):
            return owner
    return None


# }}}
