// mulop.cu: the kernels of the mulop package: out = x * y and its backward, for CUDA tensors.
// The same op as kernels/reference/03_pytorch_op.cu, standing alone: a package carries its own
// headers and registers under a fixed namespace, `mulop`, so users call torch.ops.mulop.mul.

// ---------------------------------------------------------------------------------------------
// Includes.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <tuple>

constexpr int BLOCK = 256;

// ---------------------------------------------------------------------------------------------
// Kernels.

// mul_kernel: thread i owns element i; reads 2 values, writes 1.
template <typename scalar_t>
__global__ void mul_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ y,
                           scalar_t* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] * y[i];
}

// mul_backward_kernel: thread i owns element i of both gradients; reads 3 values, writes 2.
template <typename scalar_t>
__global__ void mul_backward_kernel(const scalar_t* __restrict__ grad, const scalar_t* __restrict__ x,
                                    const scalar_t* __restrict__ y, scalar_t* __restrict__ grad_x,
                                    scalar_t* __restrict__ grad_y, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) {
    const scalar_t g = grad[i];
    grad_x[i] = g * y[i];
    grad_y[i] = g * x[i];
  }
}

// ---------------------------------------------------------------------------------------------
// Launchers.

static void check_operand(const at::Tensor& t, const at::Tensor& x, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor, got a tensor on ", t.device());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous (call .contiguous() first)");
  TORCH_CHECK(t.sizes().equals(x.sizes()), name, " must have the shape of x");
  TORCH_CHECK(t.scalar_type() == x.scalar_type(), name, " must have the dtype of x, ", x.scalar_type(), ", got ",
              t.scalar_type());
}

at::Tensor mul(const at::Tensor& x, const at::Tensor& y) {
  check_operand(x, x, "x");
  check_operand(y, x, "y");
  at::Tensor out = at::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return out;
  const int64_t blocks = (n + BLOCK - 1) / BLOCK;
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "mul", [&] {
    mul_kernel<scalar_t><<<blocks, BLOCK, 0, stream>>>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                                                       out.data_ptr<scalar_t>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> mul_backward(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& y) {
  check_operand(x, x, "x");
  check_operand(y, x, "y");
  check_operand(grad, x, "grad");
  at::Tensor grad_x = at::empty_like(x), grad_y = at::empty_like(y);
  const int64_t n = x.numel();
  if (n == 0) return {grad_x, grad_y};
  const int64_t blocks = (n + BLOCK - 1) / BLOCK;
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "mul_backward", [&] {
    mul_backward_kernel<scalar_t><<<blocks, BLOCK, 0, stream>>>(
        grad.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(),
        grad_y.data_ptr<scalar_t>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {grad_x, grad_y};
}

// ---------------------------------------------------------------------------------------------
// Registration: a fixed namespace, written out (no macro needed: nothing to expand).
TORCH_LIBRARY(mulop, m) {
  m.def("mul(Tensor x, Tensor y) -> Tensor");
  m.def("mul_backward(Tensor grad, Tensor x, Tensor y) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(mulop, CUDA, m) {
  m.impl("mul", &mul);
  m.impl("mul_backward", &mul_backward);
}
