// ATen/cuda/CUDAContext.h for the simulator.
#pragma once
#include "cudasim.h"
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace at {
namespace cuda {
inline cudaDeviceProp* getCurrentDeviceProperties() {
  static cudaDeviceProp p;
  static bool once = (cudaGetDeviceProperties(&p, 0), true);
  (void)once;
  return &p;
}
inline cudaDeviceProp* getDeviceProperties(c10::DeviceIndex) { return getCurrentDeviceProperties(); }
inline int warp_size() { return 32; }
}  // namespace cuda
}  // namespace at

// The real header includes cuBLAS; so does this one, with the simulator's stand-in (cublas_v2.h:
// its matrix multiplications run on the CPU).
#include <cublas_v2.h>
namespace at {
namespace cuda {
inline cublasHandle_t getCurrentCUDABlasHandle() {  // one handle for the process: the stand-in keeps no state per device
  static cublasHandle_t handle = [] { cublasHandle_t h; cublasCreate(&h); return h; }();
  return handle;
}
}  // namespace cuda
}  // namespace at
