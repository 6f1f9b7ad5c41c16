// cublas_v2.h for the simulator: a stand-in for cuBLAS's matrix multiplications, computed on the CPU
// (cudasim_blas.h), so that code which calls them (llm.c's dev/cuda files, extensions that use a
// handle) runs and gives the right numbers. Covered: the handle calls, cublasSgemm, cublasDgemm,
// cublasHgemm, cublasGemmEx, cublasSgemmStridedBatched and cublasGemmStridedBatchedEx, with
// transposes and fp32/fp16/bf16/fp64 data. The other cuBLAS calls below build and raise an error
// naming the call. Nothing needs linking: -lcublas is dropped on the simulator.
#pragma once
#include "cudasim.h"
#include "cudasim_blas.h"
// cuBLAS's own include guard, which the CUDA samples' helper_cuda.h tests before it declares its cublasStatus_t
// overload of _cudaGetErrorEnum (checkCudaErrors on a cuBLAS call needs it)
#define CUBLAS_API_H_

struct cublasContext {
  cudaStream_t stream = nullptr;
  int math = 0;
  int pointer_mode = 0;
};
typedef cublasContext* cublasHandle_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum { CUBLAS_POINTER_MODE_HOST = 0, CUBLAS_POINTER_MODE_DEVICE = 1 } cublasPointerMode_t;
typedef enum {
  CUBLAS_DEFAULT_MATH = 0,
  CUBLAS_TENSOR_OP_MATH = 1,
  CUBLAS_PEDANTIC_MATH = 2,
  CUBLAS_TF32_TENSOR_OP_MATH = 3,
} cublasMath_t;
typedef enum {
  CUBLAS_COMPUTE_16F = 64,
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_FAST_16F = 74,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
  CUBLAS_COMPUTE_64F = 70,
} cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 } cublasGemmAlgo_t;

inline const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

// ---- the handle -------------------------------------------------------------------------------
inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  if (h == nullptr) ::cudasim::blas::fail("cublasCreate", "handle", "is a null pointer");
  *h = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasCreate_v2(cublasHandle_t* h) { return cublasCreate(h); }
inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy_v2(cublasHandle_t h) { return cublasDestroy(h); }
inline cublasContext& cudasim_blas_handle(cublasHandle_t h, const char* call) {
  if (h == nullptr) ::cudasim::blas::fail(call, "handle", "is null: create it with cublasCreate first");
  return *h;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  cudasim_blas_handle(h, "cublasSetStream").stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t* s) {
  *s = cudasim_blas_handle(h, "cublasGetStream").stream;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
  cudasim_blas_handle(h, "cublasSetMathMode").math = m;  // TF32 or not: the stand-in computes in double
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t* m) {
  *m = cublasMath_t(cudasim_blas_handle(h, "cublasGetMathMode").math);
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetPointerMode(cublasHandle_t h, cublasPointerMode_t m) {
  cudasim_blas_handle(h, "cublasSetPointerMode").pointer_mode = m;  // host and device memory are one here
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGetPointerMode(cublasHandle_t h, cublasPointerMode_t* m) {
  *m = cublasPointerMode_t(cudasim_blas_handle(h, "cublasGetPointerMode").pointer_mode);
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void*, size_t) {
  cudasim_blas_handle(h, "cublasSetWorkspace");
  return CUBLAS_STATUS_SUCCESS;
}

// ---- matrix multiplications: C = alpha op(A) op(B) + beta C, column-major ----------------------
namespace cudasim::blas {
inline bool transposed(const char* call, const char* arg, cublasOperation_t op) {
  if (op != CUBLAS_OP_N && op != CUBLAS_OP_T && op != CUBLAS_OP_C)
    fail(call, arg, "is not CUBLAS_OP_N, CUBLAS_OP_T or CUBLAS_OP_C");
  return op != CUBLAS_OP_N;  // real data: the conjugate transpose is the transpose
}
// The scale type of a compute type (what alpha and beta point to).
inline cudaDataType_t scale_type(const char* call, cublasComputeType_t c) {
  switch (c) {
    case CUBLAS_COMPUTE_16F: return CUDA_R_16F;
    case CUBLAS_COMPUTE_32F: case CUBLAS_COMPUTE_32F_FAST_16F: case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32: return CUDA_R_32F;
    case CUBLAS_COMPUTE_64F: return CUDA_R_64F;
  }
  fail(call, "computeType", "is not one the stand-in has (CUBLAS_COMPUTE_16F, _32F and its _FAST_ forms, _64F)");
}
inline cublasStatus_t gemm(const char* call, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const void* alpha, const void* A, cudaDataType_t at, int lda, long long sa,
                           const void* B, cudaDataType_t bt, int ldb, long long sb, const void* beta, void* C,
                           cudaDataType_t ct, int ldc, long long sc, int batch, cudaDataType_t scale) {
  cudasim_blas_handle(h, call);
  bool tA = transposed(call, "transa", ta), tB = transposed(call, "transb", tb);
  check_dims(call, m, n, k, batch);
  check_ld(call, "lda", lda, tA ? k : m);
  check_ld(call, "ldb", ldb, tB ? n : k);
  check_ld(call, "ldc", ldc, m);
  Matrix a{A, at, tA ? (long long)lda : 1, tA ? 1 : (long long)lda, sa};
  Matrix b{B, bt, tB ? (long long)ldb : 1, tB ? 1 : (long long)ldb, sb};
  Matrix c{C, ct, 1, ldc, sc};
  multiply(call, m, n, k, batch, read(scale, alpha, call, "alpha"), a, b, read(scale, beta, call, "beta"), c, c);
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace cudasim::blas

inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const float* alpha, const float* A, int lda, const float* B, int ldb,
                                  const float* beta, float* C, int ldc) {
  return ::cudasim::blas::gemm("cublasSgemm", h, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0,
                               beta, C, CUDA_R_32F, ldc, 0, 1, CUDA_R_32F);
}
inline cublasStatus_t cublasDgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const double* alpha, const double* A, int lda, const double* B, int ldb,
                                  const double* beta, double* C, int ldc) {
  return ::cudasim::blas::gemm("cublasDgemm", h, ta, tb, m, n, k, alpha, A, CUDA_R_64F, lda, 0, B, CUDA_R_64F, ldb, 0,
                               beta, C, CUDA_R_64F, ldc, 0, 1, CUDA_R_64F);
}
inline cublasStatus_t cublasHgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const __half* alpha, const __half* A, int lda, const __half* B, int ldb,
                                  const __half* beta, __half* C, int ldc) {
  return ::cudasim::blas::gemm("cublasHgemm", h, ta, tb, m, n, k, alpha, A, CUDA_R_16F, lda, 0, B, CUDA_R_16F, ldb, 0,
                               beta, C, CUDA_R_16F, ldc, 0, 1, CUDA_R_16F);
}
inline cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                int n, int k, const float* alpha, const float* A, int lda,
                                                long long sa, const float* B, int ldb, long long sb,
                                                const float* beta, float* C, int ldc, long long sc, int batch) {
  return ::cudasim::blas::gemm("cublasSgemmStridedBatched", h, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, sa, B,
                               CUDA_R_32F, ldb, sb, beta, C, CUDA_R_32F, ldc, sc, batch, CUDA_R_32F);
}
inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                 int n, int k, const void* alpha, const void* A, cudaDataType_t at,
                                                 int lda, long long sa, const void* B, cudaDataType_t bt, int ldb,
                                                 long long sb, const void* beta, void* C, cudaDataType_t ct, int ldc,
                                                 long long sc, int batch, cublasComputeType_t compute,
                                                 cublasGemmAlgo_t) {
  const char* call = "cublasGemmStridedBatchedEx";
  ::cudasim::blas::check_types(call, at, bt, ct);
  return ::cudasim::blas::gemm(call, h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc,
                               batch, ::cudasim::blas::scale_type(call, compute));
}
inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void* alpha, const void* A, cudaDataType_t at, int lda, const void* B,
                                   cudaDataType_t bt, int ldb, const void* beta, void* C, cudaDataType_t ct, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t) {
  const char* call = "cublasGemmEx";
  ::cudasim::blas::check_types(call, at, bt, ct);
  return ::cudasim::blas::gemm(call, h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1,
                               ::cudasim::blas::scale_type(call, compute));
}

// y = alpha op(A) x + beta y, as a product of one row: y^T (1 x rows of op(A)) = x^T op(A)^T, so that the vectors'
// strides are the leading dimensions of one-row matrices (column-major, as cuBLAS stores them).
template <class T>
inline cublasStatus_t gemv_as_gemm(const char* call, cublasHandle_t h, cublasOperation_t trans, int m, int n,
                                   const T* alpha, const T* A, int lda, const T* x, int incx, const T* beta, T* y,
                                   int incy, cudaDataType type) {
  if (incx <= 0 || incy <= 0)
    ::cudasim::blas::fail(call, "incx or incy", "is not positive (" + std::to_string(incx) + ", " +
                          std::to_string(incy) + "): the stand-in does not walk a vector backwards");
  if (lda < std::max(1, m))
    ::cudasim::blas::fail(call, "lda", "is " + std::to_string(lda) + ", less than the " + std::to_string(m) +
                          " rows of A as stored");
  const bool t = trans != CUBLAS_OP_N;
  const int rows = t ? n : m, cols = t ? m : n;  // op(A) is rows x cols; x has cols elements, y rows
  return ::cudasim::blas::gemm(call, h, CUBLAS_OP_N, t ? CUBLAS_OP_N : CUBLAS_OP_T, 1, rows, cols, alpha, x, type, incx,
                               0, A, type, lda, 0, beta, y, type, incy, 0, 1, type);
}
inline cublasStatus_t cublasSgemv(cublasHandle_t h, cublasOperation_t trans, int m, int n, const float* alpha,
                                  const float* A, int lda, const float* x, int incx, const float* beta, float* y,
                                  int incy) {
  return gemv_as_gemm("cublasSgemv", h, trans, m, n, alpha, A, lda, x, incx, beta, y, incy, CUDA_R_32F);
}
inline cublasStatus_t cublasDgemv(cublasHandle_t h, cublasOperation_t trans, int m, int n, const double* alpha,
                                  const double* A, int lda, const double* x, int incx, const double* beta, double* y,
                                  int incy) {
  return gemv_as_gemm("cublasDgemv", h, trans, m, n, alpha, A, lda, x, incx, beta, y, incy, CUDA_R_64F);
}

// Any arguments are accepted, so the file builds; the call raises (cublasLt.h uses it too).
#define CUDASIM_NO_CUBLAS(name)                                                 \
  template <class... A>                                                         \
  inline cublasStatus_t name(A&&...) { ::cudasim::blas::not_covered(#name); }
CUDASIM_NO_CUBLAS(cublasGemmBatchedEx)
CUDASIM_NO_CUBLAS(cublasSgemmBatched)
CUDASIM_NO_CUBLAS(cublasSaxpy)
CUDASIM_NO_CUBLAS(cublasSdot)
CUDASIM_NO_CUBLAS(cublasSnrm2)
CUDASIM_NO_CUBLAS(cublasSscal)
