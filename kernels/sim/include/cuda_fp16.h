// cuda_fp16.h for the simulator: __half and __half2 with CUDA's layout, names and rounding, and
// cuda_fp16.h's API (cudasim_half_api.h, shared with cuda_bf16.h). As with nvcc, the operators and
// implicit conversions are off when PyTorch's build defines __CUDA_NO_HALF_OPERATORS__,
// __CUDA_NO_HALF2_OPERATORS__ or __CUDA_NO_HALF_CONVERSIONS__; use __hadd, __half2float, ...
#pragma once
#include "cudasim.h"
#include "cudasim_round.h"
#include <cstdint>
#include <cstring>
#include <math.h>

#define __CUDA_FP16_TYPES_EXIST__

namespace cudasim {
CUDASIM_INTERNAL inline unsigned short float_to_half_bits(float f) {
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
CUDASIM_INTERNAL inline float half_bits_to_float(unsigned short h) {
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

// The 16-bit atomicAdds: a read-modify-write that the instrumented build sees as an atomic at the
// learner's call (`pc`, the return address of their atomicAdd).
template <class V, class Add>
CUDASIM_INTERNAL inline V atomic_add_h16(V* p, V v, Add add, void* pc) {
  CUDASIM_EVENT(atomic_access(p, sizeof *p, pc));
  (void)pc;
  SimScope scope;
  V old = *p;
  *p = add(old, v);
  atomic_done(p, old, *p);
  return old;
}
}  // namespace cudasim

struct __half_raw { unsigned short x; };
struct __half2_raw { unsigned short x, y; };
struct __nv_bfloat16;

#define CUDASIM_T __half
#define CUDASIM_T2 __half2
#define CUDASIM_RAW __half_raw
#define CUDASIM_RAW2 __half2_raw
#define CUDASIM_NAME half
#define CUDASIM_FORMAT ::cudasim::kHalfFormat
#define CUDASIM_TO_FLOAT(bits) ::cudasim::half_bits_to_float(bits)
#define CUDASIM_FROM_FLOAT(f) ::cudasim::float_to_half_bits(f)
#define CUDASIM_OTHER __nv_bfloat16
#if defined(__CUDA_NO_HALF_CONVERSIONS__)
#define CUDASIM_CONVERSIONS 0
#else
#define CUDASIM_CONVERSIONS 1
#endif
#if defined(__CUDA_NO_HALF_OPERATORS__)
#define CUDASIM_OPERATORS 0
#else
#define CUDASIM_OPERATORS 1
#endif
#if defined(__CUDA_NO_HALF2_OPERATORS__)
#define CUDASIM_OPERATORS2 0
#else
#define CUDASIM_OPERATORS2 1
#endif
#include "cudasim_half_api.h"  // undefines the CUDASIM_ parameters above

typedef __half half;
typedef __half2 half2;

#define CUDART_INF_FP16 __ushort_as_half((unsigned short)0x7C00U)
#define CUDART_NAN_FP16 __ushort_as_half((unsigned short)0x7FFFU)
#define CUDART_MIN_DENORM_FP16 __ushort_as_half((unsigned short)0x0001U)
#define CUDART_MAX_NORMAL_FP16 __ushort_as_half((unsigned short)0x7BFFU)
#define CUDART_NEG_ZERO_FP16 __ushort_as_half((unsigned short)0x8000U)
#define CUDART_ZERO_FP16 __ushort_as_half((unsigned short)0x0000U)
#define CUDART_ONE_FP16 __ushort_as_half((unsigned short)0x3C00U)
