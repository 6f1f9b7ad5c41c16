// cuda_fp8.h for the simulator: the 8-bit float types of sm_89 and later, __nv_fp8_e4m3 (4 exponent
// bits, 3 mantissa bits, no infinity, largest 448) and __nv_fp8_e5m2 (5 and 2, IEEE-like, largest
// 57344), single and in pairs and fours, with cuda_fp8.h's conversion functions. Conversions to fp8
// round to nearest even; out of range, __NV_SATFINITE gives the largest finite value and __NV_NOSAT
// what the format has (e4m3: NaN, e5m2: infinity); the classes' constructors saturate, as CUDA's do.
// Conversions from fp8 are exact. As with nvcc, __CUDA_NO_FP8_CONVERSIONS__ removes the classes'
// conversions. Not simulated: the e8m0 scale type (__nv_fp8_e8m0 and __nv_cvt_*_e8m0*).
#pragma once
#include "cuda_bf16.h"

typedef unsigned char __nv_fp8_storage_t;
typedef unsigned short int __nv_fp8x2_storage_t;
typedef unsigned int __nv_fp8x4_storage_t;
typedef enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE } __nv_saturation_t;
typedef enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 } __nv_fp8_interpretation_t;

// The conversion functions and the classes are ordinary inline code (see cudasim_half_api.h: an
// instrumented build must see the learner's stores of what they return); namespace cudasim's are the
// simulator's.
namespace cudasim {
CUDASIM_INTERNAL inline const SmallFormat& fp8_format(__nv_fp8_interpretation_t kind) {
  return kind == __NV_E4M3 ? kE4M3Format : kE5M2Format;
}
inline __nv_fp8_storage_t to_fp8(double v, __nv_saturation_t sat, __nv_fp8_interpretation_t kind) {
  return static_cast<__nv_fp8_storage_t>(round_double(v, Round::Nearest, fp8_format(kind), sat == __NV_SATFINITE));
}
CUDASIM_INTERNAL inline float fp8_to_float(__nv_fp8_storage_t b, __nv_fp8_interpretation_t kind) {
  if (kind == __NV_E5M2) return half_bits_to_float(static_cast<unsigned short>(b << 8));  // the top byte of a half
  const unsigned exp = (b >> 3) & 0xFu, mant = b & 7u;
  if (exp == 0xFu && mant == 7u) return std::nanf("");
  float mag = exp == 0 ? std::ldexp(static_cast<float>(mant), -9) : std::ldexp(1.0f + mant / 8.0f, static_cast<int>(exp) - 7);
  return (b & 0x80u) ? -mag : mag;
}
}  // namespace cudasim

inline __nv_fp8_storage_t __nv_cvt_double_to_fp8(double x, __nv_saturation_t sat,
                                                                 __nv_fp8_interpretation_t kind) {
  return ::cudasim::to_fp8(x, sat, kind);
}
inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t sat,
                                                                __nv_fp8_interpretation_t kind) {
  return ::cudasim::to_fp8(x, sat, kind);
}
inline __nv_fp8_storage_t __nv_cvt_halfraw_to_fp8(__half_raw x, __nv_saturation_t sat,
                                                                  __nv_fp8_interpretation_t kind) {
  return ::cudasim::to_fp8(::cudasim::half_bits_to_float(x.x), sat, kind);
}
inline __nv_fp8_storage_t __nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw x, __nv_saturation_t sat,
                                                                      __nv_fp8_interpretation_t kind) {
  return ::cudasim::to_fp8(::cudasim::bf16_bits_to_float(x.x), sat, kind);
}
// Pairs: .x in the low byte.
inline __nv_fp8x2_storage_t __nv_cvt_double2_to_fp8x2(double2 x, __nv_saturation_t sat,
                                                                      __nv_fp8_interpretation_t kind) {
  return static_cast<__nv_fp8x2_storage_t>(::cudasim::to_fp8(x.x, sat, kind) | ::cudasim::to_fp8(x.y, sat, kind) << 8);
}
inline __nv_fp8x2_storage_t __nv_cvt_float2_to_fp8x2(float2 x, __nv_saturation_t sat,
                                                                     __nv_fp8_interpretation_t kind) {
  return static_cast<__nv_fp8x2_storage_t>(::cudasim::to_fp8(x.x, sat, kind) | ::cudasim::to_fp8(x.y, sat, kind) << 8);
}
inline __nv_fp8x2_storage_t __nv_cvt_halfraw2_to_fp8x2(__half2_raw x, __nv_saturation_t sat,
                                                                       __nv_fp8_interpretation_t kind) {
  return static_cast<__nv_fp8x2_storage_t>(__nv_cvt_halfraw_to_fp8(__half_raw{x.x}, sat, kind) |
                                           __nv_cvt_halfraw_to_fp8(__half_raw{x.y}, sat, kind) << 8);
}
inline __nv_fp8x2_storage_t __nv_cvt_bfloat16raw2_to_fp8x2(__nv_bfloat162_raw x, __nv_saturation_t sat,
                                                                           __nv_fp8_interpretation_t kind) {
  return static_cast<__nv_fp8x2_storage_t>(__nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw{x.x}, sat, kind) |
                                           __nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw{x.y}, sat, kind) << 8);
}
inline __half_raw __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t x, __nv_fp8_interpretation_t kind) {
  if (kind == __NV_E5M2) return __half_raw{static_cast<unsigned short>(x << 8)};
  return __half_raw{__half_as_ushort(__float2half_rn(::cudasim::fp8_to_float(x, kind)))};
}
inline __half2_raw __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t x, __nv_fp8_interpretation_t kind) {
  return __half2_raw{__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(x & 0xFFu), kind).x,
                     __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(x >> 8), kind).x};
}

// The classes, one set per interpretation.
#define CUDASIM_FP8_CLASSES(SUFFIX, KIND)                                                                           \
  struct alignas(1) __nv_fp8_##SUFFIX {                                                                            \
    __nv_fp8_storage_t __x;                                                                                        \
    __nv_fp8_##SUFFIX() = default;                                                                                 \
    CUDASIM_FP8_SCALAR_CONVERSIONS(SUFFIX, KIND)                                                                   \
  };                                                                                                               \
  struct alignas(2) __nv_fp8x2_##SUFFIX {                                                                          \
    __nv_fp8x2_storage_t __x;                                                                                      \
    __nv_fp8x2_##SUFFIX() = default;                                                                               \
    CUDASIM_FP8_PAIR_CONVERSIONS(SUFFIX, KIND)                                                                     \
  };                                                                                                               \
  struct alignas(4) __nv_fp8x4_##SUFFIX {                                                                          \
    __nv_fp8x4_storage_t __x;                                                                                      \
    __nv_fp8x4_##SUFFIX() = default;                                                                               \
    CUDASIM_FP8_FOUR_CONVERSIONS(SUFFIX, KIND)                                                                     \
  };

#if defined(__CUDA_NO_FP8_CONVERSIONS__)
#define CUDASIM_FP8_SCALAR_CONVERSIONS(SUFFIX, KIND)
#define CUDASIM_FP8_PAIR_CONVERSIONS(SUFFIX, KIND)
#define CUDASIM_FP8_FOUR_CONVERSIONS(SUFFIX, KIND)
#else
// From wider types with __NV_SATFINITE; integers through float. To other types exactly, and to
// integers towards zero, saturating, NaN to 0 (0x8000000000000000 for 64 bits; ::cudasim::to_integer).
#define CUDASIM_FP8_SCALAR_CONVERSIONS(SUFFIX, KIND)                                                                  \
  explicit __nv_fp8_##SUFFIX(const __half f)                                                       \
      : __x(__nv_cvt_halfraw_to_fp8(static_cast<__half_raw>(f), __NV_SATFINITE, KIND)) {}                          \
  explicit __nv_fp8_##SUFFIX(const __nv_bfloat16 f)                                                \
      : __x(__nv_cvt_bfloat16raw_to_fp8(static_cast<__nv_bfloat16_raw>(f), __NV_SATFINITE, KIND)) {}               \
  explicit __nv_fp8_##SUFFIX(const float f) : __x(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, KIND)) {} \
  explicit __nv_fp8_##SUFFIX(const double f) : __x(__nv_cvt_double_to_fp8(f, __NV_SATFINITE, KIND)) {} \
  __nv_fp8_##SUFFIX(const unsigned short v) : __nv_fp8_##SUFFIX(static_cast<float>(v)) {}         \
  explicit __nv_fp8_##SUFFIX(const unsigned int v) : __nv_fp8_##SUFFIX(static_cast<float>(v)) {}  \
  explicit __nv_fp8_##SUFFIX(const unsigned long v) : __nv_fp8_##SUFFIX(static_cast<float>(v)) {} \
  __nv_fp8_##SUFFIX(const unsigned long long v) : __nv_fp8_##SUFFIX(static_cast<float>(v)) {}     \
  explicit __nv_fp8_##SUFFIX(const short v) : __nv_fp8_##SUFFIX(static_cast<float>(v)) {}         \
  explicit __nv_fp8_##SUFFIX(const int v) : __nv_fp8_##SUFFIX(static_cast<float>(v)) {}           \
  explicit __nv_fp8_##SUFFIX(const long v) : __nv_fp8_##SUFFIX(static_cast<float>(v)) {}          \
  explicit __nv_fp8_##SUFFIX(const long long v) : __nv_fp8_##SUFFIX(static_cast<float>(v)) {}     \
  explicit operator float() const { return ::cudasim::fp8_to_float(__x, KIND); }                    \
  explicit operator double() const { return ::cudasim::fp8_to_float(__x, KIND); }                   \
  explicit operator __half() const { return __half(__nv_cvt_fp8_to_halfraw(__x, KIND)); }          \
  explicit operator __nv_bfloat16() const {                                                        \
    return __float2bfloat16_rn(::cudasim::fp8_to_float(__x, KIND));                                                 \
  }                                                                                                                 \
  explicit operator bool() const { return (__x & 0x7Fu) != 0u; }                                   \
  CUDASIM_FP8_TO_INT(unsigned char, KIND) CUDASIM_FP8_TO_INT(signed char, KIND) CUDASIM_FP8_TO_INT(char, KIND)                        \
  CUDASIM_FP8_TO_INT(unsigned short, KIND) CUDASIM_FP8_TO_INT(short, KIND) CUDASIM_FP8_TO_INT(unsigned int, KIND)                     \
  CUDASIM_FP8_TO_INT(int, KIND) CUDASIM_FP8_TO_INT(unsigned long, KIND) CUDASIM_FP8_TO_INT(long, KIND)                                \
  CUDASIM_FP8_TO_INT(unsigned long long, KIND) CUDASIM_FP8_TO_INT(long long, KIND)
#define CUDASIM_FP8_TO_INT(I, KIND)                                                                                      \
  explicit operator I() const {                                                                     \
    return ::cudasim::to_integer<I>(::cudasim::fp8_to_float(__x, KIND), ::cudasim::Round::Zero);                   \
  }
#define CUDASIM_FP8_PAIR_CONVERSIONS(SUFFIX, KIND)                                                                    \
  explicit __nv_fp8x2_##SUFFIX(const __half2 f)                                                    \
      : __x(__nv_cvt_halfraw2_to_fp8x2(static_cast<__half2_raw>(f), __NV_SATFINITE, KIND)) {}                      \
  explicit __nv_fp8x2_##SUFFIX(const __nv_bfloat162 f)                                             \
      : __x(__nv_cvt_bfloat16raw2_to_fp8x2(static_cast<__nv_bfloat162_raw>(f), __NV_SATFINITE, KIND)) {}           \
  explicit __nv_fp8x2_##SUFFIX(const float2 f) : __x(__nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, KIND)) {} \
  explicit __nv_fp8x2_##SUFFIX(const double2 f) : __x(__nv_cvt_double2_to_fp8x2(f, __NV_SATFINITE, KIND)) {} \
  explicit operator __half2() const { return __half2(__nv_cvt_fp8x2_to_halfraw2(__x, KIND)); }     \
  explicit operator float2() const {                                                               \
    return make_float2(::cudasim::fp8_to_float(static_cast<__nv_fp8_storage_t>(__x & 0xFFu), KIND),               \
                       ::cudasim::fp8_to_float(static_cast<__nv_fp8_storage_t>(__x >> 8), KIND));                  \
  }
#define CUDASIM_FP8_FOUR_CONVERSIONS(SUFFIX, KIND)                                                                    \
  explicit __nv_fp8x4_##SUFFIX(const __half2 lo, const __half2 hi)                                 \
      : __x(__nv_cvt_halfraw2_to_fp8x2(static_cast<__half2_raw>(lo), __NV_SATFINITE, KIND) |                       \
            static_cast<unsigned>(__nv_cvt_halfraw2_to_fp8x2(static_cast<__half2_raw>(hi), __NV_SATFINITE, KIND)) << 16) {} \
  explicit __nv_fp8x4_##SUFFIX(const __nv_bfloat162 lo, const __nv_bfloat162 hi)                   \
      : __x(__nv_cvt_bfloat16raw2_to_fp8x2(static_cast<__nv_bfloat162_raw>(lo), __NV_SATFINITE, KIND) |            \
            static_cast<unsigned>(__nv_cvt_bfloat16raw2_to_fp8x2(static_cast<__nv_bfloat162_raw>(hi), __NV_SATFINITE, \
                                                                 KIND)) << 16) {}                                   \
  explicit __nv_fp8x4_##SUFFIX(const float4 f)                                                     \
      : __x(__nv_cvt_float2_to_fp8x2(make_float2(f.x, f.y), __NV_SATFINITE, KIND) |                                 \
            static_cast<unsigned>(__nv_cvt_float2_to_fp8x2(make_float2(f.z, f.w), __NV_SATFINITE, KIND)) << 16) {} \
  explicit __nv_fp8x4_##SUFFIX(const double4 f)                                                    \
      : __x(__nv_cvt_double2_to_fp8x2(make_double2(f.x, f.y), __NV_SATFINITE, KIND) |                               \
            static_cast<unsigned>(__nv_cvt_double2_to_fp8x2(make_double2(f.z, f.w), __NV_SATFINITE, KIND)) << 16) {} \
  explicit operator float4() const {                                                               \
    float v[4];                                                                                                     \
    for (int i = 0; i < 4; ++i)                                                                                     \
      v[i] = ::cudasim::fp8_to_float(static_cast<__nv_fp8_storage_t>((__x >> (8 * i)) & 0xFFu), KIND);             \
    return make_float4(v[0], v[1], v[2], v[3]);                                                                     \
  }
#endif

CUDASIM_FP8_CLASSES(e4m3, __NV_E4M3)
CUDASIM_FP8_CLASSES(e5m2, __NV_E5M2)
#undef CUDASIM_FP8_CLASSES
#undef CUDASIM_FP8_SCALAR_CONVERSIONS
#undef CUDASIM_FP8_PAIR_CONVERSIONS
#undef CUDASIM_FP8_FOUR_CONVERSIONS
#undef CUDASIM_FP8_TO_INT
