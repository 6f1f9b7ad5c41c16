// cudasim_half_api.h: the API that cuda_fp16.h gives __half and __half2 and cuda_bf16.h gives
// __nv_bfloat16 and __nv_bfloat162, written once. Included twice, with no include guard: by
// cuda_fp16.h and by cuda_bf16.h, each defining first
//   CUDASIM_T, CUDASIM_T2          the scalar and pair types (__half, __half2)
//   CUDASIM_RAW, CUDASIM_RAW2      their raw structs (__half_raw, __half2_raw)
//   CUDASIM_NAME                   the type's word in function names (half: __float2half_rn, __half2int_rz)
//   CUDASIM_FORMAT                 its cudasim::SmallFormat
//   CUDASIM_TO_FLOAT(bits), CUDASIM_FROM_FLOAT(f)   exact widening, and float to nearest even
//   CUDASIM_CONVERSIONS, CUDASIM_OPERATORS, CUDASIM_OPERATORS2   1 where CUDA's header has the implicit
//       conversions, the scalar's operators and the pair's operators (PyTorch's builds turn most off:
//       __CUDA_NO_HALF_CONVERSIONS__ and friends)
//   CUDASIM_OTHER                  the other 16-bit type (the explicit conversion between the two)
// and undefining them at its end.
// Arithmetic is done in float and rounded once to nearest even, which gives the correctly rounded
// result that the GPU's instructions give for +, -, *, / (float has more than twice the bits of both
// formats); fused multiply-adds are done in double and rounded once, with the error of the double
// addition breaking ties. The math functions (hexp, hsin, ...) are float's, rounded: a GPU's
// approximations may differ in the last bit.
#define CUDASIM_N(a, b) CUDASIM_N_(a, CUDASIM_NAME, b)
#define CUDASIM_N_(a, n, b) CUDASIM_N__(a, n, b)
#define CUDASIM_N__(a, n, b) a##n##b
#define CUDASIM_N2(a, b, c) CUDASIM_N2_(a, CUDASIM_NAME, b, c)
#define CUDASIM_N2_(a, n, b, c) CUDASIM_N2__(a, n, b, c)
#define CUDASIM_N2__(a, n, b, c) a##n##b##n##c
// The API's functions are ordinary inline code, not CUDASIM_INTERNAL: they touch no simulator state,
// and an instrumented build must see the learner's accesses they make or feed. Those through a
// reference or `this` (the operators, the members) happen inside them, and a 16-bit value returned by
// a call that is not inlined (as CUDASIM_INTERNAL functions never are into instrumented code) is
// stored by GCC's thread-sanitizer pass without a hook: `out[i] = __hadd(a, b)` would go unseen.
// The helpers below that do the work in namespace cudasim are the simulator's (CUDASIM_INTERNAL).
#define CUDASIM_FN inline

struct alignas(2) CUDASIM_T {
  unsigned short __x;
  CUDASIM_T() = default;
  constexpr CUDASIM_T(const CUDASIM_RAW& r) : __x(r.x) {}
  CUDASIM_FN CUDASIM_T& operator=(const CUDASIM_RAW& r) { __x = r.x; return *this; }
  CUDASIM_FN operator CUDASIM_RAW() const { return CUDASIM_RAW{__x}; }
#if CUDASIM_CONVERSIONS
  explicit CUDASIM_T(const CUDASIM_OTHER f);
  CUDASIM_T(float f);
  CUDASIM_T(double f);
  CUDASIM_T(short v);
  CUDASIM_T(unsigned short v);
  CUDASIM_T(int v);
  CUDASIM_T(unsigned int v);
  CUDASIM_T(long v);
  CUDASIM_T(unsigned long v);
  CUDASIM_T(long long v);
  CUDASIM_T(unsigned long long v);
  CUDASIM_FN operator float() const { return CUDASIM_TO_FLOAT(__x); }
  operator signed char() const;
  operator unsigned char() const;
  operator char() const;
  operator short() const;
  operator unsigned short() const;
  operator int() const;
  operator unsigned int() const;
  operator long() const;
  operator unsigned long() const;
  operator long long() const;
  operator unsigned long long() const;
  constexpr operator bool() const { return (__x & 0x7FFFu) != 0u; }
  template <class V, std::enable_if_t<std::is_arithmetic_v<V>, int> = 0>
  CUDASIM_FN CUDASIM_T& operator=(V v) { return *this = CUDASIM_T(v); }
#endif
};

struct alignas(4) CUDASIM_T2 {
  CUDASIM_T x, y;
  CUDASIM_T2() = default;
  constexpr CUDASIM_T2(const CUDASIM_T& a, const CUDASIM_T& b) : x(a), y(b) {}
  constexpr CUDASIM_T2(const CUDASIM_RAW2& r) : x(CUDASIM_RAW{r.x}), y(CUDASIM_RAW{r.y}) {}
  CUDASIM_FN CUDASIM_T2& operator=(const CUDASIM_RAW2& r) { return *this = CUDASIM_T2(r); }
  CUDASIM_FN operator CUDASIM_RAW2() const { return CUDASIM_RAW2{x.__x, y.__x}; }
};

// ---------------------------------------------------------------------------------------------
// Bits and conversions.
CUDASIM_FN CUDASIM_T CUDASIM_N(__ushort_as_, )(unsigned short v) { return CUDASIM_T(CUDASIM_RAW{v}); }
CUDASIM_FN CUDASIM_T CUDASIM_N(__short_as_, )(short v) { return CUDASIM_N(__ushort_as_, )(static_cast<unsigned short>(v)); }
CUDASIM_FN unsigned short CUDASIM_N(__, _as_ushort)(CUDASIM_T h) { return h.__x; }
CUDASIM_FN short CUDASIM_N(__, _as_short)(CUDASIM_T h) { return static_cast<short>(h.__x); }

namespace cudasim {
CUDASIM_INTERNAL inline CUDASIM_T h16_from_bits(CUDASIM_T*, uint32_t b) { return CUDASIM_N(__ushort_as_, )(static_cast<unsigned short>(b)); }
CUDASIM_INTERNAL inline float h16_to_float(CUDASIM_T h) { return CUDASIM_TO_FLOAT(h.__x); }
CUDASIM_INTERNAL inline CUDASIM_T h16_round_mode(CUDASIM_T* tag, double v, Round mode = Round::Nearest, double tail = 0.0) {
  return h16_from_bits(tag, round_double(v, mode, CUDASIM_FORMAT, false, tail));
}
// An arithmetic result in float, rounded to nearest even.
CUDASIM_INTERNAL inline CUDASIM_T h16_round(CUDASIM_T* tag, float f) { return h16_from_bits(tag, CUDASIM_FROM_FLOAT(f)); }
}  // namespace cudasim
#define CUDASIM_TAG static_cast<CUDASIM_T*>(nullptr)

CUDASIM_FN float CUDASIM_N(__, 2float)(CUDASIM_T h) { return CUDASIM_TO_FLOAT(h.__x); }
CUDASIM_FN CUDASIM_T CUDASIM_N(__float2, )(float f) { return ::cudasim::h16_round(CUDASIM_TAG, f); }
CUDASIM_FN CUDASIM_T CUDASIM_N(__float2, _rn)(float f) { return ::cudasim::h16_round(CUDASIM_TAG, f); }
CUDASIM_FN CUDASIM_T CUDASIM_N(__float2, _rz)(float f) { return ::cudasim::h16_round_mode(CUDASIM_TAG, f, ::cudasim::Round::Zero); }
CUDASIM_FN CUDASIM_T CUDASIM_N(__float2, _rd)(float f) { return ::cudasim::h16_round_mode(CUDASIM_TAG, f, ::cudasim::Round::Down); }
CUDASIM_FN CUDASIM_T CUDASIM_N(__float2, _ru)(float f) { return ::cudasim::h16_round_mode(CUDASIM_TAG, f, ::cudasim::Round::Up); }
CUDASIM_FN CUDASIM_T CUDASIM_N(__double2, )(double f) { return ::cudasim::h16_round_mode(CUDASIM_TAG, f); }

// From integers, in each rounding mode: __int2half_rn, __ull2bfloat16_rz, ...
#define CUDASIM_FROM_INT(word, I)                                                                          \
  CUDASIM_FN CUDASIM_T CUDASIM_N(__##word##2, _rn)(I v) {                                                  \
    return ::cudasim::h16_from_bits(CUDASIM_TAG, ::cudasim::round_any_integer(v, ::cudasim::Round::Nearest, CUDASIM_FORMAT)); \
  }                                                                                                         \
  CUDASIM_FN CUDASIM_T CUDASIM_N(__##word##2, _rz)(I v) {                                                  \
    return ::cudasim::h16_from_bits(CUDASIM_TAG, ::cudasim::round_any_integer(v, ::cudasim::Round::Zero, CUDASIM_FORMAT)); \
  }                                                                                                         \
  CUDASIM_FN CUDASIM_T CUDASIM_N(__##word##2, _rd)(I v) {                                                  \
    return ::cudasim::h16_from_bits(CUDASIM_TAG, ::cudasim::round_any_integer(v, ::cudasim::Round::Down, CUDASIM_FORMAT)); \
  }                                                                                                         \
  CUDASIM_FN CUDASIM_T CUDASIM_N(__##word##2, _ru)(I v) {                                                  \
    return ::cudasim::h16_from_bits(CUDASIM_TAG, ::cudasim::round_any_integer(v, ::cudasim::Round::Up, CUDASIM_FORMAT)); \
  }
CUDASIM_FROM_INT(short, short)
CUDASIM_FROM_INT(ushort, unsigned short)
CUDASIM_FROM_INT(int, int)
CUDASIM_FROM_INT(uint, unsigned int)
CUDASIM_FROM_INT(ll, long long)
CUDASIM_FROM_INT(ull, unsigned long long)
#undef CUDASIM_FROM_INT

// To integers, saturating, NaN to 0 (64 bits: 0x8000000000000000): __half2int_rn, __bfloat162ull_rd, ...
#define CUDASIM_TO_INT(word, I)                                                                              \
  CUDASIM_FN I CUDASIM_N(__, 2##word##_rn)(CUDASIM_T h) { return ::cudasim::to_integer<I>(::cudasim::h16_to_float(h), ::cudasim::Round::Nearest); } \
  CUDASIM_FN I CUDASIM_N(__, 2##word##_rz)(CUDASIM_T h) { return ::cudasim::to_integer<I>(::cudasim::h16_to_float(h), ::cudasim::Round::Zero); }    \
  CUDASIM_FN I CUDASIM_N(__, 2##word##_rd)(CUDASIM_T h) { return ::cudasim::to_integer<I>(::cudasim::h16_to_float(h), ::cudasim::Round::Down); }    \
  CUDASIM_FN I CUDASIM_N(__, 2##word##_ru)(CUDASIM_T h) { return ::cudasim::to_integer<I>(::cudasim::h16_to_float(h), ::cudasim::Round::Up); }
CUDASIM_TO_INT(short, short)
CUDASIM_TO_INT(ushort, unsigned short)
CUDASIM_TO_INT(int, int)
CUDASIM_TO_INT(uint, unsigned int)
CUDASIM_TO_INT(ll, long long)
CUDASIM_TO_INT(ull, unsigned long long)
#undef CUDASIM_TO_INT
CUDASIM_FN signed char CUDASIM_N(__, 2char_rz)(CUDASIM_T h) { return ::cudasim::to_integer<signed char>(::cudasim::h16_to_float(h), ::cudasim::Round::Zero); }
CUDASIM_FN unsigned char CUDASIM_N(__, 2uchar_rz)(CUDASIM_T h) { return ::cudasim::to_integer<unsigned char>(::cudasim::h16_to_float(h), ::cudasim::Round::Zero); }

// Pairs.
CUDASIM_FN CUDASIM_T2 CUDASIM_N(make_, 2)(CUDASIM_T a, CUDASIM_T b) { return CUDASIM_T2(a, b); }
CUDASIM_FN CUDASIM_T2 CUDASIM_N(__halves2, 2)(CUDASIM_T a, CUDASIM_T b) { return CUDASIM_T2(a, b); }
CUDASIM_FN CUDASIM_T2 CUDASIM_N2(__, 2, 2)(CUDASIM_T a) { return CUDASIM_T2(a, a); }
CUDASIM_FN CUDASIM_T2 CUDASIM_N(__float2, 2_rn)(float f) { CUDASIM_T h = CUDASIM_N(__float2, )(f); return CUDASIM_T2(h, h); }
CUDASIM_FN CUDASIM_T2 CUDASIM_N(__floats2, 2_rn)(float a, float b) { return CUDASIM_T2(CUDASIM_N(__float2, )(a), CUDASIM_N(__float2, )(b)); }
CUDASIM_FN CUDASIM_T2 CUDASIM_N(__float22, 2_rn)(float2 f) { return CUDASIM_N(__floats2, 2_rn)(f.x, f.y); }
CUDASIM_FN float2 CUDASIM_N(__, 22float2)(CUDASIM_T2 h) { return make_float2(::cudasim::h16_to_float(h.x), ::cudasim::h16_to_float(h.y)); }
CUDASIM_FN float __low2float(CUDASIM_T2 h) { return ::cudasim::h16_to_float(h.x); }
CUDASIM_FN float __high2float(CUDASIM_T2 h) { return ::cudasim::h16_to_float(h.y); }
CUDASIM_FN CUDASIM_T CUDASIM_N(__low2, )(CUDASIM_T2 h) { return h.x; }
CUDASIM_FN CUDASIM_T CUDASIM_N(__high2, )(CUDASIM_T2 h) { return h.y; }
CUDASIM_FN CUDASIM_T2 CUDASIM_N(__low2, 2)(CUDASIM_T2 h) { return CUDASIM_T2(h.x, h.x); }
CUDASIM_FN CUDASIM_T2 CUDASIM_N(__high2, 2)(CUDASIM_T2 h) { return CUDASIM_T2(h.y, h.y); }
CUDASIM_FN CUDASIM_T2 CUDASIM_N(__lows2, 2)(CUDASIM_T2 a, CUDASIM_T2 b) { return CUDASIM_T2(a.x, b.x); }
CUDASIM_FN CUDASIM_T2 CUDASIM_N(__highs2, 2)(CUDASIM_T2 a, CUDASIM_T2 b) { return CUDASIM_T2(a.y, b.y); }
CUDASIM_FN CUDASIM_T2 __lowhigh2highlow(CUDASIM_T2 h) { return CUDASIM_T2(h.y, h.x); }

// ---------------------------------------------------------------------------------------------
// Arithmetic.
namespace cudasim {
CUDASIM_INTERNAL inline bool h16_is_nan(CUDASIM_T h) { return (h.__x & 0x7FFFu) > (((1u << CUDASIM_FORMAT.exp) - 1u) << CUDASIM_FORMAT.mant); }
CUDASIM_INTERNAL inline CUDASIM_T h16_nan(CUDASIM_T*) { return CUDASIM_N(__ushort_as_, )(0x7FFFu); }
// fma in double: a*b is exact there; the rounding error of the addition decides ties.
CUDASIM_INTERNAL inline CUDASIM_T h16_fma(CUDASIM_T a, CUDASIM_T b, CUDASIM_T c) {
  double p = static_cast<double>(h16_to_float(a)) * h16_to_float(b), s = p + h16_to_float(c);
  double tail = std::isfinite(s) ? (p - (s - (s - p))) + (h16_to_float(c) - (s - p)) : 0.0;  // two-sum
  return h16_round_mode(CUDASIM_TAG, s, Round::Nearest, tail);
}
CUDASIM_INTERNAL inline CUDASIM_T h16_sat(CUDASIM_T h) {  // the _sat forms: [0, 1], NaN to +0
  float f = h16_to_float(h);
  return f > 0.0f ? (f < 1.0f ? h : h16_round(CUDASIM_TAG, 1.0f)) : h16_round(CUDASIM_TAG, 0.0f);
}
CUDASIM_INTERNAL inline CUDASIM_T h16_relu(CUDASIM_T h) {  // the _relu forms: negative to +0, NaN to the canonical NaN
  if (h16_is_nan(h)) return h16_nan(CUDASIM_TAG);
  return h16_to_float(h) < 0.0f ? h16_round(CUDASIM_TAG, 0.0f) : h;
}
// max and min: +0 is above -0; one NaN gives the other value, two the canonical NaN (or with
// `nan`, any NaN gives the canonical NaN).
CUDASIM_INTERNAL inline CUDASIM_T h16_pick(CUDASIM_T a, CUDASIM_T b, bool greater, bool nan) {
  bool na = h16_is_nan(a), nb = h16_is_nan(b);
  if (na || nb) return (nan || (na && nb)) ? h16_nan(CUDASIM_TAG) : (na ? b : a);
  float x = h16_to_float(a), y = h16_to_float(b);
  if (x == y) return (greater ? (a.__x & 0x8000u) == 0 : (a.__x & 0x8000u) != 0) ? a : b;
  return (greater ? x > y : x < y) ? a : b;
}
}  // namespace cudasim

#define CUDASIM_BINARY(name, expr)                                                                        \
  CUDASIM_FN CUDASIM_T name(CUDASIM_T a, CUDASIM_T b) {                                                   \
    float x = ::cudasim::h16_to_float(a), y = ::cudasim::h16_to_float(b);                                        \
    return ::cudasim::h16_round(CUDASIM_TAG, expr);                                                     \
  }
CUDASIM_BINARY(__hadd, x + y)
CUDASIM_BINARY(__hsub, x - y)
CUDASIM_BINARY(__hmul, x * y)
CUDASIM_BINARY(__hdiv, x / y)
CUDASIM_BINARY(__hadd_rn, x + y)
CUDASIM_BINARY(__hsub_rn, x - y)
CUDASIM_BINARY(__hmul_rn, x * y)
#undef CUDASIM_BINARY
CUDASIM_FN CUDASIM_T __hadd_sat(CUDASIM_T a, CUDASIM_T b) { return ::cudasim::h16_sat(__hadd(a, b)); }
CUDASIM_FN CUDASIM_T __hsub_sat(CUDASIM_T a, CUDASIM_T b) { return ::cudasim::h16_sat(__hsub(a, b)); }
CUDASIM_FN CUDASIM_T __hmul_sat(CUDASIM_T a, CUDASIM_T b) { return ::cudasim::h16_sat(__hmul(a, b)); }
CUDASIM_FN CUDASIM_T __hfma(CUDASIM_T a, CUDASIM_T b, CUDASIM_T c) { return ::cudasim::h16_fma(a, b, c); }
CUDASIM_FN CUDASIM_T __hfma_sat(CUDASIM_T a, CUDASIM_T b, CUDASIM_T c) { return ::cudasim::h16_sat(::cudasim::h16_fma(a, b, c)); }
CUDASIM_FN CUDASIM_T __hfma_relu(CUDASIM_T a, CUDASIM_T b, CUDASIM_T c) { return ::cudasim::h16_relu(::cudasim::h16_fma(a, b, c)); }
CUDASIM_FN CUDASIM_T __hneg(CUDASIM_T a) { return CUDASIM_N(__ushort_as_, )(static_cast<unsigned short>(a.__x ^ 0x8000u)); }
CUDASIM_FN CUDASIM_T __habs(CUDASIM_T a) { return CUDASIM_N(__ushort_as_, )(static_cast<unsigned short>(a.__x & 0x7FFFu)); }
CUDASIM_FN CUDASIM_T __hmax(CUDASIM_T a, CUDASIM_T b) { return ::cudasim::h16_pick(a, b, true, false); }
CUDASIM_FN CUDASIM_T __hmin(CUDASIM_T a, CUDASIM_T b) { return ::cudasim::h16_pick(a, b, false, false); }
CUDASIM_FN CUDASIM_T __hmax_nan(CUDASIM_T a, CUDASIM_T b) { return ::cudasim::h16_pick(a, b, true, true); }
CUDASIM_FN CUDASIM_T __hmin_nan(CUDASIM_T a, CUDASIM_T b) { return ::cudasim::h16_pick(a, b, false, true); }

// Pairs, lane by lane.
#define CUDASIM_PAIR2(name, scalar)                                                              \
  CUDASIM_FN CUDASIM_T2 name(CUDASIM_T2 a, CUDASIM_T2 b) { return CUDASIM_T2(scalar(a.x, b.x), scalar(a.y, b.y)); }
CUDASIM_PAIR2(__hadd2, __hadd)
CUDASIM_PAIR2(__hsub2, __hsub)
CUDASIM_PAIR2(__hmul2, __hmul)
CUDASIM_PAIR2(__h2div, __hdiv)
CUDASIM_PAIR2(__hadd2_rn, __hadd_rn)
CUDASIM_PAIR2(__hsub2_rn, __hsub_rn)
CUDASIM_PAIR2(__hmul2_rn, __hmul_rn)
CUDASIM_PAIR2(__hadd2_sat, __hadd_sat)
CUDASIM_PAIR2(__hsub2_sat, __hsub_sat)
CUDASIM_PAIR2(__hmul2_sat, __hmul_sat)
CUDASIM_PAIR2(__hmax2, __hmax)
CUDASIM_PAIR2(__hmin2, __hmin)
CUDASIM_PAIR2(__hmax2_nan, __hmax_nan)
CUDASIM_PAIR2(__hmin2_nan, __hmin_nan)
#undef CUDASIM_PAIR2
#define CUDASIM_PAIR3(name, scalar)                                                              \
  CUDASIM_FN CUDASIM_T2 name(CUDASIM_T2 a, CUDASIM_T2 b, CUDASIM_T2 c) {                         \
    return CUDASIM_T2(scalar(a.x, b.x, c.x), scalar(a.y, b.y, c.y));                             \
  }
CUDASIM_PAIR3(__hfma2, __hfma)
CUDASIM_PAIR3(__hfma2_sat, __hfma_sat)
CUDASIM_PAIR3(__hfma2_relu, __hfma_relu)
#undef CUDASIM_PAIR3
CUDASIM_FN CUDASIM_T2 __hneg2(CUDASIM_T2 a) { return CUDASIM_T2(__hneg(a.x), __hneg(a.y)); }
CUDASIM_FN CUDASIM_T2 __habs2(CUDASIM_T2 a) { return CUDASIM_T2(__habs(a.x), __habs(a.y)); }
// Complex multiply-add: (a.x + i a.y) * (b.x + i b.y) + (c.x + i c.y), in float, rounded once per part.
CUDASIM_FN CUDASIM_T2 __hcmadd(CUDASIM_T2 a, CUDASIM_T2 b, CUDASIM_T2 c) {
  using ::cudasim::h16_to_float;
  float re = fmaf(-h16_to_float(a.y), h16_to_float(b.y), fmaf(h16_to_float(a.x), h16_to_float(b.x), h16_to_float(c.x)));
  float im = fmaf(h16_to_float(a.y), h16_to_float(b.x), fmaf(h16_to_float(a.x), h16_to_float(b.y), h16_to_float(c.y)));
  return CUDASIM_T2(::cudasim::h16_round(CUDASIM_TAG, re), ::cudasim::h16_round(CUDASIM_TAG, im));
}

// ---------------------------------------------------------------------------------------------
// Comparisons: ordered ones are false when either value is NaN, unordered ones (..u) true.
CUDASIM_FN bool __hisnan(CUDASIM_T a) { return ::cudasim::h16_is_nan(a); }
CUDASIM_FN int __hisinf(CUDASIM_T a) {  // -1 for -inf, 1 for +inf, else 0
  unsigned inf = ((1u << CUDASIM_FORMAT.exp) - 1u) << CUDASIM_FORMAT.mant;
  return (a.__x & 0x7FFFu) != inf ? 0 : (a.__x & 0x8000u) ? -1 : 1;
}
#define CUDASIM_COMPARE(name, op)                                                                              \
  CUDASIM_FN bool __h##name(CUDASIM_T a, CUDASIM_T b) {                                                      \
    return !__hisnan(a) && !__hisnan(b) && ::cudasim::h16_to_float(a) op ::cudasim::h16_to_float(b);                  \
  }                                                                                                            \
  CUDASIM_FN bool __h##name##u(CUDASIM_T a, CUDASIM_T b) {                                                    \
    return __hisnan(a) || __hisnan(b) || ::cudasim::h16_to_float(a) op ::cudasim::h16_to_float(b);                    \
  }                                                                                                            \
  CUDASIM_FN CUDASIM_T2 __h##name##2(CUDASIM_T2 a, CUDASIM_T2 b) {                                            \
    return CUDASIM_N(__floats2, 2_rn)(__h##name(a.x, b.x), __h##name(a.y, b.y));                              \
  }                                                                                                            \
  CUDASIM_FN CUDASIM_T2 __h##name##u2(CUDASIM_T2 a, CUDASIM_T2 b) {                                           \
    return CUDASIM_N(__floats2, 2_rn)(__h##name##u(a.x, b.x), __h##name##u(a.y, b.y));                        \
  }                                                                                                            \
  CUDASIM_FN unsigned __h##name##2_mask(CUDASIM_T2 a, CUDASIM_T2 b) {                                         \
    return (__h##name(a.x, b.x) ? 0xFFFFu : 0u) | (__h##name(a.y, b.y) ? 0xFFFF0000u : 0u);                   \
  }                                                                                                            \
  CUDASIM_FN unsigned __h##name##u2_mask(CUDASIM_T2 a, CUDASIM_T2 b) {                                        \
    return (__h##name##u(a.x, b.x) ? 0xFFFFu : 0u) | (__h##name##u(a.y, b.y) ? 0xFFFF0000u : 0u);             \
  }                                                                                                            \
  CUDASIM_FN bool __hb##name##2(CUDASIM_T2 a, CUDASIM_T2 b) { return __h##name(a.x, b.x) && __h##name(a.y, b.y); } \
  CUDASIM_FN bool __hb##name##u2(CUDASIM_T2 a, CUDASIM_T2 b) { return __h##name##u(a.x, b.x) && __h##name##u(a.y, b.y); }
CUDASIM_COMPARE(eq, ==)
CUDASIM_COMPARE(ne, !=)
CUDASIM_COMPARE(lt, <)
CUDASIM_COMPARE(le, <=)
CUDASIM_COMPARE(gt, >)
CUDASIM_COMPARE(ge, >=)
#undef CUDASIM_COMPARE
CUDASIM_FN CUDASIM_T2 __hisnan2(CUDASIM_T2 a) { return CUDASIM_N(__floats2, 2_rn)(__hisnan(a.x), __hisnan(a.y)); }

// ---------------------------------------------------------------------------------------------
// Math functions, through float: hexp, hsqrt, h2exp, ...
#define CUDASIM_MATH(name, expr)                                                                             \
  CUDASIM_FN CUDASIM_T h##name(CUDASIM_T a) {                                                                \
    float x = ::cudasim::h16_to_float(a);                                                                        \
    return ::cudasim::h16_round(CUDASIM_TAG, expr);                                                         \
  }                                                                                                          \
  CUDASIM_FN CUDASIM_T2 h2##name(CUDASIM_T2 a) { return CUDASIM_T2(h##name(a.x), h##name(a.y)); }
CUDASIM_MATH(exp, expf(x))
CUDASIM_MATH(exp2, exp2f(x))
CUDASIM_MATH(exp10, powf(10.0f, x))
CUDASIM_MATH(log, logf(x))
CUDASIM_MATH(log2, log2f(x))
CUDASIM_MATH(log10, log10f(x))
CUDASIM_MATH(cos, cosf(x))
CUDASIM_MATH(sin, sinf(x))
CUDASIM_MATH(rcp, 1.0f / x)
CUDASIM_MATH(rsqrt, 1.0f / sqrtf(x))
CUDASIM_MATH(sqrt, sqrtf(x))
CUDASIM_MATH(ceil, ceilf(x))
CUDASIM_MATH(floor, floorf(x))
CUDASIM_MATH(rint, nearbyintf(x))
CUDASIM_MATH(trunc, truncf(x))
CUDASIM_MATH(tanh, tanhf(x))
CUDASIM_MATH(tanh_approx, tanhf(x))
#undef CUDASIM_MATH

// ---------------------------------------------------------------------------------------------
// atomicAdd (sm_70 and later for __half2, sm_80 for the bfloat16 types). Each element is added
// atomically on its own, as on the GPU. Non-templates, so they win over cudasim.h's template.
CUDASIM_INTERNAL inline CUDASIM_T atomicAdd(CUDASIM_T* p, CUDASIM_T v) {
  return ::cudasim::atomic_add_h16(p, v, [](CUDASIM_T a, CUDASIM_T b) { return __hadd(a, b); },
                                   __builtin_return_address(0));
}
CUDASIM_INTERNAL inline CUDASIM_T2 atomicAdd(CUDASIM_T2* p, CUDASIM_T2 v) {
  return ::cudasim::atomic_add_h16(p, v, [](CUDASIM_T2 a, CUDASIM_T2 b) { return __hadd2(a, b); },
                                   __builtin_return_address(0));
}

// ---------------------------------------------------------------------------------------------
// Operators and implicit conversions, where CUDA's header has them.
#if CUDASIM_CONVERSIONS
inline CUDASIM_T::CUDASIM_T(float f) : __x(CUDASIM_FROM_FLOAT(f)) {}
inline CUDASIM_T::CUDASIM_T(double f) : __x(CUDASIM_N(__double2, )(f).__x) {}
inline CUDASIM_T::CUDASIM_T(short v) : __x(CUDASIM_N(__short2, _rn)(v).__x) {}
inline CUDASIM_T::CUDASIM_T(unsigned short v) : __x(CUDASIM_N(__ushort2, _rn)(v).__x) {}
inline CUDASIM_T::CUDASIM_T(int v) : __x(CUDASIM_N(__int2, _rn)(v).__x) {}
inline CUDASIM_T::CUDASIM_T(unsigned int v) : __x(CUDASIM_N(__uint2, _rn)(v).__x) {}
inline CUDASIM_T::CUDASIM_T(long v) : __x(CUDASIM_N(__ll2, _rn)(v).__x) {}
inline CUDASIM_T::CUDASIM_T(unsigned long v) : __x(CUDASIM_N(__ull2, _rn)(v).__x) {}
inline CUDASIM_T::CUDASIM_T(long long v) : __x(CUDASIM_N(__ll2, _rn)(v).__x) {}
inline CUDASIM_T::CUDASIM_T(unsigned long long v) : __x(CUDASIM_N(__ull2, _rn)(v).__x) {}
inline CUDASIM_T::operator signed char() const { return CUDASIM_N(__, 2char_rz)(*this); }
inline CUDASIM_T::operator unsigned char() const { return CUDASIM_N(__, 2uchar_rz)(*this); }
inline CUDASIM_T::operator char() const { return static_cast<char>(CUDASIM_N(__, 2char_rz)(*this)); }
inline CUDASIM_T::operator short() const { return CUDASIM_N(__, 2short_rz)(*this); }
inline CUDASIM_T::operator unsigned short() const { return CUDASIM_N(__, 2ushort_rz)(*this); }
inline CUDASIM_T::operator int() const { return CUDASIM_N(__, 2int_rz)(*this); }
inline CUDASIM_T::operator unsigned int() const { return CUDASIM_N(__, 2uint_rz)(*this); }
inline CUDASIM_T::operator long() const { return CUDASIM_N(__, 2ll_rz)(*this); }
inline CUDASIM_T::operator unsigned long() const { return CUDASIM_N(__, 2ull_rz)(*this); }
inline CUDASIM_T::operator long long() const { return CUDASIM_N(__, 2ll_rz)(*this); }
inline CUDASIM_T::operator unsigned long long() const { return CUDASIM_N(__, 2ull_rz)(*this); }
#endif

#if CUDASIM_OPERATORS
CUDASIM_FN CUDASIM_T operator+(const CUDASIM_T& a, const CUDASIM_T& b) { return __hadd(a, b); }
CUDASIM_FN CUDASIM_T operator-(const CUDASIM_T& a, const CUDASIM_T& b) { return __hsub(a, b); }
CUDASIM_FN CUDASIM_T operator*(const CUDASIM_T& a, const CUDASIM_T& b) { return __hmul(a, b); }
CUDASIM_FN CUDASIM_T operator/(const CUDASIM_T& a, const CUDASIM_T& b) { return __hdiv(a, b); }
CUDASIM_FN CUDASIM_T& operator+=(CUDASIM_T& a, const CUDASIM_T& b) { return a = __hadd(a, b); }
CUDASIM_FN CUDASIM_T& operator-=(CUDASIM_T& a, const CUDASIM_T& b) { return a = __hsub(a, b); }
CUDASIM_FN CUDASIM_T& operator*=(CUDASIM_T& a, const CUDASIM_T& b) { return a = __hmul(a, b); }
CUDASIM_FN CUDASIM_T& operator/=(CUDASIM_T& a, const CUDASIM_T& b) { return a = __hdiv(a, b); }
CUDASIM_FN CUDASIM_T& operator++(CUDASIM_T& a) { return a = __hadd(a, CUDASIM_N(__float2, )(1.0f)); }
CUDASIM_FN CUDASIM_T& operator--(CUDASIM_T& a) { return a = __hsub(a, CUDASIM_N(__float2, )(1.0f)); }
CUDASIM_FN CUDASIM_T operator++(CUDASIM_T& a, int) { CUDASIM_T old = a; ++a; return old; }
CUDASIM_FN CUDASIM_T operator--(CUDASIM_T& a, int) { CUDASIM_T old = a; --a; return old; }
CUDASIM_FN CUDASIM_T operator+(const CUDASIM_T& a) { return a; }
CUDASIM_FN CUDASIM_T operator-(const CUDASIM_T& a) { return __hneg(a); }
CUDASIM_FN bool operator==(const CUDASIM_T& a, const CUDASIM_T& b) { return __heq(a, b); }
CUDASIM_FN bool operator!=(const CUDASIM_T& a, const CUDASIM_T& b) { return __hneu(a, b); }
CUDASIM_FN bool operator<(const CUDASIM_T& a, const CUDASIM_T& b) { return __hlt(a, b); }
CUDASIM_FN bool operator<=(const CUDASIM_T& a, const CUDASIM_T& b) { return __hle(a, b); }
CUDASIM_FN bool operator>(const CUDASIM_T& a, const CUDASIM_T& b) { return __hgt(a, b); }
CUDASIM_FN bool operator>=(const CUDASIM_T& a, const CUDASIM_T& b) { return __hge(a, b); }
#endif

#if CUDASIM_OPERATORS2
CUDASIM_FN CUDASIM_T2 operator+(const CUDASIM_T2& a, const CUDASIM_T2& b) { return __hadd2(a, b); }
CUDASIM_FN CUDASIM_T2 operator-(const CUDASIM_T2& a, const CUDASIM_T2& b) { return __hsub2(a, b); }
CUDASIM_FN CUDASIM_T2 operator*(const CUDASIM_T2& a, const CUDASIM_T2& b) { return __hmul2(a, b); }
CUDASIM_FN CUDASIM_T2 operator/(const CUDASIM_T2& a, const CUDASIM_T2& b) { return __h2div(a, b); }
CUDASIM_FN CUDASIM_T2& operator+=(CUDASIM_T2& a, const CUDASIM_T2& b) { return a = __hadd2(a, b); }
CUDASIM_FN CUDASIM_T2& operator-=(CUDASIM_T2& a, const CUDASIM_T2& b) { return a = __hsub2(a, b); }
CUDASIM_FN CUDASIM_T2& operator*=(CUDASIM_T2& a, const CUDASIM_T2& b) { return a = __hmul2(a, b); }
CUDASIM_FN CUDASIM_T2& operator/=(CUDASIM_T2& a, const CUDASIM_T2& b) { return a = __h2div(a, b); }
CUDASIM_FN CUDASIM_T2& operator++(CUDASIM_T2& a) { return a = __hadd2(a, CUDASIM_N(__float2, 2_rn)(1.0f)); }
CUDASIM_FN CUDASIM_T2& operator--(CUDASIM_T2& a) { return a = __hsub2(a, CUDASIM_N(__float2, 2_rn)(1.0f)); }
CUDASIM_FN CUDASIM_T2 operator++(CUDASIM_T2& a, int) { CUDASIM_T2 old = a; ++a; return old; }
CUDASIM_FN CUDASIM_T2 operator--(CUDASIM_T2& a, int) { CUDASIM_T2 old = a; --a; return old; }
CUDASIM_FN CUDASIM_T2 operator+(const CUDASIM_T2& a) { return a; }
CUDASIM_FN CUDASIM_T2 operator-(const CUDASIM_T2& a) { return __hneg2(a); }
CUDASIM_FN bool operator==(const CUDASIM_T2& a, const CUDASIM_T2& b) { return __hbeq2(a, b); }
CUDASIM_FN bool operator!=(const CUDASIM_T2& a, const CUDASIM_T2& b) { return __hbneu2(a, b); }
CUDASIM_FN bool operator<(const CUDASIM_T2& a, const CUDASIM_T2& b) { return __hblt2(a, b); }
CUDASIM_FN bool operator<=(const CUDASIM_T2& a, const CUDASIM_T2& b) { return __hble2(a, b); }
CUDASIM_FN bool operator>(const CUDASIM_T2& a, const CUDASIM_T2& b) { return __hbgt2(a, b); }
CUDASIM_FN bool operator>=(const CUDASIM_T2& a, const CUDASIM_T2& b) { return __hbge2(a, b); }
#endif

// CUDA's headers give these types shuffle overloads (__shfl*_sync): cudasim.h's shfl_ takes them.
namespace cudasim {
template <>
inline constexpr bool shuffle_class<CUDASIM_T> = true;
template <>
inline constexpr bool shuffle_class<CUDASIM_T2> = true;
}  // namespace cudasim

#undef CUDASIM_T
#undef CUDASIM_T2
#undef CUDASIM_RAW
#undef CUDASIM_RAW2
#undef CUDASIM_NAME
#undef CUDASIM_FORMAT
#undef CUDASIM_TO_FLOAT
#undef CUDASIM_FROM_FLOAT
#undef CUDASIM_OTHER
#undef CUDASIM_CONVERSIONS
#undef CUDASIM_OPERATORS
#undef CUDASIM_OPERATORS2
#undef CUDASIM_TAG
#undef CUDASIM_FN
#undef CUDASIM_N
#undef CUDASIM_N_
#undef CUDASIM_N__
#undef CUDASIM_N2
#undef CUDASIM_N2_
#undef CUDASIM_N2__
