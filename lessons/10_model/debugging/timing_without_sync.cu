// timing_without_sync.cu: timing without a sync. A kernel launch returns as soon as the launch is
// queued, long before the kernel ends; time.perf_counter() around it measures the launch (a few
// microseconds) whatever the kernel costs. The kernel here does enough work per element to take
// milliseconds. kernels.debugging.run("timing_without_sync") times it three ways.
//
//   busy   out[i] = x[i] after `iters` rounds of a multiply-add (iters * 2 FLOPs per element)
// The fix is in the timing, not the kernel: torch.cuda.synchronize() before reading the clock, or
// CUDA events (kernels.bench does both, with warm-up and a median).
#include "helpers.cuh"

// busy_kernel: thread i owns out[i]; 8 B per element and 2 * iters FLOPs: bounded by arithmetic.
__global__ void busy_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n, int iters) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  for (int k = 0; k < iters; ++k) v = v * 0.999f + 0.001f;  // a chain the compiler cannot skip
  out[i] = v;
}

void busy(const at::Tensor& x, at::Tensor& out, int64_t iters) {
  CHECK_INPUT(x);
  CHECK_INPUT(out);
  CHECK_SAME_SHAPE(x, out);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(iters >= 0 && iters <= (1 << 20), "iters must lie in [0, 2^20], got ", std::to_string(iters));
  const int64_t n = x.numel();
  if (n == 0) return;
  busy_kernel<<<ceil_div(n, 256), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), out.data_ptr<float>(), n, static_cast<int>(iters));
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("busy(Tensor x, Tensor(a!) out, int iters) -> ()"); }

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("busy", &busy); }
