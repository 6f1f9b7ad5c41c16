// A kernel that writes far past the end of its output. On a GPU that is an illegal memory access:
// a sticky error, after which every CUDA call in the process fails. tests/test_check.py runs it in
// a subprocess only, so that the test process keeps a working GPU.
//   write_far  out[i + 2^40] = x[i]: 4 TiB past the end, far outside any allocation
#include "helpers.cuh"

__global__ void write_far_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i + (int64_t{1} << 40)] = x[i];  // the bug: an offset no tensor is that large
}

void write_far(const at::Tensor& x, at::Tensor& out) {
  CHECK_INPUT(x);
  CHECK_INPUT(out);
  CHECK_SAME_SHAPE(x, out);  // a float32 test: the checker passes float32 tensors only
  const int64_t n = x.numel();
  if (n == 0) return;  // a grid of 0 blocks is an invalid launch
  write_far_kernel<<<ceil_div(n, 256), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("write_far(Tensor x, Tensor(a!) out) -> ()"); }

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("write_far", &write_far); }
