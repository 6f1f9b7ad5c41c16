// PLANTED BUG (tests/test_lesson06.py): the same file as lessons/06_reductions/race.cu.
// race.cu: sum3 of kernels/reference/06_reductions.cu with ONE line removed: the __syncthreads()
// inside the tree loop. The lesson runs it to show how the simulator and the checker catch a race.
#include "helpers.cuh"

constexpr int BLOCK = 256;

__global__ void racy_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  __shared__ float partial[BLOCK];
  const int tid = threadIdx.x;
  const int64_t i = blockIdx.x * (int64_t)BLOCK + tid;
  partial[tid] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s /= 2) {
    if (tid < s) partial[tid] += partial[tid + s];
    // the __syncthreads() that was here made every thread wait until this level was complete;
    // without it, thread tid may read partial[tid + s] before thread tid + s has updated it
  }
  if (tid == 0) atomicAdd(out, partial[0]);
}

void racy_sum(const at::Tensor& x, at::Tensor& out) {
  CHECK_CUDA(x);
  TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(out.numel() == 1, "out must hold one element");
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  C10_CUDA_CHECK(cudaMemsetAsync(out.data_ptr<float>(), 0, sizeof(float), stream));
  const int64_t n = x.numel();
  if (n == 0) return;
  racy_sum_kernel<<<ceil_div(n, BLOCK), BLOCK, 0, stream>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("racy_sum(Tensor x, Tensor(a!) out) -> ()"); }
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("racy_sum", &racy_sum); }
