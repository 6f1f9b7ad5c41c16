// cuda_bf16.h for the simulator: __nv_bfloat16 and __nv_bfloat162 with CUDA's layout, names and
// rounding, and cuda_bf16.h's API (cudasim_half_api.h, shared with cuda_fp16.h). As with nvcc, the
// implicit conversions are off when PyTorch's build defines __CUDA_NO_BFLOAT16_CONVERSIONS__ (llm.c
// builds with -U__CUDA_NO_BFLOAT16_CONVERSIONS__), the operators with __CUDA_NO_BFLOAT16_OPERATORS__
// and __CUDA_NO_BFLOAT162_OPERATORS__.
#pragma once
#include "cuda_fp16.h"

#define __CUDA_BF16_TYPES_EXIST__

namespace cudasim {
CUDASIM_INTERNAL inline unsigned short float_to_bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7F800000u) == 0x7F800000u && (x & 0x7FFFFFu)) return static_cast<unsigned short>((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<unsigned short>(x >> 16);
}
CUDASIM_INTERNAL inline float bf16_bits_to_float(unsigned short h) {
  uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
}  // namespace cudasim

struct __nv_bfloat16_raw { unsigned short x; };
struct __nv_bfloat162_raw { unsigned short x, y; };

#define CUDASIM_T __nv_bfloat16
#define CUDASIM_T2 __nv_bfloat162
#define CUDASIM_RAW __nv_bfloat16_raw
#define CUDASIM_RAW2 __nv_bfloat162_raw
#define CUDASIM_NAME bfloat16
#define CUDASIM_FORMAT ::cudasim::kBf16Format
#define CUDASIM_TO_FLOAT(bits) ::cudasim::bf16_bits_to_float(bits)
#define CUDASIM_FROM_FLOAT(f) ::cudasim::float_to_bf16_bits(f)
#define CUDASIM_OTHER __half
#if defined(__CUDA_NO_BFLOAT16_CONVERSIONS__)
#define CUDASIM_CONVERSIONS 0
#else
#define CUDASIM_CONVERSIONS 1
#endif
#if defined(__CUDA_NO_BFLOAT16_OPERATORS__)
#define CUDASIM_OPERATORS 0
#else
#define CUDASIM_OPERATORS 1
#endif
#if defined(__CUDA_NO_BFLOAT162_OPERATORS__)
#define CUDASIM_OPERATORS2 0
#else
#define CUDASIM_OPERATORS2 1
#endif
#include "cudasim_half_api.h"  // undefines the CUDASIM_ parameters above

typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

// The explicit conversions between the two 16-bit types, rounded to nearest even.
#if !defined(__CUDA_NO_HALF_CONVERSIONS__)
inline __half::__half(const __nv_bfloat16 f) : __x(__float2half_rn(__bfloat162float(f)).__x) {}
#endif
#if !defined(__CUDA_NO_BFLOAT16_CONVERSIONS__)
inline __nv_bfloat16::__nv_bfloat16(const __half f) : __x(__float2bfloat16_rn(__half2float(f)).__x) {}
#endif

#define CUDART_INF_BF16 __ushort_as_bfloat16((unsigned short)0x7F80U)
#define CUDART_NAN_BF16 __ushort_as_bfloat16((unsigned short)0x7FFFU)
#define CUDART_MIN_DENORM_BF16 __ushort_as_bfloat16((unsigned short)0x0001U)
#define CUDART_MAX_NORMAL_BF16 __ushort_as_bfloat16((unsigned short)0x7F7FU)
#define CUDART_NEG_ZERO_BF16 __ushort_as_bfloat16((unsigned short)0x8000U)
#define CUDART_ZERO_BF16 __ushort_as_bfloat16((unsigned short)0x0000U)
#define CUDART_ONE_BF16 __ushort_as_bfloat16((unsigned short)0x3F80U)
