// 11_other_routes.cu: one kernel pair, bias + GELU and its derivative in float32, written so that every route
// of lesson 11 runs the same code: kernels.load (this file), kernels.load_inline (the same text held in a
// Python string) and CuPy's RawKernel, which compiles only the "Kernels" section below with NVRTC.
// Load with `ext = load("11")`: ext.bias_gelu(x, bias), ext.bias_gelu_backward(grad, x, bias).
//
//   bias_gelu_kernel1           out = gelu(x + bias), tanh approximation, one thread per element
//   bias_gelu_backward_kernel1  dx = grad * gelu'(x + bias), one thread per element (dbias is dx summed
//                               over rows: the caller's job, a reduction lesson 05 fuses and this file does not)
//   bias_gelu, bias_gelu_backward  the ops (they allocate and return their outputs)
//
// x and grad: any shape with C = x.size(-1) columns; bias: [C]; float32, contiguous, on the device.
// Lesson 05's bias_gelu3 is the fast version (16-byte vectors, bfloat16 too); this one is kept
// scalar so that its kernels need nothing but CUDA C++: no PyTorch header, no helpers.cuh.

// ---------------------------------------------------------------------------------------------
// Includes.
#include "helpers.cuh"

#include <ATen/ops/empty_like.h>
#include <cstdint>

constexpr int THREADS = 256;  // threads per block

// ---------------------------------------------------------------------------------------------
// Kernels. Self-contained (CuPy compiles this section alone): extern "C" keeps the names unmangled,
// so that RawKernel finds them by name, and the sizes are `long long` and `int`, types NVRTC knows
// without <cstdint>.

// gelu(h) = 0.5 h (1 + tanh(u)) = h * sigmoid(2u), u = sqrt(2/pi) (h + 0.044715 h^3) (lesson 05).
__device__ __forceinline__ float gelu_tanh1(float h) {
  const float u = 0.7978845608028654f * (h + 0.044715f * h * h * h);
  return h / (1.0f + expf(-2.0f * u));
}

// d/dh [h s] with s = sigmoid(2u): s + h * 2 s (1 - s) * du/dh.
__device__ __forceinline__ float gelu_tanh_grad1(float h) {
  const float u = 0.7978845608028654f * (h + 0.044715f * h * h * h);
  const float s = 1.0f / (1.0f + expf(-2.0f * u));
  return s + 2.0f * h * s * (1.0f - s) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * h * h);
}

// bias_gelu_kernel1: thread i owns element i of the flat [rows, C] tensor; its bias is bias[i % C].
// Reads 4 B of x (bias stays in L1/L2), writes 4 B: bounded by memory bandwidth.
extern "C" __global__ void bias_gelu_kernel1(const float* __restrict__ x, const float* __restrict__ bias,
                                             float* __restrict__ out, long long n, int C) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = gelu_tanh1(x[i] + bias[i % C]);
}

// bias_gelu_backward_kernel1: thread i owns dx[i] = grad[i] * gelu'(x[i] + bias[i % C]).
// Reads 8 B (grad, x), writes 4 B per element: bounded by memory bandwidth.
extern "C" __global__ void bias_gelu_backward_kernel1(const float* __restrict__ grad, const float* __restrict__ x,
                                                      const float* __restrict__ bias, float* __restrict__ dx,
                                                      long long n, int C) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) dx[i] = grad[i] * gelu_tanh_grad1(x[i] + bias[i % C]);
}

// ---------------------------------------------------------------------------------------------
// Launchers.

// The columns of x, after checking that bias is a float32 [C] tensor on x's device.
static int check_bias_gelu_inputs(const at::Tensor& x, const at::Tensor& bias) {
  CHECK_INPUT(x);
  CHECK_INPUT(bias);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_DTYPE(bias, at::kFloat);
  TORCH_CHECK(x.dim() >= 1, "x must have at least 1 dimension (its last is the columns), got a 0-d tensor");
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == x.size(-1), "bias must have shape [", std::to_string(x.size(-1)),
              "] (one value per column of x), got ", shape_str(bias.sizes()));
  TORCH_CHECK(x.size(-1) <= INT32_MAX, "x may have at most 2^31 - 1 columns, got ", std::to_string(x.size(-1)));
  return static_cast<int>(x.size(-1));
}

at::Tensor bias_gelu(const at::Tensor& x, const at::Tensor& bias) {
  const int C = check_bias_gelu_inputs(x, bias);
  auto out = at::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return out;
  const int64_t blocks = ceil_div(n, (int64_t)THREADS);
  CHECK_GRID(blocks);
  bias_gelu_kernel1<<<blocks, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), n, C);
  CHECK_LAUNCH();
  return out;
}

at::Tensor bias_gelu_backward(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& bias) {
  const int C = check_bias_gelu_inputs(x, bias);
  CHECK_INPUT(grad);
  CHECK_SAME_DTYPE(grad, x);
  CHECK_SAME_SHAPE(grad, x);
  auto dx = at::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return dx;
  const int64_t blocks = ceil_div(n, (int64_t)THREADS);
  CHECK_GRID(blocks);
  bias_gelu_backward_kernel1<<<blocks, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      grad.data_ptr<float>(), x.data_ptr<float>(), bias.data_ptr<float>(), dx.data_ptr<float>(), n, C);
  CHECK_LAUNCH();
  return dx;
}

// ---------------------------------------------------------------------------------------------
// Registration.
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("bias_gelu(Tensor x, Tensor bias) -> Tensor");
  m.def("bias_gelu_backward(Tensor grad, Tensor x, Tensor bias) -> Tensor");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("bias_gelu", &bias_gelu);
  m.impl("bias_gelu_backward", &bias_gelu_backward);
}
