"""Print a loop-AST :class:`~codegen.loopast.Kernel` as C source.

The C text implements the IR's semantics exactly: integer floor division and
modulo (``x // 0 == 0``) and max/min propagating NaN like numpy are small
inline helpers (only the ones used are printed), float-to-int casts give the
least integer for NaN and out-of-range values as numpy does on x86 (C leaves
them undefined), and 64-bit integer arithmetic never happens in C's 32-bit
``int`` by accident. User text appears only in sanitized comments.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Dict, List, Set, Tuple

import numpy as np

from . import mathlib, threads
from .loopast import (Accumulate, Assign, Block, Call, CExpr, Comment, Decl, Fail, Fence, For,
                      If, Kernel, Lit, Load, Local, Op, Region, Stmt, Store, StoreFence,
                      StreamStore, Var, flat, vector_parts)

CTYPE = {"bool": "bool", "int32": "int32_t", "int64": "int64_t", "float32": "float",
         "float64": "double"}
_SUF = {"bool": "b", "int32": "i32", "int64": "i64", "float32": "f32", "float64": "f64"}

ENTRY = "te_kernel"

# C operator precedence (higher binds tighter); atoms are 100.
_ATOM, _UNARY, _MUL, _ADD, _REL, _EQ, _AND, _OR, _COND = 100, 14, 13, 12, 10, 9, 5, 4, 3
_INFIX = {"quot": ("/", _MUL), "rem": ("%", _MUL),
          "add": ("+", _ADD), "sub": ("-", _ADD), "mul": ("*", _MUL), "div": ("/", _MUL),
          "lt": ("<", _REL), "le": ("<=", _REL), "gt": (">", _REL), "ge": (">=", _REL),
          "eq": ("==", _EQ), "ne": ("!=", _EQ), "and": ("&&", _AND), "or": ("||", _OR)}
_RED = {"sum": "+", "max": "max", "min": "min"}
_MATH = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "sin": "sin", "cos": "cos",
         "erf": "erf",  # libm, correctly rounded or within an ulp; scalar in every loop
         "abs": "fabs", "floor": "floor", "ceil": "ceil", "pow": "pow"}


def sanitize(text: str, limit: int = 400) -> str:
    """``text`` made safe inside a C block comment: printable ASCII, no comment delimiters.

    >>> sanitize('a; */ system("x"); /* \\n b')
    'a; * / system("x"); / * b'
    """
    s = "".join(ch if 32 <= ord(ch) < 127 else " " for ch in text)
    s = s.replace("*/", "* /").replace("/*", "/ *")
    s = " ".join(s.split())
    return s if len(s) <= limit else s[:limit - 3] + "..."


# {{{ helpers (printed only when used)

def _print_order(names) -> List[str]:
    """``names`` sorted, each after the math functions it calls (``mathlib.DEPENDS``)."""
    out: List[str] = []

    def visit(n: str) -> None:
        if n not in out:
            for d in mathlib.DEPENDS.get(n, ()):
                visit(d)
            out.append(n)
    for n in sorted(names):
        visit(n)
    return out


def _helper_src(name: str) -> str:
    if name in mathlib.FUNCTIONS:
        return mathlib.source(name)
    if name == "te_align_gap":
        return ("static inline int64_t te_align_gap(const void *p, int64_t elem, int64_t bytes,\n"
                "                                   int64_t n)\n{\n"
                "  uintptr_t a = (uintptr_t)p;\n"
                "  if (a % (uintptr_t)elem != 0) return n;  /* never aligned: no vector stores */\n"
                "  int64_t k = (int64_t)((0 - a) & (uintptr_t)(bytes - 1)) / elem;\n"
                "  return k < n ? k : n;\n}\n")
    if name == "te_store_fence":
        return ("static inline void te_store_fence(void)\n{\n"
                "#if defined(__x86_64__) || defined(__i386__)\n"
                "  __builtin_ia32_sfence();\n"
                "#else\n"
                "  __atomic_thread_fence(__ATOMIC_SEQ_CST);\n"
                "#endif\n}\n")
    if name == "te_fail":
        return ("static void te_fail(int64_t *err, int64_t code, int64_t site, int64_t dim,\n"
                "                    int64_t index, int64_t size)\n{\n"
                "#pragma omp critical(te_fail)\n"
                "  {\n"
                "    if (err[0] == 0) {\n"
                "      err[1] = site; err[2] = dim; err[3] = index; err[4] = size; err[0] = code;\n"
                "    }\n"
                "  }\n}\n")
    kind, suf = name[3:].rsplit("_", 1)
    if kind in _VECTOR_HELPERS:
        return _vector_helper(kind, suf)
    dt = {v: k for k, v in _SUF.items()}.get(suf, "")
    T = CTYPE.get(dt, "")
    if kind in ("floordiv", "mod") and dt.startswith("float"):
        return _float_divmod(name, kind, dt)
    if kind == "floordiv":
        return (f"static inline {T} {name}({T} a, {T} b)\n{{\n"
                f"  if (b == 0) return 0;\n"
                f"  if (b == -1) return ({T})(0 - (uint64_t)a);  /* no trap on MIN / -1 */\n"
                f"  {T} q = a / b;\n"
                f"  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;\n}}\n")
    if kind == "mod":
        return (f"static inline {T} {name}({T} a, {T} b)\n{{\n"
                f"  if (b == 0 || b == -1) return 0;\n"
                f"  {T} r = a % b;\n"
                f"  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}}\n")
    if kind == "pow":
        return (f"static inline {T} {name}({T} a, {T} b)\n{{\n"
                f"  if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);\n"
                f"  uint64_t r = 1, x = (uint64_t)a;\n"
                f"  while (b) {{ if (b & 1) r *= x; x *= x; b >>= 1; }}\n"
                f"  return ({T})r;\n}}\n")
    if kind in ("max", "min"):
        cmp = ">" if kind == "max" else "<"
        if dt.startswith("float"):
            # like np.maximum: a NaN operand wins, a tie gives a (-0.0 or 0.0 as a is).
            # Written as the machine's max (b > a ? b : a: keeps a NaN a) and one test
            # for a NaN b, it vectorizes to 3 operations where (a >= b || a != a) took
            # 4 (two compares, their or, a blend): a max over rows of 512 floats (one
            # thread, 16 MiB) 0.39 -> 0.33 ms. (Of two NaNs it gives b: the IR says
            # nothing of NaN payloads.)
            return (f"static inline {T} {name}({T} a, {T} b) "
                    f"{{ {T} m = b {cmp} a ? b : a; return b != b ? b : m; }}\n")
        return f"static inline {T} {name}({T} a, {T} b) {{ return a {cmp} b ? a : b; }}\n"
    if kind == "blend":  # c ? a : b without a branch (the bits of a or b)
        U = "uint32_t" if dt == "float32" else "uint64_t"
        return (f"static inline {T} {name}(bool c, {T} a, {T} b)\n{{\n"
                f"  {U} x, y, m = ({U})0 - ({U})c;\n"
                f"  __builtin_memcpy(&x, &a, sizeof x);\n"
                f"  __builtin_memcpy(&y, &b, sizeof y);\n"
                f"  x = (x & m) | (y & ~m);\n"
                f"  __builtin_memcpy(&a, &x, sizeof a);\n"
                f"  return a;\n}}\n")
    if kind == "abs":
        return f"static inline {T} {name}({T} a) {{ return a < 0 ? ({T})(0 - (uint64_t)a) : a; }}\n"
    if kind == "sigmoid":
        one, ex = ("1.0f", "te_expf") if dt == "float32" else ("1.0", "te_exp")
        return f"static inline {T} {name}({T} x) {{ return {one} / ({one} + {ex}(-x)); }}\n"
    if kind.startswith("to"):  # te_to<int type>_<float suffix>: float -> int like numpy on x86
        target = kind[2:]
        it = CTYPE[target]
        lo, hi = ("-2147483649.0", "2147483648.0") if target == "int32" else \
            ("-9223372036854775809.0", "9223372036854775808.0")
        least = "INT32_MIN" if target == "int32" else "INT64_MIN"
        return (f"static inline {it} {name}({T} x)\n{{\n"
                f"  return ((double)x > {lo} && (double)x < {hi}) ? ({it})x : {least};\n}}\n")
    raise KeyError(name)


def _float_divmod(name: str, kind: str, dt: str) -> str:
    """Float ``a // b`` or ``a % b`` as Python computes them (and numpy, whose
    ``npy_divmod`` the numpy backend calls): from the exact ``fmod``, so that
    ``1.0 // 0.1 == 9`` (``floor(1.0 / 0.1)`` is 10: the quotient rounds up), ``3 % inf == 3``,
    ``-3 % inf == inf``, zeros signed like ``b`` (remainder) or ``a / b`` (quotient). A zero
    ``b`` gives ``a / b`` and NaN, as numpy (Python raises)."""
    T, f = CTYPE[dt], ("f" if dt == "float32" else "")
    lines = [f"static inline {T} {name}({T} a, {T} b)", "{",
             f"  {T} mod = fmod{f}(a, b);",
             f"  {T} div = (a - mod) / b;  /* nearly an integer */",
             "  int fix = mod != 0 && ((b < 0) != (mod < 0));  /* Python's sign: b's */",
             "  mod = fix ? mod + b : mod;"]
    if kind == "mod":
        lines += [f"  return mod != 0 ? mod : copysign{f}(0, b);", "}", ""]
        return "\n".join(lines)
    lines += ["  div = fix ? div - 1 : div;",
              f"  {T} q = floor{f}(div);",
              "  q = div - q > 0.5 ? q + 1 : q;  /* snapped to the nearest integer */",
              f"  q = div != 0 ? q : copysign{f}(0, a / b);",
              "  return b != 0 ? q : a / b;", "}", ""]
    return "\n".join(lines)


#: fused multiply-add of whole vectors: (vector bytes, element type) -> (the macros that
#: say the instruction exists, intrinsic, its vector type, the compiler builtin the
#: intrinsic calls, the builtin's trailing arguments)
_VFMA = {(16, "float32"): ("defined(__FMA__)", "_mm_fmadd_ps", "__m128",
                           "__builtin_ia32_vfmaddps", ""),
         (16, "float64"): ("defined(__FMA__)", "_mm_fmadd_pd", "__m128d",
                           "__builtin_ia32_vfmaddpd", ""),
         (32, "float32"): ("defined(__FMA__) && defined(__AVX__)", "_mm256_fmadd_ps", "__m256",
                           "__builtin_ia32_vfmaddps256", ""),
         (32, "float64"): ("defined(__FMA__) && defined(__AVX__)", "_mm256_fmadd_pd", "__m256d",
                           "__builtin_ia32_vfmaddpd256", ""),
         (64, "float32"): ("defined(__AVX512F__)", "_mm512_fmadd_ps", "__m512",
                           "__builtin_ia32_vfmaddps512_mask", ", (unsigned short)-1, 4"),
         (64, "float64"): ("defined(__AVX512F__)", "_mm512_fmadd_pd", "__m512d",
                           "__builtin_ia32_vfmaddpd512_mask", ", (unsigned char)-1, 4")}
#: non-temporal stores of whole aligned vectors on x86 (GCC has no generic builtin for them;
#: clang's ``__builtin_nontemporal_store`` is tried first): (vector bytes, element type) ->
#: (the macros that say the instruction exists, the builtin ``_mm*_stream_p*`` calls)
_STREAM = {(16, "float32"): ("defined(__SSE__)", "__builtin_ia32_movntps"),
           (16, "float64"): ("defined(__SSE2__)", "__builtin_ia32_movntpd"),
           (32, "float32"): ("defined(__AVX__)", "__builtin_ia32_movntps256"),
           (32, "float64"): ("defined(__AVX__)", "__builtin_ia32_movntpd256"),
           (64, "float32"): ("defined(__AVX512F__)", "__builtin_ia32_movntps512"),
           (64, "float64"): ("defined(__AVX512F__)", "__builtin_ia32_movntpd512")}
#: defined by a kernel's prelude when the compiler has every builtin its vector fmas call
_VFMA_BUILTINS = "TE_VFMA_BUILTINS"
_VECTOR_HELPERS = ("vload", "vstore", "vstream", "splat", "vfma")


def referenced_buffers(source: str, names: Dict[str, int]) -> Set[int]:
    r"""The indices of the buffers ``names`` (C name -> index ``k`` of ``bufs[k]``) that a
    generated ``source`` reads or writes: a tensor inlined into its readers has a buffer
    it never touches, which the runtime need not allocate. A buffer is declared at most
    once (a kernel cut into parts declares in each part only the buffers it uses), so
    a name found once is its declaration alone.

    >>> sorted(referenced_buffers("  float *restrict b1 = (float *)bufs[1];  /* T */\n"
    ...                           "  float *restrict b2 = (float *)bufs[2];  /* Y */\n"
    ...                           "  b2[0] = 1.0f;", {"b1": 1, "b2": 2}))
    [2]
    """
    if not names:
        return set()
    # one pass over the source for just these names (a source can be 600 KB)
    pattern = re.compile(r"\b(?:" + "|".join(
        re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")\b")
    found = Counter(pattern.findall(source))
    return {k for name, k in names.items() if found[name] >= 2}


def _vfma_prelude(helpers) -> str:
    """What the vector fmas ``helpers`` (``te_vfma_f32x16``...) need: the builtins that
    the intrinsics of ``<immintrin.h>`` call, where the compiler has them all (GCC,
    clang), else the header. The header costs ~0.15 s of compiler time per kernel
    (the whole of x86's intrinsics, AVX-512 included, parsed for one fma): a third of
    a small kernel's compile; the builtins make the same instructions.

    >>> print(_vfma_prelude(["te_vfma_f32x8"]))
    #if defined(__x86_64__) || defined(__i386__)
    #if defined(__has_builtin)
    #if __has_builtin(__builtin_ia32_vfmaddps256)
    #define TE_VFMA_BUILTINS 1
    #endif
    #endif
    #ifndef TE_VFMA_BUILTINS
    #include <immintrin.h>
    #endif
    #endif
    """
    names = []
    for h in helpers:
        elem, lanes = _suffix_parts(h[len("te_vfma_"):])
        got = _VFMA.get((lanes * np.dtype(elem).itemsize, elem))
        if got is not None and got[3] not in names:
            names.append(got[3])
    have = " && ".join(f"__has_builtin({b})" for b in names) or "0"
    return ("#if defined(__x86_64__) || defined(__i386__)\n#if defined(__has_builtin)\n"
            f"#if {have}\n#define {_VFMA_BUILTINS} 1\n#endif\n#endif\n"
            f"#ifndef {_VFMA_BUILTINS}\n#include <immintrin.h>\n#endif\n#endif")


def _vector_type(dt: str) -> str:
    """The C name of vector type ``dt`` (``float32x8`` -> ``te_f32x8``)."""
    elem, lanes = vector_parts(dt)
    return f"te_{_SUF[elem]}x{lanes}"


def _vector_typedefs(dt: str) -> str:
    """GCC/clang vector types: ``te_f32x8`` (a register) and ``te_f32x8u`` (the same in
    memory at any element's alignment, aliasing the element type)."""
    elem, lanes = vector_parts(dt)
    T, V = CTYPE[elem], _vector_type(dt)
    size = lanes * np.dtype(elem).itemsize
    return (f"typedef {T} {V} __attribute__((vector_size({size})));\n"
            f"typedef {T} {V}u __attribute__((vector_size({size}), aligned(sizeof({T})), "
            f"may_alias));\n")


def _suffix_parts(suf: str):
    """``(element type, lanes)`` of a helper's vector suffix (``f32x8`` -> float32, 8)."""
    return {v: k for k, v in _SUF.items()}[suf.split("x")[0]], int(suf.split("x")[1])


def _vector_helper(kind: str, suf: str) -> str:
    elem, lanes = _suffix_parts(suf)
    T, V = CTYPE[elem], f"te_{suf}"
    name = f"te_{kind}_{suf}"
    if kind == "vload":
        return f"static inline {V} {name}(const {T} *p) {{ return *(const {V}u *)p; }}\n"
    if kind == "vstore":
        return f"static inline void {name}({T} *p, {V} v) {{ *({V}u *)p = v; }}\n"
    if kind == "vstream":  # p is aligned to the vector's size (codegen.streaming)
        size = lanes * np.dtype(elem).itemsize
        builtin = _STREAM.get((size, elem))
        x86 = "" if builtin is None else (
            f"#elif (defined(__x86_64__) || defined(__i386__)) && {builtin[0]} && "
            f"__has_builtin({builtin[1]})\n  {builtin[1]}(p, v);\n  return;\n")
        return (f"static inline void {name}({T} *p, {V} v)\n{{\n"
                f"#ifdef __has_builtin\n#if __has_builtin(__builtin_nontemporal_store)\n"
                f"  __builtin_nontemporal_store(v, ({V} *)p);\n  return;\n{x86}"
                f"#endif\n#endif\n  *({V} *)p = v;\n}}\n")
    if kind == "splat":  # not 0 + x: that turns -0.0 into +0.0
        return (f"static inline {V} {name}({T} x) "
                f"{{ return ({V}){{{', '.join(['x'] * lanes)}}}; }}\n")
    # vfma: a * b + c with one rounding per lane, like the scalar sums' fmaf
    size = lanes * np.dtype(elem).itemsize
    fn = _FMA[elem]
    loop = (f"  {V} r;\n  for (int l = 0; l < {lanes}; l++) r[l] = {fn}(a[l], b[l], c[l]);\n"
            f"  return r;\n")
    body = loop
    if (size, elem) in _VFMA:
        cond, intr, mt, builtin, extra = _VFMA[(size, elem)]
        body = (f"#if (defined(__x86_64__) || defined(__i386__)) && {cond}\n"
                f"#ifdef {_VFMA_BUILTINS}\n  return {builtin}(a, b, c{extra});\n#else\n"
                f"  return ({V}){intr}(({mt})a, ({mt})b, ({mt})c);\n#endif\n"
                f"#else\n{loop}#endif\n")
    return f"static inline {V} {name}({V} a, {V} b, {V} c)\n{{\n{body}}}\n"


# }}}


def _data_dependent(c: CExpr) -> bool:
    """Does the test ``c`` depend on data (a load, or a value not an index)?

    >>> _data_dependent(Op("eq", (Var("i0", "int64"), Lit(0, "int64")), "bool"))
    False
    >>> _data_dependent(Op("lt", (Load("b0", Var("i0", "int64"), "float32"),
    ...                           Lit(0.0, "float32")), "bool"))
    True
    """
    match c:
        case Load():
            return True
        case Var(_, dt):
            return not dt.startswith(("int", "uint"))
        case Op(_, args, _):
            return any(_data_dependent(a) for a in args)
    return False


class _Emitter:
    def __init__(self):
        self.helpers: Dict[str, None] = {}
        self.lines: List[str] = []
        #: local accumulator arrays (their ``+=`` of a product is a sum reduction's step)
        self.locals: set = set()
        #: some loop compares its work with the run-time threshold
        self.threaded = False
        #: loops marked simd around the statement being emitted
        self.simd_depth = 0
        #: vector types used (their typedefs precede the helpers)
        self.vectors: Dict[str, None] = {}
        #: the text of each literal, by (type, value's type, value) (``lit``)
        self.literals: Dict[tuple, Tuple[str, int, bool]] = {}

    def use(self, name: str) -> str:
        for dep in mathlib.DEPENDS.get(name, ()):
            self.use(dep)
        self.helpers.setdefault(name)
        return name

    def ctype(self, dt: str) -> str:
        """The C type of ``dt``, a scalar or a vector type (its typedef then printed)."""
        if vector_parts(dt) is None:
            return CTYPE[dt]
        self.vectors.setdefault(dt)
        return _vector_type(dt)

    def vector_call(self, kind: str, dt: str) -> str:
        """The helper ``kind`` of vector type ``dt`` (``te_vload_f32x8``), marked used."""
        return self.use(f"te_{kind}_{self.ctype(dt)[3:]}")

    # {{{ expressions: (text, precedence, is 64-bit in C)

    def lit(self, x: Lit) -> Tuple[str, int, bool]:
        v, dt = x.value, x.dtype
        # (the text of each literal once: numpy's float32 rounding is slow, and a kernel
        # repeats few literals; 0.0 and -0.0, equal keys, are not kept, nor NaN)
        key = (dt, type(v), v)
        got = self.literals.get(key) if v else None
        if got is None:
            got = self._lit(v, dt)
            if v and v == v:
                self.literals[key] = got
        return got

    @staticmethod
    def _lit(v, dt: str) -> Tuple[str, int, bool]:
        if dt == "bool":
            return ("true" if v else "false"), _ATOM, False
        if dt in ("int32", "int64"):
            v = int(v)
            if dt == "int32":  # a literal of the type holds its value modulo 2**32
                v = (v + (1 << 31)) % (1 << 32) - (1 << 31)
            if -(1 << 31) < v < (1 << 31):
                return (str(v), _ATOM if v >= 0 else _UNARY, False)
            if v == -(1 << 31):
                return "(-2147483647 - 1)", _ATOM, False
            if v == -(1 << 63):
                return "(-INT64_C(9223372036854775807) - 1)", _ATOM, True
            return (f"INT64_C({v})" if v > 0 else f"-INT64_C({-v})"), \
                (_ATOM if v > 0 else _UNARY), True
        f32 = dt == "float32"
        if f32:
            with np.errstate(over="ignore"):  # beyond float32's range rounds to inf, as in C
                v = float(np.float32(v))
        v = float(v)
        if np.isnan(v):
            return ("NAN" if f32 else "((double)NAN)"), _ATOM, False
        if np.isinf(v):
            s = "INFINITY" if f32 else "HUGE_VAL"
            return (s, _ATOM, False) if v > 0 else (f"-{s}", _UNARY, False)
        if f32:
            # The decimal of the exact float32 value: C rounds it back to that value.
            text = repr(float(np.float32(v))) + "f"
        else:
            text = repr(v)
        return text, (_UNARY if text.startswith("-") else _ATOM), False

    def ex(self, e) -> Tuple[str, int, bool]:
        # (by exact type, not a match statement: asked of every node of the kernel)
        cls = type(e)
        if cls is Op:
            return self.op(e.op, e.args, e.dtype)
        if cls is Var:
            return e.name, _ATOM, e.dtype == "int64"
        if cls is Load:
            dt = e.dtype
            if vector_parts(dt) is not None:
                return (f"{self.vector_call('vload', dt)}(&{e.buf}[{self.text(e.offset)}])",
                        _ATOM, False)
            return f"{e.buf}[{self.text(e.offset)}]", _ATOM, dt == "int64"
        if cls is Lit:
            return self.lit(e)
        raise TypeError(f"not a loop-AST expression: {e!r}")

    def text(self, e, prec: int = 0) -> str:
        s, p, _ = self.ex(e)
        return f"({s})" if p < prec else s

    def call(self, fn: str, args, wide: bool) -> Tuple[str, int, bool]:
        return f"{fn}({', '.join(self.text(a) for a in args)})", _ATOM, wide

    def op(self, op: str, args, dt: str) -> Tuple[str, int, bool]:
        wide = dt == "int64"
        infix = _INFIX.get(op)
        if infix is not None:  # (first: the most frequent; no case below is one of them)
            # down the left operands in a loop, not by recursion: a gradient adds a term
            # per use of a tensor (a chain of hundreds of layers reading one weight), a
            # chain deeper than Python's stack
            spine = [(op, args, dt)]
            while type(spine[-1][1][0]) is Op and spine[-1][1][0].op in _INFIX:
                x = spine[-1][1][0]
                spine.append((x.op, x.args, x.dtype))
            sa = self.ex(spine[-1][1][0])
            for o, (_, b), d in reversed(spine):
                sym, prec = _INFIX[o]
                wide = d == "int64"
                sb = self.ex(b)
                left = _wrap(sa, prec)
                if o in ("add", "sub", "mul") and wide and not (sa[2] or sb[2]):
                    left = f"(int64_t){_wrap(sa, _UNARY)}"  # compute in 64 bits, not in int
                sa = (f"{left} {sym} {_wrap(sb, prec + 1)}", prec, wide)
            return sa
        adt = args[0].dtype
        isf = adt in ("float32", "float64")
        if op == "cast":
            return self.cast(args[0], dt)
        if op == "splat":
            return self.call(self.vector_call("splat", dt), args, False)
        if op == "align_gap":
            at, bytes_, n = args
            return (f"{self.use('te_align_gap')}(&{at.buf}[{self.text(at.offset)}], "
                    f"sizeof({CTYPE[at.dtype]}), {self.text(bytes_)}, {self.text(n)})", _ATOM, True)
        if op == "select":
            c, a, b = args
            if dt in ("float32", "float64") and (
                    (isinstance(a, Lit) and isinstance(b, Lit))
                    or (not self.simd_depth and _data_dependent(c)
                        and all(isinstance(x, (Lit, Var)) for x in (a, b)))):
                # a choice between constants (a count of ties, a mask), or, outside vector
                # loops, between values already computed on a test of data, by bits, not
                # a branch: gcc branches in scalar code (a vector loop's peeled tail, a
                # blocked transpose), and a data-dependent test mispredicts (max-pool
                # gradient 3x slower; a running maximum's gradient, transposed, 1.6x).
                # A test of indices alone is predicted: it stays a branch, or a cmov
                return self.call(self.use(f"te_blend_{_SUF[dt]}"), args, False)
            sa, sb = self.ex(a), self.ex(b)
            s = f"{self.text(c, _OR)} ? {_wrap(sa, _OR)} : {_wrap(sb, _COND)}"
            return s, _COND, sa[2] or sb[2]
        if op == "neg":
            a = self.ex(args[0])
            inner = _wrap(a, _UNARY)
            if inner.startswith("-"):  # `--x` would be a decrement
                inner = f"({inner})"
            if wide and not a[2]:
                return f"-(int64_t){inner}", _UNARY, True
            return f"-{inner}", _UNARY, wide
        if op == "not":
            return f"!{self.text(args[0], _UNARY)}", _UNARY, False
        if (op, adt) in mathlib.NAMES:  # the same bits in every loop (see codegen.mathlib)
            return self.call(self.use(mathlib.NAMES[(op, adt)]), args, False)
        if op in _MATH and isf:
            fn = _MATH[op] + ("f" if adt == "float32" else "")
            return f"{fn}({', '.join(self.text(a) for a in args)})", _ATOM, False
        if op == "sigmoid":
            self.use(mathlib.NAMES[("exp", adt)])
        if op in ("abs", "sigmoid"):
            return self.call(self.use(f"te_{op}_{_SUF[adt]}"), args, wide)
        if op in ("max", "min") and adt == "bool":
            sym, prec = ("||", _OR) if op == "max" else ("&&", _AND)
            return f"{self.text(args[0], prec)} {sym} {self.text(args[1], prec + 1)}", prec, False
        if op in ("floordiv", "mod", "max", "min", "pow"):
            return self.call(self.use(f"te_{op}_{_SUF[adt]}"), args, wide)
        raise TypeError(f"no C for operation {op} on {adt}")

    def cast(self, x, dt: str) -> Tuple[str, int, bool]:
        src = x.dtype
        if src == dt:
            return self.ex(x)
        if dt == "bool":
            return f"{self.text(x, _EQ)} != 0", _EQ, False
        if dt in ("int32", "int64") and src in ("float32", "float64"):
            return self.call(self.use(f"te_to{dt}_{_SUF[src]}"), [x], dt == "int64")
        return f"({CTYPE[dt]}){self.text(x, _UNARY)}", _UNARY, dt == "int64"

    # }}}

    # {{{ statements

    def line(self, ind: int, s: str) -> None:
        self.lines.append("  " * ind + s)

    def stmt(self, s: Stmt, ind: int) -> None:
        match s:
            case Decl(var, init):
                t = self.ctype(var.dtype)
                if init is None:
                    self.line(ind, f"{t} {var.name};")
                else:
                    self.line(ind, f"{t} {var.name} = {self.text(init)};")
            case Assign(var, value):
                self.line(ind, f"{var.name} = {self.text(value)};")
            case Accumulate(var, op, value):
                fused = _product(value) if op == "sum" else None
                if fused is not None:
                    a, b = fused
                    fn = _FMA.get(var.dtype) or self.vector_call("vfma", var.dtype)
                    self.line(ind, f"{var.name} = {fn}({self.text(a)}, "
                                   f"{self.text(b)}, {var.name});")
                elif op == "sum":
                    self.line(ind, f"{var.name} += {self.text(value)};")
                else:
                    rhs = self.text(Op(op, (var, value), var.dtype))
                    self.line(ind, f"{var.name} = {rhs};")
            case Store(buf, off, value, add) if add and buf in self.locals and \
                    _product(value) is not None:
                a, b = _product(value)
                at = f"{buf}[{self.text(off)}]"
                self.line(ind, f"{at} = {_FMA[value.dtype]}({self.text(a)}, {self.text(b)}, {at});")
            case Store(buf, off, value, False) if vector_parts(value.dtype) is not None:
                self.line(ind, f"{self.vector_call('vstore', value.dtype)}(&{buf}[{self.text(off)}], "
                               f"{self.text(value)});")
            case StreamStore(buf, off, value):
                self.line(ind, f"{self.vector_call('vstream', value.dtype)}(&{buf}[{self.text(off)}], "
                               f"{self.text(value)});")
            case StoreFence():
                self.line(ind, f"{self.use('te_store_fence')}();")
            case Store(buf, off, value, add):
                sym = "+=" if add else "="
                self.line(ind, f"{buf}[{self.text(off)}] {sym} {self.text(value)};")
            case Fail(code, site, dim, index, size):
                self.use("te_fail")
                self.line(ind, f"te_fail(err, {code}, {site}, {dim}, {self.text(index)}, "
                               f"{self.text(size)});")
            case Block(stmts):
                for x in stmts:
                    self.stmt(x, ind)
            case For():
                self.loop(s, ind)
            case Region(body, work):
                self.threaded = self.threaded or work is not None
                cond = "" if work is None else \
                    f" if(parallel: {self.text(work, _REL + 1)} >= {threads.SYMBOL})"
                self.line(ind, f"#pragma omp parallel{cond}")
                self.line(ind, "{")
                self.stmt(body, ind + 1)
                self.line(ind, "}")
            case If():
                self.if_(s, ind)
            case Local(name, dtype, size, init) if init:
                self.line(ind, f"static const {CTYPE[dtype]} {name}[{size}] = {{")
                for k in range(0, len(init), 24):  # (a revolve schedule: 44,000 at T=4096)
                    self.line(ind + 1, ", ".join(map(str, init[k:k + 24])) + ",")
                self.line(ind, "};")
            case Local(name, dtype, size):
                self.locals.add(name)
                self.line(ind, f"{CTYPE[dtype]} {name}[{size}] __attribute__((aligned(64)));")
            case Comment(text):
                self.line(ind, f"/* {sanitize(text)} */")
            case Call(name, args):
                self.line(ind, f"{name}({', '.join(['bufs', 'sizes', 'err'] + [self.text(a) for a in args])});")
            case Fence(name, dtype, size):  # an empty asm that reads and writes the array
                self.line(ind, f'__asm__ __volatile__("" : "+m"(*({CTYPE[dtype]} (*)[{size}]){name}));')
            case _:
                raise TypeError(f"not a loop-AST statement: {s!r}")

    def loop(self, s: For, ind: int) -> None:
        v = s.var.name
        red = "".join(f" reduction({_RED[op]}:{var.name})" for op, var in s.reduction)
        share = f" schedule({s.share})" if s.share else ""
        if s.team:
            simd = " simd" if s.simd and s.team.startswith("for") else ""
            words = s.team.split()
            # (a schedule belongs to a worksharing for, not to a loop a single thread runs)
            share = share if words[0] == "for" else ""
            self.line(ind, f"#pragma omp {words[0]}{simd}{red if simd else ''}{share}"
                           f"{''.join(' ' + w for w in words[1:])}")
            if s.simd and not simd:
                self.line(ind, f"#pragma omp simd{red}")
        elif s.parallel:
            simd = " simd" if s.simd else ""
            self.threaded = self.threaded or s.work is not None
            cond = "" if s.work is None else \
                f" if(parallel: {self.text(s.work, _REL + 1)} >= {threads.SYMBOL})"
            self.line(ind, f"#pragma omp parallel for{simd}{share}{cond}{red if s.simd else ''}")
        elif s.simd:
            self.line(ind, f"#pragma omp simd{red}")
        note = f"  /* {sanitize(s.note, 80)} */" if s.note else ""
        if s.descending:
            head = (f"for (int64_t {v} = {self.text(s.hi, _ADD)} - 1; {v} >= "
                    f"{self.text(s.lo, _REL + 1)}; {v} -= 1) {{")
        else:
            head = (f"for (int64_t {v} = {self.text(s.lo)}; {v} < {self.text(s.hi, _REL + 1)}; "
                    f"{v} += {s.step}) {{")
        self.line(ind, head + note)
        self.simd_depth += bool(s.simd)
        self.stmt(s.body, ind + 1)
        self.simd_depth -= bool(s.simd)
        self.line(ind, "}")

    def if_(self, s: If, ind: int, chained: bool = False) -> None:
        if chained:  # continue the previous `}` as `} else if (...) {`
            self.lines[-1] += f" else if ({self.text(s.cond)}) {{"
        else:
            self.line(ind, f"if ({self.text(s.cond)}) {{")
        self.stmt(s.then, ind + 1)
        self.line(ind, "}")
        if s.orelse is None:
            return
        if len(s.orelse.stmts) == 1 and isinstance(s.orelse.stmts[0], If):
            self.if_(s.orelse.stmts[0], ind, chained=True)
            return
        self.lines[-1] += " else {"
        self.stmt(s.orelse, ind + 1)
        self.line(ind, "}")

    # }}}


#: a float sum adds a product term with one rounding (ir.py: "Float arithmetic")
_FMA = {"float32": "fmaf", "float64": "fma"}


def _product(value):
    """``(a, b)`` if ``value`` is a float product ``a * b`` (a sum's term), else None."""
    elem = (vector_parts(value.dtype) or (value.dtype,))[0] if isinstance(value, Op) else None
    if isinstance(value, Op) and value.op == "mul" and elem in _FMA \
            and all(getattr(x, "dtype", None) == value.dtype for x in value.args):
        return value.args
    return None


def _wrap(x: Tuple[str, int, bool], prec: int) -> str:
    s, p, _ = x
    return f"({s})" if p < prec else s


#: A kernel of more lines than SPLIT_LINES (a chain of a thousand tensors) is emitted as
#: functions of about PART_LINES lines each, called in order: the C compiler's time
#: grows faster than linearly with the size of one function (register allocation and
#: value-range passes; a chain of 1,000 loop nests: 8.3 s in one function, 4.8 s in
#: parts of 50 nests) and linearly with the number of bounded ones.
SPLIT_LINES = 3000
PART_LINES = 250

_WORD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def parts(stmts: List[Stmt], texts: List[List[str]], split: int = SPLIT_LINES,
          size: int = PART_LINES) -> List[range]:
    """``stmts`` (top-level, with the C lines of each in ``texts``) cut into consecutive
    ranges of about ``size`` lines, never between a local's declaration and a later
    use of it; one range when there are at most ``split`` lines in all.

    >>> from codegen.loopast import Comment, Decl, Var
    >>> t = Var("t0", "float64")
    >>> ss = [Comment("a"), Decl(t, None), Comment("b"), Comment("c")]
    >>> parts(ss, [["/* a */"], ["double t0;"], ["t0 = 1;"], ["/* c */"]], split=3, size=1)
    [range(0, 1), range(1, 3), range(3, 4)]
    """
    if sum(len(t) for t in texts) <= split:
        return [range(len(stmts))]
    declared = {}
    for k, top in enumerate(stmts):
        for s in flat([top]):  # a Block's declarations are in the function's scope
            match s:
                case Decl(var, _):
                    declared[var.name] = k
                case Local(name, _, _):
                    declared[name] = k
    # the last statement each top-level local must share a function with
    reach = list(range(len(stmts)))
    for k, text in enumerate(texts):
        for w in set(_WORD.findall("\n".join(text))):
            d = declared.get(w)
            if d is not None and d < k:
                reach[d] = max(reach[d], k)
    out, start, need, lines = [], 0, 0, 0
    for k in range(len(stmts)):
        need, lines = max(need, reach[k]), lines + len(texts[k])
        if need == k and lines >= size:
            out.append(range(start, k + 1))
            start, lines = k + 1, 0
    if start < len(stmts):
        out.append(range(start, len(stmts)))
    return out


#: the parameters every function of the kernel has (the entry point's)
PARAMS = "void *const *bufs, const int64_t *sizes, int64_t *err"


def _declared(body: List[str], decls) -> List[str]:
    """The declarations of the sizes and buffers (``decls``: ``(name, line)``) that the
    lines ``body`` use: all of them in every function would make the text quadratic in
    the number of tensors."""
    words = set(_WORD.findall("\n".join(body)))
    return ["  " + line for name, line in decls if name in words]


def _function(em: "_Emitter", fn, decls) -> List[str]:
    """The lines of the kernel's function ``fn`` (``loopast.Function``): a ``static`` C
    function of the kernel's parameters and its own (each call site passes them)."""
    mark = len(em.lines)
    em.stmt(fn.body, 1)
    body = em.lines[mark:]
    del em.lines[mark:]
    own = "".join(f", {em.ctype(v.dtype)} {v.name}" for v in fn.params)
    note = f"  /* {sanitize(fn.note, 120)} */" if fn.note else ""
    return ([f"static void {fn.name}({PARAMS}{own}){note}", "{"] + _declared(body, decls)
            + body + ["", "  (void)bufs; (void)sizes; (void)err;", "}", ""])


def emit(kernel: Kernel) -> str:
    """The C translation unit of ``kernel``: includes, used helpers, the entry point.

    >>> from codegen.loopast import Kernel, Store, Lit
    >>> print(emit(Kernel("demo", (), (), ())).splitlines()[-1])
    }
    """
    em = _Emitter()
    decls = []
    for k, (var, note) in enumerate(kernel.sizes):
        decls.append((var.name, f"const int64_t {var.name} = sizes[{k}];  "
                                f"/* {sanitize(note, 80)} */"))
    for k, b in enumerate(kernel.buffers):
        t = CTYPE[b.dtype]
        q = "const " if b.readonly else ""
        decls.append((b.name, f"{q}{t} *restrict {b.name} = ({q}{t} *)bufs[{k}];  "
                              f"/* {sanitize(b.note, 80)} */"))
    functions = []
    for fn in kernel.functions:
        functions += _function(em, fn, decls)
    stmts = list(kernel.body)
    texts = []
    for s in stmts:
        mark = len(em.lines)
        em.lines.append("")
        em.stmt(s, 1)
        texts.append(em.lines[mark:])
        del em.lines[mark:]
    pieces = parts(stmts, texts)
    if len(pieces) == 1:
        em.lines = ["  " + line for _, line in decls] + [x for t in texts for x in t]
    else:
        # each part declares only the sizes and buffers it uses: all of them in every
        # part would make the text quadratic in the number of tensors
        for n, piece in enumerate(pieces):
            body = [x for k in piece for x in texts[k]]
            functions += [f"static __attribute__((noinline)) void te_part{n}({PARAMS})", "{"]
            functions += _declared(body, decls)
            functions += body + ["", "  (void)bufs; (void)sizes; (void)err;", "}", ""]
            em.lines.append(f"  te_part{n}(bufs, sizes, err);")
    head = [f"/* Generated by tensorexpr (C backend): {sanitize(kernel.title)} */",
            "#include <math.h>", "#include <stdbool.h>", "#include <stdint.h>", ""]
    if any(h in mathlib.FUNCTIONS for h in em.helpers):
        head.append(mathlib.prelude())
    vfma = [h for h in em.helpers if h.startswith("te_vfma_")]
    if vfma:
        head.append(_vfma_prelude(vfma))
    for dt in em.vectors:
        head.append(_vector_typedefs(dt))
    for name in _print_order(em.helpers):
        head.append(_helper_src(name))
    if em.threaded:
        head.append(f"/* set by the runtime when it loads the library (codegen.threads) */\n"
                    f"int64_t {threads.SYMBOL} = {threads.DEFAULT};\n")
    head += functions
    head.append(f"int {ENTRY}(void *const *bufs, const int64_t *sizes, int64_t *err)")
    head.append("{")
    unused = [p for p, used in (("bufs", kernel.buffers), ("sizes", kernel.sizes)) if not used]
    tail = [""] + [f"  (void){p};" for p in unused] + ["  return (int)err[0];", "}", ""]
    return "\n".join(head + em.lines + tail)
