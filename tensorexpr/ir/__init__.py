"""The tensor-expression IR: immutable scalar expressions and tensor definitions.

Semantics every pass and backend relies on
==========================================

Values and types
    Element types are ``float32``, ``float64``, ``int32``, ``int64`` and ``bool``.
    Binary operations promote along ``bool < int32 < int64 < float32 < float64``;
    a Python scalar is *weak*: it takes the type of the other operand (a Python
    float meeting an integer expression gives ``float32``). ``a / b`` is true
    division; on two integers it gives ``float32``. Comparisons give ``bool``;
    ``&``, ``|`` and ``~`` take booleans only. Math functions applied to integers
    first convert them to ``float32`` (``abs``, ``floor`` and ``ceil`` keep
    integers). Float arithmetic follows IEEE 754 in the element type (no
    fast-math reassociation is promised; reductions may be summed in any order,
    and a sum may add a product term ``a * b`` with one rounding, as a fused
    multiply-add, the way BLAS does; elementwise expressions are never fused).
    A math function gives the same bits for the same operand wherever a backend
    computes it (any loop, any program): a max's gradient compares a recomputed
    body with the stored maximum. Float ``a // b`` and ``a % b`` are Python's,
    from the exact ``fmod``: ``1.0 // 0.1 == 9.0``, ``3.0 % inf == 3.0``,
    ``-3.0 % inf == inf``, a zero remainder has the sign of ``b``; float
    ``x // 0`` is ``x / 0`` and ``x % 0`` is NaN (numpy's answer; Python raises).

Index arithmetic
    Indices and axes are ``int64``. ``a // b`` is floor division and ``a % b`` is
    floor modulo (the result has the sign of ``b``), exactly as in Python and
    isl: ``-7 // 2 == -4`` and ``-7 % 2 == 1``. Integer ``x // 0`` and ``x % 0``
    are defined as ``0`` (so no backend can trap); index expressions only ever
    divide by positive constants. Integer ``x ** y`` with ``y < 0`` is the
    integer part of ``1 / x ** -y``: ``1`` for ``x == 1``, ``+-1`` for
    ``x == -1`` and ``0`` otherwise (``0 ** -1`` included).

Domains and what lies outside them
    A tensor of shape ``(n0, ..., nk)`` is defined on the box ``0 <= i_d < n_d``.
    A reduction ``te.sum(body, axis=r, where=c)`` ranges over the box of its axes
    intersected with ``c``. ``select(c, a, b)`` evaluates only the taken branch;
    ``a & b`` evaluates ``b`` only where ``a`` holds and ``a | b`` only where ``a``
    does not (left to right, as C's ``&&`` and ``||``).
    A point outside a domain, a ``where``, the untaken branch of a ``select`` or the
    right operand of a false ``&`` (a true ``|``) is *never evaluated*: reads there
    are not bounds-checked, cannot fault, and their values (even NaN or inf) never
    reach a result. Consequently the adjoint of
    anything outside a domain is exactly zero, never ``NaN * 0``.
    A sum over an empty set is 0; a max over an empty set is ``-inf`` (the least
    value of an integer type), a min is ``+inf`` (the greatest).

Reduction axes are bound variables
    A reduction binds its axes in its ``body`` and ``where``; the axes' bounds are
    evaluated outside it. One axis object may be bound by several *sibling*
    reductions (``s = te.sum(X[k], axis=k)`` used three times in one body, a sum and
    a max over the same ``k``): each binds its own variable. A reduction nested in a
    reduction over the same axis (shadowing) is refused when it is written
    (``te.sum`` raises) and never built by a pass: rewriting that maps axes
    (``transform.substitute``) does not replace a bound axis inside its reduction
    and renames a bound axis rather than capture an axis of a replacement. Along any
    path of an expression an axis is therefore bound at most once, and every backend
    and pass may key bound axes by ``uid`` within one nest of reductions.

Reads
    ``X[f(i)]`` must lie inside ``X``'s box at every evaluated point. For affine
    and clamped (min/max of affine) indices this is proven statically with isl;
    data-dependent indices (the value of an integer tensor) are checked at run
    time and raise ``IndexError``. There is no negative-index wrap-around.

Recurrences
    A :class:`Compute` may read itself through its :class:`SelfRef`. Every
    self-read must refer to a point that is strictly earlier in the order given
    by ``Compute.carry``: the axis ``carry.axis`` runs sequentially in direction
    ``carry.step`` (+1 ascending, -1 descending) and the other axes are
    independent (parallel) within one step. Points are evaluated in that order,
    so a self-read sees the final value of the point it reads. A user's
    ``te.recurrence`` always runs ascending (a read at ``t + 1`` is refused);
    descending recurrences are the adjoints built by ``te.differentiate``.

Scatter-add
    :class:`ScatterAdd` starts from zeros and, for every point of its iteration
    domain, adds ``value`` at ``indices`` (data-dependent). Addition order is
    unspecified (floating-point sums may differ in the last bits between
    backends). It exists for adjoints of data-dependent reads, which cannot be
    turned into gathers.

Node identity
    Expression nodes are frozen dataclasses with structural equality and cached
    structural hashes. Because ``==`` on an expression *builds* a comparison (so
    users can write ``te.select(t == 0, ...)``), structural equality is spelled
    ``same(a, b)``; ``bool(a == b)`` also answers it, so expressions work as dict
    keys. Tensors are compared by their unique ``uid``: two placeholders with the
    same name are different inputs.

The IR is three modules, all re-exported here: ``tensorexpr.ir.dtypes`` (element
types), ``tensorexpr.ir.nodes`` (the nodes and the constructors that type them) and
``tensorexpr.ir.traversal`` (walks over expressions and programs).

>>> from tensorexpr.ir import Const, walk
>>> [str(x) for x in walk(Const(1, "int64") + 2)]
['(1 + 2)', '1', '2']
"""
from __future__ import annotations
from .dtypes import (DTYPES, INDEX_DTYPE, DEFAULT_FLOAT, fresh_uid, is_float, is_int, promote,
    check_dtype)  # noqa: F401
from .nodes import (Node, field_nodes, kept_on, same, BINARY_ARITH, BINARY_CMP, TIE_TESTS, BINARY_LOGIC,
    UNARY_MATH, UNARY_OPS, REDUCE_OPS, COSTLY_OPS, Expr, Const, SizeVar, Axis, Binary, Unary, Cast, Select,
    Read, Reduce, Tensor, Placeholder, SelfRef, Carry, Compute, ScatterAdd, const, as_expr,
    coerce_pair, cast, binary, unary, read, register_printer)  # noqa: F401
from .traversal import (children, walk, evaluated_with, postorder, occurrences, reads,
    tensor_exprs, tensor_inputs, topo_order, size_vars)  # noqa: F401
