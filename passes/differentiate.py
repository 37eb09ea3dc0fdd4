"""Reverse-mode differentiation without Jacobians: vector-Jacobian products as gathers.

For a tensor ``Y[o] = body`` reading ``X[f(o, r)]``, the adjoint contribution is
naturally a scatter, ``dX[f(o, r)] += dY[o] * d body / d X[f(o, r)]``. We never
build it: isl inverts the read (``polyhedral.solve_fiber``) and the contribution
becomes a gather ``dX[j] = sum over {(o, r) in domain : f(o, r) = j}`` with exact
bounds, including floor division and modulo (strided and dilated convolutions,
pooling, flatten) and clamps (split into pieces). Only data-dependent reads
(``E[idx[i]]``) stay scatters, as :class:`~tensorexpr.ir.ScatterAdd` nodes.

Rules at the tensor level (after :mod:`passes.normalize`):

* elementwise ``Y[o] = body``: the partials of ``body`` (:mod:`passes.partials`);
* ``Y[o] = sum_r body where w``: the same, over ``(o, r)`` restricted to ``w``;
* ``Y[o] = max_r body`` (or min): the adjoint goes to the arg-extremum. Tie rule:
  it is split evenly among the tied points (``count[o]`` of them), the average
  of the one-hot subgradients. A row holding NaN has the max NaN, which equals
  no point: its gradient is 0 (the NaN shows in the forward value; testing for
  it in every element cost the max-pooling VJP ~30%);
* a recurrence's self-reads send adjoint to its own adjoint, which is then a
  recurrence running the other way (verified like any recurrence);
* ``ScatterAdd``: the adjoint of its value is a (data-dependent) gather.

Every gradient is an ordinary tensor: buildable, printable, differentiable again.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from tensorexpr import api
from tensorexpr.errors import JacobianError, describe
from tensorexpr.ir import (Axis, Binary, Compute, Const, Expr, Read, Reduce, ScatterAdd,
                           SelfRef, SizeVar, Tensor, binary, children, fresh_uid, is_float, postorder,
                           same, topo_order, tensor_inputs, walk, INDEX_DTYPE)
from tensorexpr.bounds import inside_by_intervals
from tensorexpr.printer import shape_str
from tensorexpr.polyhedral import NotAffine, Space, params_of, simplify_affine, solve_fiber
from tensorexpr.transform import (free_axes, interned, map_reads, rebuild,
                                  replace_subexprs_each, substitute)

from .common_factors import factored_sum
from .extract import extract
from .gradients import Gradients, resolve_inputs
from .normalize import hoist_reductions, normalize
from .partials import Site, read_partials
from .simplify import simplify


#: ``head=None`` on a non-scalar output builds its full Jacobian, ``output.size *
#: input.size`` elements per input. Past this many (64 MiB of float32), or when a
#: symbolic size leaves the count unknown, ``differentiate`` refuses unless asked
#: with ``jacobian=True``: forgetting ``head`` is the usual cause.
JACOBIAN_LIMIT = 1 << 24


def differentiate(output: Union[Tensor, Sequence[Tensor]],
                  inputs: Optional[Sequence[Tensor]] = None,
                  head: Union[None, Tensor, Sequence[Optional[Tensor]]] = None,
                  override: Optional[dict] = None, jacobian: bool = False) -> Gradients:
    """Vector-Jacobian products of ``output`` w.r.t. ``inputs``, as tensor expressions.

    ``head`` (shape ``prefix + output.shape``) is the adjoint of ``output``; the
    gradients then have shape ``prefix + input.shape``. ``head=None`` means the
    identity: for a 0-d output the gradients have the inputs' shapes; for any
    other output it would build the full Jacobian ``output.shape + input.shape``,
    which is refused with :class:`~tensorexpr.errors.JacobianError` (forgetting
    ``head`` is the usual cause) unless ``jacobian=True`` asks for it, or it has
    at most :data:`JACOBIAN_LIMIT` elements per input and no symbolic size.

    Several outputs: ``differentiate([Y1, Y2], inputs, head=[H1, H2])`` seeds
    each output with its head (``None`` for a 0-d output) and returns, per input,
    the sum of the contributions of every output (as ``jax.vjp`` of a tuple), built
    in one traversal of the graph (outputs may read each other). The heads share
    one prefix.

    ``override={Y: fn}`` replaces the contribution through ``Y`` to
    each of its inputs ``X`` by ``fn(Y, X, head_Y)``; ``override={(Y, X): fn}``
    replaces one edge. An override that is ``None`` (or a function returning
    None) stops the gradient there: the edge contributes nothing, as JAX's
    ``stop_gradient`` (e.g. a softmax's row maximum, whose exact contribution is
    zero because the softmax does not change when its shift does).

    >>> import numpy as np, tensorexpr as te
    >>> A = te.placeholder((2, 3), name="A")
    >>> B = te.placeholder((3, 4), name="B")
    >>> k = te.reduce_axis(3, name="k")
    >>> C = te.compute((2, 4), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> i, j = te.reduce_axis(2), te.reduce_axis(4)
    >>> L = te.compute((), lambda: te.sum(C[i, j], axis=[i, j]), name="L")
    >>> dA, dB = te.differentiate(L, [A, B])
    >>> f = te.build([dA, dB], inputs=[A, B], backend="numpy")
    >>> ga, gb = f(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))
    >>> ga
    array([[4., 4., 4.],
           [4., 4., 4.]], dtype=float32)
    >>> H = te.placeholder((2, 4), name="H")
    >>> (dA2,) = te.differentiate([C, L], [A], head=[H, None])
    >>> f2 = te.build(dA2, inputs=[A, B, H], backend="numpy")  # dA2 does not read A
    >>> f2(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), np.ones((2, 4), np.float32))
    array([[8., 8., 8.],
           [8., 8., 8.]], dtype=float32)
    """
    several = isinstance(output, (list, tuple))
    outputs = list(output) if several else [output]
    if several:
        if not outputs:
            raise TypeError("differentiate: the list of outputs is empty")
        if head is None:
            heads = [None] * len(outputs)
        elif isinstance(head, (list, tuple)) and len(head) == len(outputs):
            heads = list(head)
        else:
            raise TypeError(f"differentiate: with {len(outputs)} outputs, head= is a list of "
                            f"{len(outputs)} heads (None for a 0-d output)")
    else:
        heads = [head]
    for out in outputs:
        if not isinstance(out, Tensor):
            raise TypeError("differentiate: output must be a tensor (or a list of tensors)")
        if not is_float(out.dtype):
            raise TypeError(f"differentiate: {describe(out)} is {out.dtype}; only "
                            f"floating-point outputs have gradients")
    if jacobian and any(h is not None for h in heads):
        raise ValueError("differentiate: jacobian=True asks for the full Jacobian, which "
                         "head=None seeds; pass one or the other")
    inputs = resolve_inputs(outputs, inputs)
    return _Differentiator(outputs, inputs, heads, override or {}, several, jacobian).run()


def _count(dims) -> Optional[int]:
    """The number of elements of a shape, None if a size is symbolic."""
    n = 1
    for d in dims:
        if not (isinstance(d, Const) and isinstance(d.value, int)):
            return None
        n *= d.value
    return n


class _Differentiator:
    def __init__(self, outputs, inputs, heads, override, several=False, jacobian=False):
        self.outputs, self.inputs = outputs, inputs
        self.several, self.jacobian = several, jacobian
        self.whole: Dict[int, Callable] = {}
        self.edge: Dict[Tuple[int, int], Callable] = {}
        for key, fn in override.items():
            if isinstance(key, tuple) and len(key) == 2:
                self.edge[(key[0].uid, key[1].uid)] = fn
            elif isinstance(key, Tensor):
                self.whole[key.uid] = fn
            else:
                raise TypeError("override keys are tensors Y or pairs (Y, X)")
        self.group: Dict[int, int] = {}  # extracted tensor uid -> the user tensor it came from
        self.norm = normalize(list(outputs), self.group)
        self.originals = {t.uid: t for t in topo_order(list(outputs))}
        self.self_handle: Dict[int, SelfRef] = {}
        self.order = topo_order([self.norm[o.uid] for o in outputs])
        self.taken = {t.name for t in self.order} | {t.name for t in self.originals.values()}
        # output uid -> its seeds (a head tensor, or None for the 0-d identity), in order
        self.seeds: Dict[int, List[Optional[Tensor]]] = {}
        self.prefix = None
        for out, head in zip(outputs, heads):
            prefix, expr = self._head(out, head)
            if self.prefix is None:
                self.prefix, first = prefix, out
            elif len(prefix) != len(self.prefix) or not all(
                    same(a, b) for a, b in zip(prefix, self.prefix)):
                raise ValueError(
                    f"differentiate: the heads of {describe(first)} and {describe(out)} have "
                    f"different prefixes {shape_str(self.prefix)} and {shape_str(prefix)}; "
                    f"every head is prefix + its output's shape, with one prefix (a 0-d "
                    f"output with head None has the prefix ())")
            self.seeds.setdefault(out.uid, []).append(expr)
        self.active = self._active()
        self.adj: Dict[int, Tensor] = {}
        self.terms: Dict[int, List[Callable]] = {}
        self.axes: Dict[int, Tuple[Axis, ...]] = {}

    # {{{ set-up

    def _head(self, out, head):
        if head is None:
            if out.ndim == 0:
                return (), None
            if self.several:
                raise ValueError(
                    f"differentiate: {describe(out)} has shape {shape_str(out.dims)}; among "
                    f"several outputs each non-scalar one needs a head of shape prefix + "
                    f"{shape_str(out.dims)} (head=None is for 0-d outputs)")
            self._check_jacobian(out)
            # The identity: dOut[p, o] = (p == o), built because a Jacobian was asked for.
            dims = tuple(out.dims) * 2
            n = out.ndim

            def ident(*ax):
                cond = ax[0] == ax[n]
                for a, b in zip(ax[1:n], ax[n + 1:]):
                    cond = cond & (a == b)
                return api.select(cond, api.const(1.0, out.dtype), api.const(0.0, out.dtype))
            eye = api.compute(dims, ident, name=f"eye_{out.name}")
            return tuple(out.dims), eye
        if not isinstance(head, Tensor):
            raise TypeError("head must be a tensor of shape prefix + output.shape")
        k = head.ndim - out.ndim
        if k < 0 or not all(same(a, b) for a, b in zip(head.dims[k:], out.dims)):
            raise ValueError(f"head {head.name!r} has shape {head.shape}; it must end with the "
                             f"output's shape {out.shape}")
        return tuple(head.dims[:k]), head

    def _check_jacobian(self, out):
        """Refuse a Jacobian nobody asked for: past the limit, or of unknown size."""
        if self.jacobian:
            return
        n_out = _count(out.dims)
        for x in self.inputs:
            n_in = _count(x.dims)
            size = None if n_out is None or n_in is None else n_out * n_in
            if size is not None and size <= JACOBIAN_LIMIT:
                continue
            what = (f"{size:,} elements" if size is not None else
                    "a size known only at call time (a symbolic size)")
            raise JacobianError(
                f"differentiate: head=None on {describe(out)}, of shape "
                f"{shape_str(out.dims)}, builds its full Jacobian w.r.t. {x.name!r} "
                f"(shape {shape_str(out.dims)} + {shape_str(x.dims)}: {what}; the limit "
                f"is {JACOBIAN_LIMIT:,}). For a vector-Jacobian product pass head= (a "
                f"tensor of shape prefix + {shape_str(out.dims)}), or reduce the output "
                f"to a 0-d loss; to build the Jacobian anyway pass jacobian=True")

    def _active(self) -> set:
        """uids on a path from an input to the output (float tensors only)."""
        want = {t.uid for t in self.inputs}
        reach = set()
        for t in self.order:
            if t.uid in want or any(p.uid in reach for p in tensor_inputs(t)):
                if is_float(t.dtype):
                    reach.add(t.uid)
        live = set(self.seeds) & reach
        for t in reversed(self.order):
            if t.uid in live:
                live |= {p.uid for p in tensor_inputs(t) if p.uid in reach}
        return live

    # }}}

    def adjoint_name(self, t: Tensor) -> str:
        """``dX`` for ``X``; ``d2X`` (``d3X``...) when the differentiated program already
        has a tensor of that name: a second derivative of ``X`` differentiates a
        program holding its first, ``dX``, and must not print like it."""
        name = f"d{t.name}"
        k = 2
        while name in self.taken:
            name, k = f"d{k}{t.name}", k + 1
        return name

    def adjoint_axes(self, t: Tensor) -> Tuple[Axis, ...]:
        if t.uid not in self.axes:
            # A compute's adjoint reuses its axis names; others (inputs, scatters) get i0, i1...
            own = [a.name for a in t.axes] if isinstance(t, Compute) else \
                [f"i{k}" for k in range(t.ndim)]
            names = [f"p{k}" for k in range(len(self.prefix))] + own
            dims = self.prefix + tuple(t.dims)
            self.axes[t.uid] = tuple(Axis(n, Const(0, INDEX_DTYPE), d, fresh_uid())
                                     for n, d in zip(names, dims))
        return self.axes[t.uid]

    def run(self) -> Gradients:
        for t in reversed(self.order):
            if t.uid not in self.active:
                continue
            if not self.seeds.get(t.uid) and not self.terms.get(t.uid):
                # Every use of t is under te.stop_gradient (or overridden away): its
                # adjoint is zero and sends nothing on, so no tie count, no pass over X.
                self._build_adjoint(t)
                continue
            sites = self._sites(t)
            own = [s for s in sites if s[1].read.tensor.uid == t.uid]
            for s in own:  # a recurrence's adjoint reads itself: register before building
                self._add_site(t, *s)
            self._build_adjoint(t)
            if self.group.get(t.uid, t.uid) == t.uid:
                self._apply_overrides(t, self.adj[t.uid])
            for s in sites:
                if s[1].read.tensor.uid != t.uid:
                    self._add_site(t, *s)
        grads = []
        for x in self.inputs:
            g = self.adj.get(x.uid)
            if g is None:
                g = api.compute(self.prefix + tuple(x.dims),
                                lambda *ax: api.const(0.0, x.dtype if is_float(x.dtype) else "float32"),
                                name=self.adjoint_name(x))
            grads.append(g)
        adjoints = {}
        for uid, g in self.adj.items():
            if uid in self.originals:
                adjoints[self.originals[uid]] = g
        return Gradients(grads, adjoints)

    # {{{ adjoint tensors

    def _build_adjoint(self, t: Tensor):
        axes = self.adjoint_axes(t)
        seeds = [api.const(1.0, t.dtype) if h is None else
                 api.cast(Read(h, axes, h.dtype), t.dtype) for h in self.seeds.get(t.uid, ())]
        terms = seeds + [f(axes) for f in self.terms.get(t.uid, [])]
        self_ref = self.self_handle.get(t.uid)
        # (terms sharing a factor, the head or a chain's partials, are added before
        # multiplying by it: passes.common_factors)
        terms = factored_sum(_merge_sums(terms))
        body = balanced_sum(terms) if terms else api.const(0.0, t.dtype)
        # one object per distinct sub-expression: each term substituted its own copy of
        # the chain it shares with the others (a shared select chain's gradient held
        # D**2 nodes for 2*D distinct, and its C computed each copy again)
        body = interned(simplify(api.cast(body, t.dtype)))
        if self_ref is None and _is_copy(body, axes):
            self.adj[t.uid] = body.tensor  # the adjoint is another tensor verbatim: no copy
            return
        g = Compute(self.adjoint_name(t), self.prefix + tuple(t.dims), t.dtype, fresh_uid(),
                    t.origin, axes=axes, body=body, self_ref=self_ref)
        if self_ref is not None:
            from tensorexpr.recurrence import verify_order
            g = verify_order(g, steps=(-t.carry.step,))
        self.adj[t.uid] = g

    # }}}

    # {{{ propagation through one tensor

    def _skip(self, t: Tensor, x: Tensor) -> bool:
        owner = self.group.get(t.uid, t.uid)
        return owner in self.whole or (owner, x.uid) in self.edge

    def _sites(self, t: Tensor) -> list:
        """``(x, site, guards, domain, p_axes, adj_idx)`` for every active read of ``t``."""
        owner = self.group.get(t.uid, t.uid)
        if owner in self.whole:
            return []
        p_axes = self.adjoint_axes(t)[:len(self.prefix)]
        match t:
            case Compute(body=Reduce(op, rbody, raxes, where, _)):
                guards = () if where is None else (where,)
                domain = tuple(t.axes) + tuple(raxes)
                if op == "sum":
                    sites = read_partials(rbody)
                else:
                    count = self._tie_count(t, op, rbody, raxes, where)
                    hit = binary("eq", rbody, Read(t, tuple(t.axes), t.dtype))
                    inv = binary("div", 1.0, Read(count, tuple(t.axes), count.dtype))
                    sites = [Site(s.read, simplify(s.factor * inv), (hit,) + s.guards)
                             for s in read_partials(rbody)]
                adj_idx = p_axes + tuple(t.axes)
            case Compute():
                body = t.body if t.self_ref is None else _replace_self(t.body, t)
                guards, domain = (), tuple(t.axes)
                # The body's own value in a partial (tanh' = 1 - tanh^2) is the tensor
                # itself: read it instead of recomputing it.
                me = Read(t, tuple(t.axes), t.dtype)
                sites = _replaced(read_partials(body, t), [(body, me)])
                if t.self_ref is None:
                    sites = _shared_values_kept(sites, t)
                if t.self_ref is not None:
                    # Sums over the previous step left inline (sigmoid(sum_k h[t-1, k]
                    # W[k, j]) in a GRU) are in the partials too: computed once over
                    # the finished recurrence, not again in every term of the adjoint.
                    fwd = dataclasses.replace(t, body=body, self_ref=None, carry=None)
                    # the partials are simplified (Wh[k, 0 + j] reads Wh[k, j]): the
                    # reduction is found in either form
                    hoisted = hoist_reductions(fwd, self.taken)
                    self.taken |= {value.tensor.name for _, value in hoisted}
                    pairs = [(form, value) for r, value in hoisted
                             for form in dict.fromkeys((r, simplify(r)), None)]
                    sites = _replaced(sites, pairs)
                adj_idx = p_axes + tuple(t.axes)
            case ScatterAdd():
                guards = () if t.where is None else (t.where,)
                domain = tuple(t.axes)
                sites = read_partials(t.value)
                adj_idx = p_axes + tuple(t.indices)
            case _:
                return []
        out = []
        for s in sites:
            x = self.norm.get(s.read.tensor.uid, s.read.tensor)
            if x.uid in self.active and not self._skip(t, x):
                out.append((x, s, guards, domain, p_axes, adj_idx))
        return out

    def _tie_count(self, t: Compute, op, rbody, raxes, where) -> Compute:
        ax = tuple(Axis(a.name, a.lo, a.hi, fresh_uid()) for a in t.axes)
        sub = dict(zip(t.axes, ax))
        hit = binary("eq", rbody, Read(t, tuple(t.axes), t.dtype))
        cond = hit if where is None else (where & hit)
        body = substitute(Reduce("sum", api.const(1.0, t.dtype), tuple(raxes), cond, t.dtype), sub)
        return Compute(f"{t.name}_ties", tuple(t.dims), t.dtype, fresh_uid(), t.origin,
                       axes=ax, body=body)

    def _apply_overrides(self, t: Tensor, dT: Tensor):
        user_t = self.originals.get(t.uid, t)
        for x in list(tensor_inputs(t)) + _group_inputs(self, t):
            x = self.norm.get(x.uid, x)
            if (t.uid, x.uid) in self.edge:
                fn = self.edge[(t.uid, x.uid)]
            elif t.uid in self.whole:
                fn = self.whole[t.uid]
            else:
                continue
            if fn is None or x.uid not in self.active:
                continue  # None stops the gradient: this edge contributes nothing
            user_x = self.originals.get(x.uid, x)
            contrib = fn(user_t, user_x, dT)
            if contrib is None:
                continue
            if not isinstance(contrib, Tensor):
                raise TypeError(f"override for {describe(user_t)} must return a tensor")
            want = self.prefix + tuple(x.dims)
            if len(contrib.dims) != len(want) or not all(
                    same(a, b) for a, b in zip(contrib.dims, want)):
                raise ValueError(f"override for {describe(user_t)} returned shape "
                                 f"{contrib.shape} for input {x.name!r}; expected "
                                 f"{tuple(getattr(d, 'value', d) for d in want)}")
            self.terms.setdefault(x.uid, []).append(
                lambda axes, c=contrib, dt=x.dtype: api.cast(Read(c, tuple(axes), c.dtype), dt))

    def _add_site(self, t, x, s: Site, guards, domain, p_axes, adj_idx):
        handle = self._self_handle_for(t) if x.uid == t.uid else self.adj[t.uid]
        # the adjoint times the chain's outer factors first where the rest reads along
        # an axis the adjoint does not (a sum's): the adjoint of an intermediate
        # (dY * (1 - Y^2) under a tanh) is then one value per point of t, shared
        # (passes.share) and one factor per lane of a row sum (an RNN's adjoint:
        # sum_j (dY * (1 - Y^2)) * Wh[k, j], not dY * ((1 - Y^2) * Wh[k, j])); elsewhere
        # the factor stays whole (its sub-products are common to several reads)
        contrib = Read(handle, tuple(adj_idx), handle.dtype)
        outer, rest = _outer_factors(s.factor, {a.uid for a in t.axes})
        for f in outer:
            contrib = contrib * f
        contrib = contrib * rest
        all_guards = tuple(guards) + tuple(s.guards)
        read = s.read
        domain = tuple(domain) + tuple(s.axes)

        def term(x_axes, contrib=contrib, read=read):
            q_axes, j_axes = x_axes[:len(self.prefix)], x_axes[len(self.prefix):]
            g = substitute(contrib, dict(zip(p_axes, q_axes)))
            return self._gather(t, x, g, all_guards, domain, read, j_axes, q_axes)

        self.terms.setdefault(x.uid, []).append(term)

    def _self_handle_for(self, t: Tensor) -> SelfRef:
        if t.uid not in self.self_handle:
            ax = self.adjoint_axes(t)
            self.self_handle[t.uid] = SelfRef(self.adjoint_name(t), tuple(a.hi for a in ax), t.dtype,
                                              fresh_uid(), t.origin)
        return self.self_handle[t.uid]

    # }}}

    # {{{ scatter to gather

    def _gather(self, t, x, g: Expr, guards, domain, read: Read, j_axes, q_axes) -> Expr:
        params = params_of(list(guards) + list(read.indices) + [a.hi for a in domain]
                           + [a.hi for a in j_axes])
        sp = Space(list(domain), params)
        affine, other = [], []
        for c in guards:
            try:
                sp.cond(c)
                affine.append(c)
            except NotAffine:
                other.append(c)
        try:
            pieces = solve_fiber(list(j_axes), list(domain), affine, list(read.indices))
        except NotAffine:
            return self._scatter(t, x, g, guards, domain, read, j_axes, q_axes)
        dtype = x.dtype
        total = None
        for p in pieces:
            sub = {ax: p.subst[ax.uid] for ax in domain}
            body = _tidy_indices(api.cast(substitute(g, sub), dtype))
            cond = p.cond
            late = None
            for c in other:
                c2 = _tidy_indices(substitute(c, sub))
                if cond is None or _reads_inside(c2, tuple(j_axes) + tuple(p.free)):
                    cond = c2 if cond is None else (cond & c2)
                else:
                    # Off the fibre (where p.cond fails) c2 may read outside a tensor:
                    # `&` evaluates both sides, a select only its taken branch.
                    late = c2 if late is None else (late & c2)
            if late is not None:
                body = api.select(late, body, api.const(0.0, dtype))
            if p.free:
                term = Reduce("sum", body, tuple(p.free), cond, dtype)
            elif cond is not None:
                term = api.select(cond, body, api.const(0.0, dtype))
            else:
                term = body
            total = term if total is None else total + term
        return simplify(total) if total is not None else api.const(0.0, dtype)

    def _scatter(self, t, x, g, guards, domain, read, j_axes, q_axes) -> Expr:
        # A data-dependent read cannot be inverted: accumulate explicitly.
        new = {a: Axis(a.name, a.lo, a.hi, fresh_uid()) for a in tuple(q_axes) + tuple(domain)}
        where = None
        for c in guards:
            where = c if where is None else (where & c)
        sub = lambda e: substitute(e, new)
        idx = tuple(new[a] for a in q_axes) + tuple(sub(i) for i in read.indices)
        s = ScatterAdd(f"{self.adjoint_name(x)}_scatter", self.prefix + tuple(x.dims), x.dtype, fresh_uid(),
                       t.origin, axes=tuple(new.values()), where=None if where is None else sub(where),
                       indices=idx, value=api.cast(sub(g), x.dtype))
        return Read(s, tuple(q_axes) + tuple(j_axes), x.dtype)

    # }}}


def _replaced(sites: Sequence[Site], pairs) -> List[Site]:
    """``sites`` with :func:`~tensorexpr.transform.replace_subexprs` of ``pairs`` applied to
    their factors, which share most of their nodes (one partial per read of one body):
    each shared node is rewritten once for all."""
    factors = replace_subexprs_each([s.factor for s in sites], pairs)
    return [s._replace(factor=f) for s, f in zip(sites, factors)]


#: A value the partials of reads at different indices share becomes a tensor when it
#: costs at least this many operations beyond the values already kept in tensors:
#: each shifted read's term substituted its index into its own copy (the terms of
#: ``Y[i] = f(...f(X[i], X[i + 1])..., X[i + d])`` hold the chain once per shift, and
#: a second-order gradient of it grew as depth**3).
SHARED_VALUE_COST = 12


def _shared_values_kept(sites: Sequence[Site], t: Compute) -> List[Site]:
    """``sites`` of elementwise ``t`` with each costly value that sites reading at
    different indices share (the forward chain, the backward product of its local
    derivatives) read from a tensor of its own, children first: the gather evaluates
    it at each read's shifted index, and the tensor computes it once per point (only
    a value whose reads are in range over the whole box: its guards are not there).

    Nothing changes unless reads at two shifts (or one shift and bare axes) share it."""
    # (reads at bare axes only rename them: their terms' copies are one after interning)
    shifts = [None if all(isinstance(i, Axis) for i in s.read.indices) else s.read.indices
              for s in sites]
    if len(set(shifts)) < 2:
        return list(sites)
    users: Dict[int, set] = {}  # node id -> the shifts of the sites using it
    roots = []
    for s, shift in zip(sites, shifts):
        for e in (s.factor,) + tuple(s.guards):
            roots.append(e)
            for x in walk(e, unique=True):
                users.setdefault(id(x), set()).add(shift)
    own = {a.uid for a in t.axes}
    new: Dict[int, Expr] = {}
    cost: Dict[int, int] = {}
    table: Dict[Expr, Expr] = {}  # one object per distinct value (and one tensor)
    for e in roots:
        for x in postorder(e):
            if id(x) in new:
                continue
            y = rebuild(x, lambda c: new[id(c)])
            y = table.setdefault(y, y)
            c = 1 + sum(cost[id(k)] for k in children(x))
            if (c >= SHARED_VALUE_COST and len(users.get(id(x), ())) > 1
                    and is_float(x.dtype) and not isinstance(x, (Read, Const, Reduce))
                    and _data_only(y)
                    and not any(isinstance(r, (Reduce, SelfRef)) or isinstance(r, Read)
                                and not inside_by_intervals(r, t.axes)
                                for r in walk(y, unique=True))
                    and {a.uid for a in free_axes(y)} <= own):
                key = ("kept", y)
                if key not in table:
                    order = [a for a in t.axes if a.uid in {b.uid for b in free_axes(y)}]
                    table[key] = extract(y, f"{t.name}_v{len(table)}", t.origin, order=order)[1]
                y, c = table[key], 1
            new[id(x)] = y
            cost[id(x)] = c
    if not any(isinstance(k, tuple) for k in table):
        return list(sites)  # nothing shared costs enough
    return [s._replace(factor=new[id(s.factor)], guards=tuple(new[id(g)] for g in s.guards))
            for s in sites]


def _data_only(e: Expr) -> bool:
    """Do axes and sizes appear in ``e`` only as read indices? (A test of the indices,
    ``select(i0 == 2, 2.0, 0.0) * dT0[0, i1]``, guards the reads beside it: kept inline.)"""
    stack, seen = [e], set()
    while stack:
        x = stack.pop()
        if id(x) in seen or isinstance(x, Read):
            continue
        seen.add(id(x))
        if isinstance(x, (Axis, SizeVar)):
            return False
        stack.extend(children(x))
    return True


def _group_inputs(d: _Differentiator, t: Tensor) -> list:
    """Inputs of the extracted reductions that belong to user tensor ``t``."""
    out = []
    for uid, owner in d.group.items():
        if owner == t.uid:
            out += [p for p in tensor_inputs(d.norm[uid]) if p.uid not in d.group]
    return out


def _replace_self(body: Expr, t: Compute) -> Expr:
    """Reads of a recurrence's handle become reads of the finished tensor."""
    ref = t.self_ref.uid
    return map_reads(body, lambda r: Read(t, r.indices, r.dtype)
                     if isinstance(r.tensor, SelfRef) and r.tensor.uid == ref else r)


def _is_copy(body: Expr, axes) -> bool:
    """Is ``body`` a read of a whole tensor of the same shape at exactly ``axes``?"""
    return (isinstance(body, Read) and not isinstance(body.tensor, SelfRef)
            and len(body.indices) == len(axes)
            and all(i is a or same(i, a) for i, a in zip(body.indices, axes))
            and all(same(d, a.hi) for d, a in zip(body.tensor.dims, axes)))


def balanced_sum(terms: Sequence[Expr], leaf: int = 16) -> Expr:
    """``terms[0] + terms[1] + ...`` as a balanced tree: an adjoint may collect one term
    per reader (hundreds along a chain of tensors), and a left-leaning sum of them would
    be an expression as deep as the chain, which every recursive pass and backend walks.
    Up to ``leaf`` terms it is the left-leaning sum (the usual adjoint's code is as it was).

    >>> import tensorexpr as te
    >>> X = te.placeholder((4,), name="X")
    >>> print(balanced_sum([X[0], X[1], X[2], X[3]], leaf=2))
    ((X[0] + X[1]) + (X[2] + X[3]))
    """
    if len(terms) <= leaf:
        body = terms[0]
        for x in terms[1:]:
            body = body + x
        return body
    half = len(terms) // 2
    return balanced_sum(terms[:half], leaf) + balanced_sum(terms[half:], leaf)


def _merge_sums(terms: List[Expr]) -> List[Expr]:
    """Fuse sums over equal ranges and conditions: one loop instead of several."""
    out: List[Expr] = []
    bodies: List[List[Expr]] = []  # the bodies of out[k] when it is a merged sum
    for term in terms:
        for k, prev in enumerate(out):
            body = _merge_body(prev, term)
            if body is not None:
                bodies[k].append(body)
                break
        else:
            out.append(term)
            bodies.append([term.body] if isinstance(term, Reduce) else [])
    return [dataclasses.replace(t, body=balanced_sum(b)) if len(b) > 1 else t
            for t, b in zip(out, bodies)]


def _merge_body(a: Expr, b: Expr) -> Optional[Expr]:
    """The body of the sum ``b`` over ``a``'s axes, if ``a + b`` is one sum; else None."""
    if not (isinstance(a, Reduce) and isinstance(b, Reduce) and a.op == b.op == "sum"
            and len(a.axes) == len(b.axes) and a.dtype == b.dtype):
        return None
    if not all(same(x.lo, y.lo) and same(x.hi, y.hi) for x, y in zip(a.axes, b.axes)):
        return None
    sub = dict(zip(b.axes, a.axes))
    where = None if b.where is None else substitute(b.where, sub)
    if not ((where is None and a.where is None) or
            (where is not None and a.where is not None and same(where, a.where))):
        return None
    return substitute(b.body, sub)


def _reads_inside(e: Expr, axes) -> bool:
    """Does every read in ``e`` stay inside its tensor at every point of ``axes``' box?

    (Reads in the untaken branch of a select or outside a where are not evaluated.)
    """
    from tensorexpr.bounds import guard_set, read_sites
    for read, guards, raxes in read_sites(e):
        space = Space(tuple(axes) + tuple(raxes), params_of(
            list(read.tensor.dims) + list(read.indices) + list(guards)))
        dom = space.box()
        for c in guards:
            dom = dom & guard_set(space, c)
        for ix, size in zip(read.indices, read.tensor.dims):
            try:
                pa = space.aff(ix)
            except NotAffine:
                return False
            if not (dom & (pa.lt_set(space.vars[0]) | pa.ge_set(space.aff(size)))).is_empty():
                return False
    return True


def _tidy_indices(e: Expr) -> Expr:
    """Let isl simplify substituted read indices (``2*(i//2) + i%2`` is just ``i``)."""

    def tidy(r: Read) -> Expr:
        idx = tuple(simplify_affine(i) for i in r.indices)
        changed = any(a is not b for a, b in zip(idx, r.indices))
        return Read(r.tensor, idx, r.dtype) if changed else r

    return map_reads(e, tidy)



def _outer_factors(e: Expr, own) -> Tuple[List[Expr], Expr]:
    """``(outer, rest)`` with ``e == outer[0] * (outer[1] * (... * rest))``: the leading
    factors of the product ``e`` down its right operands that use only the axes
    ``own`` (uids; a constant stays with the factor it multiplies: ``2.0 * x``), when
    ``rest`` uses another axis; else ``([], e)``.

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import Axis, Const
    >>> i, k = (Axis(n, Const(0, "int64"), Const(4, "int64"), u) for n, u in (("i", -1), ("k", -2)))
    >>> X = te.placeholder((4, 4), name="X")
    >>> outer, rest = _outer_factors(X[i, i] * (X[i, 0] * X[k, i]), {i.uid})
    >>> [str(f) for f in outer], str(rest)
    (['X[i, i]', 'X[i, 0]'], 'X[k, i]')
    >>> _outer_factors(X[i, i] * X[i, 0], {i.uid})[0]   # no other axis: whole
    []
    """
    outer: List[Expr] = []
    whole = e
    while (isinstance(e, Binary) and e.op == "mul" and not isinstance(e.a, Const)
           and _axes_within(e.a, own)):
        outer.append(e.a)
        e = e.b
    return (outer, e) if outer and not _axes_within(e, own) else ([], whole)


def _axes_within(e: Expr, own) -> bool:
    return all(x.uid in own for x in walk(e, unique=True) if isinstance(x, Axis))

