// 03_pytorch_op.cu: elementwise multiply as a real PyTorch op, with its backward.
// Load with `ext = load("03")`; the ops live in the namespace ext.ns: torch.ops.<ext.ns>.mul.
//
//   mul            out = x * y: a functional op (returns a new tensor), float32 and float64
//   mul_backward   (grad_x, grad_y) = (grad * y, grad * x): both gradients in one kernel, added to
//                  the namespace by a second block, TORCH_LIBRARY_FRAGMENT
//
// Unlike the out-variants of the other lessons, these ops allocate their result (at::empty_like):
// autograd and torch.compile work with functional ops. Python adds the rest (the lesson shows
// it): register_fake (shapes without running a kernel) and register_autograd (the derivative).
// Inputs: contiguous tensors of one shape and one dtype (float32 or float64) on the device.

// ---------------------------------------------------------------------------------------------
// Includes.
#include "helpers.cuh"

#include <ATen/Dispatch.h>       // AT_DISPATCH_FLOATING_TYPES: one kernel instance per dtype
#include <ATen/ops/empty_like.h> // at::empty_like without the heavy <torch/extension.h>
#include <tuple>

constexpr int BLOCK = 256;  // threads per block: 8 warps

// ---------------------------------------------------------------------------------------------
// Kernels.

// mul_kernel: thread i owns element i. Reads 2 values and writes 1 (12 B per element in fp32,
// 24 B in fp64): memory-bound, like every elementwise op. scalar_t is float or double.
template <typename scalar_t>
__global__ void mul_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ y,
                           scalar_t* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;  // 64-bit: n may pass 2^31
  if (i < n) out[i] = x[i] * y[i];  // the last block is ragged: its threads past n do nothing
}

// mul_backward_kernel: thread i owns element i of both gradients. Reads grad, x, y once and
// writes two outputs (20 B per element in fp32): one pass instead of two separate multiplies,
// which would read grad twice (24 B).
template <typename scalar_t>
__global__ void mul_backward_kernel(const scalar_t* __restrict__ grad, const scalar_t* __restrict__ x,
                                    const scalar_t* __restrict__ y, scalar_t* __restrict__ grad_x,
                                    scalar_t* __restrict__ grad_y, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) {
    const scalar_t g = grad[i];  // read once, used twice
    grad_x[i] = g * y[i];        // d(x*y)/dx = y
    grad_y[i] = g * x[i];        // d(x*y)/dy = x
  }
}

// ---------------------------------------------------------------------------------------------
// Launchers.

// The checks every op here makes: same device, contiguous, same shape and dtype, float or double.
static void check_operands(const at::Tensor& x, const at::Tensor& y) {
  CHECK_INPUT(x);
  CHECK_INPUT(y);
  CHECK_SAME_SHAPE(x, y);
  CHECK_SAME_DTYPE(x, y);
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble,
              "x must have dtype float32 or float64, got ", x.scalar_type());
}

at::Tensor mul(const at::Tensor& x, const at::Tensor& y) {
  check_operands(x, y);
  at::Tensor out = at::empty_like(x);  // a new tensor: this op is functional
  const int64_t n = x.numel();
  if (n == 0) return out;  // a grid of 0 blocks is an error, and there is nothing to do
  const int64_t blocks = ceil_div(n, BLOCK);
  CHECK_GRID(blocks);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  // AT_DISPATCH_FLOATING_TYPES runs the lambda once with scalar_t = float or double, whichever
  // x holds (and raises for any other dtype): the kernel template gets one instance per type.
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "mul", [&] {
    mul_kernel<scalar_t><<<blocks, BLOCK, 0, stream>>>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                                                       out.data_ptr<scalar_t>(), n);
    CHECK_LAUNCH();
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> mul_backward(const at::Tensor& grad, const at::Tensor& x,
                                                const at::Tensor& y) {
  check_operands(x, y);
  CHECK_INPUT(grad);  // autograd can hand us a strided grad: the Python side calls .contiguous()
  CHECK_SAME_SHAPE(grad, x);
  CHECK_SAME_DTYPE(grad, x);
  at::Tensor grad_x = at::empty_like(x), grad_y = at::empty_like(y);
  const int64_t n = x.numel();
  if (n == 0) return {grad_x, grad_y};
  const int64_t blocks = ceil_div(n, BLOCK);
  CHECK_GRID(blocks);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "mul_backward", [&] {
    mul_backward_kernel<scalar_t><<<blocks, BLOCK, 0, stream>>>(
        grad.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
        grad_x.data_ptr<scalar_t>(), grad_y.data_ptr<scalar_t>(), n);
    CHECK_LAUNCH();
  });
  return {grad_x, grad_y};
}

// ---------------------------------------------------------------------------------------------
// Registration.

// The schema: the op's name, argument types and result, with no kernel yet. A plain `Tensor`
// result (no `(a!)` annotation on any argument) tells PyTorch the op mutates nothing: functional.
// TORCH_LIBRARY may appear once per namespace in the whole program.
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("mul(Tensor x, Tensor y) -> Tensor");
}

// A FRAGMENT adds ops to a namespace that a TORCH_LIBRARY block (here, or in another file of the
// same library) opens. Large projects keep one fragment per file.
TORCH_LIBRARY_FRAGMENT_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("mul_backward(Tensor grad, Tensor x, Tensor y) -> (Tensor, Tensor)");
}

// The kernels, under the CUDA dispatch key: PyTorch calls them for CUDA tensors. (The simulator
// registers the same functions under the CPU key, since its tensors live on the CPU.)
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("mul", &mul);
  m.impl("mul_backward", &mul_backward);
}
