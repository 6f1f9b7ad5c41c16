// pybind_extension.cu: a PyTorch C++/CUDA extension in the tutorial's style: torch/extension.h,
// torch::Tensor in the signatures, AT_DISPATCH_FLOATING_TYPES, torch::zeros_like and packed
// accessors, bound with pybind11. On the sim backend it builds with the simulator's light
// torch/extension.h; tests/test_sim_compat.py compares every op with PyTorch.
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
//
//   op                 what it exercises
//   leaky_relu         AT_DISPATCH_FLOATING_TYPES, torch::zeros_like, packed_accessor32 on a 2-D tensor
//   column_sums        torch::zeros with options, packed_accessor64, an atomicAdd per element
//   moments            std::vector<torch::Tensor> returned through pybind11, torch::ones/full/empty_like
#include <torch/extension.h>

#include <c10/cuda/CUDAException.h>

#include <vector>

// ---------------------------------------------------------------------------------------------
// kernels

// One thread per (row, column): blockIdx.y picks the row, x threads stride the columns.
template <typename scalar_t>
__global__ void leaky_relu_kernel(const torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> x,
                                  torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> out,
                                  scalar_t slope) {
  const int r = blockIdx.y;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < x.size(1)) out[r][c] = x[r][c] > scalar_t(0) ? x[r][c] : slope * x[r][c];
}

// One thread per element; each adds its value into its column's sum (float32 only: atomicAdd).
__global__ void column_sums_kernel(const torch::PackedTensorAccessor64<float, 2, torch::RestrictPtrTraits> x,
                                   torch::PackedTensorAccessor64<float, 1, torch::RestrictPtrTraits> sums) {
  const int64_t r = blockIdx.y;
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c < x.size(1)) atomicAdd(&sums[c], x[r][c]);
}

// One thread per element: mean and square of x scaled by a per-call constant.
template <typename scalar_t>
__global__ void moments_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ first,
                               scalar_t* __restrict__ second, scalar_t scale, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    first[i] = scale * x[i];
    second[i] = scale * x[i] * x[i];
  }
}

// ---------------------------------------------------------------------------------------------
// launchers

torch::Tensor leaky_relu(torch::Tensor x, double slope) {
  TORCH_CHECK(x.dim() == 2, "x must be 2-D, got ", x.dim(), "-D");
  x = x.contiguous();
  auto out = torch::zeros_like(x);
  if (x.numel() == 0) return out;
  const int threads = 128;
  const dim3 blocks((x.size(1) + threads - 1) / threads, x.size(0));
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "leaky_relu", ([&] {
    leaky_relu_kernel<scalar_t><<<blocks, threads>>>(x.packed_accessor32<scalar_t, 2, torch::RestrictPtrTraits>(),
                                                     out.packed_accessor32<scalar_t, 2, torch::RestrictPtrTraits>(),
                                                     static_cast<scalar_t>(slope));
  }));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

torch::Tensor column_sums(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x must be a 2-D float32 tensor");
  auto sums = torch::zeros({x.size(1)}, x.options());
  if (x.numel() == 0) return sums;
  const int threads = 64;
  const dim3 blocks((x.size(1) + threads - 1) / threads, x.size(0));
  column_sums_kernel<<<blocks, threads>>>(x.packed_accessor64<float, 2, torch::RestrictPtrTraits>(),
                                          sums.packed_accessor64<float, 1, torch::RestrictPtrTraits>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return sums;
}

// Returns {scale * x, scale * x^2, ones like x, a one-element tensor holding x.numel()}.
std::vector<torch::Tensor> moments(torch::Tensor x, double scale) {
  x = x.contiguous();
  auto first = torch::empty_like(x);
  auto second = torch::empty_like(x);
  const int64_t n = x.numel();
  if (n > 0) {
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "moments", ([&] {
      moments_kernel<scalar_t><<<(n + 255) / 256, 256>>>(x.data_ptr<scalar_t>(), first.data_ptr<scalar_t>(),
                                                         second.data_ptr<scalar_t>(), static_cast<scalar_t>(scale), n);
    }));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return {first, second, torch::ones(x.sizes(), x.options()),
          torch::full({1}, n, torch::TensorOptions().dtype(torch::kInt64).device(x.device()))};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("leaky_relu", &leaky_relu, "x where x > 0, else slope * x", py::arg("x"), py::arg("slope"));
  m.def("column_sums", &column_sums, "x.sum(0) through atomicAdd");
  m.def("moments", &moments, "scale * x, scale * x^2, ones_like(x) and x.numel()");
}
