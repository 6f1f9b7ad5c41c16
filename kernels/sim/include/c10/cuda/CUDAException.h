// c10/cuda/CUDAException.h for the simulator: the same checks, on the simulated error state.
#pragma once
#include "cudasim.h"
#include <c10/util/Exception.h>

// As c10's own check, a failure also clears the error state, so the next check does not see it again.
#define C10_CUDA_CHECK(EXPR)                                                       \
  do {                                                                             \
    const cudaError_t cudasim_err_ = (EXPR);                                       \
    if (cudasim_err_ != cudaSuccess) (void)cudaGetLastError();                     \
    TORCH_CHECK(cudasim_err_ == cudaSuccess, "CUDA error: ", cudaGetErrorString(cudasim_err_)); \
  } while (0)
#define C10_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_CHECK(cudaGetLastError())
#define C10_CUDA_CHECK_WARN(EXPR) (void)(EXPR)
#define AT_CUDA_CHECK(EXPR) C10_CUDA_CHECK(EXPR)
