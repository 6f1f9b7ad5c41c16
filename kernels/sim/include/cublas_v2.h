// cublas_v2.h for the simulator, which has no cuBLAS. A file that includes this header builds
// and runs (many extensions include it, or set up a handle in a function they never call); a
// call to any cuBLAS function below raises an error that says the simulator has no cuBLAS.
#pragma once
#include "cudasim.h"

struct cublasContext;
typedef cublasContext* cublasHandle_t;
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
#ifndef CUDASIM_LIBRARY_TYPES
#define CUDASIM_LIBRARY_TYPES
typedef enum {
  CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_8I = 3, CUDA_R_32I = 10, CUDA_R_16BF = 14,
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;
#endif

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

namespace cudasim {
[[noreturn]] inline void no_cublas(const char* name) {
  throw std::runtime_error(std::string(name) + ": the simulator has no cuBLAS. Write the kernel yourself, or "
                           "compare with torch.matmul in Python; run cuBLAS code with the cuda backend.");
}
}  // namespace cudasim

// Any arguments are accepted, so the file builds; the call raises (cublasLt.h uses it too).
#define CUDASIM_NO_CUBLAS(name)                                                 \
  template <class... A>                                                         \
  inline cublasStatus_t name(A&&...) { ::cudasim::no_cublas(#name); }
CUDASIM_NO_CUBLAS(cublasCreate)
CUDASIM_NO_CUBLAS(cublasDestroy)
CUDASIM_NO_CUBLAS(cublasSetStream)
CUDASIM_NO_CUBLAS(cublasGetStream)
CUDASIM_NO_CUBLAS(cublasSetMathMode)
CUDASIM_NO_CUBLAS(cublasGetMathMode)
CUDASIM_NO_CUBLAS(cublasSetPointerMode)
CUDASIM_NO_CUBLAS(cublasSetWorkspace)
CUDASIM_NO_CUBLAS(cublasSgemm)
CUDASIM_NO_CUBLAS(cublasDgemm)
CUDASIM_NO_CUBLAS(cublasHgemm)
CUDASIM_NO_CUBLAS(cublasGemmEx)
CUDASIM_NO_CUBLAS(cublasSgemmStridedBatched)
CUDASIM_NO_CUBLAS(cublasGemmStridedBatchedEx)
CUDASIM_NO_CUBLAS(cublasGemmBatchedEx)
CUDASIM_NO_CUBLAS(cublasSgemv)
CUDASIM_NO_CUBLAS(cublasSaxpy)
CUDASIM_NO_CUBLAS(cublasSdot)
CUDASIM_NO_CUBLAS(cublasSnrm2)
CUDASIM_NO_CUBLAS(cublasSscal)
