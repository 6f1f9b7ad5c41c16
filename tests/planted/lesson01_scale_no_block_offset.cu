// planted bug (tests/test_lesson01.py): the index leaves out blockIdx.x * blockDim.x
// scale.cu: the exercise of lesson 01. out[i] = a * x[i], one CUDA thread per element.
//
// The launcher below is complete: it checks the inputs and starts ceil_div(n, 256) blocks of 256
// threads. Your part is the kernel body: what ONE thread does. It is the Python function
// scale_thread you wrote in the notebook, in C++.
// Check it from the notebook: check_exercise("01", "scale", path="scale.cu")
#include "helpers.cuh"

constexpr int THREADS = 256;

// scale_kernel: thread (blockIdx.x, threadIdx.x) owns element i; reads 4 B and writes 4 B.
__global__ void scale_kernel(const float* __restrict__ x, float a, float* __restrict__ out, int64_t n) {
  const int64_t i = threadIdx.x;  // BUG: forgets the block: every block writes elements 0..255
  if (i < n) out[i] = a * x[i];
}

void scale(const at::Tensor& x, double a, at::Tensor& out) {
  CHECK_INPUT(x);
  CHECK_INPUT(out);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_SAME_DTYPE(x, out);
  CHECK_SAME_SHAPE(x, out);
  const int64_t n = x.numel();
  if (n == 0) return;
  scale_kernel<<<ceil_div(n, THREADS), THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), static_cast<float>(a), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("scale(Tensor x, float a, Tensor(a!) out) -> ()"); }

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("scale", &scale); }
