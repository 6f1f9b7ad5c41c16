// uses_torch_nn.cu: an extension whose host code uses libtorch's C++ module API (torch::nn::Linear),
// which the simulator's light torch/extension.h does not hold: on the sim backend the build falls
// back to the real torch/extension.h. tests/test_sim_compat.py checks the result against PyTorch.
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
#include <torch/extension.h>

#include <c10/cuda/CUDAException.h>

// ---------------------------------------------------------------------------------------------
// kernels

// One thread per element: out = 2 * y.
__global__ void twice_kernel(const float* __restrict__ y, float* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = 2.0f * y[i];
}

// ---------------------------------------------------------------------------------------------
// launchers

// 2 * (x @ w.T + b), the linear layer computed by torch::nn::Linear with w and b as its parameters.
torch::Tensor twice_linear(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && b.dim() == 1 && x.size(1) == w.size(1) && w.size(0) == b.size(0),
              "expected x (N, in), w (out, in) and b (out)");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
  torch::nn::Linear linear(torch::nn::LinearOptions(w.size(1), w.size(0)));
  linear->to(x.device());
  {
    torch::NoGradGuard no_grad;
    linear->weight.copy_(w);
    linear->bias.copy_(b);
  }
  auto y = linear(x).detach().contiguous();
  auto out = torch::empty_like(y);
  const int64_t n = y.numel();
  if (n > 0) {
    twice_kernel<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), out.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("twice_linear", &twice_linear, "2 * (x @ w.T + b) through torch::nn::Linear");
}
