// launch_forms.cu: launches, shuffles and registrations written the way public projects write them
// (the CUDA samples, LeetCUDA's launch macros, NVIDIA's integral-image kernels, vLLM's registration
// header); tests/test_sim_public.py compares every op with PyTorch on the sim backend and, with a GPU,
// on cuda.
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
//
//   op             what it exercises
//   reverse32      dynamic shared memory sized by an enumerator (cudaTensorCoreGemm's enum { SHMEM_SZ })
//   scale_macro    a launch split over a macro's lines (kernel name, backslash, then <<<), and one
//                  whose kernel name is pasted together with ##
//   shift_up       __shfl_up_sync with the full mask in a block of 40 threads: the partial last warp's
//                  lanes read only lanes that exist
//   row_prefix     cg::inclusive_scan over tiled_partition<32> of 120-thread blocks (a partial last tile)
//   launch_kernel  cudaLaunchKernel with the kernel's arguments behind void pointers
// The ops are registered through the project's own macro around TORCH_LIBRARY_IMPL, which passes the
// dispatch key CUDA along (as vLLM's registration.h does to expand TORCH_EXTENSION_NAME).
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <cooperative_groups.h>
#include <cooperative_groups/scan.h>

namespace cg = cooperative_groups;

#define PROJECT_REGISTER_IMPL(NAME, DEVICE, MODULE) TORCH_LIBRARY_IMPL(NAME, DEVICE, MODULE)
#define PROJECT_REGISTER_IMPL_EXPAND(NAME, DEVICE, MODULE) PROJECT_REGISTER_IMPL(NAME, DEVICE, MODULE)

// ---------------------------------------------------------------------------------------------
// kernels

// One block of 32 threads: out[i] = x[31 - i] through dynamic shared memory.
__global__ void reverse32_kernel(const float* x, float* out) {
  extern __shared__ float s[];
  s[threadIdx.x] = x[threadIdx.x];
  __syncthreads();  // every element is in before any is read back
  out[threadIdx.x] = s[31 - threadIdx.x];
}

// One thread per element: out = a * x.
__global__ void scale_kernel(const float* x, float* out, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i];
}
__global__ void scale_f32_kernel(const float* x, float* out, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + 1.0f;
}

// One block of n threads (n up to 64): out[i] = the thread index of lane i - 1 in its warp (lane 0 keeps its own).
__global__ void shift_up_kernel(int* out) {
  out[threadIdx.x] = __shfl_up_sync(0xffffffff, static_cast<int>(threadIdx.x), 1);
}

// Blocks of 120 threads, one element each: out[i] = the sum of the elements of i's tile of 32 up to i.
__global__ void row_prefix_kernel(const int* x, int* out, int n) {
  cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = i < n ? x[i] : 0;
  int sum = cg::inclusive_scan(tile, v);
  if (i < n) out[i] = sum;
}

// ---------------------------------------------------------------------------------------------
// launchers

at::Tensor reverse32(const at::Tensor& x) {
  CHECK_INPUT(x);
  TORCH_CHECK(x.numel() == 32, "expected 32 values, got ", std::to_string(x.numel()));
  enum { SHMEM_SZ = 32 * sizeof(float) };  // the CUDA samples' way to name a size
  auto out = at::empty_like(x);
  reverse32_kernel<<<1, 32, SHMEM_SZ>>>(x.data_ptr<float>(), out.data_ptr<float>());
  CHECK_LAUNCH();
  return out;
}

#define LAUNCH_SCALE(x, out, a, n)                                        \
  scale_kernel                                                            \
      <<<ceil_div(n, 256), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), \
                                  a, n);
#define LAUNCH_SCALE_TYPED(type, x, out, a, n)                            \
  scale_##type##_kernel<<<ceil_div(n, 256), 256>>>(                       \
      x.data_ptr<float>(), out.data_ptr<float>(), a, n);

std::vector<at::Tensor> scale_macro(const at::Tensor& x, double a) {
  CHECK_INPUT(x);
  const int n = static_cast<int>(x.numel());
  auto out = at::empty_like(x), out2 = at::empty_like(x);
  if (n) {
    LAUNCH_SCALE(x, out, static_cast<float>(a), n)
    CHECK_LAUNCH();
    LAUNCH_SCALE_TYPED(f32, x, out2, static_cast<float>(a), n)
    CHECK_LAUNCH();
  }
  return {out, out2};
}

at::Tensor shift_up(const at::Tensor& like, int64_t n) {
  auto out = at::empty({n}, like.options().dtype(at::kInt));
  shift_up_kernel<<<1, static_cast<int>(n)>>>(out.data_ptr<int>());
  CHECK_LAUNCH();
  return out;
}

at::Tensor row_prefix(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kInt);
  const int n = static_cast<int>(x.numel());
  auto out = at::empty_like(x);
  if (n) row_prefix_kernel<<<ceil_div(n, 120), 120>>>(x.data_ptr<int>(), out.data_ptr<int>(), n);
  CHECK_LAUNCH();
  return out;
}

at::Tensor launch_kernel(const at::Tensor& x, double a) {
  CHECK_INPUT(x);
  int n = static_cast<int>(x.numel());
  auto out = at::empty_like(x);
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  float af = static_cast<float>(a);
  void* args[] = {&xp, &op, &af, &n};
  if (n) C10_CUDA_CHECK(cudaLaunchKernel(scale_kernel, dim3(ceil_div(n, 128)), dim3(128), args, 0, nullptr));
  return out;
}

// ---------------------------------------------------------------------------------------------
// registration

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("reverse32(Tensor x) -> Tensor");
  m.def("scale_macro(Tensor x, float a) -> Tensor[]");
  m.def("shift_up(Tensor like, int n) -> Tensor");
  m.def("row_prefix(Tensor x) -> Tensor");
  m.def("launch_kernel(Tensor x, float a) -> Tensor");
}

PROJECT_REGISTER_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("reverse32", &reverse32);
  m.impl("scale_macro", &scale_macro);
  m.impl("shift_up", &shift_up);
  m.impl("row_prefix", &row_prefix);
  m.impl("launch_kernel", &launch_kernel);
}
