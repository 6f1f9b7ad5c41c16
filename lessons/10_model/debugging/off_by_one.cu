// off_by_one.cu: `i <= n`. out = x + 1, with a guard that lets one thread too many through: the
// thread with i == n reads and writes one element past the end. Nothing stops it on a GPU or on the
// simulator: the write lands in whatever memory follows (often another tensor of the caching
// allocator), silently. The self-check (kernels.check) catches it with canaries after the output.
//
//   broken   if (i <= n)
//   fixed    if (i < n)
#include "helpers.cuh"

// add_one_kernel: thread i owns out[i]; 8 B per element.
template <bool kFixed>
__global__ void add_one_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (kFixed ? i < n : i <= n) out[i] = x[i] + 1.0f;  // the bug: i == n is past the end (FIX: i < n)
}

template <bool kFixed>
static void launch(const at::Tensor& x, at::Tensor& out) {
  CHECK_INPUT(x);
  CHECK_INPUT(out);
  CHECK_SAME_SHAPE(x, out);
  CHECK_DTYPE(x, at::kFloat);
  const int64_t n = x.numel();
  if (n == 0) return;
  add_one_kernel<kFixed><<<ceil_div(n, 256), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

void broken(const at::Tensor& x, at::Tensor& out) { launch<false>(x, out); }
void fixed(const at::Tensor& x, at::Tensor& out) { launch<true>(x, out); }

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("broken(Tensor x, Tensor(a!) out) -> ()");
  m.def("fixed(Tensor x, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("broken", &broken);
  m.impl("fixed", &fixed);
}
