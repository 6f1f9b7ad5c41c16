// extension_style.cu: host code written for CUDA tensors, as the PyTorch C++/CUDA extension
// tutorial and pytorch/extension-cpp write it, with no simulator-specific line. On the sim
// backend "the CUDA device" is the CPU; tests/test_sim_compat.py compares every op with PyTorch.
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
//
//   op              what it exercises
//   muladd          a.device().type() == at::DeviceType::CUDA in TORCH_CHECK and TORCH_INTERNAL_ASSERT
//   sigmoid_scale   packed_accessor32 / PackedTensorAccessor32 with RestrictPtrTraits, AT_DISPATCH
//   row_offsets     packed_accessor64 / PackedTensorAccessor64 on a 3-D tensor
//   to_device       .is_cuda(), torch::kCUDA options, .to(kCUDA), .cuda(), options().device(at::kCUDA),
//                   the guards and the current stream
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublas_v2.h>  // included and never called, as many extensions do

#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")
#define CHECK_CONTIGUOUS(x) TORCH_CHECK(x.is_contiguous(), #x " must be contiguous")
#define CHECK_INPUT(x) \
  CHECK_CUDA(x);       \
  CHECK_CONTIGUOUS(x)

// An error-check macro in the style of many extensions: it names cuBLAS types without calling cuBLAS.
#define CUBLAS_CHECK(status) \
  TORCH_CHECK((status) == CUBLAS_STATUS_SUCCESS, "cuBLAS error: ", cublasGetStatusString(status))

// ---------------------------------------------------------------------------------------------
// kernels

// One thread per element: out = a * b + c. Reads 12 bytes and writes 4 per element.
__global__ void muladd_kernel(int64_t numel, const float* a, const float* b, float c, float* result) {
  int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx < numel) result[idx] = a[idx] * b[idx] + c;
}

// One thread per (row, column): blockIdx.y picks the row, x threads stride the columns.
template <typename scalar_t>
__global__ void sigmoid_scale_kernel(const torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> x,
                                     const torch::PackedTensorAccessor32<scalar_t, 1, torch::RestrictPtrTraits> w,
                                     torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> out) {
  const int n = blockIdx.y;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < x.size(1)) out[n][c] = w[c] / (scalar_t(1) + exp(-x[n][c]));
}

// One thread per (batch, row): out[b][r] = the sum of x[b][r][:] plus r, through 64-bit accessors.
template <typename scalar_t>
__global__ void row_offsets_kernel(const at::PackedTensorAccessor64<scalar_t, 3, at::RestrictPtrTraits> x,
                                   at::PackedTensorAccessor64<scalar_t, 2, at::RestrictPtrTraits> out) {
  const int64_t b = blockIdx.x;
  const int64_t r = threadIdx.x;
  if (r >= x.size(1)) return;
  scalar_t s = 0;
  for (int64_t k = 0; k < x.size(2); ++k) s += x[b][r][k];
  out[b][r] = s + static_cast<scalar_t>(r);
}

// One thread per element: out = 2 * x.
__global__ void twice_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = 2.0f * x[i];
}

// ---------------------------------------------------------------------------------------------
// launchers

at::Tensor muladd(const at::Tensor& a, const at::Tensor& b, double c) {
  TORCH_CHECK(a.sizes() == b.sizes(), "a and b must have the same shape");
  TORCH_CHECK(a.dtype() == at::kFloat && b.dtype() == at::kFloat, "a and b must be float32");
  TORCH_CHECK(a.device().type() == at::DeviceType::CUDA, "a must be a CUDA tensor");
  TORCH_INTERNAL_ASSERT(b.device().type() == at::DeviceType::CUDA);
  at::Tensor a_contig = a.contiguous();
  at::Tensor b_contig = b.contiguous();
  at::Tensor result = torch::empty(a_contig.sizes(), a_contig.options());
  const int64_t numel = a_contig.numel();
  if (numel == 0) return result;
  muladd_kernel<<<(numel + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
      numel, a_contig.data_ptr<float>(), b_contig.data_ptr<float>(), static_cast<float>(c),
      result.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return result;
}

torch::Tensor sigmoid_scale(torch::Tensor x, torch::Tensor w) {
  CHECK_INPUT(x);
  CHECK_INPUT(w);
  TORCH_CHECK(x.dim() == 2 && w.dim() == 1 && w.size(0) == x.size(1), "expected x (N, C) and w (C)");
  const c10::cuda::CUDAGuard device_guard(x.device());
  auto out = torch::empty_like(x);
  if (x.numel() == 0) return out;
  const int threads = 128;
  const dim3 blocks((x.size(1) + threads - 1) / threads, x.size(0));
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "sigmoid_scale", ([&] {
    sigmoid_scale_kernel<scalar_t><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.packed_accessor32<scalar_t, 2, torch::RestrictPtrTraits>(),
        w.packed_accessor32<scalar_t, 1, torch::RestrictPtrTraits>(),
        out.packed_accessor32<scalar_t, 2, torch::RestrictPtrTraits>());
  }));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

torch::Tensor row_offsets(torch::Tensor x) {
  CHECK_CUDA(x);
  TORCH_CHECK(x.dim() == 3 && x.size(1) <= 1024, "expected x (B, R, K) with R <= 1024");
  const at::cuda::OptionalCUDAGuard device_guard(device_of(x));
  auto out = torch::empty({x.size(0), x.size(1)}, x.options());
  if (out.numel() == 0) return out;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "row_offsets", ([&] {
    row_offsets_kernel<scalar_t><<<x.size(0), x.size(1), 0, at::cuda::getCurrentCUDAStream()>>>(
        x.packed_accessor64<scalar_t, 3, at::RestrictPtrTraits>(),
        out.packed_accessor64<scalar_t, 2, at::RestrictPtrTraits>());
  }));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

// Moves to "the CUDA device" in every spelling, checks where the results are, and returns
// 2 * x computed by a kernel plus 1 + the number of device checks that held (5 of 5 expected).
std::vector<torch::Tensor> to_device(torch::Tensor x) {
  CHECK_CUDA(x);
  TORCH_CHECK(x.dtype() == torch::kFloat32, "x must be float32");
  c10::cuda::CUDAGuard guard(x.device());
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCUDA);
  auto out = torch::empty(x.sizes(), opts);
  auto moved = x.to(torch::kCUDA).contiguous();
  auto copied = x.cuda();
  auto same = torch::empty({0}, x.options().device(at::kCUDA));
  int held = 0;
  held += out.is_cuda();
  held += moved.device().type() == torch::kCUDA;
  held += copied.device() == x.device();
  held += same.device().type() == c10::DeviceType::CUDA;
  held += x.device().is_cuda();
  const int64_t n = moved.numel();
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (n > 0) {
    twice_kernel<<<(n + 255) / 256, 256, 0, stream>>>(moved.data_ptr<float>(), out.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return {out, torch::full({1}, held + 1, torch::TensorOptions().dtype(torch::kInt64))};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("muladd", &muladd, "a * b + c");
  m.def("sigmoid_scale", &sigmoid_scale, "w * sigmoid(x), through 32-bit packed accessors");
  m.def("row_offsets", &row_offsets, "x.sum(-1) + row index, through 64-bit packed accessors");
  m.def("to_device", &to_device, "2 * x, moved to the CUDA device in every spelling");
}
