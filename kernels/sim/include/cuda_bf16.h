// cuda_bf16.h for the simulator: __nv_bfloat16 with CUDA's layout, names and rounding.
#pragma once
#include "cuda_fp16.h"

namespace cudasim {
inline unsigned short float_to_bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7F800000u) == 0x7F800000u && (x & 0x7FFFFFu)) return static_cast<unsigned short>((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<unsigned short>(x >> 16);
}
inline float bf16_bits_to_float(unsigned short h) {
  uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
}  // namespace cudasim

struct __nv_bfloat16_raw { unsigned short x; };
struct alignas(2) __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  constexpr __nv_bfloat16(const __nv_bfloat16_raw& r) : __x(r.x) {}
  operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
#if !defined(__CUDA_NO_BFLOAT16_CONVERSIONS__)
  __nv_bfloat16(float f) : __x(::cudasim::float_to_bf16_bits(f)) {}
  __nv_bfloat16(double f) : __x(::cudasim::float_to_bf16_bits(static_cast<float>(f))) {}
  operator float() const { return ::cudasim::bf16_bits_to_float(__x); }
#endif
};
typedef __nv_bfloat16 nv_bfloat16;
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
  __nv_bfloat162() = default;
  constexpr __nv_bfloat162(const __nv_bfloat16& a, const __nv_bfloat16& b) : x(a), y(b) {}
};
typedef __nv_bfloat162 nv_bfloat162;

inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short v) { return __nv_bfloat16(__nv_bfloat16_raw{v}); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __ushort_as_bfloat16(::cudasim::float_to_bf16_bits(f)); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return ::cudasim::bf16_bits_to_float(h.__x); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162(__float2bfloat16(a), __float2bfloat16(b)); }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return make_float2(__bfloat162float(h.x), __bfloat162float(h.y)); }
inline float __low2float(__nv_bfloat162 h) { return __bfloat162float(h.x); }
inline float __high2float(__nv_bfloat162 h) { return __bfloat162float(h.y); }

#define CUDASIM_B1(name, expr) inline __nv_bfloat16 name(__nv_bfloat16 a, __nv_bfloat16 b) { float x = __bfloat162float(a), y = __bfloat162float(b); return __float2bfloat16(expr); }
CUDASIM_B1(__hadd, x + y)
CUDASIM_B1(__hsub, x - y)
CUDASIM_B1(__hmul, x * y)
CUDASIM_B1(__hdiv, x / y)
CUDASIM_B1(__hmax, fmaxf(x, y))
CUDASIM_B1(__hmin, fminf(x, y))
#undef CUDASIM_B1
inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
  return __float2bfloat16(fmaf(__bfloat162float(a), __bfloat162float(b), __bfloat162float(c)));
}
inline __nv_bfloat16 __hneg(__nv_bfloat16 a) { return __ushort_as_bfloat16(static_cast<unsigned short>(a.__x ^ 0x8000u)); }
inline __nv_bfloat16 hexp(__nv_bfloat16 a) { return __float2bfloat16(expf(__bfloat162float(a))); }

inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) { __nv_bfloat16 o = *p; *p = __hadd(o, v); return o; }

#if !defined(__CUDA_NO_BFLOAT16_OPERATORS__)
inline __nv_bfloat16 operator+(__nv_bfloat16 a, __nv_bfloat16 b) { return __hadd(a, b); }
inline __nv_bfloat16 operator-(__nv_bfloat16 a, __nv_bfloat16 b) { return __hsub(a, b); }
inline __nv_bfloat16 operator*(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmul(a, b); }
inline __nv_bfloat16 operator/(__nv_bfloat16 a, __nv_bfloat16 b) { return __hdiv(a, b); }
inline __nv_bfloat16& operator+=(__nv_bfloat16& a, __nv_bfloat16 b) { return a = __hadd(a, b); }
inline __nv_bfloat16& operator*=(__nv_bfloat16& a, __nv_bfloat16 b) { return a = __hmul(a, b); }
#endif

// CUDA's headers give these shuffle overloads (__shfl*_sync): cudasim.h's shfl_ takes them.
namespace cudasim {
template <>
inline constexpr bool shuffle_class<__nv_bfloat16> = true;
template <>
inline constexpr bool shuffle_class<__nv_bfloat162> = true;
}  // namespace cudasim
