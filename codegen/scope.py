"""The lowering scope: what holds at a point of the generated code (bound axes, guards, temporaries).

Lowering an expression (``codegen.lower``) threads a :class:`Scope` through it:
the C expression of each enclosing axis, the IR conditions known to hold there
(which isl uses to prove reads in range) and the temporaries already computed.
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

from tensorexpr import polyhedral
from tensorexpr.ir import Axis, Const, Expr, INDEX_DTYPE, same
from tensorexpr.transform import const_value

from .loopast import CExpr
from .patterns import nonneg, uses

I64 = INDEX_DTYPE


def key_uses(key, uids: set) -> bool:
    """Does a memo key (an expression, or a tuple holding expressions) use an axis
    of ``uids``?

    >>> import tensorexpr as te
    >>> i = te.reduce_axis(4, name="i")
    >>> key_uses(("in range", i + 1), {i.uid}), key_uses("cse", {i.uid})
    (True, False)
    """
    if isinstance(key, tuple):
        return any(key_uses(k, uids) for k in key)
    return isinstance(key, Expr) and uses(key, uids)


class Scope:
    """What holds at a point of the generated code.

    ``env`` maps axis uids to C expressions; ``axes`` are the enclosing logical
    axes (outermost first), ``guards`` the IR conditions known to hold (both
    feed isl); ``memo`` reuses temporaries already computed in this scope.

    >>> import tensorexpr as te
    >>> i = te.reduce_axis(4, name="i")
    >>> Scope({}, (i,), (), {}).proves_inside(i, te.ir.Const(4, "int64"), ())
    True
    """

    def __init__(self, env, axes, guards, memo):
        self.env: Dict[int, CExpr] = env
        self.axes: Tuple[Axis, ...] = axes
        self.guards: Tuple[Expr, ...] = guards
        self.memo: Dict[Expr, CExpr] = memo
        #: the sizes isl sees here: those of the first question asked (its point set
        #: answered the later ones, whatever sizes they named)
        self._params: Optional[Tuple[str, ...]] = None

    def child(self, axes=(), guards=(), env=None) -> "Scope":
        base = self.unbind(axes)
        new_env = dict(base.env)
        new_env.update(env or {})
        # A temporary holds its value at the axes' old values and is declared in the
        # statements lowered there: rebinding an axis starts without them.
        rebinds = any(u in self.env and self.env[u] is not x for u, x in (env or {}).items())
        return Scope(new_env, base.axes + tuple(axes), base.guards + tuple(guards),
                      {} if rebinds else dict(base.memo))

    def unbind(self, axes) -> "Scope":
        """This scope where ``axes`` are about to be bound again (a reduction nested
        in one over the same axis, as the IR allows): the outer binding is shadowed,
        so it leaves the axes (isl names each axis once, by uid), and the guards and
        temporaries that speak of it are forgotten (fewer guards only enlarge the
        set of points isl reasons about: still sound)."""
        uids = {a.uid for a in axes} & {a.uid for a in self.axes}
        if not uids:
            return self
        return Scope({u: v for u, v in self.env.items() if u not in uids},
                      tuple(a for a in self.axes if a.uid not in uids),
                      tuple(g for g in self.guards if not uses(g, uids)),
                      {k: v for k, v in self.memo.items() if not key_uses(k, uids)})

    def proves_nonneg(self, e: Expr, params: Sequence[str]) -> bool:
        """Does ``e >= 0`` hold wherever this code runs?"""
        if nonneg(e):
            return True
        if not self.axes:
            return False
        return self._within(e, Const(1 << 62, I64), params)

    def proves_inside(self, index: Expr, size: Expr, params: Sequence[str]) -> bool:
        """Does ``0 <= index < size`` hold wherever this code runs (no check needed)?"""
        if isinstance(index, Axis):  # the common case needs no isl
            lo, hi, n = const_value(index.lo), const_value(index.hi), const_value(size)
            if lo is not None and lo >= 0 and (same(index.hi, size) or
                                               (hi is not None and n is not None and hi <= n)):
                return True
        return self._within(index, size, params)

    def _within(self, index: Expr, size: Expr, params: Sequence[str]) -> bool:
        if self._params is None:
            self._params = tuple(params)
        return polyhedral.within(self.axes, self.guards, self._params, index, size)
