// cuda_fp16.h for the simulator: __half and __half2 with CUDA's layout, names and rounding.
// As with nvcc, the operators and implicit conversions are off when PyTorch's build defines
// __CUDA_NO_HALF_OPERATORS__ / __CUDA_NO_HALF_CONVERSIONS__; use __hadd, __half2float, ...
#pragma once
#include "cudasim.h"
#include <cstdint>
#include <cstring>
#include <math.h>

namespace cudasim {
inline unsigned short float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xFFu, mant = x & 0x7FFFFFu;
  if (exp == 0xFF) return static_cast<unsigned short>(sign | 0x7C00u | (mant ? 0x200u | (mant >> 13) : 0u));
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<unsigned short>(sign | 0x7C00u);
  if (e <= 0) {  // a subnormal half, or zero
    if (e < -10) return static_cast<unsigned short>(sign);
    mant |= 0x800000u;
    int shift = 14 - e;
    uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;  // round to nearest even
    return static_cast<unsigned short>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13), rem = mant & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry may round up to infinity
  return static_cast<unsigned short>(sign | h);
}
inline float half_bits_to_float(unsigned short h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu, x;
  if (exp == 0x1F) {
    x = sign | 0x7F800000u | (mant << 13);
  } else if (exp == 0) {
    float f = static_cast<float>(mant) * 5.9604644775390625e-08f;  // mant * 2^-24
    std::memcpy(&x, &f, 4);
    x |= sign;
  } else {
    x = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
}  // namespace cudasim

struct __half_raw { unsigned short x; };
struct __half2_raw { unsigned short x, y; };

struct alignas(2) __half {
  unsigned short __x;
  __half() = default;
  constexpr __half(const __half_raw& r) : __x(r.x) {}
  operator __half_raw() const { return __half_raw{__x}; }
#if !defined(__CUDA_NO_HALF_CONVERSIONS__)
  __half(float f) : __x(::cudasim::float_to_half_bits(f)) {}
  __half(double f) : __x(::cudasim::float_to_half_bits(static_cast<float>(f))) {}
  __half(int v) : __x(::cudasim::float_to_half_bits(static_cast<float>(v))) {}
  operator float() const { return ::cudasim::half_bits_to_float(__x); }
#endif
};
typedef __half half;

struct alignas(4) __half2 {
  __half x, y;
  __half2() = default;
  constexpr __half2(const __half& a, const __half& b) : x(a), y(b) {}
};
typedef __half2 half2;

inline __half __ushort_as_half(unsigned short v) { return __half(__half_raw{v}); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __short_as_half(short v) { return __ushort_as_half(static_cast<unsigned short>(v)); }
inline short __half_as_short(__half h) { return static_cast<short>(h.__x); }
inline __half __float2half(float f) { return __ushort_as_half(::cudasim::float_to_half_bits(f)); }
inline __half __float2half_rn(float f) { return __float2half(f); }
inline __half __double2half(double f) { return __float2half(static_cast<float>(f)); }
inline float __half2float(__half h) { return ::cudasim::half_bits_to_float(h.__x); }
inline __half __int2half_rn(int v) { return __float2half(static_cast<float>(v)); }
inline int __half2int_rz(__half h) { return static_cast<int>(__half2float(h)); }
inline int __half2int_rn(__half h) { return static_cast<int>(nearbyintf(__half2float(h))); }

#define CUDASIM_H1(name, expr) inline __half name(__half a, __half b) { float x = __half2float(a), y = __half2float(b); return __float2half(expr); }
CUDASIM_H1(__hadd, x + y)
CUDASIM_H1(__hsub, x - y)
CUDASIM_H1(__hmul, x * y)
CUDASIM_H1(__hdiv, x / y)
CUDASIM_H1(__hmax, fmaxf(x, y))
CUDASIM_H1(__hmin, fminf(x, y))
#undef CUDASIM_H1
inline __half __hfma(__half a, __half b, __half c) { return __float2half(fmaf(__half2float(a), __half2float(b), __half2float(c))); }
inline __half __hneg(__half a) { return __ushort_as_half(static_cast<unsigned short>(a.__x ^ 0x8000u)); }
inline __half __habs(__half a) { return __ushort_as_half(static_cast<unsigned short>(a.__x & 0x7FFFu)); }
inline bool __heq(__half a, __half b) { return __half2float(a) == __half2float(b); }
inline bool __hne(__half a, __half b) { return __half2float(a) != __half2float(b); }
inline bool __hlt(__half a, __half b) { return __half2float(a) < __half2float(b); }
inline bool __hle(__half a, __half b) { return __half2float(a) <= __half2float(b); }
inline bool __hgt(__half a, __half b) { return __half2float(a) > __half2float(b); }
inline bool __hge(__half a, __half b) { return __half2float(a) >= __half2float(b); }
inline bool __hisnan(__half a) { return (a.__x & 0x7C00u) == 0x7C00u && (a.__x & 0x3FFu); }
inline bool __hisinf(__half a) { return (a.__x & 0x7FFFu) == 0x7C00u; }
inline __half hexp(__half a) { return __float2half(expf(__half2float(a))); }
inline __half hlog(__half a) { return __float2half(logf(__half2float(a))); }
inline __half hsqrt(__half a) { return __float2half(sqrtf(__half2float(a))); }
inline __half hrsqrt(__half a) { return __float2half(1.0f / sqrtf(__half2float(a))); }
inline __half htanh(__half a) { return __float2half(tanhf(__half2float(a))); }

inline __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
inline __half2 __half2half2(__half a) { return __half2(a, a); }
inline __half2 __float2half2_rn(float f) { return __half2(__float2half(f), __float2half(f)); }
inline __half2 __floats2half2_rn(float a, float b) { return __half2(__float2half(a), __float2half(b)); }
inline float2 __half22float2(__half2 h) { return make_float2(__half2float(h.x), __half2float(h.y)); }
inline __half2 __float22half2_rn(float2 f) { return __floats2half2_rn(f.x, f.y); }
inline float __low2float(__half2 h) { return __half2float(h.x); }
inline float __high2float(__half2 h) { return __half2float(h.y); }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline __half2 __hadd2(__half2 a, __half2 b) { return __half2(__hadd(a.x, b.x), __hadd(a.y, b.y)); }
inline __half2 __hsub2(__half2 a, __half2 b) { return __half2(__hsub(a.x, b.x), __hsub(a.y, b.y)); }
inline __half2 __hmul2(__half2 a, __half2 b) { return __half2(__hmul(a.x, b.x), __hmul(a.y, b.y)); }
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) { return __half2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); }

// atomicAdd on halves (sm_70 and later); non-templates, so they win over cudasim.h's template.
inline __half atomicAdd(__half* p, __half v) { __half o = *p; *p = __hadd(o, v); return o; }
inline __half2 atomicAdd(__half2* p, __half2 v) { __half2 o = *p; *p = __hadd2(o, v); return o; }

#if !defined(__CUDA_NO_HALF_OPERATORS__)
inline __half operator+(__half a, __half b) { return __hadd(a, b); }
inline __half operator-(__half a, __half b) { return __hsub(a, b); }
inline __half operator*(__half a, __half b) { return __hmul(a, b); }
inline __half operator/(__half a, __half b) { return __hdiv(a, b); }
inline __half operator-(__half a) { return __hneg(a); }
inline __half& operator+=(__half& a, __half b) { return a = __hadd(a, b); }
inline __half& operator-=(__half& a, __half b) { return a = __hsub(a, b); }
inline __half& operator*=(__half& a, __half b) { return a = __hmul(a, b); }
inline __half& operator/=(__half& a, __half b) { return a = __hdiv(a, b); }
inline bool operator==(__half a, __half b) { return __heq(a, b); }
inline bool operator!=(__half a, __half b) { return __hne(a, b); }
inline bool operator<(__half a, __half b) { return __hlt(a, b); }
inline bool operator<=(__half a, __half b) { return __hle(a, b); }
inline bool operator>(__half a, __half b) { return __hgt(a, b); }
inline bool operator>=(__half a, __half b) { return __hge(a, b); }
#endif

// CUDA's headers give these shuffle overloads (__shfl*_sync): cudasim.h's shfl_ takes them.
namespace cudasim {
template <>
inline constexpr bool shuffle_class<__half> = true;
template <>
inline constexpr bool shuffle_class<__half2> = true;
}  // namespace cudasim
