// mul_pybind.cu: the same multiply bound the older way, as a Python module (PYBIND11_MODULE).
// Load with `mod = load("mul_pybind.cu")`; then mod.mul(x, y) is a plain Python function.
//
// <torch/extension.h> brings in pybind11 and all of the C++ frontend: it is easy to write and
// slow to compile. PyTorch's dispatcher never sees this function, so autograd, torch.compile,
// opcheck and the CUDA/CPU dispatch keys know nothing about it (the lesson shows what follows).

// ---------------------------------------------------------------------------------------------
// Includes.
#include <torch/extension.h>

#include "helpers.cuh"

constexpr int BLOCK = 256;

// ---------------------------------------------------------------------------------------------
// Kernels.

// mul_kernel: thread i owns element i; reads 2 values, writes 1 (12 B per element in fp32).
template <typename scalar_t>
__global__ void mul_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ y,
                           scalar_t* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] * y[i];
}

// ---------------------------------------------------------------------------------------------
// Launchers.

torch::Tensor mul(const torch::Tensor& x, const torch::Tensor& y) {
  CHECK_INPUT(x);
  CHECK_INPUT(y);
  CHECK_SAME_SHAPE(x, y);
  CHECK_SAME_DTYPE(x, y);
  torch::Tensor out = torch::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return out;
  const int64_t blocks = ceil_div(n, BLOCK);
  CHECK_GRID(blocks);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "mul", [&] {
    mul_kernel<scalar_t><<<blocks, BLOCK, 0, stream>>>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                                                       out.data_ptr<scalar_t>(), n);
    CHECK_LAUNCH();
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Binding: a Python module whose function `mul` calls the C++ function directly.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("mul", &mul, "out = x * y (float32 or float64)"); }
