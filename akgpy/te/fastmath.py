"""exp, log and tanh for float32 as plain arithmetic, so a vectorised loop stays vectorised.

TVM lowers `exp`/`tanh` to LLVM intrinsics that LLVM turns into one libm call per lane (a
16-lane vector of GELU made 64 scalar calls). These are Cephes' exp (range reduction by ln 2,
2^n built in the exponent bits) and log (mantissa and exponent from the bits; where x is known
to lie in [1, 2], a polynomial in x - 1 with no reduction), with minimax polynomials of the
lowest degree float32 needs, and Eigen's rational tanh; all are accurate to a few
ulp (tests/test_fastmath.py measures them against float64 on dense grids), well inside the
1e-4 fp32 tolerance, and keep inf/NaN semantics. Other dtypes use TVM's intrinsics.
"""
from __future__ import annotations

from tvm import te, tirx

F32 = "float32"
LET_NAME = "fm"  # the name of every var these functions bind: how a schedule recognises vector math


def _c(v: float):
    return tirx.const(v, F32)


def _i(v: int):
    return tirx.const(v, "int32")


def _dtype(x) -> str:
    return str(x.ty)


def _let(value, body):
    """body(v) with v bound once to `value`: the argument is usually a whole inlined producer
    chain, and a tree that used it ten times would compute it ten times."""
    if isinstance(value, (tirx.Var, tirx.FloatImm, tirx.IntImm)):
        return body(value)
    v = tirx.Var(LET_NAME, _dtype(value))
    return tirx.Let(v, value, body(v))


def _is_number(x):
    """False only for NaN. Not isnan(): TVM's vectorizer scalarises any loop that calls it, and
    `x == x` is folded to true by TVM's simplifier; an ordered compare with inf is neither."""
    return tirx.abs(x) <= tirx.const(float("inf"), _dtype(x))


# Without overflow handling n <= 127 must hold: x <= 88 leaves a margin to ln(FLT_MAX) = 88.72.
EXP_NO_OVERFLOW = 88.0
EXP_NO_CLAMP_LOW = -88.0


def exp(x, rng=None):
    """exp(x); `rng` (graph/ranges.Range of x's non-NaN values, or None) drops the overflow
    and underflow handling it proves unneeded."""
    if _dtype(x) != F32:
        return te.exp(x)
    high = rng is None or rng.hi > EXP_NO_OVERFLOW
    low = rng is None or rng.lo < EXP_NO_CLAMP_LOW
    return _let(x, lambda x: _exp(x, high, low))


# t = x log2(e) + EXP_MAGIC rounds x log2(e) to the nearest integer n (t's ulp is 1 in
# [2^23, 2^24)), leaving n + 127 in t's low mantissa bits: n as a float is t - EXP_MAGIC and 2^n
# is those bits shifted into the exponent field (the constant's own bits shift out). This is
# two ops where floor, a float->int conversion and the bias add were four.
EXP_MAGIC = 12582912.0 + 127.0  # 1.5 * 2^23 + the exponent bias
_EXP_MAGIC_BITS = 0x4B400000 + 127  # its bit pattern: n = 0 in the low bits


def _exp(x, high, low):
    # clamps as selects on `x > c` and `x < c`, false for NaN, so NaN passes them (min/max would
    # replace it by the bound) and the arithmetic below carries it to the result with no test
    # of its own: NaN - NaN = NaN, and NaN times 2^n is NaN whatever bits n took. The test
    # (compare, blend) was 2 of ~25 vector ops; yolo's loss ~2380 0.90x, ~3153 0.94x, ~6853 1.01x
    xc = tirx.Select(x > _c(88.72283935546875), _c(88.72283935546875), x) if high else x
    xc = tirx.Select(xc < _c(-88.3762626647949), _c(-88.3762626647949), xc) if low else xc
    return _let(xc, lambda xc: _exp_clamped(x, xc, high, _EXP_P))


def _exp_clamped(x, xc, high, coeffs):
    """exp of the clamped xc with the polynomial `coeffs`; `high`: x may overflow float32."""
    return _let(xc * _c(1.44269504088896341) + _c(EXP_MAGIC), lambda t: _let(t - _c(EXP_MAGIC), lambda n: _let(
        xc - n * _c(0.693359375) - n * _c(-2.12194440e-4),  # ln 2 in two parts: r is exact
        lambda r: _exp_poly(x, t, r, high, coeffs))))


# 1 + r (1 + r P(r)) on |r| <= ln(2)/2, one Horner chain (the extra rounding of 1 + r P weighs
# |r| of an ulp): P of degree 4, a minimax fit of (e^r - 1 - r) / r^2 to relative error 3.1e-9
# (0.05 ulp). Cephes' degree 5 (error 1.1e-9) bought no accuracy a float32 result keeps, for one
# more FMA of the ~11 an exp spends on the FMA pipes that bound exp-heavy loops (tests: 2 ulp)
_EXP_P = (1.38145379426601e-3, 8.368745365166054e-3, 4.166839083378296e-2, 1.6666520396398027e-1,
          4.9999993431871365e-1)


def _exp_poly(x, t, r, high, coeffs):
    y = _horner(coeffs + (1.0, 1.0), r)
    bits = tirx.reinterpret("int32", t)
    # n = 128 (x just below ln(FLT_MAX)) is 2^127 * 2: its exponent field would read as inf
    e = tirx.min(bits, _i(_EXP_MAGIC_BITS + 127)) if high else bits
    res = y * tirx.reinterpret(F32, tirx.shift_left(e, _i(23)))
    if high:
        res = res * tirx.Select(bits > _i(_EXP_MAGIC_BITS + 127), _c(2.0), _c(1.0))
        res = tirx.Select(x > _c(88.72283935546875), _c(float("inf")), res)
    return res


# A float16 result (a graph's Exp keeps its operand's dtype, so x is a widened float16 too): above
# 12 exp rounds to inf in float16 (65504 = e^11.09) and below -18 to 0 (half the least
# subnormal, 2^-25 = e^-17.3), so x clamped to [-18, 12] needs no overflow or underflow handling
# of its own (the float16 rounding makes the infinities and zeros; NaN passes the selects), and a
# degree-3 P (a minimax fit to relative error 1.1e-7; float32's degree 4: 3.1e-9). Over all 65536
# float16 inputs 5 round an ulp away from numpy's float16 exp, against 4 with float32's exp
# (tests/test_fastmath.py): three ops and an FMA less per element.
EXP_HALF_LOW, EXP_HALF_HIGH = -18.0, 12.0
_EXP_HALF_P = (8.312315070778025e-3, 4.189442088943929e-2, 1.6667129644406514e-1, 4.999920243473182e-1)


def exp_to_half(x, rng=None):
    """exp(x) for a result rounded to float16 (x a widened float16 value)."""
    if _dtype(x) != F32:
        return te.exp(x)
    high = rng is None or rng.hi > EXP_HALF_HIGH
    low = rng is None or rng.lo < EXP_HALF_LOW

    def body(x):
        xc = tirx.Select(x > _c(EXP_HALF_HIGH), _c(EXP_HALF_HIGH), x) if high else x
        xc = tirx.Select(xc < _c(EXP_HALF_LOW), _c(EXP_HALF_LOW), xc) if low else xc
        return _let(xc, lambda xc: _exp_clamped(x, xc, False, _EXP_HALF_P))
    return _let(x, body)


_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
           1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)


def tanh(x, rng=None):
    """tanh(x); the clamp to [-9, 9] (where tanh is +-1 in float32) is dropped when `rng` proves
    x inside it."""
    return _tanh_clamped(x, rng, 9.0, _TANH_P, _TANH_Q)


def _tanh_clamped(x, rng, bound: float, p, q):
    if _dtype(x) != F32:
        return te.tanh(x)
    inside = rng is not None and rng.within(-bound, bound)
    return _let(x, lambda x: _let(x if inside else _clamp(x, bound),
                                  lambda xc: _let(xc * xc, lambda x2: _tanh(xc, x2, p, q))))


def _clamp(x, bound: float):
    """x clamped to [-bound, bound] by selects on `x > c` and `x < -c`, false for NaN, so that NaN
    passes (as in `_exp`) and the arithmetic after it carries NaN to the result untested."""
    c = tirx.const(bound, _dtype(x))
    return _let(tirx.Select(x > c, c, x), lambda xc: tirx.Select(xc < -c, -c, xc))


def _horner(coeffs, x, const=_c):
    """coeffs[0] * x^(n-1) + ... + coeffs[-1]."""
    p = const(coeffs[0])
    for c in coeffs[1:]:
        p = p * x + const(c)
    return p


# Eigen's rational alone. Eigen returns x itself for |x| < 0.0004, where the rational is x times
# P(0) / Q(0) = 1 - 1.3e-7 (an ulp or two: the dense-grid test's maximum, 4.3 ulp near 5.2, does
# not move), and akgpy tested x for NaN, which the clamp's selects now pass: 5 of the ~19 vector
# ops a float32 tanh was (compare, and, blend twice). Kernel alone, interleaved, 2 threads: bert
# GELU ~8645 0.89x, GELU backward ~0750 0.91x (one thread, 64 rows in cache: 0.89x, 0.92x)
def _tanh(xc, x2, p, q):
    return xc * _horner(p, x2) / _horner(q, x2)


# A tanh whose result is rounded to float16 needs far less than float32's accuracy: its input is a
# float16 too (a graph's Tanh keeps its operand's dtype), and for every one of the 65536 float16
# inputs the float16 rounding of this [7/6] rational equals that of tanh (tests/test_fastmath.py
# checks all of them; a minimax fit on [0, 5] to relative error 6.2e-8, found by reweighted least
# squares; one degree less in P or Q leaves 22-74 inputs an ulp off). Past |x| = 5 tanh rounds to
# +-1 in float16 (from 4.51). Three FMAs less than the float32 rational, on a loop that a float16
# tanh's two conversions and division already make arithmetic-bound: bert's GELU backward.
TANH_HALF_BOUND = 5.0
_TANH_HALF_P = (5.183161539490807e-06, 2.5090291993228975e-03, 1.254824208669846e-01, 9.999999386072926e-01)
_TANH_HALF_Q = (1.6904179782249737e-04, 2.211507439165192e-02, 4.5881514902357956e-01, 1.0)


def tanh_to_half(x, rng=None):
    """tanh(x) for a result rounded to float16 (x a widened float16 value)."""
    return _tanh_clamped(x, rng, TANH_HALF_BOUND, _TANH_HALF_P, _TANH_HALF_Q)


# log(1 + m) = m - m^2 / 2 + m^3 P(m) on [sqrt(1/2) - 1, sqrt(2) - 1]: P of degree 7, a minimax fit
# to relative error 5.8e-9 (0.1 ulp), where Cephes' degree 8 (3.4e-9) spent one more FMA
_LOG_P = (-7.635619154257679e-2, 1.2763313557752268e-1, -1.3160589751178903e-1, 1.420155537806274e-1,
          -1.6623297855269428e-1, 2.0001233273636657e-1, -2.500082272710346e-1, 3.3333331658608023e-1)


FLT_MIN_NORMAL = 1.17549435e-38
FLT_MAX = 3.4028234663852886e38


def log(x, rng=None):
    """log(x); `rng` (as for exp) drops the zero, negative, subnormal and infinity handling when
    it proves x a finite normal positive number, and the range reduction when it proves x in
    [1, 2]."""
    if _dtype(x) != F32:
        return te.log(x)
    if rng is not None and rng.within(*LOG_UNIT_RANGE):
        return _let(x - _c(1.0), _log1p_unit)
    normal = rng is not None and rng.lo >= FLT_MIN_NORMAL
    finite = rng is not None and rng.hi <= FLT_MAX
    return _let(x, lambda x: _log(x, normal, finite))


# log(x) for x in [1, 2], where softplus's 1 + exp(-|x|) (every sigmoid cross-entropy) and
# log(1 + p) of a probability lie: u = x - 1 is exact there (Sterbenz), and log(1 + u) =
# u + u^2 P(u) on [-1e-3, 1 + 1e-3] (the range rules widen their bounds by ~1e-6 an op), a
# least-squares fit weighted to the result's relative error. No exponent to extract, no
# special case (NaN passes through the arithmetic), no select: 11 vector ops where the general
# path takes ~22, and a dependence chain half as long. Max error 1.26 ulp on every float32 of
# [1, 2] (the general path's is 0.78; near 2 the u^2 P(u) term is ~0.3 of the result).
# Kernel alone, interleaved, LLC flushed, two runs: yolo loss ~2380 0.74x, ~6853 0.85-0.87x,
# ~3153 0.85-0.88x
LOG_UNIT_RANGE = (1.0 - 1e-3, 2.0 + 1e-3)
_LOG1P_P = (-3.4500742331147194e-3, 2.0868370309472084e-2, -5.905577167868614e-2, 1.0837534070014954e-1,
            -1.545848250389099e-1, 1.9735097885131836e-1, -2.496713548898697e-1, 3.333141803741455e-1,
            -4.9999967217445374e-1)


def _log1p_unit(u):
    return u * u * _horner(_LOG1P_P, u) + u


def _log(x, normal, finite):
    i32 = "int32"
    tiny = None if normal else x < _c(FLT_MIN_NORMAL)  # subnormal (or <= 0): scale into the normal range first
    xs = x if normal else tirx.Select(tiny, x * _c(8388608.0), x)
    return _let(tirx.reinterpret(i32, xs), lambda bits: _log_bits(x, tiny, bits, finite))


# log(x) = k ln 2 + log(z) with z = x / 2^k in [sqrt(1/2), sqrt(2)): subtracting sqrt(1/2)'s bits
# carries into the exponent field exactly when the mantissa is at least sqrt(1/2)'s, so k is
# that difference's exponent field and z is x's bits less k in the exponent (6 integer/float
# ops; extracting the field, then testing and adjusting the mantissa, took 10)
_SQRT_HALF_BITS = 0x3F3504F3


def _log_bits(x, tiny, bits, finite):
    k = tirx.shift_right(bits - _i(_SQRT_HALF_BITS), _i(23))  # arithmetic: x < sqrt(1/2) gives k < 0
    m = tirx.reinterpret(F32, bits - tirx.shift_left(k, _i(23))) - _c(1.0)
    if tiny is not None:
        k = k - tirx.Select(tiny, _i(23), _i(0))
    ef = k.astype(F32)
    return _let(m, lambda m: _let(ef, lambda ef: _log_poly(x, m, ef, tiny is not None, finite)))


def _log_poly(x, m, ef, special, finite):
    z = m * m
    y = _horner(_LOG_P, m)
    y = y * m * z + ef * _c(-2.12194440e-4) - _c(0.5) * z
    res = m + y + ef * _c(0.693359375)
    if special:
        res = tirx.Select(x == _c(0.0), _c(float("-inf")), res)
        # `x >= 0` is false for NaN too: this select gives NaN for negative and NaN arguments
        # alike, and no NaN test of its own is left (2 of the ~30 ops)
        res = tirx.Select(x >= _c(0.0), res, _c(float("nan")))
    if not finite:
        res = tirx.Select(x == _c(float("inf")), x, res)
    return res if special else tirx.Select(_is_number(x), res, x)


# Eigen's float erf (generic_fast_erf_float): x * P(x^2) / Q(x^2) on [-4, 4], where erf is +-1
# to float precision. TVM 0.27's own `erf` lowers to garbage on LLVM (1e38 on [-4, 4]), so
# this is the only erf, also for the libm variant and (less accurately, ~1e-7) for float64.
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


def erf(x):
    dt = _dtype(x)
    c = (lambda v: tirx.const(v, dt))
    return _let(x, lambda x: _let(_clamp(x, 4.0), lambda xc: _let(xc * xc, lambda x2: _erf(xc, x2, c))))


def _erf(xc, x2, c):
    return xc * _horner(_ERF_P, x2, c) / _horner(_ERF_Q, x2, c)
