// vector_add.cu: the library's kernel and its launcher. nvcc compiles this file into an object (make);
// the extension's build never sees it, it links the static library that holds the object.
#include <algorithm>

#include "vector_add.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // the grid's cap: past 4096 * 256 elements each thread does several

// out[i] = a[i] + b[i]: 8 bytes read and 4 written per element, so memory-bound. A thread starts at its
// global index and steps by the whole grid's size (a grid-stride loop): a capped grid still covers any n.
__global__ void vector_add_kernel(const float* a, const float* b, float* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    out[i] = a[i] + b[i];
  }
}

}  // namespace

cudaError_t vector_add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;  // a grid of 0 blocks is a launch error
  const int64_t blocks = std::min((n + kThreads - 1) / kThreads, kMaxBlocks);
  vector_add_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a, b, out, n);
  return cudaGetLastError();  // a bad configuration shows here; a fault inside the kernel shows later
}
