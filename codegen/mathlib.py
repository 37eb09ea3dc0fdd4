"""C source of the math functions whose value must not depend on where they are computed.

The gradient of a max or min reduction tests ``body == Y[o]`` (passes/differentiate.py):
it recomputes the reduction's body and compares it with the value the forward stored,
possibly in another loop shape or another program (a saved forward value). So every
kernel must compute the same IR expression to the same bits. glibc's scalar ``expf`` and
libmvec's vector ``_ZGVdN8v_expf`` (which gcc calls in ``omp simd`` loops once it is
declared ``omp declare simd``) differ in the last bits for about half of all inputs, and
whether a loop is vectorized depends on its shape, its trip count and its remainder.

These functions are plain C of correctly rounded operations (``+ - * /``, comparisons,
integer and bit operations, no libm call; no contraction of ``a * b + c``:
``-ffp-contract=off``), so a vector lane and a scalar call perform the same operations
and give the same bits, and gcc and clang vectorize them (branch-free: every case is
computed and chosen with ``?:``). Their polynomial steps are written ``TE_FMAF(a, b, c)``:
a fused multiply-add where the target has one (``__FMA__``; correctly rounded, so the
same bits in a vector lane and a scalar call, and half the operations: ``tanh`` 1.4x
faster), ``a * b + c`` elsewhere (the same choice for every kernel of a machine, as the
flags are). They are accurate to about 1 ulp either way (tested against numpy in
``tests/codegen/test_mathlib.py``):

* ``exp``: Cody-Waite reduction ``x = k ln2 + r`` (the float one and its polynomial are
  Cephes' ``expf``, the double one a degree-13 Taylor polynomial, truncation below
  2^-57), ``2^k`` applied as two exact powers of two so that a subnormal result is
  rounded once; ``k`` comes from the bits of ``x / ln2 + 1.5 * 2^p`` (no float-to-int
  conversion: AVX2 has none for 64-bit lanes).
* ``log``: ``x = m 2^e`` with ``m`` in ``[sqrt(1/2), sqrt(2))``; Cephes' ``logf``
  polynomial, fdlibm's ``log`` (``s = f / (2 + f)``, coefficients Lg1..Lg7).
* ``tanh``: Cephes' odd polynomial (float) or rational function (double) below 0.625,
  ``1 - 2 / (exp(2|x|) + 1)`` above, the sign restored with ``copysign``. Its exp
  (``te_expf_one_scale``) applies ``2^k`` in one product: ``2|x|`` is clamped to
  ``[0, 20]`` (``[0, 44]``), where that product is the same correctly rounded one as
  exp's two, and a NaN goes through the clamp, so no extra test for it: the same bits
  as before (every float32 compared), fewer operations (GELU's forward on one
  thread 3.14 -> 2.76 ms).

``sin``, ``cos`` and ``pow`` stay glibc's scalar calls (never vectorized, so also the
same everywhere); ``sqrt``, ``fabs``, ``floor`` and ``ceil`` are exact in any form.
"""
from __future__ import annotations

from typing import Dict, Tuple

#: (IR operation, element type) -> the C function computing it
NAMES: Dict[Tuple[str, str], str] = {
    ("exp", "float32"): "te_expf", ("exp", "float64"): "te_exp",
    ("log", "float32"): "te_logf", ("log", "float64"): "te_log",
    ("tanh", "float32"): "te_tanhf", ("tanh", "float64"): "te_tanh",
}

#: every function of this module (the exps without their clamp: tanh's argument is in range)
FUNCTIONS = frozenset(NAMES.values()) | {"te_expf_in_range", "te_exp_in_range",
                                          "te_expf_one_scale", "te_exp_one_scale"}

#: functions that call another one of these (which must be printed first)
DEPENDS: Dict[str, Tuple[str, ...]] = {
    "te_expf": ("te_expf_in_range",), "te_exp": ("te_exp_in_range",),
    "te_tanhf": ("te_expf_one_scale",), "te_tanh": ("te_exp_one_scale",)}

_BITS = """\
#if defined(__FMA__)
#define TE_FMAF(a, b, c) __builtin_fmaf(a, b, c)
#define TE_FMA(a, b, c) __builtin_fma(a, b, c)
#else
#define TE_FMAF(a, b, c) ((a) * (b) + (c))
#define TE_FMA(a, b, c) ((a) * (b) + (c))
#endif
static inline uint32_t te_bits_f32(float x)
{ uint32_t u; __builtin_memcpy(&u, &x, 4); return u; }
static inline float te_from_bits_f32(uint32_t u)
{ float x; __builtin_memcpy(&x, &u, 4); return x; }
static inline uint64_t te_bits_f64(double x)
{ uint64_t u; __builtin_memcpy(&u, &x, 8); return u; }
static inline double te_from_bits_f64(uint64_t u)
{ double x; __builtin_memcpy(&x, &u, 8); return x; }
"""

#: exp's float reduction ``x = k ln2 + r`` and polynomial ``p = e^r`` (``k`` in ``t``'s low
#: bits), shared by ``te_expf_in_range`` and ``te_tanhf`` (which scales by ``2^k`` its own way)
_EXPF_REDUCED = """\
  float t = TE_FMAF(x, 1.44269504088896341f, 12582912.0f);  /* k = rint(x / ln2) in t's low bits */
  float kf = t - 12582912.0f;
  float r = TE_FMAF(kf, 2.12194440e-4f, TE_FMAF(kf, -0.693359375f, x));
  float p = 1.9875691500e-4f;
  p = TE_FMAF(p, r, 1.3981999507e-3f);
  p = TE_FMAF(p, r, 8.3334519073e-3f);
  p = TE_FMAF(p, r, 4.1665795894e-2f);
  p = TE_FMAF(p, r, 1.6666665459e-1f);
  p = TE_FMAF(p, r, 5.0000001201e-1f);
  p = TE_FMAF(p, r * r, r) + 1.0f;
"""

#: the same for double (``p = e^r``), shared by ``te_exp_in_range`` and ``te_tanh``
_EXP_REDUCED = """\
  double t = TE_FMA(x, 1.4426950408889634, 6755399441055744.0);  /* k = rint(x / ln2) in t's low bits */
  double kd = t - 6755399441055744.0;
  double r = TE_FMA(kd, -1.90821492927058770002e-10, TE_FMA(kd, -6.93147180369123816490e-01, x));
  double q = 1.0 / 6227020800.0;
  q = TE_FMA(q, r, 1.0 / 479001600.0);
  q = TE_FMA(q, r, 1.0 / 39916800.0);
  q = TE_FMA(q, r, 1.0 / 3628800.0);
  q = TE_FMA(q, r, 1.0 / 362880.0);
  q = TE_FMA(q, r, 1.0 / 40320.0);
  q = TE_FMA(q, r, 1.0 / 5040.0);
  q = TE_FMA(q, r, 1.0 / 720.0);
  q = TE_FMA(q, r, 1.0 / 120.0);
  q = TE_FMA(q, r, 1.0 / 24.0);
  q = TE_FMA(q, r, 1.0 / 6.0);
  q = TE_FMA(q, r, 0.5);
  double p = 1.0 + TE_FMA(r * r, q, r);
"""

_SOURCE = {
    "te_expf_in_range": """\
static inline float te_expf_in_range(float x)  /* x in [-104, 89]: k stays in range */
{
""" + _EXPF_REDUCED + """\
  /* 2^k = 2^(k - a) * 2^a with a = floor(k / 2): both normal, the first product exact */
  uint32_t uk = te_bits_f32(t) - 0x4B400000u;
  uint32_t ua = (uk + 256u) >> 1;
  return (p * te_from_bits_f32((uk + 255u - ua) << 23)) * te_from_bits_f32((ua - 1u) << 23);
}
""",
    "te_expf": """\
static inline float te_expf(float x)
{
  /* clamped (NaN too) so that k stays in range; beyond the clamp exp is 0 or inf anyway */
  float y = te_expf_in_range(x > -104.0f ? (x < 89.0f ? x : 89.0f) : -104.0f);
  return x != x ? x + x : y;
}
""",
    "te_exp_in_range": """\
static inline double te_exp_in_range(double x)  /* x in [-746, 710]: k stays in range */
{
""" + _EXP_REDUCED + """\
  /* 2^k = 2^(k - a) * 2^a with a = floor(k / 2): both normal, the first product exact */
  uint64_t uk = te_bits_f64(t) - 0x4338000000000000u;
  uint64_t ua = (uk + 2048u) >> 1;
  return (p * te_from_bits_f64((uk + 2047u - ua) << 52)) * te_from_bits_f64((ua - 1u) << 52);
}
""",
    "te_exp": """\
static inline double te_exp(double x)
{
  /* clamped (NaN too) so that k stays in range; beyond the clamp exp is 0 or inf anyway */
  double y = te_exp_in_range(x > -746.0 ? (x < 710.0 ? x : 710.0) : -746.0);
  return x != x ? x + x : y;
}
""",
    "te_logf": """\
static inline float te_logf(float x)
{
  int sub = x < 1.17549435e-38f;  /* subnormal (or not positive): scaled into the normals */
  uint32_t u = te_bits_f32(sub ? x * 8388608.0f : x);
  float m = te_from_bits_f32((u & 0x007fffffu) | 0x3f800000u);  /* [1, 2) */
  int big = m > 1.41421356f;
  m = big ? m * 0.5f : m;
  float e = (float)(int32_t)((u >> 23) & 0xffu) - (sub ? 150.0f : 127.0f) + (big ? 1.0f : 0.0f);
  float f = m - 1.0f;
  float z = f * f;
  float y = 7.0376836292e-2f;
  y = TE_FMAF(y, f, -1.1514610310e-1f);
  y = TE_FMAF(y, f, 1.1676998740e-1f);
  y = TE_FMAF(y, f, -1.2420140846e-1f);
  y = TE_FMAF(y, f, 1.4249322787e-1f);
  y = TE_FMAF(y, f, -1.6668057665e-1f);
  y = TE_FMAF(y, f, 2.0000714765e-1f);
  y = TE_FMAF(y, f, -2.4999993993e-1f);
  y = TE_FMAF(y, f, 3.3333331174e-1f);
  y = y * f * z;
  y = y + e * -2.12194440e-4f;
  y = y - 0.5f * z;
  float r = (f + y) + e * 0.693359375f;
  r = x == INFINITY ? x : r;
  r = x < 0.0f ? NAN : r;
  r = x == 0.0f ? -INFINITY : r;
  return x != x ? x + x : r;
}
""",
    "te_log": """\
static inline double te_log(double x)
{
  int sub = x < 2.2250738585072014e-308;  /* subnormal (or not positive): scaled into the normals */
  uint64_t u = te_bits_f64(sub ? x * 18014398509481984.0 : x);
  double m = te_from_bits_f64((u & 0x000fffffffffffffu) | 0x3ff0000000000000u);  /* [1, 2) */
  int big = m > 1.4142135623730951;
  m = big ? m * 0.5 : m;
  /* the biased exponent as a double without an int64 conversion (AVX2 has none) */
  double eb = te_from_bits_f64(((u >> 52) & 0x7ffu) | 0x4330000000000000u) - 4503599627370496.0;
  double k = eb - (sub ? 1077.0 : 1023.0) + (big ? 1.0 : 0.0);
  double f = m - 1.0;
  double s = f / (2.0 + f);
  double z = s * s;
  double w = z * z;
  double t1 = w * (3.999999999940941908e-01 + w * (2.222219843214978396e-01
                                                    + w * 1.531383769920937332e-01));
  double t2 = z * (6.666666666666735130e-01 + w * (2.857142874366239149e-01
                   + w * (1.818357216161805012e-01 + w * 1.479819860511658591e-01)));
  double R = t2 + t1;
  double hfsq = 0.5 * f * f;
  double r = k * 6.93147180369123816490e-01
             - ((hfsq - (s * (hfsq + R) + k * 1.90821492927058770002e-10)) - f);
  r = x == HUGE_VAL ? x : r;
  r = x < 0.0 ? (double)NAN : r;
  r = x == 0.0 ? -HUGE_VAL : r;
  return x != x ? x + x : r;
}
""",
    "te_expf_one_scale": """\
static inline float te_expf_one_scale(float x)  /* x in [-87, 88]: 2^k is a normal float */
{
""" + _EXPF_REDUCED + """\
  return p * te_from_bits_f32((te_bits_f32(t) + (127u - 0x4B400000u)) << 23);
}
""",
    "te_exp_one_scale": """\
static inline double te_exp_one_scale(double x)  /* x in [-708, 709]: 2^k is a normal double */
{
""" + _EXP_REDUCED + """\
  return p * te_from_bits_f64((te_bits_f64(t) + (1023u - 0x4338000000000000u)) << 52);
}
""",
    "te_tanhf": """\
static inline float te_tanhf(float x)
{
  float a = fabsf(x);
  float z = a * a;
  float p = -5.70498872745e-3f;
  p = TE_FMAF(p, z, 2.06390887954e-2f);
  p = TE_FMAF(p, z, -5.37397155531e-2f);
  p = TE_FMAF(p, z, 1.33314422036e-1f);
  p = TE_FMAF(p, z, -3.33332819422e-1f);
  float small = TE_FMAF(a * z, p, a);
  /* tanh(10) rounds to 1 in float: the clamp keeps exp finite; a NaN goes through it and
     makes big NaN. k is in [0, 29]: 2^k is applied in one product */
  float big = 1.0f - 2.0f / (te_expf_one_scale(2.0f * (a > 10.0f ? 10.0f : a)) + 1.0f);
  return copysignf(a < 0.625f ? small : big, x);
}
""",
    "te_tanh": """\
static inline double te_tanh(double x)
{
  double a = fabs(x);
  double z = a * a;
  double P = TE_FMA(TE_FMA(-9.64399179425052238628e-1, z, -9.92877231001918586564e1), z,
                    -1.61468768441708447952e3);
  double Q = TE_FMA(TE_FMA(z + 1.12811678491632931402e2, z, 2.23548839060100448583e3), z,
                    4.84406305325125486048e3);
  double small = TE_FMA(a, z * (P / Q), a);
  /* tanh(22) rounds to 1 in double: the clamp keeps exp finite; a NaN goes through it and
     makes big NaN. k is in [0, 64]: 2^k is applied in one product */
  double big = 1.0 - 2.0 / (te_exp_one_scale(2.0 * (a > 22.0 ? 22.0 : a)) + 1.0);
  return copysign(a < 0.625 ? small : big, x);
}
""",
}


def source(name: str) -> str:
    """The C definition of math function ``name`` (after the bit-cast helpers it uses,
    which ``prelude`` prints once).

    >>> "static inline float te_expf(float x)" in source("te_expf")
    True
    """
    return _SOURCE[name]


def prelude() -> str:
    """The bit-cast helpers the functions use (printed once before the first of them).

    >>> prelude().count("static inline")
    4
    """
    return _BITS
