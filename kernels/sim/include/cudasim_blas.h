// The simulator's matrix multiplication for its cuBLAS and cuBLASLt stand-ins (cublas_v2.h, cublasLt.h):
// D = act(alpha op(A) op(B) + beta C + bias) on the CPU, accumulated in double and rounded once to D's
// type. An argument the stand-in does not cover, or one cuBLAS would refuse, raises an error that names
// the call and the argument; it never computes something else.
#pragma once
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_bf16.h"
#include "cuda_fp16.h"

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16,
} cublasStatus_t;
#ifndef CUDASIM_LIBRARY_TYPES
#define CUDASIM_LIBRARY_TYPES
typedef enum {
  CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_8I = 3, CUDA_R_32I = 10, CUDA_R_16BF = 14,
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;
#endif

namespace cudasim::blas {
[[noreturn]] inline void fail(const char* call, const char* arg, const std::string& why) {
  throw std::runtime_error(std::string(call) + ": " + arg + " " + why + " (the simulator's cuBLAS stand-in)");
}
[[noreturn]] inline void not_covered(const char* call) {
  throw std::runtime_error(std::string(call) + ": the simulator's cuBLAS stand-in has only the matrix "
                           "multiplications (cublasSgemm, cublasGemmEx, their strided batched forms, cublasLtMatmul, cublasSgemv and "
                           "cublasDgemv); "
                           "run this call with the cuda backend, or compare with torch in Python.");
}
inline void check_dims(const char* call, long long m, long long n, long long k, long long batch) {
  if (m < 0) fail(call, "m", "is negative (" + std::to_string(m) + ")");
  if (n < 0) fail(call, "n", "is negative (" + std::to_string(n) + ")");
  if (k < 0) fail(call, "k", "is negative (" + std::to_string(k) + ")");
  if (batch < 0) fail(call, "batchCount", "is negative (" + std::to_string(batch) + ")");
}
// A column-major matrix's leading dimension must be at least its row count (and at least 1).
inline void check_ld(const char* call, const char* arg, long long ld, long long rows) {
  long long need = rows > 1 ? rows : 1;
  if (ld < need)
    fail(call, arg, "is " + std::to_string(ld) + ", less than the " + std::to_string(need) +
                        " rows of its matrix as stored");
}
inline const char* type_name(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_64F: return "CUDA_R_64F";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    case CUDA_R_8I: return "CUDA_R_8I";
    case CUDA_R_32I: return "CUDA_R_32I";
  }
  return "an unknown cudaDataType_t";
}
inline bool known_type(cudaDataType_t t) {
  return t == CUDA_R_32F || t == CUDA_R_64F || t == CUDA_R_16F || t == CUDA_R_16BF;
}
// A and B of one type; C of that type or fp32 (fp16/bf16 inputs with an fp32 output); 8-bit integers are not covered.
inline void check_types(const char* call, cudaDataType_t a, cudaDataType_t b, cudaDataType_t c) {
  if (!known_type(a)) fail(call, "Atype", std::string("is ") + type_name(a) + ": the stand-in has fp32, fp64, fp16, bf16");
  if (b != a) fail(call, "Btype", std::string("is ") + type_name(b) + ", not Atype's " + type_name(a));
  if (c != a && !(c == CUDA_R_32F && (a == CUDA_R_16F || a == CUDA_R_16BF)))
    fail(call, "Ctype", std::string("is ") + type_name(c) + " with Atype " + type_name(a) +
                            ": the stand-in has C of A's type, or fp32 with fp16/bf16 inputs");
}
inline double load(const void* p, cudaDataType_t t, long long i) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(p)[i];
    case CUDA_R_64F: return static_cast<const double*>(p)[i];
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(p)[i]);
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: fail("cuBLAS", "a data type", std::string("is ") + type_name(t) + ", which the stand-in does not have");
  }
}
inline void store(void* p, cudaDataType_t t, long long i, double v) {
  switch (t) {
    case CUDA_R_32F: static_cast<float*>(p)[i] = static_cast<float>(v); return;
    case CUDA_R_64F: static_cast<double*>(p)[i] = v; return;
    case CUDA_R_16F: static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v)); return;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(v)); return;
    default: fail("cuBLAS", "a data type", std::string("is ") + type_name(t) + ", which the stand-in does not have");
  }
}
// alpha or beta, of the compute type's scale type (host and device memory are one on the simulator)
inline double read(cudaDataType_t t, const void* p, const char* call, const char* arg) {
  if (p == nullptr) fail(call, arg, "is a null pointer");
  return load(p, t, 0);
}

// Element (r, c) of matrix number i of a batch is at p[i * batch_stride + r * rs + c * cs] (elements).
struct Matrix {
  const void* p;
  cudaDataType_t t;
  long long rs, cs, batch_stride;
};
enum Activation { NONE = 0, RELU = 1, GELU = 2 };
struct Epilogue {
  const void* bias = nullptr;  // one value per row of D
  cudaDataType_t bias_type = CUDA_R_32F;
  long long bias_batch_stride = 0;
  Activation act = NONE;
};
inline double activate(Activation a, double x) {
  if (a == RELU) return x > 0 ? x : 0;
  if (a == GELU) {  // the tanh approximation, as cuBLASLt's GELU epilogue
    const double s = std::sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
  }
  return x;
}

inline void multiply(const char* call, long long m, long long n, long long k, long long batch, double alpha,
                     const Matrix& a, const Matrix& b, double beta, const Matrix& c, const Matrix& d,
                     const Epilogue& ep = Epilogue()) {
  if (m == 0 || n == 0 || batch == 0) return;
  if (d.p == nullptr) fail(call, "the output matrix", "is a null pointer");
  if (k > 0 && alpha != 0 && (a.p == nullptr || b.p == nullptr)) fail(call, a.p ? "B" : "A", "is a null pointer");
  if (beta != 0 && c.p == nullptr) fail(call, "C", "is a null pointer while beta is not 0");
  std::vector<double> at(m * k), bt(n * k);  // op(A) row by row, op(B) column by column
  for (long long i = 0; i < batch; i++) {
    if (alpha != 0)
      for (long long r = 0; r < m; r++)
        for (long long l = 0; l < k; l++) at[r * k + l] = load(a.p, a.t, i * a.batch_stride + r * a.rs + l * a.cs);
    if (alpha != 0)
      for (long long col = 0; col < n; col++)
        for (long long l = 0; l < k; l++) bt[col * k + l] = load(b.p, b.t, i * b.batch_stride + l * b.rs + col * b.cs);
    for (long long col = 0; col < n; col++)
      for (long long r = 0; r < m; r++) {
        double acc = 0;
        if (alpha != 0) {
          const double* x = &at[r * k];
          const double* y = &bt[col * k];
          for (long long l = 0; l < k; l++) acc += x[l] * y[l];
          acc *= alpha;
        }
        // beta == 0: C is not read (it may hold NaN), as in cuBLAS
        if (beta != 0) acc += beta * load(c.p, c.t, i * c.batch_stride + r * c.rs + col * c.cs);
        if (ep.bias) acc += load(ep.bias, ep.bias_type, i * ep.bias_batch_stride + r);
        store(const_cast<void*>(d.p), d.t, i * d.batch_stride + r * d.rs + col * d.cs, activate(ep.act, acc));
      }
  }
}
}  // namespace cudasim::blas
