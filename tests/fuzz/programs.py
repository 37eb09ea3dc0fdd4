"""Random tensorexpr programs as plain data, their Python source, and the tensors they build.

A :class:`Program` is a small description: inputs (float placeholders and int32
index tensors with a known value range), then a list of tensor definitions whose
bodies are expression trees of tuples over named axes. :func:`to_source` prints
it as the Python a user would write; :func:`build` runs exactly that source, so a
shrunk failure's printed source *is* the reproducer. :func:`programs` is the
hypothesis strategy; every choice shrinks towards the simplest program (leaves
before inner nodes, reads before anything else, small numbers).

Every program is valid by construction: each read index gets an interval (affine
in the symbolic size ``n`` where there is one), and an index that may leave its
tensor is clamped, wrapped with ``%`` or guarded by a ``select``. A
``te.BoundsError`` on a generated program is therefore a generator bug or a te
bug, never expected.

Trees (all tuples):

* float expressions: ``("read", T, idx, guards)``, ``("self", T, idx, guards)``,
  ``("const", v)``, ``("axis", a)``, ``("un", op, e)``, ``("bin", op, a, b)``,
  ``("select", cond, a, b)``, ``("reduce", op, axes, where, body)``,
  ``("deep", tag, start, steps)``: a chain of values ``v0 = start``, then one per step,
  each a function of earlier values (``("un", op, j)``, ``("bin", op, j, k)``,
  ``("sel", j, k, m)``: ``v_k if v_j > 0 else v_m``), the last one its value; values are
  used several times, so its tree is exponentially larger than its DAG (printed with
  ``:=``, as a user names intermediate values)
* index expressions: ``("ax", a)``, ``("n",)``, ``("c", v)``, ``("add", a, b)``,
  ``("sub", a, b)``, ``("mul", k, a)``, ``("fdiv", a, k)``, ``("mod", a, k)``,
  ``("max", a, b)``, ``("min", a, b)``, ``("abs", a)`` (a reflection), ``("data", I, idx)``
* conditions: ``("cmp", op, a, b)`` of index expressions, ``("dcmp", op, e, v)``
  of a float expression and a constant, ``("and", a, b)``, ``("or", a, b)``,
  ``("not", a)``

>>> p = Program("float64", None, (Input("X0", (3,), "float", 0),),
...             (Def("T0", (3,), ("i0",), (), ("un", "tanh", ("read", "X0", (("ax", "i0"),), ())),
...                  None),))
>>> print(to_source(p))
X0 = te.placeholder((3,), dtype="float64", name="X0")
T0 = te.compute((3,), lambda i0: te.tanh(X0[i0]), name="T0", dtype="float64")
>>> build(p)["T0"].shape
(3,)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from hypothesis import strategies as st

SYM = "n"  # the one symbolic size a program may have


@dataclass(frozen=True)
class Input:
    """A placeholder: ``kind`` is "float" (the program's dtype) or "index" (int32 in [0, vmax))."""
    name: str
    shape: tuple
    kind: str
    vmax: int


@dataclass(frozen=True)
class Def:
    """A ``te.compute`` (``carry is None``) or a ``te.recurrence`` along dimension ``carry``.

    ``raxes`` are the reduce axes this definition creates: ``(name, lo, hi)``, ``hi``
    an int or ``"n"``. ``chain > 0`` makes it a chain of that many computes, each
    reading the previous one as ``P`` (starting from the definition before it).
    ``checkpoints``: a recurrence's ``checkpoints=k`` (its gradient may be checkpointed).
    """
    name: str
    shape: tuple
    axes: tuple
    raxes: tuple
    body: tuple
    carry: Optional[int]
    chain: int = 0
    checkpoints: Optional[int] = None


@dataclass(frozen=True)
class Program:
    """Inputs, definitions (the last one is the output); ``n`` is the symbolic size's value;
    ``sizes`` the profile its sizes were drawn from (:data:`SIZES`)."""
    dtype: str
    n: Optional[int]
    inputs: Tuple[Input, ...]
    defs: Tuple[Def, ...]
    second_order: bool = False
    seed: int = 0
    sizes: str = "small"

    @property
    def output(self) -> Def:
        return self.defs[-1]


# {{{ printing


def _dim(d) -> str:
    return str(d)


def _shape(shape) -> str:
    inner = ", ".join(_dim(d) for d in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def idx_src(e, p: str = "") -> str:
    """An index tree as Python source.

    >>> idx_src(("add", ("mul", 2, ("ax", "i")), ("c", -1)))
    '2 * i + -1'
    """
    match e:
        case ("ax", a):
            return a
        case ("n",):
            return SYM
        case ("c", v):
            return str(v)
        case ("add", a, b):
            return f"{idx_src(a, p)} + {idx_src(b, p)}"
        case ("sub", a, b):
            return f"{idx_src(a, p)} - ({idx_src(b, p)})"
        case ("mul", k, a):
            return f"{k} * {_paren(a, p)}"
        case ("fdiv", a, k):
            return f"{_paren(a, p)} // {k}"
        case ("mod", a, k):
            return f"{_paren(a, p)} % {k}"
        case ("max", a, b):
            return f"te.maximum({idx_src(a, p)}, {idx_src(b, p)})"
        case ("min", a, b):
            return f"te.minimum({idx_src(a, p)}, {idx_src(b, p)})"
        case ("abs", a):
            return f"te.abs({idx_src(a, p)})"
        case ("data", t, idx):
            return f"{p}{t}[{', '.join(idx_src(i, p) for i in idx)}]"
    raise ValueError(f"not an index tree: {e!r}")


def _paren(e, p: str) -> str:
    s = idx_src(e, p)
    return s if e[0] in ("ax", "n", "c", "data", "max", "min") else f"({s})"


def cond_src(c, p: str = "") -> str:
    """A condition tree as Python source.

    >>> cond_src(("not", ("cmp", "<", ("ax", "i"), ("c", 2))))
    '~(i < 2)'
    """
    match c:
        case ("cmp", op, a, b):
            return f"{idx_src(a, p)} {op} {idx_src(b, p)}"
        case ("dcmp", op, e, v):
            return f"{expr_src(e, p)} {op} {v!r}"
        case ("and", a, b):
            return f"({cond_src(a, p)}) & ({cond_src(b, p)})"
        case ("or", a, b):
            return f"({cond_src(a, p)}) | ({cond_src(b, p)})"
        case ("not", a):
            return f"~({cond_src(a, p)})"
    raise ValueError(f"not a condition tree: {c!r}")


_UNARY = {
    "neg": "-({})", "tanh": "te.tanh({})", "sigmoid": "te.sigmoid({})", "sin": "te.sin({})",
    "cos": "te.cos({})", "exp": "te.exp(te.tanh({}))", "expneg": "te.exp(-({0}) * ({0}))",
    "log": "te.log(1.0 + ({0}) * ({0}))", "sqrt": "te.sqrt(1.0 + ({0}) * ({0}))",
    "sqrtabs": "te.sqrt(te.abs({}) + 0.5)", "abs": "te.abs({})", "floor": "te.floor({})",
    "ceil": "te.ceil({})", "square": "({}) ** 2", "half": "0.5 * ({})", "erf": "te.erf({})",
}
_BINARY = {
    "add": "{} + {}", "sub": "{} - ({})", "mul": "({}) * ({})", "div": "({0}) / (1.0 + ({1}) * ({1}))",
    "max": "te.maximum({}, {})", "min": "te.minimum({}, {})",
    # a power of a data exponent: its base and exponent are exactly 0 wherever their
    # operands are <= 0 (0 ** b, a ** 0 and 0 ** 0: flat, their slopes 0), the exponent
    # at most 2 so that values stay in range
    "pow": "te.maximum({}, 0.0) ** te.minimum(te.maximum({}, 0.0), 2.0)",
}


def expr_src(e, p: str = "", dtype: str = "float64") -> str:
    """A float expression tree as Python source (``p`` prefixes tensor names).

    >>> expr_src(("bin", "add", ("const", 0.5), ("read", "X", (("ax", "i"),), ())), dtype="float32")
    '0.5 + X[i]'
    >>> expr_src(("read", "X", (("sub", ("ax", "i"), ("c", 1)),), (("cmp", ">=", ("ax", "i"), ("c", 1)),)))
    'te.select(i >= 1, X[i - (1)], 0.0)'
    """
    match e:
        case ("read", t, idx, guards) | ("self", t, idx, guards):
            name = "S" if e[0] == "self" else t[1:] if t.startswith("@") else f"{p}{t}"
            s = f"{name}[{', '.join(idx_src(i, p) for i in idx)}]" if idx else f"{name}[()]"
            if guards:
                cond = guards[0]
                for g in guards[1:]:
                    cond = ("and", cond, g)
                s = f"te.select({cond_src(cond, p)}, {s}, 0.0)"
            return s
        case ("const", v):
            # a bare Python float is float32 (weak) under a math function: keep float64 exact
            return repr(v) if dtype == "float32" else f"te.const({v!r}, {dtype!r})"
        case ("axis", a):
            return f"te.cast({a}, {dtype!r}) * 0.5"
        case ("un", op, a):
            return _UNARY[op].format(expr_src(a, p, dtype))
        case ("bin", op, a, b):
            return _BINARY[op].format(expr_src(a, p, dtype), expr_src(b, p, dtype))
        case ("select", c, a, b):
            return f"te.select({cond_src(c, p)}, {expr_src(a, p, dtype)}, {expr_src(b, p, dtype)})"
        case ("reduce", op, axes, where, body):
            ax = axes[0] if len(axes) == 1 else "[" + ", ".join(axes) + "]"
            w = "" if where is None else f", where={cond_src(where, p)}"
            return f"te.{op}({expr_src(body, p, dtype)}, axis={ax}{w})"
        case ("deep", tag, start, steps):
            v = [f"_d{tag}_{m}" for m in range(len(steps) + 1)]
            parts = [f"({v[0]} := {expr_src(start, p, dtype)})"]
            for m, step in enumerate(steps, 1):
                match step:
                    case ("un", op, j):
                        x = _DEEP_UNARY[op].format(v[j])
                    case ("bin", op, j, k):
                        x = _DEEP_BINARY[op].format(v[j], v[k])
                    case ("sel", j, k, m2):
                        x = f"te.select({v[j]} > 0.0, {v[k]}, {v[m2]})"
                parts.append(f"({v[m]} := {x})")
            return f"({', '.join(parts)})[-1]"
    raise ValueError(f"not an expression tree: {e!r}")


def to_source(prog: Program, prefix: str = "") -> str:
    """The program as Python source defining its tensors (names prefixed by ``prefix``).

    The source expects ``te`` imported; with a symbolic size it defines ``n``
    (prefixed, so that several programs can share one namespace).

    >>> p = Program("float32", 2, (Input("X0", ("n",), "float", 0),),
    ...             (Def("T0", (), (), (("k0", 0, "n"),), ("reduce", "max", ("k0",), None,
    ...                  ("read", "X0", (("ax", "k0"),), ())), None),))
    >>> print(to_source(p, "p1_"))
    p1_n = te.var("p1_n")
    p1_X0 = te.placeholder((p1_n,), dtype="float32", name="p1_X0")
    p1_k0 = te.reduce_axis((0, p1_n), name="p1_k0")
    p1_T0 = te.compute((), lambda : te.max(p1_X0[p1_k0], axis=p1_k0), name="p1_T0", dtype="float32")
    >>> print(to_source(Program("float32", None, (), (Def("T0", (4,), ("i0",), (), ("const", 1.0), 0,
    ...                                                   checkpoints=2),))))
    T0 = te.recurrence((4,), lambda S, i0: 1.0, name="T0", dtype="float32", checkpoints=2)
    """
    p = prefix
    lines = []
    if prog.n is not None:
        lines.append(f'{p}{SYM} = te.var("{p}{SYM}")')

    def shp(shape):
        return _shape(tuple(f"{p}{SYM}" if d == SYM else d for d in shape))

    for inp in prog.inputs:
        dt = prog.dtype if inp.kind == "float" else "int32"
        lines.append(f'{p}{inp.name} = te.placeholder({shp(inp.shape)}, dtype="{dt}", '
                     f'name="{p}{inp.name}")')
    for pos, d in enumerate(prog.defs):
        for name, lo, hi in d.raxes:
            hs = f"{p}{SYM}" if hi == SYM else hi
            lines.append(f'{p}{name} = te.reduce_axis(({lo}, {hs}), name="{p}{name}")')
        body = expr_src(d.body, p, prog.dtype)
        if p:  # reduce axes and the size are prefixed; own axes are lambda parameters
            body = _prefix_free_names(body, d, p)
        params = ", ".join(d.axes)
        if d.chain:
            prev = f"{p}{prog.defs[pos - 1].name}"
            lines.append(f"{p}{d.name} = {prev}")
            lines.append(f"for _ in range({d.chain}):")
            lines.append(f"    {p}{d.name} = (lambda P: te.compute({shp(d.shape)}, lambda {params}: "
                         f'{body}, name="{p}{d.name}", dtype="{prog.dtype}"))({p}{d.name})')
        elif d.carry is None:
            lines.append(f'{p}{d.name} = te.compute({shp(d.shape)}, lambda {params}: {body}, '
                         f'name="{p}{d.name}", dtype="{prog.dtype}")')
        else:
            params = ", ".join(("S",) + d.axes)
            ck = "" if d.checkpoints is None else f", checkpoints={d.checkpoints}"
            lines.append(f'{p}{d.name} = te.recurrence({shp(d.shape)}, lambda {params}: {body}, '
                         f'name="{p}{d.name}", dtype="{prog.dtype}"{ck})')
    return "\n".join(lines)


def _prefix_free_names(body: str, d: Def, p: str) -> str:
    import re
    names = [name for name, _, _ in d.raxes] + [SYM]
    return re.sub(r"\b(" + "|".join(map(re.escape, names)) + r")\b", lambda m: p + m.group(1), body)


def build(prog: Program, prefix: str = "") -> dict:
    """Run :func:`to_source`; the namespace maps (prefixed) names to tensors and sizes.

    >>> p = Program("float64", None, (Input("X0", (2,), "float", 0),),
    ...             (Def("T0", (2,), ("i0",), (), ("const", 1.0), None),))
    >>> build(p, "q_")["q_T0"].name
    'q_T0'
    """
    import tensorexpr as te
    ns = {"te": te}
    exec(compile(to_source(prog, prefix), "<fuzz program>", "exec"), ns)
    return ns


# }}}

# {{{ index intervals: (lo0, lo1, hi0, hi1) meaning [lo0 + lo1*n, hi0 + hi1*n]


def _lin(d):
    return (0, 1) if d == SYM else (d, 0)


def index_range(e, ranges: dict, tensors: dict):
    """The interval of an index tree, affine in ``n``; None if unknown.

    >>> index_range(("add", ("ax", "i"), ("c", 1)), {"i": (0, 0, 2, 0)}, {})
    (1, 0, 3, 0)
    """
    match e:
        case ("ax", a):
            return ranges[a]
        case ("n",):
            return (0, 1, 0, 1)
        case ("c", v):
            return (v, 0, v, 0)
        case ("add", a, b):
            ra, rb = index_range(a, ranges, tensors), index_range(b, ranges, tensors)
            if ra is None or rb is None:
                return None
            return tuple(x + y for x, y in zip(ra, rb))
        case ("sub", a, b):
            ra, rb = index_range(a, ranges, tensors), index_range(b, ranges, tensors)
            if ra is None or rb is None:
                return None
            return (ra[0] - rb[2], ra[1] - rb[3], ra[2] - rb[0], ra[3] - rb[1])
        case ("mul", k, a):
            r = index_range(a, ranges, tensors)
            if r is None:
                return None
            s = tuple(k * x for x in r)
            return s if k >= 0 else (s[2], s[3], s[0], s[1])
        case ("fdiv", a, k):
            r = index_range(a, ranges, tensors)
            if r is None or r[1] or r[3]:
                return None
            return (r[0] // k, 0, r[2] // k, 0)
        case ("mod", a, k):
            r = index_range(a, ranges, tensors)
            if r is not None and not r[1] and not r[3] and 0 <= r[0] and r[2] < k:
                return r
            return (0, 0, k - 1, 0)
        case ("max", a, ("c", v)) | ("min", a, ("c", v)):
            r = index_range(a, ranges, tensors)
            if r is None or r[1] or r[3]:
                return None
            f = max if e[0] == "max" else min
            return (f(r[0], v), 0, f(r[2], v), 0)
        case ("abs", a):
            r = index_range(a, ranges, tensors)
            if r is None or r[1] or r[3]:
                return None
            lo, hi = r[0], r[2]
            return (0 if lo <= 0 <= hi else min(abs(lo), abs(hi)), 0, max(abs(lo), abs(hi)), 0)
        case ("data", t, _):
            return (0, 0, tensors[t].vmax - 1, 0)
    return None


def fits(r, d) -> Tuple[bool, bool]:
    """Whether the interval's low end is >= 0 and its high end < ``d``, for every n >= 1.

    >>> fits((0, 0, -1, 1), "n"), fits((1, 0, 0, 1), "n")   # [0, n - 1] and [1, n]
    ((True, True), (True, False))
    """
    if r is None:
        return False, False
    d0, d1 = _lin(d)
    lo_ok = r[0] + r[1] >= 0 and r[1] >= 0
    e0, e1 = r[2] - d0 + 1, r[3] - d1
    return lo_ok, (e0 + e1 <= 0 and e1 <= 0)


def _dmax(d):
    """The index tree of ``d - 1``."""
    return ("sub", ("n",), ("c", 1)) if d == SYM else ("c", d - 1)


# }}}

# {{{ the strategy


class _Ctx:
    """What a definition being generated can see (mutable while one program is drawn)."""

    def __init__(self, dtype, has_n, tensors, max_depth, sizes="small", n_val=None):
        self.dtype = dtype
        self.has_n = has_n
        self.sizes = sizes              # the size profile (SIZES)
        self.n_val = n_val              # the symbolic size's value (for the work budget)
        self.points = 1                 # points of the definition being drawn (its box)
        self.pool = []                  # the static sizes drawn so far (big profile)
        self.align = 0                  # > 0: reads take whole axes wherever one fits
        self.tensors = tensors          # name -> Input-like (shape, kind, vmax)
        self.max_depth = max_depth
        self.ranges = {}                # axis name -> interval
        self.own = ()                   # the definition's own axes
        self.raxes = []                 # (name, lo, hi) created by this definition
        self.bound = []                 # reduce axes bound around the current point
        self.next_axis = 0
        self.next_deep = 0              # deep chains drawn (their values' names)
        self.self_def = None            # (shape, carry) of a recurrence being defined
        self.no_self = 0                # inside a max/min: te differentiates only sums of
        #                                 a recurrence's earlier values (a documented limit)

    def scope(self):
        return list(self.own) + list(self.bound)


def _pick(draw, options):
    return draw(st.sampled_from(options))


def gen_index(draw, ctx: _Ctx, depth: int = 1):
    """An index tree over the axes in scope (not yet made valid for any tensor)."""
    scope = ctx.scope()
    kinds = ["axis", "shift", "const", "rev", "lin", "div", "mod", "reflect"]
    if ctx.sizes == "big":
        kinds += ["axis", "axis", "axis"]  # reads along whole axes: the tiled shapes
    if depth > 0 and any(t.kind == "index" for t in ctx.tensors.values()):
        kinds.append("data")
    kind = _pick(draw, kinds) if scope else "const"
    if kind == "const":
        return ("c", draw(st.integers(0, 4)))
    a = ("ax", _pick(draw, scope))
    if kind == "axis":
        return a
    if kind == "shift":
        return ("add", a, ("c", _pick(draw, [1, -1, 2, -2])))
    if kind == "rev":
        r = ctx.ranges[a[1]]
        hi = ("sub", ("n",), ("c", 1)) if r[3] else ("c", r[2] + r[0])
        return ("sub", hi, a)  # lo + hi - a: the axis reversed over its own range
    if kind == "lin":
        b = ("ax", _pick(draw, scope)) if draw(st.booleans()) else ("c", draw(st.integers(0, 2)))
        rb = index_range(b, ctx.ranges, ctx.tensors)
        coefs = [2, 3] + ([rb[2] + 1] if not rb[3] and b[0] == "ax" and rb[0] == 0 else [])
        k = _pick(draw, coefs)
        if draw(st.booleans()):
            return ("add", ("mul", k, a), b)   # strided (or a flattening when k = b's extent)
        return ("add", b, ("mul", k, a))       # dilated
    if kind == "reflect":  # |a - c|: te.nn.pad's reflect mode folds indices so
        if ctx.ranges[a[1]][1] or ctx.ranges[a[1]][3]:
            return a
        return ("abs", ("add", a, ("c", -draw(st.integers(1, 2)))))
    if kind in ("div", "mod"):
        if ctx.ranges[a[1]][1] or ctx.ranges[a[1]][3]:
            return a  # // and % of a symbolic range have no static interval here
        inner = a if draw(st.booleans()) else ("add", a, ("c", draw(st.integers(1, 2))))
        return (("fdiv" if kind == "div" else "mod"), inner, _pick(draw, [2, 3]))
    # data-dependent: I[idx] (idx made valid for I by clamping), maybe % k or // 2
    iname = _pick(draw, sorted(n for n, t in ctx.tensors.items() if t.kind == "index"))
    itens = ctx.tensors[iname]
    idx = tuple(_make_valid(draw, ctx, gen_index(draw, ctx, depth - 1), d, [], allow_guard=False)
                for d in itens.shape)
    e = ("data", iname, idx)
    post = _pick(draw, ["none", "mod", "div"])
    if post == "mod":
        return ("mod", e, _pick(draw, [2, 3]))
    if post == "div":
        return ("fdiv", e, 2)
    return e


def _make_valid(draw, ctx, e, d, guards: list, allow_guard=True):
    """``e`` as an index into a dimension of size ``d``: clamped, wrapped or guarded."""
    lo_ok, hi_ok = fits(index_range(e, ctx.ranges, ctx.tensors), d)
    if lo_ok and hi_ok:
        return e
    if e[0] == "c" and d != SYM:
        return ("c", min(max(e[1], 0), d - 1))  # a guard on constants is a Python bool
    modes = ["clamp"] + (["guard"] if allow_guard else []) + (["mod"] if d != SYM else [])
    mode = _pick(draw, modes)
    if mode == "mod":
        return ("mod", e, d)
    if mode == "guard":
        if not lo_ok:
            guards.append(("cmp", ">=", e, ("c", 0)))
        if not hi_ok:
            guards.append(("cmp", "<=", e, _dmax(d)))
        return e
    if not lo_ok:
        e = ("max", e, ("c", 0))
    if not hi_ok:
        e = ("min", e, _dmax(d))
    return e


def gen_read(draw, ctx: _Ctx):
    """A read of a float tensor defined so far, every index made valid."""
    names = sorted(n for n, t in ctx.tensors.items() if t.kind == "float")
    t = _pick(draw, names)
    shape = ctx.tensors[t].shape
    guards = []
    if len(shape) == 2 and shape[1] != SYM and ctx.scope() and draw(st.integers(0, 5)) == 0:
        # unflatten: T[f // B, f % B] over one axis
        a = ("ax", _pick(draw, ctx.scope()))
        if not (ctx.ranges[a[1]][1] or ctx.ranges[a[1]][3]):
            B = shape[1]
            return ("read", t, (_make_valid(draw, ctx, ("fdiv", a, B), shape[0], guards),
                                ("mod", a, B)), tuple(guards))
    idx = tuple(_aligned(draw, ctx, d) or _make_valid(draw, ctx, gen_index(draw, ctx), d, guards)
                for d in shape)
    return ("read", t, idx, tuple(guards))


def _aligned(draw, ctx: _Ctx, d):
    """Big profile, half of the time: an axis in scope that runs over the whole dimension
    ``d`` (a contraction's or an elementwise read's index, the shapes the code generator
    tiles and vectorizes), if there is one; else None."""
    if ctx.sizes != "big" or d == SYM:
        return None
    fit = [a for a in ctx.scope() if ctx.ranges[a] == (0, 0, d - 1, 0)]
    if not fit or not (ctx.align or draw(st.booleans())):
        return None
    return ("ax", _pick(draw, fit))


def gen_self(draw, ctx: _Ctx, order: int):
    """A read of the recurrence being defined, ``order`` steps back, guarded at the start."""
    shape, carry = ctx.self_def
    guards = [("cmp", ">=", ("ax", ctx.own[carry]), ("c", order))]
    idx = []
    for pos, d in enumerate(shape):
        if pos == carry:
            idx.append(("sub", ("ax", ctx.own[pos]), ("c", order)))
        elif draw(st.booleans()):
            idx.append(("ax", ctx.own[pos]))
        else:
            idx.append(_make_valid(draw, ctx, gen_index(draw, ctx, 0), d, guards))
    return ("self", "S", tuple(idx), tuple(guards))


def gen_cond(draw, ctx: _Ctx, depth: int):
    """A boolean condition: index comparisons, data comparisons, & | ~."""
    kind = _pick(draw, ["idx", "data", "parity", "and", "or", "not"] if depth > 0
                 else ["idx", "data", "parity"])
    scope = ctx.scope()
    if kind == "idx" and scope:
        a = ("ax", _pick(draw, scope))
        if draw(st.booleans()):
            a = ("add", a, ("c", draw(st.integers(-1, 1))))
        b = ("ax", _pick(draw, scope)) if draw(st.booleans()) else ("c", draw(st.integers(0, 3)))
        return ("cmp", _pick(draw, ["<", "<=", "==", "!=", ">", ">="]), a, b)
    if kind == "parity" and scope:
        return ("cmp", "==", ("mod", ("ax", _pick(draw, scope)), 2), ("c", draw(st.integers(0, 1))))
    if kind in ("and", "or"):
        return (kind, gen_cond(draw, ctx, depth - 1), gen_cond(draw, ctx, depth - 1))
    if kind == "not":
        return ("not", gen_cond(draw, ctx, depth - 1))
    leaf = gen_self(draw, ctx, draw(st.integers(1, 3))) if (
        ctx.self_def and not ctx.no_self and draw(st.integers(0, 2)) == 0) else gen_read(draw, ctx)
    return ("dcmp", _pick(draw, [">", "<"]), leaf, _pick(draw, [0.0, 0.5, -0.5]))


def gen_leaf(draw, ctx: _Ctx):
    kinds = ["read", "const", "axis"] + (["self"] if ctx.self_def and not ctx.no_self else [])
    kind = _pick(draw, kinds)
    if kind == "const":
        return ("const", _pick(draw, [1.0, 0.5, -1.5, 2.0, 0.0]))
    if kind == "axis" and ctx.scope():
        return ("axis", _pick(draw, ctx.scope()))
    if kind == "self":
        return gen_self(draw, ctx, draw(st.integers(1, 3)))
    return gen_read(draw, ctx)


def _box(ctx: _Ctx, beside=()) -> int:
    """Points of the box around a new reduce axis: the definition's, times the reduce
    axes bound there and ``beside`` (the big profile keeps it within WORK)."""
    return ctx.points * _prod(_extent(ctx.ranges[a], ctx.n_val) for a in ctx.bound + list(beside))


def _new_raxis(draw, ctx: _Ctx, size=None, beside=()):
    """A new reduce axis (``size``: its extent, from 0; else drawn; ``beside``: axes of
    the same reduction, in its box)."""
    name = f"k{ctx.next_axis}"
    ctx.next_axis += 1
    if size is not None:
        lo, hi = 0, size
        rng = (0, 0, size - 1, 0)
    elif ctx.has_n and draw(st.integers(0, 4)) == 0 and (
            ctx.sizes != "big" or ctx.n_val * _box(ctx, beside) <= WORK):
        lo, hi = 0, SYM
        rng = (0, 0, -1, 1)
    else:
        lo = draw(st.integers(0, 2))
        if ctx.sizes == "big":
            # the box of the reduction nest (the definition's points times every
            # reduce axis bound around it) stays within WORK
            size = _draw_size(draw, max(1, WORK // _box(ctx, beside)), ctx.pool)
            lo = 0 if size in ctx.pool else lo  # k over a whole axis of that size
            hi = lo + size
        else:
            hi = lo + draw(st.integers(1, 4))
        rng = (lo, 0, hi - 1, 0)
    ctx.raxes.append((name, lo, hi))
    ctx.ranges[name] = rng
    return name, lo


def gen_reduce(draw, ctx: _Ctx, depth: int):
    op = _pick(draw, ["sum", "max", "min"])
    axes, los = [], []
    for _ in range(draw(st.integers(1, 2))):
        free = [a for a, _, _ in ctx.raxes if a not in ctx.bound and a not in axes]
        if ctx.sizes == "big":  # a shared axis keeps the nest within WORK too
            box = _box(ctx, axes)
            free = [a for a in free if box * _extent(ctx.ranges[a], ctx.n_val) <= WORK]
        if free and draw(st.integers(0, 2)) == 0:   # share an axis with an earlier reduction
            a = _pick(draw, free)
            lo = next(lo for n, lo, _ in ctx.raxes if n == a)
        else:
            a, lo = _new_raxis(draw, ctx, beside=axes)
        axes.append(a)
        los.append(lo)
    ctx.bound.extend(axes)
    ctx.no_self += op != "sum"
    try:
        where = gen_cond(draw, ctx, 1) if draw(st.booleans()) else None
        if where is not None and op != "sum":
            # max/min over an empty set is -+inf: keep the first point of the box
            first = ("cmp", "==", ("ax", axes[0]), ("c", los[0]))
            for a, lo in zip(axes[1:], los[1:]):
                first = ("and", first, ("cmp", "==", ("ax", a), ("c", lo)))
            where = ("or", where, first)
        body = gen_expr(draw, ctx, depth - 1)
    finally:
        del ctx.bound[-len(axes):]
        ctx.no_self -= op != "sum"
    return ("reduce", op, tuple(axes), where, body)


def gen_contraction(draw, ctx: _Ctx, depth: int):
    """Big profile: a sum over a new axis ``k`` running over a dimension of a tensor ``A``
    of a product of ``A`` read with ``k`` there and a read (of ``A`` or another tensor)
    with ``k`` where it has a dimension that long, the other indices along whole axes
    where they fit (a matrix product, a batched dot, a weighted sum: what the code
    generator tiles into rows, jams and register tiles), maybe masked, under an
    epilogue; a plain reduction where no dimension fits the work budget."""
    box = _box(ctx)
    floats = sorted(n for n, t in ctx.tensors.items() if t.kind == "float")
    dims = [(n, j) for n in floats for j, d in enumerate(ctx.tensors[n].shape)
            if d != SYM and 1 < d <= WORK // box]
    if not dims:
        return gen_reduce(draw, ctx, depth)
    a, pa = _pick(draw, dims)
    size = ctx.tensors[a].shape[pa]
    own = [x for x in ctx.own if ctx.ranges[x][1] == ctx.ranges[x][3] == 0]
    conv = own and box * 5 <= WORK and draw(st.integers(0, 2)) == 0
    if conv:
        # a convolution: A read at s*i + k - P (strided, padded: guarded or clamped),
        # over a few taps k (the shapes of padded copies, residue splits and tap sums)
        size = draw(st.integers(2, 5))
    k, _ = _new_raxis(draw, ctx, size)
    ctx.bound.append(k)
    ctx.align += 1
    try:
        if conv:
            s, pad = _pick(draw, [1, 1, 2]), draw(st.integers(0, 2))
            at = ("add", ("mul", s, ("ax", _pick(draw, own))) if s > 1 else ("ax", _pick(draw, own)),
                  ("add", ("ax", k), ("c", -pad)))
            guards = []
            idx = tuple(_make_valid(draw, ctx, at, d, guards) if j == pa else
                        _aligned(draw, ctx, d) or _make_valid(draw, ctx, gen_index(draw, ctx), d,
                                                              guards)
                        for j, d in enumerate(ctx.tensors[a].shape))
            left = ("read", a, idx, tuple(guards))
        else:
            left = _read_with(draw, ctx, a, {pa: k})
        other = [(n, j) for n in floats for j, d in enumerate(ctx.tensors[n].shape) if d == size]
        if other and draw(st.integers(0, 3)):
            b, pb = _pick(draw, other)
            right = _read_with(draw, ctx, b, {pb: k})
        else:
            right = gen_read(draw, ctx)
        where = gen_cond(draw, ctx, 0) if draw(st.integers(0, 3)) == 0 else None
    finally:
        ctx.align -= 1
        ctx.bound.pop()
    red = ("reduce", "sum", (k,), where, ("bin", "mul", left, right))
    epilogue = _pick(draw, ["none", "un", "bias"])
    if epilogue == "un":
        return ("un", _pick(draw, ["tanh", "sigmoid", "half", "exp"]), red)
    if epilogue == "bias":
        return ("bin", "add", red, gen_leaf(draw, ctx))
    return red


def gen_conv(draw, big: bool, k: int):
    """Inputs ``Xc (N, C, L)``, ``Wc (F, C, K)`` and a 1-D convolution of them written as
    a user writes one (NCW, stride ``s``, ``P`` zeros each side, the domain saying where
    the read is inside ``Xc``) as definition ``T{k}``: the shapes zero-padded copies
    (``codegen.padcopy``: the forward and its input gradient), residue splits (stride 2)
    and tap sums take, which a read made valid by a clamp or a select never does. Rows
    are at least :data:`CONV_ROW` long (shorter ones are not padded: no vector to fill).
    One in four is followed by a max or a min of it over the filters (``T{k+1} (N, out)``):
    the convolution is then a compared sum (the tie test recomputes it: it must add in
    written order) that residue splits and padded copies would rewrite.

    >>> from hypothesis import find
    >>> convs = st.composite(lambda draw: gen_conv(draw, False, 0))()
    >>> ins, (d,) = find(convs, lambda r: r[1][0].raxes[1][2] == 3 and r[1][0].body[3] is not None)
    >>> print(to_source(Program("float64", None, ins, (d,))))  # doctest: +NORMALIZE_WHITESPACE
    Xc = te.placeholder((1, 1, 8), dtype="float64", name="Xc")
    Wc = te.placeholder((1, 1, 3), dtype="float64", name="Wc")
    k0 = te.reduce_axis((0, 1), name="k0")
    k1 = te.reduce_axis((0, 3), name="k1")
    T0 = te.compute((1, 1, 8), lambda i0, i1, i2: te.sum((Xc[i0, k0, i2 + k1 + -1]) *
        (Wc[i1, k0, k1]), axis=[k0, k1], where=(i2 + k1 + -1 >= 0) & (i2 + k1 + -1 < 8)),
        name="T0", dtype="float64")
    >>> ins, defs = find(convs, lambda r: len(r[1]) == 2 and r[1][1].body[1] == "max")
    >>> print(to_source(Program("float64", None, ins, defs)).splitlines()[-2:])  # doctest: +NORMALIZE_WHITESPACE
    ['k2 = te.reduce_axis((0, 1), name="k2")',
     'T1 = te.compute((1, 8), lambda i0, i1: te.max(T0[i0, k2, i1], axis=k2), name="T1", dtype="float64")']
    """
    size = (lambda cap: _draw_size(draw, cap, ())) if big else (lambda cap: draw(st.integers(1, 4)))
    n, c, f = size(4), size(8 if big else 4), size(8 if big else 4)
    if not big:  # a few channels: central differences at every element of Xc
        n, c = min(n, 2), min(c, 3)
    K = _pick(draw, [3, 2, 5, 4, 1])
    s = _pick(draw, [1, 1, 2])
    P = _pick(draw, list(range(1, K)) + [0])  # mostly padded (unpadded: nothing to copy)
    L = max(K, CONV_ROW, size(70) if big else CONV_ROW + draw(st.integers(0, 4)))
    while L > max(K, CONV_ROW) and n * f * c * K * ((L + 2 * P - K) // s + 1) > WORK:
        L = max(K, CONV_ROW, L // 2)   # the sum's box within WORK
    out = (L + 2 * P - K) // s + 1
    at = ("add", ("add", ("mul", s, ("ax", "i2")) if s > 1 else ("ax", "i2"), ("ax", "k1")),
          ("c", -P))
    inside = ("and", ("cmp", ">=", at, ("c", 0)), ("cmp", "<", at, ("c", L)))
    body = ("reduce", "sum", ("k0", "k1"), inside if P else None,
            ("bin", "mul", ("read", "Xc", (("ax", "i0"), ("ax", "k0"), at), ()),
             ("read", "Wc", (("ax", "i1"), ("ax", "k0"), ("ax", "k1")), ())))
    ins = (Input("Xc", (n, c, L), "float", 0), Input("Wc", (f, c, K), "float", 0))
    conv = Def(f"T{k}", (n, f, out), ("i0", "i1", "i2"), (("k0", 0, c), ("k1", 0, K)), body,
               None)
    if draw(st.integers(0, 3)) < 3:
        return ins, (conv,)
    over = ("reduce", _pick(draw, ["max", "min"]), ("k2",), None,
            ("read", conv.name, (("ax", "i0"), ("ax", "k2"), ("ax", "i1")), ()))
    return ins, (conv, Def(f"T{k + 1}", (n, out), ("i0", "i1"), (("k2", 0, f),), over, None))


#: a generated convolution's rows are at least this long: a zero-padded copy is made for
#: rows of a vector or more (``codegen.padcopy``; 8 float64 lanes on AVX-512)
CONV_ROW = 8


def gen_matmul(draw, big: bool, k: int):
    """Inputs ``Am (M, R)``, ``Bm (R, Q)`` and their product as definition ``T{k}``, with
    ``M`` and ``R`` at least :data:`MIN_ROWS`: the gradient ``dAm = H Bm^T`` is then a
    dot-product-shaped sum with rows enough for a transposed copy of ``Bm``
    (``codegen.layout``), narrow ``Q`` rows take row-padded copies (``codegen.copies``).

    >>> from hypothesis import find
    >>> ins, defs = find(st.composite(lambda draw: gen_matmul(draw, False, 1))(), lambda r: True)
    >>> print(to_source(Program("float64", None, ins, defs)))  # doctest: +NORMALIZE_WHITESPACE
    Am = te.placeholder((8, 8), dtype="float64", name="Am")
    Bm = te.placeholder((8, 2), dtype="float64", name="Bm")
    k0 = te.reduce_axis((0, 8), name="k0")
    T1 = te.compute((8, 2), lambda i0, i1: te.sum((Am[i0, k0]) * (Bm[k0, i1]), axis=k0),
        name="T1", dtype="float64")
    """
    if big:  # (m * r * q, the sum's box, within WORK)
        m, r = (max(MIN_ROWS, _draw_size(draw, 64)) for _ in range(2))
        q = max(2, _draw_size(draw, min(POINTS // max(m, r), WORK // (m * r))))
    else:
        m, r = (MIN_ROWS + draw(st.integers(0, 4)) for _ in range(2))
        q = draw(st.integers(2, 4))
    # (Q >= 2: the gradient of a matrix-vector product sums one term, a plain product)
    body = ("reduce", "sum", ("k0",), None,
            ("bin", "mul", ("read", "Am", (("ax", "i0"), ("ax", "k0")), ()),
             ("read", "Bm", (("ax", "k0"), ("ax", "i1")), ())))
    return ((Input("Am", (m, r), "float", 0), Input("Bm", (r, q), "float", 0)),
            (Def(f"T{k}", (m, q), ("i0", "i1"), (("k0", 0, r),), body, None),))


#: a generated product's rows and length: a transposed copy needs a sum reading each
#: element of it 8 times (``codegen.layout.MIN_ROWS``) and rows of a vector
MIN_ROWS = 8


def gen_wide(draw, dtype: str, k: int):
    """Input ``Xw (R, W)`` and a cheap elementwise map of it as definition ``T{k}``, ``W``
    at least :data:`WIDE_ROW` elements: the gradient ``dXw`` is written once along long
    contiguous rows by a cheap loop, what streaming stores take
    (``codegen.streaming``, under the harness's target of small caches).

    >>> from hypothesis import find
    >>> ins, defs = find(st.composite(lambda draw: gen_wide(draw, "float64", 0))(), lambda r: True)
    >>> print(to_source(Program("float64", None, ins, defs)))  # doctest: +NORMALIZE_WHITESPACE
    Xw = te.placeholder((1, 64), dtype="float64", name="Xw")
    T0 = te.compute((1, 64), lambda i0, i1: (Xw[i0, i1]) * (Xw[i0, i1]), name="T0",
        dtype="float64")
    """
    w = WIDE_ROW * (2 if dtype == "float32" else 1) + draw(st.integers(0, 8))
    r = draw(st.integers(1, 2))
    x = ("read", "Xw", (("ax", "i0"), ("ax", "i1")), ())
    body = _pick(draw, [("bin", "mul", x, x), ("bin", "add", x, ("const", 0.5)),
                        ("un", "half", x), ("bin", "max", x, ("const", 0.25))])
    return (Input("Xw", (r, w), "float", 0),), (Def(f"T{k}", (r, w), ("i0", "i1"), (), body, None),)


#: a wide map's rows (float64; float32 twice as many): 8 vectors of 8 float64 lanes
#: (AVX-512), the rows streaming stores need (``codegen.streaming.MIN_VECTORS``)
WIDE_ROW = 64


def _read_with(draw, ctx: _Ctx, t: str, fixed: dict):
    """A read of ``t`` with the axes ``fixed`` (position -> axis name) at those
    positions, the others as :func:`gen_read` draws them."""
    guards = []
    idx = tuple(("ax", fixed[j]) if j in fixed else
                _aligned(draw, ctx, d) or _make_valid(draw, ctx, gen_index(draw, ctx), d, guards)
                for j, d in enumerate(ctx.tensors[t].shape))
    return ("read", t, idx, tuple(guards))


#: a deep chain's steps: none grows a value's magnitude (30 steps stay in range)
_DEEP_UNARY = {"tanh": "te.tanh({})", "sin": "te.sin({})", "sigmoid": "te.sigmoid({})",
               "half": "0.5 * ({})"}
_DEEP_BINARY = {"avg": "0.5 * ({} + {})", "tmul": "te.tanh({}) * ({})", "max": "te.maximum({}, {})",
                "min": "te.minimum({}, {})"}
#: the most steps of a deep chain (30 asked for). A gradient's terms share one object per
#: distinct node and the C one local per value guarded terms share, but differentiate
#: itself still stalls past ~20 steps of selects and max/min over a reduction
#: (passes.differentiate's _merge_sums over the ties' conditions: minutes; reproducer
#: in the issue note of 2026-11-28): not fixed yet
DEEP_STEPS = 12


def gen_deep(draw, ctx: _Ctx, depth: int):
    """A chain of up to DEEP_STEPS values, each of one to three of the last few (so each
    value is used several times: a DAG whose tree is exponential); shrinks to 1 step."""
    start = gen_expr(draw, ctx, depth - 1)
    steps = []
    for m in range(1, draw(st.integers(1, DEEP_STEPS)) + 1):
        recent = st.integers(max(0, m - 3), m - 1)
        kind = _pick(draw, ["un", "bin", "sel"])
        if kind == "un":
            steps.append(("un", _pick(draw, list(_DEEP_UNARY)), draw(recent)))
        elif kind == "bin":
            steps.append(("bin", _pick(draw, list(_DEEP_BINARY)), draw(recent), draw(recent)))
        else:
            steps.append(("sel", draw(recent), draw(recent), draw(recent)))
    ctx.next_deep += 1
    return ("deep", ctx.next_deep, start, tuple(steps))


def gen_expr(draw, ctx: _Ctx, depth: int):
    """A float expression; shrinks towards a single read."""
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        return gen_leaf(draw, ctx)
    if draw(st.integers(0, 15)) == 0:  # (rare: a deep chain costs a whole batch's time)
        return gen_deep(draw, ctx, depth)
    kind = _pick(draw, ["un", "bin", "select", "reduce"] + (["contract"] * 2 if ctx.sizes == "big"
                                                            else []))
    if kind == "contract":
        return gen_contraction(draw, ctx, depth)
    if kind == "un":
        return ("un", _pick(draw, list(_UNARY)), gen_expr(draw, ctx, depth - 1))
    if kind == "bin":
        return ("bin", _pick(draw, list(_BINARY)), gen_expr(draw, ctx, depth - 1),
                gen_expr(draw, ctx, depth - 1))
    if kind == "select":
        return ("select", gen_cond(draw, ctx, 1), gen_expr(draw, ctx, depth - 1),
                gen_expr(draw, ctx, depth - 1))
    return gen_reduce(draw, ctx, depth)


def _read_by(defs, d) -> set:
    """Names of the definitions ``d`` reads, directly or through others.

    >>> r = lambda t: ("read", t, (), ())
    >>> a, b, c = (Def(n, (), (), (), body, None) for n, body in
    ...            (("T0", ("const", 1.0)), ("T1", r("T0")), ("T2", r("X0"))))
    >>> sorted(_read_by([a, b, c], b)), sorted(_read_by([a, b, c], c))
    (['T0'], [])
    """
    out, todo = set(), [d]
    while todo:
        e = todo.pop()
        for x in defs:
            if x.name not in out and (_reads_tensor(e.body, x.name) or
                                      (e.chain and x is defs[defs.index(e) - 1])):
                out.add(x.name)
                todo.append(x)
    return out


def compared_rows(draw, h: Def, k: int, name: str):
    """A max or a min over sums of the rows of recurrence ``h`` (along its last
    dimension; of its steps when it has one), definition ``name`` of ``h``'s shape
    without the last dimension: ``(M, Wm)``, ``M`` with reduce axes ``k{k}``, ``k{k+1}``,
    ``Wm (K, J)`` a new input (``J`` in 1..3). A compared sum: its gradient's tie test
    recomputes it, which must add in the order the value did whether the gradient is
    checkpointed or kept whole (``codegen.recurrence_steps``: step-rows a step at a
    time; across the steps, the full tape).

    >>> h = Def("T0", (6, 3), ("i0", "i1"), (), ("const", 1.0), 0, checkpoints=2)
    >>> from hypothesis import find
    >>> M, w = find(st.composite(lambda draw: compared_rows(draw, h, 4, "T1"))(),
    ...             lambda r: r[0].body[1] == "max")
    >>> M.shape, expr_src(M.body), w.shape
    ((6,), 'te.max(te.sum((T0[i0, k4]) * (Wm[k4, k5]), axis=k4), axis=k5)', (3, 1))
    """
    K, J = h.shape[-1], draw(st.integers(1, 3))
    row, col = f"k{k}", f"k{k + 1}"
    idx = tuple(("ax", a) for a in h.axes[:-1]) + (("ax", row),)
    prod = ("bin", "mul", ("read", h.name, idx, ()), ("read", "Wm", (("ax", row), ("ax", col)), ()))
    term = ("reduce", _pick(draw, ["max", "min"]), (col,), None,
            ("reduce", "sum", (row,), None, prod))
    return (Def(name, h.shape[:-1], h.axes[:-1], ((row, 0, K), (col, 0, J)), term, None),
            Input("Wm", (K, J), "float", 0))


def lockstep(h: Def, name: str):
    """A second recurrence in lockstep with checkpointed recurrence ``h`` (along its
    first dimension): ``g[t] = tanh(h[t-1] + Xl[t] + 0.7 g[t-1])`` (``Xl`` a new input of
    ``h``'s shape), checkpointed as ``h`` is, and a term ``exp(h[1])`` for the output to
    read: the adjoint of an early row through a transcendental, stored once by hoist,
    must be computed before the reversal's turns (``codegen.checkpoint_rows``: it ran
    after them, and the reverse steps read memory never written). Returns ``(g, Xl,
    term)``, ``term`` an expression over ``h``'s axes but the first.

    >>> h = Def("T0", (6, 3), ("i0", "i1"), (), ("const", 1.0), 0, checkpoints=2)
    >>> g, x, term = lockstep(h, "T1")
    >>> g.checkpoints, x.shape, expr_src(term)
    (2, (6, 3), 'te.exp(te.tanh(T0[1, i1]))')
    """
    t, rest = h.axes[0], tuple(("ax", a) for a in h.axes[1:])
    start = (("cmp", ">=", ("ax", t), ("c", 1)),)
    back = (("sub", ("ax", t), ("c", 1)),) + rest
    here = (("ax", t),) + rest
    body = ("un", "tanh", ("bin", "add", ("bin", "add", ("read", h.name, back, start),
                                          ("read", "Xl", here, ())),
                           ("bin", "mul", ("const", 0.7), ("self", "S", back, start))))
    term = ("un", "exp", ("read", h.name, (("c", 1),) + rest, ()))
    return (Def(name, h.shape, h.axes, (), body, 0, 0, h.checkpoints),
            Input("Xl", h.shape, "float", 0), term)


def _reads_tensor(e, name: str) -> bool:
    """Does the expression tree ``e`` read tensor ``name`` (anywhere, indices too)?

    >>> _reads_tensor(("un", "tanh", ("read", "T0", (("ax", "i0"),), ())), "T0")
    True
    """
    if isinstance(e, tuple):
        if len(e) >= 2 and e[0] in ("read", "data") and e[1] == name:
            return True
        return any(_reads_tensor(x, name) for x in e)
    return False


#: the size profiles: "small" draws every axis from 1..4 (1..3 in rank 3), "big" from
#: ranges that cross the code generator's thresholds (:func:`_draw_size`) within budgets
SIZES = ("small", "big")
#: big profile: points of one tensor, and of one reduction nest (its box)
POINTS, WORK = 4096, 1 << 16
#: big profile: sizes just below, at and above multiples of the vector widths (8, 16
#: lanes) and of the register tiles' rows and columns
EDGES = (7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 47, 48, 49, 63, 64, 65)


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _extent(r, n_val) -> int:
    """The number of values of an axis of interval ``r`` (affine in n) when n = ``n_val``."""
    return max(1, r[2] - r[0] + (r[3] - r[1]) * (n_val or 0) + 1)


def _draw_size(draw, cap: int, pool=()) -> int:
    """A size of the big profile, at most ``cap``: small (1..4), at a vector-width edge
    (:data:`EDGES`), anywhere in 5..70 or one of ``pool`` (sizes the program has: reads
    along axes of the same size need no clamp, so contractions and plain gathers, the
    shapes the code generator tiles, are drawn too); shrinks towards 1."""
    kind = _pick(draw, ["small", "edge", "range"] + (["same"] * 3 if pool else []))
    if kind == "same":
        size = _pick(draw, sorted(set(pool)))
    elif kind == "small":
        size = draw(st.integers(1, 4))
    elif kind == "edge":
        size = _pick(draw, EDGES)
    else:
        size = draw(st.integers(5, 70))
    return max(1, min(size, cap))


def _fit(dims, n_val, points: int = POINTS) -> tuple:
    """``dims`` with its largest static sizes cut until the tensor has at most ``points``
    points (n counted as ``n_val``).

    >>> _fit((64, 64, 8), None), _fit((64, "n"), 128)
    ((8, 64, 8), (32, 'n'))
    """
    dims = list(dims)
    while True:
        total = _prod(n_val if d == SYM else d for d in dims)
        static = [j for j, d in enumerate(dims) if d != SYM and d > 1]
        if total <= points or not static:
            return tuple(dims)
        j = max(static, key=lambda j: dims[j])
        dims[j] = max(1, dims[j] * points // total)


def _dims(draw, has_n, rank, size_max=4, sizes="small", n_val=None, pool=None):
    """A shape of ``rank`` sizes (one may be n); big: within :data:`POINTS`, its sizes
    added to ``pool``."""
    if sizes == "big":
        # one tensor within POINTS: a long axis leaves the others short
        dims = []
        for _ in range(rank):
            dims.append(_draw_size(draw, max(1, POINTS // _prod(dims)), pool))
        pool.extend(dims)
    else:
        dims = [draw(st.integers(1, size_max)) for _ in range(rank)]
    if has_n and rank and draw(st.booleans()):
        dims[draw(st.integers(0, rank - 1))] = SYM
    return _fit(dims, n_val) if sizes == "big" else tuple(dims)


#: the first definitions a program may start with, as users write them: a padded
#: convolution (:func:`gen_conv`), a matrix product (:func:`gen_matmul`), a wide map
#: (:func:`gen_wide`)
HEADS = ("conv", "matmul", "wide")


@st.composite
def programs(draw, dtype=None, max_defs: int = 3, max_depth: int = 3, symbolic: bool = True,
             sizes: str = "small", recurrences: bool = True, head: Optional[str] = None):
    """A random valid program (see the module docstring); ``sizes`` is its size profile
    (:data:`SIZES`: "big" reaches the code generator's tiles, vector loops and
    remainders, thread thresholds and strided-gather splits, its tensors and reduction
    boxes within :data:`POINTS` and :data:`WORK`); ``recurrences=False`` draws none
    (a build with a recurrence leaves its sums without copies: ``codegen.layout``,
    ``codegen.padcopy``); ``head`` (one of :data:`HEADS`) is its first definition,
    drawn when None.

    >>> from hypothesis import given, settings
    >>> @settings(max_examples=3, derandomize=True, database=None, deadline=None)
    ... @given(programs(dtype="float64"))
    ... def t(p):
    ...     assert p.dtype == "float64" and build(p)[p.output.name].dtype == "float64"
    >>> t()
    """
    if sizes not in SIZES:
        raise ValueError(f"programs(sizes={sizes!r}): the size profiles are {', '.join(SIZES)}")
    big = sizes == "big"
    pool = []
    dtype = dtype or _pick(draw, ["float64", "float32"])
    has_n = symbolic and draw(st.integers(0, 3)) == 0
    n_val = (_draw_size(draw, 70) if big else draw(st.integers(1, 4))) if has_n else None
    inputs = []
    for k in range(draw(st.integers(1, 3))):
        rank = draw(st.integers(0, 3))
        shape = _dims(draw, has_n, rank, 4 if rank < 3 else 3, sizes, n_val, pool)
        if has_n and k == 0 and SYM not in shape:
            shape = shape + (SYM,)  # the size is bound from an input's shape
            shape = _fit(shape, n_val) if big else shape
        inputs.append(Input(f"X{k}", shape, "float", 0))
    if draw(st.integers(0, 2)) == 0:
        if big:
            inputs.append(Input("I0", (_draw_size(draw, 70, pool),), "index",
                                _draw_size(draw, 70, pool)))
        else:
            inputs.append(Input("I0", (draw(st.integers(1, 4)),), "index",
                                draw(st.integers(1, 5))))
    defs = []
    # a third of the programs start with a definition written as users write the shapes
    # the code generator rewrites (its inputs are the program's): a convolution, a
    # matrix product, a wide map
    head = head or draw(st.sampled_from(["none", "none", *HEADS]))
    if head != "none":
        head_inputs, first = (gen_conv(draw, big, 0) if head == "conv" else
                              gen_matmul(draw, big, 0) if head == "matmul" else
                              gen_wide(draw, dtype, 0))
        inputs += list(head_inputs)
        defs += list(first)
    tensors = {i.name: i for i in inputs}
    tensors.update({d.name: Input(d.name, d.shape, "float", 0) for d in defs})
    ctx = _Ctx(dtype, has_n, tensors, max_depth, sizes, n_val)
    ctx.pool = pool
    ctx.next_axis = sum(len(d.raxes) for d in defs)
    for k in range(len(defs), len(defs) + draw(st.integers(1, max_defs))):
        rank = draw(st.integers(0, 3))
        shape = _dims(draw, has_n, rank, 4 if rank < 3 else 3, sizes, n_val, pool)
        axes = tuple(f"i{j}" for j in range(rank))
        ctx.own, ctx.raxes, ctx.bound = axes, [], []
        ctx.points = _prod(n_val if d == SYM else d for d in shape)
        ctx.ranges = {a: (0, 0, -1, 1) if d == SYM else (0, 0, d - 1, 0) for a, d in zip(axes, shape)}
        carry = None
        chain = 0
        checkpoints = None
        if defs and draw(st.integers(0, 99)) == 37:
            # a long chain of computes (deep graphs: recursion in passes), about 1 in 100
            # (hypothesis draws the ends of a range far more often than 1 in 100)
            shape = defs[-1].shape
            axes = tuple(f"i{j}" for j in range(len(shape)))
            ctx.points = _prod(n_val if d == SYM else d for d in shape)
            ctx.own = axes
            ctx.ranges = {a: (0, 0, -1, 1) if d == SYM else (0, 0, d - 1, 0)
                          for a, d in zip(axes, shape)}
            # (big: at most 40 links; at these sizes a link costs ~0.4 s to build, and
            # the depth of a chain is what the small profile tests)
            chain = draw(st.integers(1, 40 if big else 400))
            prev = ("read", "@P", tuple(("ax", a) for a in axes), ())
            body = ("bin", "add", ("bin", "mul", ("const", 0.9), ("un", "tanh", prev)),
                    ("bin", "mul", ("const", 0.1), gen_expr(draw, ctx, 1)))
        elif recurrences and rank and draw(st.integers(0, 3)) == 0:
            static = [j for j, d in enumerate(shape) if d != SYM] or list(range(rank))
            if draw(st.booleans()):  # half of them: their gradients may be checkpointed
                checkpoints = draw(st.integers(1, 4))
            # (checkpoints apply to a carry along the first axis, of a few steps)
            carry = 0 if checkpoints and 0 in static else _pick(draw, static)
            if checkpoints and shape[carry] != SYM and shape[carry] < 3:
                shape = shape[:carry] + (shape[carry] + 3,) + shape[carry + 1:]
                ctx.ranges[axes[carry]] = (0, 0, shape[carry] - 1, 0)
            ctx.self_def = (shape, carry)
            body = gen_expr(draw, ctx, max_depth - 1)
            if checkpoints:  # reading an earlier tensor at each step: it has a gradient
                body = ("bin", "add", gen_read(draw, ctx), body)
            for order in range(1, draw(st.integers(1, 3)) + 1):
                term = gen_self(draw, ctx, order)
                wrap = _pick(draw, ["id", "tanh", "reduce"])
                if wrap == "tanh":
                    term = ("un", "tanh", term)
                elif wrap == "reduce" and rank > 1:
                    # a reduction over the previous step's other dimension
                    other = next(j for j in range(rank) if j != carry)
                    if shape[other] != SYM:
                        name = f"k{ctx.next_axis}"
                        ctx.next_axis += 1
                        ctx.raxes.append((name, 0, shape[other]))
                        ctx.ranges[name] = (0, 0, shape[other] - 1, 0)
                        idx = list(term[2])
                        idx[other] = ("ax", name)
                        total = ("reduce", "sum", (name,), None,
                                 ("self", "S", tuple(idx), term[3]))
                        if shape[other] > 4:
                            # a mean, not a sum: fed back through a sum of many terms a
                            # recurrence multiplies its rounding errors by about n/4 a
                            # step (32 terms: 8x), and after 30 steps neither backend's
                            # value has a digit left to compare
                            total = ("bin", "mul", ("const", 1.0 / shape[other]), total)
                        term = ("un", _pick(draw, ["tanh", "sigmoid", "half"]), total)
                body = ("bin", "add", body, ("bin", "mul", ("const", 0.5), term))
            body = ("un", _pick(draw, ["tanh", "half", "sin"]), body)
        else:
            ctx.self_def = None
            body = gen_expr(draw, ctx, max_depth)
        ctx.self_def = None
        name = f"T{k}"
        defs.append(Def(name, shape, axes, tuple(ctx.raxes), body, carry, chain, checkpoints))
        tensors[name] = Input(name, shape, "float", 0)
    ck = [d for d in defs if d.checkpoints]
    early = None
    if ck and ck[-1].carry == 0 and ck[-1].shape[0] != SYM and draw(st.integers(0, 2)) == 0:
        # (a third of them: two checkpointed recurrences in lockstep, see lockstep)
        g, xl, early = lockstep(ck[-1], f"T{len(defs)}")
        inputs.append(xl)
        defs.append(g)
        ck.append(g)
        if draw(st.booleans()):
            # the early row's term a tensor of its own, after the second recurrence (as
            # the hunt that found the checkpoint bug wrote it: the output reads it at
            # each step; inline, hoist made the same tensor only some of the time)
            rest = ck[-1].axes[1:]
            defs.append(Def(f"T{len(defs)}", ck[-1].shape[1:], rest, (), early, None))
            early = ("read", defs[-1].name, tuple(("ax", a) for a in rest), ())
    compared = bool(ck) and draw(st.booleans())
    if ck and (early is not None or compared or ck[-1] is defs[-1]
               or not _reads_tensor(defs[-1].body, ck[-1].name)):
        # the output (kept whole: never checkpointed) reads the checkpointed recurrence at
        # every step, with what it read (its gradient has a head over every step)
        read = ("read", ck[-1].name, tuple(("ax", a) for a in ck[-1].axes), ())
        body = ("un", "half", read)
        if ck[-1] is not defs[-1] and defs[-1].chain == 0 and defs[-1].shape == ck[-1].shape:
            body = ("bin", "add", body, ("read", defs[-1].name, read[2], ()))
        if compared:  # (a tensor of its own: each box within WORK)
            M, w = compared_rows(draw, ck[-1], ctx.next_axis, f"T{len(defs)}")
            ctx.next_axis += 2
            inputs.append(w)
            defs.append(M)
            term = ("read", M.name, tuple(("ax", a) for a in M.axes), ())
            body = ("bin", "add", body, ("bin", "mul", ("const", 0.5), term))
        if early is not None:  # (over the same axes but the first: read at each step)
            body = ("bin", "add", body, early)
        defs.append(Def(f"T{len(defs)}", ck[-1].shape, ck[-1].axes, (), body, None))
    if head != "none" and defs[0] is not defs[-1] and defs[0].name not in _read_by(defs, defs[-1]):
        # a head definition nothing reads would not be built: the output adds it to the
        # sum of the last definition (a scalar of its own: each box within WORK)
        head, last = defs[0], defs[-1]
        raxes = tuple((f"k{ctx.next_axis + j}", 0, d) for j, d in enumerate(last.shape))
        ctx.next_axis += len(raxes)
        total = ("read", last.name, tuple(("ax", a) for a, _, _ in raxes), ())
        if raxes:
            defs.append(Def(f"T{len(defs)}", (), (), raxes,
                            ("reduce", "sum", tuple(a for a, _, _ in raxes), None, total), None))
            total = ("read", defs[-1].name, (), ())
        own = tuple(("ax", a) for a in head.axes)
        defs.append(Def(f"T{len(defs)}", head.shape, head.axes, (),
                        ("bin", "add", ("read", head.name, own, ()), total), None))
    second = dtype == "float64" and draw(st.integers(0, 4)) == 0
    return Program(dtype, n_val, tuple(inputs), tuple(defs), second, draw(st.integers(0, 2**16)),
                   sizes)


# }}}
