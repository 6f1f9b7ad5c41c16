// profile_probes.cu: small kernels with known memory-access patterns, one pattern per op, for the
// simulator's access profiler (tests/test_profile.py) and for the same counters from Nsight
// Compute on a GPU (tests/toolkit/ncu_compare.py). Every launch is one or more whole warps, and
// the comment above each kernel says what a warp's request should cost.
//
//   strided_copy    out[i] = x[i * stride]: 4 B per lane, stride 1/2/32 -> 4/8/32 sectors a request
//   shared_stride   lane l reads shared word (l * stride) % 1024: 2-way conflicts at stride 2,
//                   32-way at stride 32, none at stride 1 or 0 (all lanes read one word: a broadcast)
//   odd_lanes       a branch on threadIdx.x % 2: the copy inside runs with 16 active lanes of 32
//   atomic_sum      atomicAdd of every element into one float: one atomic request per warp
//   matmul_tiled    C = A @ B with 16x16 shared-memory tiles (row-major float32, any sizes)
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <string>

constexpr int kThreads = 256;
constexpr int kTile = 16;

// ---------------------------------------------------------------------------------------------
// Kernels.

// strided_copy_kernel: thread i owns out[i] and reads x[i * stride]. A warp's 32 loads of 4 bytes
// lie 4 * stride bytes apart: 128 B (4 sectors) at stride 1, 256 B (8) at 2, a sector each from 8 on.
__global__ void strided_copy_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n, int64_t stride) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i * stride];
}

// shared_stride_kernel: each thread fills word tid of a 1024-word shared array (consecutive
// words: no conflict), then lane l of every warp reads word (l * stride) % 1024. Word w sits in
// bank w % 32, so stride 2 puts two lanes on each even bank, stride 32 all lanes on bank 0.
__global__ void shared_stride_kernel(float* __restrict__ out, int stride) {
  __shared__ float words[1024];
  const int tid = threadIdx.x;
  for (int w = tid; w < 1024; w += blockDim.x) words[w] = static_cast<float>(w);
  __syncthreads();  // every word is written before any lane reads another's
  const int lane = tid % 32;
  out[blockIdx.x * blockDim.x + tid] = words[(lane * stride) % 1024];
}

// odd_lanes_kernel: only odd threads copy, so each warp's copy runs with half its lanes.
__global__ void odd_lanes_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n && threadIdx.x % 2 == 1) out[i] = x[i];
}

// atomic_sum_kernel: every thread adds its element into *out (one address: the atomics queue).
__global__ void atomic_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(out, x[i]);
}

// matmul_tiled_kernel: thread (ty, tx) of block (by, bx) owns C[by*16 + ty][bx*16 + tx]; the
// block walks K in 16-wide tiles of A and B staged in shared memory, each element of a tile read
// by 16 threads from shared memory instead of 16 times from global memory.
__global__ void matmul_tiled_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                    int m, int n, int k) {
  __shared__ float as[kTile][kTile];
  __shared__ float bs[kTile][kTile];
  const int ty = threadIdx.y, tx = threadIdx.x;
  const int row = blockIdx.y * kTile + ty, col = blockIdx.x * kTile + tx;
  float acc = 0.0f;
  for (int t = 0; t < k; t += kTile) {
    as[ty][tx] = row < m && t + tx < k ? a[(int64_t)row * k + t + tx] : 0.0f;
    bs[ty][tx] = t + ty < k && col < n ? b[(int64_t)(t + ty) * n + col] : 0.0f;
    __syncthreads();  // the tiles are complete before anyone reads them
    for (int j = 0; j < kTile; ++j) acc += as[ty][j] * bs[j][tx];
    __syncthreads();  // everyone is done with the tiles before the next ones overwrite them
  }
  if (row < m && col < n) c[(int64_t)row * n + col] = acc;
}

// ---------------------------------------------------------------------------------------------
// Launchers.

void strided_copy(const at::Tensor& x, at::Tensor& out, int64_t stride) {
  CHECK_INPUT(x);
  CHECK_INPUT(out);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_DTYPE(out, at::kFloat);
  TORCH_CHECK(stride >= 1, "stride must be at least 1, got ", std::to_string(stride));
  const int64_t n = out.numel();
  TORCH_CHECK(n == 0 || (n - 1) * stride < x.numel(), "x must hold (out.numel() - 1) * stride + 1 = ",
              std::to_string(n == 0 ? 0 : (n - 1) * stride + 1), " elements, got ", std::to_string(x.numel()));
  if (n == 0) return;
  strided_copy_kernel<<<ceil_div(n, kThreads), kThreads>>>(x.data_ptr<float>(), out.data_ptr<float>(), n, stride);
  CHECK_LAUNCH();
}

void shared_stride(at::Tensor& out, int64_t stride) {
  CHECK_INPUT(out);
  CHECK_DTYPE(out, at::kFloat);
  TORCH_CHECK(stride >= 0 && stride <= 1024, "stride must be 0 to 1024, got ", std::to_string(stride));
  TORCH_CHECK(out.numel() > 0 && out.numel() % kThreads == 0, "out must hold a positive multiple of ",
              std::to_string(kThreads), " elements, got ", std::to_string(out.numel()));
  shared_stride_kernel<<<out.numel() / kThreads, kThreads>>>(out.data_ptr<float>(), static_cast<int>(stride));
  CHECK_LAUNCH();
}

void odd_lanes(const at::Tensor& x, at::Tensor& out) {
  CHECK_INPUT(x);
  CHECK_INPUT(out);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_SAME_SHAPE(x, out);
  CHECK_SAME_DTYPE(x, out);
  const int64_t n = x.numel();
  if (n == 0) return;
  odd_lanes_kernel<<<ceil_div(n, kThreads), kThreads>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

void atomic_sum(const at::Tensor& x, at::Tensor& out) {
  CHECK_INPUT(x);
  CHECK_INPUT(out);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_SAME_DTYPE(x, out);
  TORCH_CHECK(out.numel() == 1, "out must hold one element, got ", std::to_string(out.numel()));
  const int64_t n = x.numel();
  if (n == 0) return;
  atomic_sum_kernel<<<ceil_div(n, kThreads), kThreads>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

at::Tensor matmul_tiled(const at::Tensor& a, const at::Tensor& b) {
  CHECK_INPUT(a);
  CHECK_INPUT(b);
  CHECK_DTYPE(a, at::kFloat);
  CHECK_SAME_DTYPE(a, b);
  CHECK_DIM(a, 2);
  CHECK_DIM(b, 2);
  TORCH_CHECK(a.size(1) == b.size(0), "a's columns must match b's rows, got shapes ", shape_str(a.sizes()),
              " and ", shape_str(b.sizes()));
  const int m = static_cast<int>(a.size(0)), k = static_cast<int>(a.size(1)), n = static_cast<int>(b.size(1));
  at::Tensor c = at::empty({m, n}, a.options());
  if (m == 0 || n == 0) return c;
  if (k == 0) return c.zero_();
  const dim3 block(kTile, kTile), grid(ceil_div(n, kTile), ceil_div(m, kTile));
  matmul_tiled_kernel<<<grid, block>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), m, n, k);
  CHECK_LAUNCH();
  return c;
}

// ---------------------------------------------------------------------------------------------
// Registration.

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("strided_copy(Tensor x, Tensor(a!) out, int stride) -> ()");
  m.def("shared_stride(Tensor(a!) out, int stride) -> ()");
  m.def("odd_lanes(Tensor x, Tensor(a!) out) -> ()");
  m.def("atomic_sum(Tensor x, Tensor(a!) out) -> ()");
  m.def("matmul_tiled(Tensor a, Tensor b) -> Tensor");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("strided_copy", &strided_copy);
  m.impl("shared_stride", &shared_stride);
  m.impl("odd_lanes", &odd_lanes);
  m.impl("atomic_sum", &atomic_sum);
  m.impl("matmul_tiled", &matmul_tiled);
}
