// vector_add.h: the library's interface. The binding (binding.cpp) includes it and is compiled by the
// host compiler, so nothing here may need nvcc: no kernels, no <<< >>>, only declarations.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>  // cudaStream_t, cudaError_t: found in the CUDA toolkit's include folder

// out[i] = a[i] + b[i] for 0 <= i < n, queued on `stream`; a, b and out point to GPU memory.
// Returns cudaSuccess, or the launch's error (the library never throws and never synchronises).
cudaError_t vector_add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);
