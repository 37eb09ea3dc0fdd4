"""The calling convention shared by every backend: inputs, sizes, validation.

A built function takes its inputs positionally or by name, binds every symbolic
size from the shapes of the arrays, checks count, dtype, shape and layout, and
computes the output shapes. Errors name the input and say what to do.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

from tensorexpr.errors import TensorExprError, describe
from tensorexpr.ir import (Compute, Placeholder, ScatterAdd, SizeVar, Tensor, topo_order,
                           size_vars, tensor_exprs)
from tensorexpr.transform import eval_int, substitute
from tensorexpr.ir import Const, kept_on


def _tensor_size_vars(t: Tensor) -> frozenset:
    # kept on the (immutable) tensor, as its inputs are (ir.tensor_inputs): lowering makes
    # a signature of the same tensors again and again (each pass of codegen.pipeline's
    # hoist), and each walked every body
    return kept_on(t, "_size_vars", lambda: frozenset(_walk_size_vars(t)))


def _walk_size_vars(t: Tensor) -> set:
    out = set()
    for d in t.dims:
        out |= size_vars(d)
    for e in tensor_exprs(t):
        out |= size_vars(e)
    for ax in getattr(t, "axes", ()):
        out |= size_vars(ax.hi) | size_vars(ax.lo)
    return out


class Signature:
    """Inputs, outputs and the size variables of one built program.

    >>> import tensorexpr as te
    >>> n = te.var("n")
    >>> A = te.placeholder((n,), name="A")
    >>> B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    >>> sig = Signature([B], [A])
    >>> sig.size_names
    ['n']
    """

    def __init__(self, outputs: Sequence[Tensor], inputs: Sequence[Tensor],
                 inferred: bool = False):
        self.outputs = list(outputs)
        # inputs= was None: the inputs are the placeholders the outputs read, and a
        # caller's surplus argument is most likely an input they do not read.
        self.inferred = inferred
        self.inputs = list(inputs)
        self.order = topo_order(self.outputs)
        input_uids = {t.uid for t in self.inputs}
        for t in self.inputs:
            if not isinstance(t, Placeholder):
                # te.build turns a computed tensor of inputs= into a placeholder first
                raise TypeError(f"inputs must be placeholders; {describe(t)} is computed "
                                f"(te.build accepts it as a given value)")
        if len(input_uids) != len(self.inputs):
            raise ValueError("the same tensor is listed twice in inputs")
        for t in self.order:
            if isinstance(t, Placeholder) and t.uid not in input_uids:
                raise TensorExprError(
                    f"{describe(t)} is read by the program but is not among inputs= "
                    f"({', '.join(i.name for i in self.inputs)}); add it, or pass inputs=None")
        names: set = set()
        for t in self.order + self.inputs:
            names |= _tensor_size_vars(t)
        self.size_names = sorted(names)
        # Where each size comes from: the first input dimension that is exactly it.
        self.size_source: Dict[str, Tuple[int, int]] = {}
        for k, t in enumerate(self.inputs):
            for d, dim in enumerate(t.dims):
                if isinstance(dim, SizeVar):
                    self.size_source.setdefault(dim.name, (k, d))
        missing = [n for n in self.size_names if n not in self.size_source]
        if missing:
            raise TensorExprError(
                f"size {missing[0]!r} cannot be bound at call time: no input has a dimension "
                f"that is exactly {missing[0]!r}; give some input that dimension or use a constant")
        self.input_names = [t.name for t in self.inputs]
        self._shapes: Dict[tuple, Tuple[int, ...]] = {}
        # Computed tensors whose shape depends on sizes: e.g. (n - 3,) is negative for n = 2.
        self._sized = [t for t in self.order if not isinstance(t, Placeholder)
                       and any(not isinstance(d, Const) for d in t.dims)]
        # The fast path of bind: per-input dtype, and the size values of every tuple of
        # input shapes already validated (the shapes decide the sizes and every check).
        self._dtypes = [np.dtype(t.dtype) for t in self.inputs]
        #: boolean inputs: their bytes are checked on every call (see ``_array``)
        self._bools = [k for k, t in enumerate(self.inputs) if t.dtype == "bool"]
        self._bound: Dict[Tuple[Tuple[int, ...], ...], Dict[str, int]] = {}
        self._empty_ok: set = set()

    def shape(self, t: Tensor, sizes: Dict[str, int]) -> Tuple[int, ...]:
        """The concrete shape of ``t`` once sizes are known."""
        if all(isinstance(d, Const) for d in t.dims):
            return tuple(d.value for d in t.dims)
        # Evaluating the size expressions costs ~20 us per tensor; calls repeat sizes.
        key = (t.uid, tuple(sizes.items()))
        shape = self._shapes.get(key)
        if shape is None:
            if len(self._shapes) > 4096:
                self._shapes.clear()
            binding = {SizeVar(n): Const(v, "int64") for n, v in sizes.items()}
            shape = tuple(int(eval_int(substitute(d, binding))) for d in t.dims)
            self._shapes[key] = shape
        return shape

    def bind(self, args: tuple, kwargs: dict) -> Tuple[List[np.ndarray], Dict[str, int]]:
        """Validate a call and return (input arrays in order, size values)."""
        # A call like an earlier valid one (positional C-contiguous arrays of the right
        # dtypes, shapes seen before) needs only a few comparisons and one lookup.
        if not kwargs and len(args) == len(self._dtypes):
            for v, dt in zip(args, self._dtypes):
                if type(v) is not np.ndarray or (v.dtype is not dt and v.dtype != dt) \
                        or not (v.flags.c_contiguous and v.flags.aligned):
                    break
            else:
                if any(not _clean_bools(args[k]) for k in self._bools):
                    return self._bind_checked(args, kwargs)
                got = self._bound.get(tuple([v.shape for v in args]))
                if got is not None:
                    return list(args), dict(got)
        return self._bind_checked(args, kwargs)

    def _unread_hint(self) -> str:
        if not self.inferred:
            return ""
        return (". te.build(..., inputs=None) takes only the placeholders the outputs read, and "
                "a gradient need not read the input it is taken w.r.t. (that of a linear "
                "function does not): list every input, te.build(grads, inputs=[...]), to keep "
                "it in the signature")

    def _bind_checked(self, args: tuple, kwargs: dict):
        n = len(self.inputs)
        if len(args) > n:
            raise TypeError(f"the function takes {n} input(s) ({', '.join(self.input_names)}); "
                            f"got {len(args)} positional arguments{self._unread_hint()}")
        values = list(args) + [None] * (n - len(args))
        given = [k < len(args) for k in range(n)]
        index = {}
        for k, name in enumerate(self.input_names):
            index.setdefault(name, k)
        for key, val in kwargs.items():
            if key not in index:
                raise TypeError(f"unexpected input {key!r}; the inputs are "
                                f"{', '.join(self.input_names) or 'none'}{self._unread_hint()}")
            k = index[key]
            if self.input_names.count(key) > 1:
                # a keyword would bind the first of them and report the others missing
                raise TypeError(f"{self.input_names.count(key)} inputs are named {key!r}, so "
                                f"{key}= cannot say which; pass them positionally (in the "
                                f"order {', '.join(self.input_names)}) or give the "
                                f"placeholders distinct names")
            if given[k]:
                raise TypeError(f"input {key!r} given twice (positionally and by name)")
            values[k], given[k] = val, True
        if not all(given):
            miss = [self.input_names[k] for k in range(n) if not given[k]]
            raise TypeError(f"missing input(s): {', '.join(miss)}")
        arrays = [self._array(t, v) for t, v in zip(self.inputs, values)]
        sizes: Dict[str, int] = {}
        for name in self.size_names:
            k, d = self.size_source[name]
            sizes[name] = int(arrays[k].shape[d])
        for t, a in zip(self.inputs, arrays):
            want = self.shape(t, sizes)
            if tuple(a.shape) != want:
                # only the sizes this input's shape uses, each with the input it came from
                used = sorted(set().union(*(size_vars(d) for d in t.dims)))
                bound = ", ".join(
                    f"{k}={sizes[k]} from {self.input_names[self.size_source[k][0]]!r}"
                    for k in used)
                from tensorexpr.printer import shape_str
                raise ValueError(
                    f"input {t.name!r} has shape {tuple(a.shape)}, expected {want} "
                    f"(declared {shape_str(t.dims)}{' with ' + bound if bound else ''})")
        for t in self._sized:
            shape = self.shape(t, sizes)
            if any(d < 0 for d in shape):
                from tensorexpr.printer import expr_str
                neg = next(e for e, d in zip(t.dims, shape) if d < 0)
                raise ValueError(
                    f"{describe(t)} would have the negative shape {shape} with "
                    f"{', '.join(f'{k}={v}' for k, v in sizes.items())}; pass larger inputs "
                    f"or clamp the shape (te.maximum({expr_str(neg)}, 0))")
        zero = frozenset(k for k, v in sizes.items() if v == 0)
        if zero:
            self.check_empty(zero, sizes)
        if len(self._bound) > 4096:
            self._bound.clear()
        self._bound[tuple([tuple(a.shape) for a in arrays])] = dict(sizes)
        return arrays, sizes

    def check_empty(self, zero: frozenset, sizes: Dict[str, int]) -> None:
        """Raise ValueError unless the program reads inside its tensors when the sizes
        ``zero`` are 0 (an empty batch) and the others are at least 1.

        Reads are proven in range when a tensor is defined assuming every size is at
        least 1: ``X[n - 1]`` is fine then, and outside ``X`` when ``n`` is 0. Each set
        of zero sizes is proven once per program, the same way (isl, over the points
        where each read is evaluated).

        >>> import tensorexpr as te
        >>> n = te.var("n")
        >>> X = te.placeholder((n,), name="X")
        >>> last = te.compute((), lambda: X[n - 1], name="last")
        >>> Signature([last], [X]).check_empty(frozenset({"n"}), {"n": 0})
        Traceback (most recent call last):
        ...
        ValueError: size 'n' is 0 (an empty input), but tensor 'last' ...
        """
        if zero in self._empty_ok:
            return
        from tensorexpr.bounds import guard_set, read_sites
        from tensorexpr.polyhedral import NotAffine, Space, dim_name, params_of
        from tensorexpr.printer import expr_str
        for t in self.order:
            match t:
                case Compute():
                    axes, parts = t.axes, [(t.body, ())]
                case ScatterAdd():
                    g = () if t.where is None else (t.where,)
                    axes, parts = t.axes, [(x, g) for x in (*t.indices, t.value)]
                    parts += [] if t.where is None else [(t.where, ())]
                case _:
                    continue
            for expr, guards0 in parts:
                for read, guards, raxes in read_sites(expr, guards0):
                    ax = tuple(axes) + tuple(raxes)
                    space = Space(ax, params_of(list(read.tensor.dims) + list(read.indices)
                                                + list(guards) + [a.hi for a in ax]))
                    dom = space.universe()
                    for p in space.params:
                        dom = dom & (space.vars[p].eq_set(space.vars[0]) if p in zero
                                     else space.vars[p].ge_set(space.vars[0] + 1))
                    for a in ax:
                        v = space.vars[dim_name(a)]
                        dom = dom & space.aff(a.lo).le_set(v) & v.lt_set(space.aff(a.hi))
                    for g in guards:
                        dom = dom & guard_set(space, g)
                    if dom.is_empty():
                        continue
                    for ix, size in zip(read.indices, read.tensor.dims):
                        try:
                            pa, hi = space.aff(ix), space.aff(size)
                        except NotAffine:
                            continue  # data-dependent: checked when the kernel runs
                        if not (dom & (pa.lt_set(space.vars[0]) | pa.ge_set(hi))).is_empty():
                            names = " and ".join(f"{k!r}" for k in sorted(zero))
                            raise ValueError(
                                f"size{'s' if len(zero) > 1 else ''} {names} "
                                f"{'are' if len(zero) > 1 else 'is'} 0 (an empty input), but {describe(t)} "
                                f"reads {expr_str(read)} outside {read.tensor.name!r} then "
                                f"(with {', '.join(f'{k}={v}' for k, v in sizes.items())}); "
                                f"guard the read (te.select({sorted(zero)[0]} > 0, ..., 0.0)) "
                                f"or pass a non-empty input")
        self._empty_ok.add(zero)

    def _array(self, t: Tensor, v) -> np.ndarray:
        if isinstance(v, np.ndarray):
            if v.dtype != np.dtype(t.dtype):
                raise TypeError(f"input {t.name!r} must be {t.dtype}; got {v.dtype} "
                                f"(convert with .astype(np.{t.dtype}))")
        else:
            try:
                a = np.asarray(v)
                if a.dtype == object or not np.can_cast(a.dtype, t.dtype, "same_kind"):
                    # e.g. [1.5, 2] for an int32 input: never truncate silently
                    raise TypeError(f"its elements are {a.dtype}")
                v = a.astype(t.dtype)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"input {t.name!r}: cannot convert {type(v).__name__} "
                                f"to a {t.dtype} array: {exc}") from None
        if v.ndim != t.ndim:
            raise ValueError(f"input {t.name!r} must have {t.ndim} dimension(s); "
                             f"got an array of shape {v.shape}")
        # Views with strides are copied: kernels index dense row-major buffers. So are
        # arrays not aligned for their type (a view at an odd byte offset of a buffer):
        # C may load them with aligned vector instructions.
        # (Not np.ascontiguousarray: it turns a 0-d array into shape (1,).)
        if not (v.flags.c_contiguous and v.flags.aligned):
            v = v.copy(order="C")
        if v.dtype == np.bool_ and not _clean_bools(v):
            # numpy calls any nonzero byte True, C's bool only 1 (2 & 2 == 2, ~2 == 253)
            v = np.not_equal(v.view(np.uint8), 0, out=np.empty(v.shape, np.bool_))  # 0-d too
        return v


def _clean_bools(a: np.ndarray) -> bool:
    """Does boolean array ``a`` hold only the bytes 0 and 1 (what C's ``bool`` can hold)?

    >>> _clean_bools(np.array([True, False])), _clean_bools(np.array([2], np.uint8).view(bool))
    (True, False)
    """
    return a.size == 0 or int(a.view(np.uint8).max()) <= 1
