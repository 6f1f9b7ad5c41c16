// fma.cu: a fused multiply-add op, out = x * y + z, with its backward, as a real PyTorch op.
// Fill in the two kernels and the two registration lines below (FILL ME IN), and the Python half
// in fma_op.py.
// The self-check: check_exercise("03", "fma", path="fma.cu") (or `make check LESSON=03`).
//
//   fma            out = x * y + z: one pass over three inputs (an eager x * y + z takes two)
//   fma_backward   (grad_x, grad_y) = (grad * y, grad * x); grad_z is grad itself (Python returns it)
//
// Both ops are functional: they allocate their outputs. fma_op.py (next to this file) adds the
// Python half: register_fake and register_autograd. Inputs: contiguous tensors of one shape and
// dtype (float32 or float64) on the device.

// ---------------------------------------------------------------------------------------------
// Includes.
#include "helpers.cuh"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty_like.h>
#include <tuple>

constexpr int BLOCK = 256;

// ---------------------------------------------------------------------------------------------
// Kernels.

// fma_kernel: thread i owns element i. Reads 3 values, writes 1 (16 B per element in fp32).
// nvcc turns x * y + z into one fused multiply-add instruction (one rounding instead of two).
template <typename scalar_t>
__global__ void fma_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ y,
                           const scalar_t* __restrict__ z, scalar_t* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  // FILL ME IN (roughly 1 line): out = x * y + z for the element this thread owns, if it exists
}

// fma_backward_kernel: thread i owns element i of both gradients. Reads grad, x, y, writes
// grad_x and grad_y (20 B per element in fp32).
template <typename scalar_t>
__global__ void fma_backward_kernel(const scalar_t* __restrict__ grad, const scalar_t* __restrict__ x,
                                    const scalar_t* __restrict__ y, scalar_t* __restrict__ grad_x,
                                    scalar_t* __restrict__ grad_y, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  // FILL ME IN (roughly 5 lines): grad_x = grad * y and grad_y = grad * x for this thread's element
}

// ---------------------------------------------------------------------------------------------
// Launchers.

static void check_operand(const at::Tensor& t, const at::Tensor& x, const char* name) {
  TORCH_CHECK(KERNELS_ON_DEVICE(t), name, " must be " KERNELS_DEVICE_WORD ", got a tensor on ", t.device());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous (call .contiguous() first)");
  TORCH_CHECK(t.sizes() == x.sizes(), name, " must have the shape of x, ", shape_str(x.sizes()), ", got ",
              shape_str(t.sizes()));
  TORCH_CHECK(t.scalar_type() == x.scalar_type(), name, " must have the dtype of x, ", x.scalar_type(), ", got ",
              t.scalar_type());
}

static void check_x(const at::Tensor& x) {
  CHECK_INPUT(x);
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble,
              "x must have dtype float32 or float64, got ", x.scalar_type());
}

// Named fma_forward, not fma: fma is already a C math function (one fused multiply-add).
at::Tensor fma_forward(const at::Tensor& x, const at::Tensor& y, const at::Tensor& z) {
  check_x(x);
  check_operand(y, x, "y");
  check_operand(z, x, "z");
  at::Tensor out = at::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return out;
  const int64_t blocks = ceil_div(n, BLOCK);
  CHECK_GRID(blocks);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fma", [&] {
    fma_kernel<scalar_t><<<blocks, BLOCK, 0, stream>>>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                                                       z.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n);
    CHECK_LAUNCH();
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> fma_backward(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& y) {
  check_x(x);
  check_operand(y, x, "y");
  check_operand(grad, x, "grad");
  at::Tensor grad_x = at::empty_like(x), grad_y = at::empty_like(y);
  const int64_t n = x.numel();
  if (n == 0) return {grad_x, grad_y};
  const int64_t blocks = ceil_div(n, BLOCK);
  CHECK_GRID(blocks);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fma_backward", [&] {
    fma_backward_kernel<scalar_t><<<blocks, BLOCK, 0, stream>>>(
        grad.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(),
        grad_y.data_ptr<scalar_t>(), n);
    CHECK_LAUNCH();
  });
  return {grad_x, grad_y};
}

// ---------------------------------------------------------------------------------------------
// Registration.
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("fma(Tensor x, Tensor y, Tensor z) -> Tensor");
  // FILL ME IN (1 line): the schema of fma_backward: it reads grad, x and y, and returns two tensors
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("fma", &fma_forward);
  // FILL ME IN (1 line): the launcher fma_backward (the C++ function above, not the __global__
  // kernel) as the CUDA implementation of the op fma_backward
}
