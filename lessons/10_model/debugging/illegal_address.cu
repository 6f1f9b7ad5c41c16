// illegal_address.cu: an illegal memory access. out[r][c] = x[r][c] + bias[c], where the bias is
// optional: without one the launcher passes a null pointer, and the kernel reads it anyway. On a
// GPU: "an illegal memory access was encountered", and the CUDA context is broken for the rest of
// the process (see sticky_error.cu).
//
//   broken   reads bias[c] whether or not there is a bias
//   fixed    reads it only when the pointer is not null
#include "helpers.cuh"

#include <optional>

// add_bias_kernel: thread i owns out[i] (row i / cols, column i % cols); 8-12 B per element.
template <bool kChecksBias>
__global__ void add_bias_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                float* __restrict__ out, int64_t n, int64_t cols) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float b;
  if constexpr (kChecksBias) b = bias != nullptr ? bias[i % cols] : 0.0f;  // FIX: no bias, nothing to add
  else b = bias[i % cols];  // the bug: bias may be null, and reading address 0 + 4c is illegal
  out[i] = x[i] + b;
}

template <bool kChecksBias>
static void launch(const at::Tensor& x, const std::optional<at::Tensor>& bias, at::Tensor& out) {
  CHECK_INPUT(x);
  CHECK_INPUT(out);
  CHECK_SAME_SHAPE(x, out);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_DIM(x, 2);
  const float* b = nullptr;
  if (bias.has_value()) {
    CHECK_INPUT(*bias);
    TORCH_CHECK(bias->numel() == x.size(1), "bias must have x.size(1) = ", std::to_string(x.size(1)),
                " elements, got ", std::to_string(bias->numel()));
    b = bias->data_ptr<float>();
  }
  const int64_t n = x.numel();
  if (n == 0) return;
  add_bias_kernel<kChecksBias><<<ceil_div(n, 256), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), b, out.data_ptr<float>(), n, x.size(1));
  CHECK_LAUNCH();
}

void broken(const at::Tensor& x, const std::optional<at::Tensor>& bias, at::Tensor& out) { launch<false>(x, bias, out); }
void fixed(const at::Tensor& x, const std::optional<at::Tensor>& bias, at::Tensor& out) { launch<true>(x, bias, out); }

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("broken(Tensor x, Tensor? bias, Tensor(a!) out) -> ()");
  m.def("fixed(Tensor x, Tensor? bias, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("broken", &broken);
  m.impl("fixed", &fixed);
}
