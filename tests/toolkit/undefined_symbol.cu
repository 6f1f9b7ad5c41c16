// compile-check: skip (it compiles and links, but cannot load on purpose: the loader must say why)
// scale_factor is declared and called, and defined nowhere: the library links (a shared library
// may leave symbols for the loader to find) and loading it fails on the undefined symbol.
#include "helpers.cuh"

#include <ATen/ops/empty_like.h>

namespace probe {
float scale_factor(int which);  // a __host__ function without a definition
}

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ out, float s, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = s * x[i];
}

at::Tensor scale(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  auto out = at::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return out;
  scale_kernel<<<ceil_div(n, 256), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), out.data_ptr<float>(), probe::scale_factor(2), n);
  CHECK_LAUNCH();
  return out;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("scale(Tensor x) -> Tensor"); }

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("scale", &scale); }
