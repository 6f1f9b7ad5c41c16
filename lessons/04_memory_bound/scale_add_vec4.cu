// scale_add_vec4.cu: the exercise of lesson 04 (your file: fill in the kernel below).
// out = a * x + y with float4 loads and stores, a grid-stride loop over the float4s, and the
// ragged tail (the last n % 4 elements).
// Check it with: check_exercise("04", "scale_add_vec4", path="scale_add_vec4.cu")  (or make check LESSON=04)
#include "helpers.cuh"

#include <algorithm>
#include <cstdint>
#include <string>

constexpr int BLOCK = 256;
constexpr int BLOCKS_PER_SM = 4;

// scale_add_vec4_kernel: a fixed grid of T threads (the launcher caps it: often fewer threads than
// float4s). Thread t owns float4s t, t + T, t + 2T, ... (grid-stride loop: coalesced, any n), and
// threads 0 .. n % 4 - 1 of the grid each own one element of the tail after the last whole float4.
// x, y and out are 16-byte aligned (the launcher checks). 12 B per element: bounded by bandwidth.
__global__ void scale_add_vec4_kernel(float a, const float* __restrict__ x, const float* __restrict__ y,
                                      float* __restrict__ out, int64_t n) {
  // FILL ME IN (roughly 12 lines)
  // 1. view x, y, out as float4 pointers (reinterpret_cast) and count the whole float4s: n / 4
  // 2. a grid-stride loop over the float4s: out4[i] = a * x4[i] + y4[i], lane by lane (make_float4)
  // 3. the tail: the last n % 4 elements, one per thread, with plain float loads
}

// The launcher (nothing to change here): input checks, the alignment precondition, a capped grid.
static int sm_count() {
  int dev = 0, sms = 0;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

#define CHECK_ALIGNED16(t)                                                                     \
  TORCH_CHECK(reinterpret_cast<uintptr_t>((t).data_ptr()) % 16 == 0,                          \
              #t " must be 16-byte aligned for float4 loads and stores, got an address 16k + ", \
              std::to_string(reinterpret_cast<uintptr_t>((t).data_ptr()) % 16),               \
              " (a view such as x[1:] is not aligned)")

void scale_add_vec4(double a, const at::Tensor& x, const at::Tensor& y, at::Tensor& out) {
  CHECK_INPUT(x);
  CHECK_INPUT(y);
  CHECK_INPUT(out);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_DTYPE(y, at::kFloat);
  CHECK_DTYPE(out, at::kFloat);
  CHECK_SAME_SHAPE(x, y);
  CHECK_SAME_SHAPE(x, out);
  CHECK_ALIGNED16(x);
  CHECK_ALIGNED16(y);
  CHECK_ALIGNED16(out);
  const int64_t n = x.numel();
  if (n == 0) return;
  // One thread per float4 at most, and no more than BLOCKS_PER_SM blocks per SM: large inputs
  // leave every thread several float4s, so the kernel must loop.
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(ceil_div(n / 4, BLOCK), (int64_t)sm_count() * BLOCKS_PER_SM));
  scale_add_vec4_kernel<<<blocks, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(
      static_cast<float>(a), x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("scale_add_vec4(float a, Tensor x, Tensor y, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("scale_add_vec4", &scale_add_vec4); }
