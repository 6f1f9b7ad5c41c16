// features.cu: one kernel (or a few) per CUDA feature the simulator supports; tests/test_sim.py
// runs each op whose result a GPU defines on every available backend (the simulator, and the GPU
// when there is one) and compares it with PyTorch; the ops that probe the simulator's own errors
// (divergent barriers, deadlocks, races, spins, overruns) run on the simulator only. Ordinary
// CUDA C++ that nvcc also compiles, except the one block marked CUDASIM (nvcc refuses it at
// compile time). Host code allocates on the CUDA device (the CPU on the simulator).
//
//   section                what the ops exercise
//   qualifiers             __host__ __device__ __forceinline__ __noinline__ __launch_bounds__ __restrict__,
//                          templates, unroll
//   indices                threadIdx / blockIdx / blockDim / gridDim in 1, 2 and 3 dimensions, warpSize
//   launches               every spelling of <<<...>>>, and '<<<' inside a string and a comment
//   shared memory          static 1-D and 2-D, extern dynamic, alignment, the 48 KB limits
//   barriers               early return, divergent barriers, deadlocks, a missing barrier
//   warps                  shuffles, votes, __syncwarp, partial masks and warps, the legacy reduction
//   atomics                every atomic on every type CUDA has it for, a CAS loop
//   math and types         intrinsics, bit tricks, vector types, __half and __nv_bfloat16, printf
//   host side              launch errors and the error API, the device's compute capability
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <cassert>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <string>
#include <vector>

// =============================================================================================
// qualifiers
__host__ __device__ __forceinline__ float square_plus_one(float v) { return v * v + 1.0f; }

__device__ __noinline__ float twice(float v) { return 2.0f * v; }
__device__ float twice_square_plus_one(float v) { return twice(square_plus_one(v)); }  // device calls device

template <typename T, int UNROLL>
__global__ void __launch_bounds__(128, 4) qualifiers_kernel(const T* __restrict__ x, T* __restrict__ out, int n) {
  int base = (blockIdx.x * blockDim.x + threadIdx.x) * UNROLL;
#pragma unroll
  for (int k = 0; k < UNROLL; ++k) {
    int i = base + k;
    if (i < n) out[i] = twice_square_plus_one(x[i]);
  }
}

// out = 2 * (x^2 + 1) on the device, plus the host's square_plus_one(3) = 10 in the last slot
at::Tensor qualifiers(const at::Tensor& x) {
  CHECK_INPUT(x);
  int n = x.numel();
  auto out = at::empty({n + 1}, x.options());
  constexpr int UNROLL = 4;
  qualifiers_kernel<float, UNROLL><<<ceil_div(n, 128 * UNROLL), 128>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
  out.narrow(0, n, 1).fill_(square_plus_one(3.0f));  // a fill, not a host write: out may be GPU memory
  return out;
}

// =============================================================================================
// indices: every thread writes what it sees, 12 ints at its global linear id
__global__ void index_kernel(int* out) {
  int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  int id = block * (blockDim.x * blockDim.y * blockDim.z) + thread;
  int* o = out + 13 * id;
  o[0] = threadIdx.x; o[1] = threadIdx.y; o[2] = threadIdx.z;
  o[3] = blockIdx.x;  o[4] = blockIdx.y;  o[5] = blockIdx.z;
  o[6] = blockDim.x;  o[7] = blockDim.y;  o[8] = blockDim.z;
  o[9] = gridDim.x;   o[10] = gridDim.y;  o[11] = gridDim.z;
  o[12] = warpSize;
}

at::Tensor indices(std::vector<int64_t> grid, std::vector<int64_t> block) {
  TORCH_CHECK(grid.size() == 3 && block.size() == 3, "grid and block take 3 values");
  dim3 g(grid[0], grid[1], grid[2]), b(block[0], block[1], block[2]);
  int64_t total = grid[0] * grid[1] * grid[2] * block[0] * block[1] * block[2];
  auto out = at::empty({total, 13}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA));
  index_kernel<<<g, b>>>(out.data_ptr<int>());
  CHECK_LAUNCH();
  return out;
}

// a 2-D grid over a ragged matrix: out[r][c] = x[r][c] + r - c
__global__ void matrix_2d_kernel(const float* x, float* out, int rows, int cols) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  int r = blockIdx.y * blockDim.y + threadIdx.y;
  if (r < rows && c < cols) out[r * cols + c] = x[r * cols + c] + r - c;
}

at::Tensor matrix_2d(const at::Tensor& x) {
  CHECK_INPUT(x);
  int rows = x.size(0), cols = x.size(1);
  auto out = at::empty_like(x);
  dim3 block(16, 8);
  dim3 grid(ceil_div(cols, block.x), ceil_div(rows, block.y));
  matrix_2d_kernel<<<grid, block>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
  CHECK_LAUNCH();
  return out;
}

// =============================================================================================
// launches: every row of the result is written by a different spelling of the launch;
// row j holds x * (j + 1)
__global__ void scale_kernel(const float* x, float* out, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] * s;
}

__global__ void scale_dyn_kernel(const float* x, float* out, float s, int n) {
  extern __shared__ float staged[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  staged[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  if (i < n) out[i] = staged[threadIdx.x] * s;
}

template <typename T, int THREADS>
__global__ void scale_t_kernel(const T* x, T* out, T s, int n) {
  int i = blockIdx.x * THREADS + threadIdx.x;
  if (i < n) out[i] = x[i] * s;
}

template <typename T>
__global__ void scale_deduced_kernel(const T* x, T* out, T s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] * s;
}

namespace launchns {
__global__ void scale(const float* x, float* out, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] * s;
}
namespace inner {
template <int THREADS>
__global__ void scale_t(const float* x, float* out, float s, int n) {
  int i = blockIdx.x * THREADS + threadIdx.x;
  if (i < n) out[i] = x[i] * s;
}
}  // namespace inner
}  // namespace launchns

at::Tensor launch_forms(const at::Tensor& x) {
  CHECK_INPUT(x);
  int n = x.numel();
  const int rows = 9;
  auto out = at::empty({rows, n}, x.options());
  const float* xp = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  scale_kernel<<<ceil_div(n, 256), 256>>>(xp, o + 0 * n, 1.0f, n);
  CHECK_LAUNCH();
  scale_dyn_kernel<<<ceil_div(n, 128), 128, 128 * sizeof(float)>>>(xp, o + 1 * n, 2.0f, n);
  CHECK_LAUNCH();
  scale_dyn_kernel<<<ceil_div(n, 64), 64, 64 * sizeof(float), stream>>>(xp, o + 2 * n, 3.0f, n);
  CHECK_LAUNCH();
  scale_t_kernel<float, 256><<<ceil_div(n, 256), 256>>>(xp, o + 3 * n, 4.0f, n);
  CHECK_LAUNCH();
  launchns::scale<<<ceil_div(n, 32), 32>>>(xp, o + 4 * n, 5.0f, n);
  CHECK_LAUNCH();
  launchns::inner::scale_t<512><<<ceil_div(n, 512), 512, 0, stream>>>(xp, o + 5 * n, 6.0f, n);
  CHECK_LAUNCH();
  scale_kernel<<<
      ceil_div(n, 96),   // a launch split over lines,
      96                 // with comments inside
      >>>(xp,
          o + 6 * n,
          7.0f, n);
  CHECK_LAUNCH();
  scale_kernel<<<(n + 255) >> 8, 256>>>(xp, o + 7 * n, 8.0f, n);  // '>>' inside the configuration
  CHECK_LAUNCH();
  dim3 grid(ceil_div(n, 1024)), block(1024);
  scale_deduced_kernel<<<grid, block>>>(xp, o + 8 * n, 9.0f, n);  // template arguments deduced
  CHECK_LAUNCH();
  return out;
}

// '<<<' in a string, a comment and a character literal stays as it is: k<<<1, 1>>>(x);
/* not a launch either: k<<<grid, block>>>(x); */
std::string launch_text() {
  char open = '<';
  return std::string("k<<<1, 1>>>(x);") + open;
}

// the line a statement after a multi-line launch reports (compiler errors use the same numbering)
int64_t line_after_launch(const at::Tensor& x) {
  int n = x.numel();
  auto out = at::empty_like(x);
  scale_kernel<<<ceil_div(n, 256),
                 256>>>(x.data_ptr<float>(),
                        out.data_ptr<float>(), 1.0f, n);
  return __LINE__;  // LINE-AFTER-LAUNCH
}

// =============================================================================================
// shared memory
// 1-D static: reverse each block's slice (a barrier between the writes and the reads)
__global__ void smem_reverse_kernel(const float* x, float* out, int n) {
  __shared__ float tile[256];
  int i = blockIdx.x * 256 + threadIdx.x;
  int valid = min(256, n - static_cast<int>(blockIdx.x) * 256);
  if (threadIdx.x < valid) tile[threadIdx.x] = x[i];
  __syncthreads();  // wait until the whole tile is loaded
  if (threadIdx.x < valid) out[i] = tile[valid - 1 - threadIdx.x];
}

at::Tensor smem_reverse(const at::Tensor& x) {
  CHECK_INPUT(x);
  int n = x.numel();
  auto out = at::empty_like(x);
  smem_reverse_kernel<<<ceil_div(n, 256), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
  return out;
}

// 2-D static: a tiled transpose; the +1 column avoids bank conflicts
template <int TILE>
__global__ void transpose_kernel(const float* x, float* out, int rows, int cols) {
  __shared__ float tile[TILE][TILE + 1];
  int c = blockIdx.x * TILE + threadIdx.x, r = blockIdx.y * TILE + threadIdx.y;
  if (r < rows && c < cols) tile[threadIdx.y][threadIdx.x] = x[r * cols + c];
  __syncthreads();  // the tile is read transposed: wait for every thread's load
  int tc = blockIdx.y * TILE + threadIdx.x, tr = blockIdx.x * TILE + threadIdx.y;
  if (tr < cols && tc < rows) out[tr * rows + tc] = tile[threadIdx.x][threadIdx.y];
}

at::Tensor transpose(const at::Tensor& x) {
  CHECK_INPUT(x);
  int rows = x.size(0), cols = x.size(1);
  auto out = at::empty({cols, rows}, x.options());
  constexpr int TILE = 32;
  transpose_kernel<TILE><<<dim3(ceil_div(cols, TILE), ceil_div(rows, TILE)), dim3(TILE, TILE)>>>(
      x.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
  CHECK_LAUNCH();
  return out;
}

// extern dynamic, sized by the launch, seen as float4: each block sums its 4*blockDim floats per lane
__global__ void dyn_float4_kernel(const float4* x, float* out, int* misaligned) {
  extern __shared__ __align__(16) unsigned char dyn_raw[];
  float4* tile = reinterpret_cast<float4*>(dyn_raw);
  if (reinterpret_cast<uintptr_t>(dyn_raw) % 16 != 0) atomicAdd(misaligned, 1);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = x[i];
  __syncthreads();
  float4 v = tile[blockDim.x - 1 - threadIdx.x];
  out[i] = v.x + v.y + v.z + v.w;
}

// x has a multiple of 4 * threads floats; returns (sums of reversed float4s, misaligned count)
std::vector<at::Tensor> dyn_float4(const at::Tensor& x, int64_t threads) {
  CHECK_INPUT(x);
  TORCH_CHECK(reinterpret_cast<uintptr_t>(x.data_ptr<float>()) % 16 == 0, "x must be 16-byte aligned for float4");
  int n4 = x.numel() / 4;
  auto out = at::empty({n4}, x.options());
  auto bad = at::zeros({1}, x.options().dtype(at::kInt));
  dyn_float4_kernel<<<n4 / threads, threads, threads * sizeof(float4)>>>(
      reinterpret_cast<const float4*>(x.data_ptr<float>()), out.data_ptr<float>(), bad.data_ptr<int>());
  CHECK_LAUNCH();
  return {out, bad};
}

// static arrays of awkward sizes still start 16-byte aligned (as nvcc lays them out)
__global__ void static_align_kernel(int* out) {
  __shared__ char odd[3];
  __shared__ float4 quad[2];
  __shared__ double d[1];
  if (threadIdx.x == 0) {
    odd[0] = 1;
    out[0] = reinterpret_cast<uintptr_t>(&quad[0]) % 16;
    out[1] = reinterpret_cast<uintptr_t>(&d[0]) % 8;
    out[2] = odd[0];
  }
}

at::Tensor static_align() {
  auto out = at::empty({3}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA));
  static_align_kernel<<<1, 32>>>(out.data_ptr<int>());
  CHECK_LAUNCH();
  return out;
}

// exactly 48 KB of static shared memory is allowed
__global__ void smem_48k_kernel(const float* x, float* out) {
  __shared__ float big[12288];
  for (int k = threadIdx.x; k < 12288; k += blockDim.x) big[k] = x[k];
  __syncthreads();
  for (int k = threadIdx.x; k < 12288; k += blockDim.x) out[k] = big[12287 - k];
}

at::Tensor smem_48k(const at::Tensor& x) {
  CHECK_INPUT(x);
  TORCH_CHECK(x.numel() == 12288, "x must hold 12288 floats");
  auto out = at::empty_like(x);
  smem_48k_kernel<<<1, 256>>>(x.data_ptr<float>(), out.data_ptr<float>());
  CHECK_LAUNCH();
  return out;
}

#ifdef CUDASIM
// nvcc refuses this at compile time (ptxas: too much shared data); the simulator can only
// refuse it when the kernel runs.
__global__ void smem_too_big_kernel(float* out) {
  __shared__ float too_big[12289];
  too_big[threadIdx.x] = 1.0f;
  out[threadIdx.x] = too_big[threadIdx.x];
}
#endif

void smem_static_too_big() {
#ifdef CUDASIM
  auto out = at::empty({32}, at::TensorOptions().dtype(at::kFloat));
  smem_too_big_kernel<<<1, 32>>>(out.data_ptr<float>());
  CHECK_LAUNCH();
#endif
}

// more than 48 KB of dynamic shared memory: only after the kernel opts in
__global__ void big_dyn_plain_kernel(float* out, int floats) {
  extern __shared__ float dyn_plain[];
  for (int k = threadIdx.x; k < floats; k += blockDim.x) dyn_plain[k] = k;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = dyn_plain[floats - 1];
}

template <typename T>
__global__ void big_dyn_kernel(T* out, int count) {
  extern __shared__ __align__(16) unsigned char dyn_bytes[];
  T* buf = reinterpret_cast<T*>(dyn_bytes);
  for (int k = threadIdx.x; k < count; k += blockDim.x) buf[k] = static_cast<T>(k);
  __syncthreads();
  if (threadIdx.x == 0) out[0] = buf[count - 1];
}

// returns the last value written to shared memory (bytes / 4 - 1)
double big_dynamic_smem(int64_t bytes, bool opt_in) {
  auto out = at::empty({1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA));
  int floats = bytes / sizeof(float);
  if (opt_in) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(big_dyn_kernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    big_dyn_kernel<float><<<2, 256, bytes>>>(out.data_ptr<float>(), floats);
  } else {
    big_dyn_plain_kernel<<<2, 256, bytes>>>(out.data_ptr<float>(), floats);
  }
  CHECK_LAUNCH();
  return out.item<float>();
}

// a write one float past the dynamic shared memory the launch asked for
__global__ void dyn_overrun_kernel(int floats) {
  extern __shared__ float dyn_over[];
  dyn_over[threadIdx.x] = 1.0f;  // threadIdx.x == floats is one too far
}

void dyn_overrun() {
  dyn_overrun_kernel<<<1, 65, 64 * sizeof(float)>>>(64);
  CHECK_LAUNCH();
}

// =============================================================================================
// barriers
// threads past the end mark themselves and leave before the barrier; the others still meet there
__global__ void early_exit_kernel(const float* x, float* out, int* left, int n) {
  __shared__ float tile[128];
  int t = threadIdx.x;
  if (t >= n) {
    left[t] = 1;  // a side effect before leaving must happen
    return;
  }
  tile[t] = x[t];
  __syncthreads();  // the threads that returned are not waited for
  out[t] = tile[n - 1 - t];
}

std::vector<at::Tensor> early_exit(const at::Tensor& x) {
  CHECK_INPUT(x);
  int n = x.numel();
  TORCH_CHECK(n <= 128, "at most 128 values");
  auto out = at::empty_like(x);
  auto left = at::zeros({128}, x.options().dtype(at::kInt));
  early_exit_kernel<<<1, 128>>>(x.data_ptr<float>(), out.data_ptr<float>(), left.data_ptr<int>(), n);
  CHECK_LAUNCH();
  return {out, left};
}

// two different __syncthreads: undefined behaviour on a GPU, an error naming both lines here
__global__ void divergent_kernel(float* out) {
  if (threadIdx.x < 16) {
    out[threadIdx.x] = 1.0f;
    __syncthreads();  // DIVERGENT-A
  } else {
    __syncthreads();  // DIVERGENT-B
  }
}

void divergent_barrier() {
  auto out = at::empty({64}, at::TensorOptions().dtype(at::kFloat));
  divergent_kernel<<<1, 64>>>(out.data_ptr<float>());
  CHECK_LAUNCH();
}

// lane 0 waits at a barrier while its warp waits for it in a shuffle: a deadlock
__global__ void deadlock_kernel(float* out) {
  float v = threadIdx.x;
  if (threadIdx.x % 32 == 0) {
    __syncthreads();
  } else {
    v = __shfl_down_sync(0xffffffffu, v, 1);  // DEADLOCK-SHUFFLE
  }
  out[threadIdx.x] = v;
}

void warp_deadlock() {
  auto out = at::empty({64}, at::TensorOptions().dtype(at::kFloat));
  deadlock_kernel<<<1, 64>>>(out.data_ptr<float>());
  CHECK_LAUNCH();
}

// block 0 waits for a flag that block 1 sets: fine on a GPU with both resident, never here
__global__ void inter_block_spin_kernel(int* flag) {
  if (blockIdx.x == 0) {
    while (atomicCAS(flag, 1, 1) != 1) {
    }
  } else {
    atomicExch(flag, 1);
  }
}

void inter_block_spin() {
  auto flag = at::zeros({1}, at::TensorOptions().dtype(at::kInt));
  inter_block_spin_kernel<<<2, 1>>>(flag.data_ptr<int>());
  CHECK_LAUNCH();
}

// __syncthreads_count / _and / _or
__global__ void barrier_votes_kernel(const float* x, int* out) {
  float v = x[threadIdx.x];
  int count = __syncthreads_count(v > 0.0f);
  int all = __syncthreads_and(v > 0.0f);
  int any = __syncthreads_or(v > 0.0f);
  if (threadIdx.x == 0) {
    out[0] = count;
    out[1] = all;
    out[2] = any;
  }
}

at::Tensor barrier_votes(const at::Tensor& x) {
  CHECK_INPUT(x);
  auto out = at::empty({3}, x.options().dtype(at::kInt));
  barrier_votes_kernel<<<1, x.numel()>>>(x.data_ptr<float>(), out.data_ptr<int>());
  CHECK_LAUNCH();
  return out;
}

// A missing barrier: each thread writes its slot and reads another thread's slot at once.
// mirror: reads tile[255 - t]; neighbour: reads tile[t - 1] (thread 0 its own), which forward
// order happens to have written already, so only reverse or random order exposes it.
__global__ void race_kernel(const float* x, float* out, bool mirror) {
  __shared__ float tile[256];
  int t = threadIdx.x, base = blockIdx.x * 256;
  tile[t] = x[base + t];
  // (the missing __syncthreads() belongs here)
  int from = mirror ? 255 - t : (t == 0 ? 0 : t - 1);
  out[base + t] = tile[from];
}

at::Tensor race(const at::Tensor& x, bool mirror) {
  CHECK_INPUT(x);
  TORCH_CHECK(x.numel() % 256 == 0, "x must hold a multiple of 256 values");
  auto out = at::empty_like(x);
  race_kernel<<<x.numel() / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), mirror);
  CHECK_LAUNCH();
  return out;
}

// =============================================================================================
// warps
// Two full warps; row k of the result is one warp operation's value per thread.
__global__ void shuffles_kernel(const float* x, float* f, int64_t* votes) {
  int t = threadIdx.x, lane = t % warpSize, n = blockDim.x;
  float v = x[t];
  f[0 * n + t] = __shfl_sync(0xffffffffu, v, (lane + 3) % 32);
  f[1 * n + t] = __shfl_up_sync(0xffffffffu, v, 1);
  f[2 * n + t] = __shfl_down_sync(0xffffffffu, v, 2);
  f[3 * n + t] = __shfl_xor_sync(0xffffffffu, v, 5);
  f[4 * n + t] = __shfl_sync(0xffffffffu, v, 3, 8);        // lane 3 of each group of 8
  f[5 * n + t] = __shfl_down_sync(0xffffffffu, v, 4, 16);  // stays inside its half warp
  f[6 * n + t] = __shfl_up_sync(0xffffffffu, v, 2, 8);
  f[7 * n + t] = __shfl_xor_sync(0xffffffffu, v, 1, 4);
  __syncwarp();
  f[8 * n + t] = warp_reduce_sum(v);  // lane 0 holds the sum
  double d = __shfl_sync(0xffffffffu, static_cast<double>(v), 0);  // 8-byte values shuffle too
  f[9 * n + t] = static_cast<float>(d);
  votes[0 * n + t] = __ballot_sync(0xffffffffu, v > 0.0f);
  votes[1 * n + t] = __any_sync(0xffffffffu, v > 2.0f);
  votes[2 * n + t] = __all_sync(0xffffffffu, v > -2.0f);
  votes[3 * n + t] = __activemask();
  // a partial mask: only the low 8 lanes take part
  int64_t partial = -1;
  if (lane < 8) partial = __ballot_sync(0xffu, v > 0.0f);
  votes[4 * n + t] = partial;
  float px = -1.0f;
  if (lane < 8) px = __shfl_xor_sync(0xffu, v, 1);
  f[10 * n + t] = px;
}

std::vector<at::Tensor> shuffles(const at::Tensor& x) {
  CHECK_INPUT(x);
  int n = x.numel();
  TORCH_CHECK(n % 32 == 0, "whole warps only");
  auto f = at::empty({11, n}, x.options());
  auto votes = at::empty({5, n}, x.options().dtype(at::kLong));
  shuffles_kernel<<<1, n>>>(x.data_ptr<float>(), f.data_ptr<float>(), votes.data_ptr<int64_t>());
  CHECK_LAUNCH();
  return {f, votes};
}

// Only warp 2 of four shuffles; the other warps never call a warp operation.
__global__ void one_warp_kernel(const float* x, float* out) {
  float v = x[threadIdx.x];
  if (threadIdx.x / 32 == 2) v = warp_allreduce_sum(v);
  out[threadIdx.x] = v;
}

at::Tensor one_warp(const at::Tensor& x) {
  CHECK_INPUT(x);
  TORCH_CHECK(x.numel() == 128, "128 values");
  auto out = at::empty_like(x);
  one_warp_kernel<<<1, 128>>>(x.data_ptr<float>(), out.data_ptr<float>());
  CHECK_LAUNCH();
  return out;
}

// blockDim not a multiple of 32: the last warp has blockDim % 32 lanes
__global__ void partial_warp_kernel(const float* x, float* out, int64_t* masks) {
  int t = threadIdx.x, lane = t % 32;
  unsigned active = __activemask();
  masks[2 * t] = active;
  masks[2 * t + 1] = __ballot_sync(active, x[t] > 0.0f);
  float v = x[t];
  // sum over the lanes that exist: a butterfly needs whole warps, so each lane reads the lane
  // `offset` above it only where that lane exists (reading one that does not is undefined, even
  // if the value were thrown away)
  int lanes = __popc(active);
  for (int offset = 16; offset > 0; offset /= 2) {
    int src = lane + offset < lanes ? lane + offset : lane;
    float other = __shfl_sync(active, v, src);
    if (src != lane) v += other;
  }
  out[t] = __shfl_sync(active, v, 0);
}

std::vector<at::Tensor> partial_warp(const at::Tensor& x) {
  CHECK_INPUT(x);
  int n = x.numel();
  auto out = at::empty_like(x);
  auto masks = at::empty({n, 2}, x.options().dtype(at::kLong));
  partial_warp_kernel<<<1, n>>>(x.data_ptr<float>(), out.data_ptr<float>(), masks.data_ptr<int64_t>());
  CHECK_LAUNCH();
  return {out, masks};
}

// The legacy last-warp reduction of old CUDA samples: `volatile` and no __syncwarp, relying on
// the 32 lanes running in lockstep. Since Volta lanes may not run in lockstep, and here they
// never do (each lane runs until its next warp operation), so it sums the wrong values.
__device__ void warp_reduce_legacy(volatile float* s, int t) {
  s[t] += s[t + 32];
  s[t] += s[t + 16];
  s[t] += s[t + 8];
  s[t] += s[t + 4];
  s[t] += s[t + 2];
  s[t] += s[t + 1];
}

// The same with __syncwarp between every read and write: correct on every GPU and here.
__device__ void warp_reduce_syncwarp(float* s, int t) {
  float v = s[t];
  for (int offset = 32; offset > 0; offset /= 2) {
    v += s[t + offset];
    __syncwarp();  // every lane has read before any lane writes
    s[t] = v;
    __syncwarp();  // every lane has written before the next read
  }
}

__global__ void legacy_reduce_kernel(const float* x, float* out, bool use_syncwarp) {
  __shared__ float s[64];
  int t = threadIdx.x;
  s[t] = x[blockIdx.x * 64 + t];
  __syncthreads();
  if (t < 32) {
    if (use_syncwarp) warp_reduce_syncwarp(s, t);
    else warp_reduce_legacy(s, t);
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

at::Tensor legacy_reduce(const at::Tensor& x, bool use_syncwarp) {
  CHECK_INPUT(x);
  TORCH_CHECK(x.numel() % 64 == 0, "a multiple of 64 values");
  auto out = at::empty({x.numel() / 64}, x.options());
  legacy_reduce_kernel<<<x.numel() / 64, 64>>>(x.data_ptr<float>(), out.data_ptr<float>(), use_syncwarp);
  CHECK_LAUNCH();
  return out;
}

// =============================================================================================
// atomics
// The float max idiom: CUDA has no atomicMax for float, so compare-and-swap its bits.
__device__ float atomic_max_float(float* addr, float value) {
  int* bits = reinterpret_cast<int*>(addr);
  int old = *bits, assumed;
  do {
    assumed = old;
    if (__int_as_float(assumed) >= value) break;
    old = atomicCAS(bits, assumed, __float_as_int(value));
  } while (assumed != old);
  return __int_as_float(old);
}

__global__ void atomics_kernel(const int* v, const float* f, int n, int* i32, unsigned* u32,
                               unsigned long long* u64, float* f32, double* f64, int* tickets, float* fmax_) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int a = v[i];
  atomicAdd(&i32[0], a);
  atomicSub(&i32[1], a);
  atomicMax(&i32[2], a);
  atomicMin(&i32[3], a);
  tickets[i] = atomicAdd(&i32[4], 1);  // the old value: every thread gets its own ticket
  atomicExch(&i32[5], a);
  atomicCAS(&i32[6], -1, i);  // only the first thread to come swaps
  atomicAdd(&u32[0], static_cast<unsigned>(a));
  atomicMax(&u32[1], static_cast<unsigned>(a));
  atomicMin(&u32[2], static_cast<unsigned>(a));
  atomicAnd(&u32[3], static_cast<unsigned>(a));
  atomicOr(&u32[4], static_cast<unsigned>(a));
  atomicXor(&u32[5], static_cast<unsigned>(a));
  atomicAnd(&i32[7], a);
  atomicOr(&i32[8], a);
  atomicXor(&i32[9], a);
  atomicAdd(&u64[0], static_cast<unsigned long long>(a) << 33);  // beyond 32 bits
  atomicExch(&u64[1], 7ull);
  atomicAdd(&f32[0], f[i]);
  atomicExch(&f32[1], 2.5f);
  atomicAdd(&f64[0], static_cast<double>(f[i]));
  atomic_max_float(fmax_, f[i]);
}

// returns [i32 (10), u32 (6), u64 (2), f32 (2), f64 (1), tickets (n), fmax (1)]
std::vector<at::Tensor> atomics(const at::Tensor& v, const at::Tensor& f) {
  CHECK_INPUT(v);
  CHECK_INPUT(f);
  int n = v.numel();
  auto opt = v.options();
  auto i32 = at::zeros({10}, opt.dtype(at::kInt));
  auto u32 = at::zeros({6}, opt.dtype(at::kInt));
  auto u64 = at::zeros({2}, opt.dtype(at::kLong));
  auto f32 = at::zeros({2}, opt.dtype(at::kFloat));
  auto f64 = at::zeros({1}, opt.dtype(at::kDouble));
  auto tickets = at::empty({n}, opt.dtype(at::kInt));
  auto fmax_ = at::empty({1}, opt.dtype(at::kFloat));
  fmax_.fill_(-INFINITY);
  // starting values set by fills (the host cannot write GPU memory through a pointer)
  const int starts[][2] = {{2, INT_MIN}, {3, INT_MAX}, {6, -1}, {7, -1}};
  for (const auto& kv : starts) i32.narrow(0, kv[0], 1).fill_(kv[1]);
  u32.narrow(0, 2, 2).fill_(-1);  // 0xFFFFFFFF as unsigned
  int* ip = i32.data_ptr<int>();
  unsigned* up = reinterpret_cast<unsigned*>(u32.data_ptr<int>());
  atomics_kernel<<<ceil_div(n, 128), 128>>>(v.data_ptr<int>(), f.data_ptr<float>(), n, ip, up,
                                            reinterpret_cast<unsigned long long*>(u64.data_ptr<int64_t>()),
                                            f32.data_ptr<float>(), f64.data_ptr<double>(), tickets.data_ptr<int>(),
                                            fmax_.data_ptr<float>());
  CHECK_LAUNCH();
  return {i32, u32, u64, f32, f64, tickets, fmax_};
}

// float2 and float4 atomicAdd (compute capability 9.0 and later): every thread adds a pair and a four into the same
// slots of out, and the _block and _system forms into the next ones
__global__ void vector_atomics_kernel(const float* f, int n, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(out), make_float2(f[i], 2.0f * f[i]));
  atomicAdd(reinterpret_cast<float4*>(out + 4), make_float4(f[i], -f[i], 1.0f, 0.5f));
  atomicAdd_block(reinterpret_cast<float2*>(out + 8), make_float2(1.0f, 1.0f));
  atomicAdd_system(reinterpret_cast<float4*>(out + 12), make_float4(1.0f, 1.0f, 1.0f, 1.0f));
#else
  __trap();  // the vector forms exist from compute capability 9.0; the test runs this on such a GPU only
#endif
}

at::Tensor vector_atomics(const at::Tensor& f) {
  CHECK_INPUT(f);
  const int n = f.numel();
  auto out = at::zeros({16}, f.options());
  vector_atomics_kernel<<<ceil_div(n, 128), 128>>>(f.data_ptr<float>(), n, out.data_ptr<float>());
  CHECK_LAUNCH();
  return out;
}

// A handoff between blocks through a flag read with volatile loads: block 1 sets it, thread 0 of block 0 waits for
// it. On a GPU both blocks are resident at once; here blocks run one at a time and a thread runs until it waits at a
// barrier, a warp operation or an atomic, so the poll never sees the store and the simulator's watchdog stops it
// (tests/test_sim.py, which runs it on the simulator only).
__global__ void volatile_handoff_kernel(int* flag, int* out) {
  if (blockIdx.x == 1) {
    if (threadIdx.x == 0) atomicExch(flag, 1);
    return;
  }
  if (threadIdx.x == 0) {
    while (*reinterpret_cast<volatile int*>(flag) == 0) {
    }
    out[0] = 1;
  }
}

// assert() in a kernel: thread i asserts i < n (run on the simulator only, by tests/test_sim.py: on a GPU a failed
// device-side assert loses the CUDA context for the rest of the process)
__global__ void device_assert_kernel(float* out, int n) {
  const int i = threadIdx.x;
  assert(i < n);
  out[i] = static_cast<float>(i);
}

at::Tensor device_assert(const at::Tensor& like, int64_t n) {
  auto out = at::zeros({64}, like.options());
  device_assert_kernel<<<1, 64>>>(out.data_ptr<float>(), static_cast<int>(n));
  CHECK_LAUNCH();
  return out;
}

at::Tensor volatile_handoff(const at::Tensor& like) {
  auto flag = at::zeros({2}, like.options().dtype(at::kInt));
  volatile_handoff_kernel<<<2, 32>>>(flag.data_ptr<int>(), flag.data_ptr<int>() + 1);
  CHECK_LAUNCH();
  return flag;
}

// =============================================================================================
// math and types
__global__ void float_math_kernel(const float* __restrict__ x, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = __ldg(&x[i]), a = fabsf(v) + 1.0f;
  out[0 * n + i] = expf(v);
  out[1 * n + i] = __expf(v);
  out[2 * n + i] = __logf(a);
  out[3 * n + i] = __fdividef(v, 3.0f);
  out[4 * n + i] = rsqrtf(a);
  out[5 * n + i] = __fmaf_rn(v, 2.0f, 1.0f);
  out[6 * n + i] = max(v, 0.5f);
  out[7 * n + i] = min(v, -0.5f);
  out[8 * n + i] = tanhf(v);
  out[9 * n + i] = __saturatef(v);
}

at::Tensor float_math(const at::Tensor& x) {
  CHECK_INPUT(x);
  int n = x.numel();
  auto out = at::empty({10, n}, x.options());
  float_math_kernel<<<ceil_div(n, 256), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
  return out;
}

__global__ void int_math_kernel(const int* x, int64_t* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int v = x[i];
  unsigned u = static_cast<unsigned>(v);
  out[0 * n + i] = __popc(u);
  out[1 * n + i] = __clz(v);
  out[2 * n + i] = __ffs(v);
  out[3 * n + i] = min(v, 1000);
  out[4 * n + i] = max(v, -1000);
  out[5 * n + i] = min(u, 5000u);
  out[6 * n + i] = max(blockDim.x, 7u);
  out[7 * n + i] = min(v & 0xFF, blockDim.x);  // int with unsigned, as CUDA allows
  out[8 * n + i] = max(static_cast<long long>(v) * 3, -5ll);
  out[9 * n + i] = __popcll(static_cast<unsigned long long>(static_cast<long long>(v)) << 7);
}

at::Tensor int_math(const at::Tensor& x) {
  CHECK_INPUT(x);
  int n = x.numel();
  auto out = at::empty({10, n}, x.options().dtype(at::kLong));
  int_math_kernel<<<ceil_div(n, 256), 256>>>(x.data_ptr<int>(), out.data_ptr<int64_t>(), n);
  CHECK_LAUNCH();
  return out;
}

// vector types: sizes and alignments as in CUDA, so reinterpret_cast loads are legal
static_assert(sizeof(float2) == 8 && alignof(float2) == 8, "float2 is 8 bytes, 8-aligned");
static_assert(sizeof(float4) == 16 && alignof(float4) == 16, "float4 is 16 bytes, 16-aligned");
static_assert(sizeof(int4) == 16 && alignof(int4) == 16, "int4 is 16 bytes, 16-aligned");
static_assert(sizeof(double2) == 16 && alignof(double2) == 16, "double2 is 16 bytes, 16-aligned");
static_assert(sizeof(float3) == 12 && alignof(float3) == 4, "float3 is 12 bytes, 4-aligned");

// out = x * 2 + 1 through float4 loads, float2 halves and an int4 round trip
__global__ void vectors_kernel(const float4* x, float4* out, int n4) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  float4 v = x[i];
  float2 lo = make_float2(v.x, v.y), hi = make_float2(v.z, v.w);
  int4 bits = make_int4(__float_as_int(lo.x), __float_as_int(lo.y), __float_as_int(hi.x), __float_as_int(hi.y));
  float4 back = make_float4(__int_as_float(bits.x), __int_as_float(bits.y), __int_as_float(bits.z),
                            __int_as_float(bits.w));
  out[i] = make_float4(back.x * 2 + 1, back.y * 2 + 1, back.z * 2 + 1, back.w * 2 + 1);
}

at::Tensor vectors(const at::Tensor& x) {
  CHECK_INPUT(x);
  TORCH_CHECK(x.numel() % 4 == 0, "a multiple of 4 values");
  int n4 = x.numel() / 4;
  auto out = at::empty_like(x);
  vectors_kernel<<<ceil_div(n4, 128), 128>>>(reinterpret_cast<const float4*>(x.data_ptr<float>()),
                                             reinterpret_cast<float4*>(out.data_ptr<float>()), n4);
  CHECK_LAUNCH();
  return out;
}

// __half and __nv_bfloat16: float -> 16 bits (round to nearest even) and back
__global__ void to_half_kernel(const float* x, __half* h, __nv_bfloat16* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    h[i] = __float2half_rn(x[i]);
    b[i] = __float2bfloat16(x[i]);
  }
}

__global__ void from_half_kernel(const __half* h, const __nv_bfloat16* b, float* fh, float* fb, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    fh[i] = __half2float(h[i]);
    fb[i] = __bfloat162float(b[i]);
  }
}

std::vector<at::Tensor> to_half(const at::Tensor& x) {
  CHECK_INPUT(x);
  int n = x.numel();
  auto h = at::empty({n}, x.options().dtype(at::kHalf));
  auto b = at::empty({n}, x.options().dtype(at::kBFloat16));
  to_half_kernel<<<ceil_div(n, 256), 256>>>(x.data_ptr<float>(), reinterpret_cast<__half*>(h.data_ptr<at::Half>()),
                                            reinterpret_cast<__nv_bfloat16*>(b.data_ptr<at::BFloat16>()), n);
  CHECK_LAUNCH();
  return {h, b};
}

std::vector<at::Tensor> from_half(const at::Tensor& h, const at::Tensor& b) {
  CHECK_INPUT(h);
  CHECK_INPUT(b);
  int n = h.numel();
  auto fh = at::empty({n}, h.options().dtype(at::kFloat));
  auto fb = at::empty({n}, h.options().dtype(at::kFloat));
  from_half_kernel<<<ceil_div(n, 256), 256>>>(reinterpret_cast<const __half*>(h.data_ptr<at::Half>()),
                                              reinterpret_cast<const __nv_bfloat16*>(b.data_ptr<at::BFloat16>()),
                                              fh.data_ptr<float>(), fb.data_ptr<float>(), n);
  CHECK_LAUNCH();
  return {fh, fb};
}

// half arithmetic through the intrinsics (PyTorch builds switch the operators off)
__global__ void half_math_kernel(const __half* a, const __half* b, __half* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __hfma(a[i], b[i], __hadd(a[i], b[i]));
}

at::Tensor half_math(const at::Tensor& a, const at::Tensor& b) {
  CHECK_INPUT(a);
  CHECK_INPUT(b);
  int n = a.numel();
  auto out = at::empty_like(a);
  half_math_kernel<<<ceil_div(n, 256), 256>>>(reinterpret_cast<const __half*>(a.data_ptr<at::Half>()),
                                              reinterpret_cast<const __half*>(b.data_ptr<at::Half>()),
                                              reinterpret_cast<__half*>(out.data_ptr<at::Half>()), n);
  CHECK_LAUNCH();
  return out;
}

__global__ void printf_kernel(const float* x) {
  printf("block %d thread %d value %.2f\n", blockIdx.x, threadIdx.x, x[blockIdx.x * blockDim.x + threadIdx.x]);
}

void kernel_printf(const at::Tensor& x) {
  CHECK_INPUT(x);
  printf_kernel<<<2, 2>>>(x.data_ptr<float>());
  CHECK_LAUNCH();
}

// =============================================================================================
// host side: launch errors, as CUDA reports them
__global__ void empty_kernel() {}

void launch_config(std::vector<int64_t> grid, std::vector<int64_t> block, int64_t smem) {
  empty_kernel<<<dim3(grid[0], grid[1], grid[2]), dim3(block[0], block[1], block[2]), smem>>>();
  CHECK_LAUNCH();
}

// [error after a bad launch, error read again (cleared), error after a later good launch
//  when the bad one was never read (still reported: errors stay until read), cudaDeviceSynchronize]
std::vector<int64_t> error_api() {
  std::vector<int64_t> out;
  empty_kernel<<<0, 32>>>();
  out.push_back(cudaGetLastError());
  out.push_back(cudaGetLastError());
  empty_kernel<<<1, 2048>>>();
  empty_kernel<<<1, 32>>>();
  out.push_back(cudaGetLastError());
  out.push_back(cudaDeviceSynchronize());
  return out;
}

std::string error_string(int64_t code) {
  return std::string(cudaGetErrorName(static_cast<cudaError_t>(code))) + ": " +
         cudaGetErrorString(static_cast<cudaError_t>(code));
}

// The device's compute capability, [major, minor], as the attributes report it.
std::vector<int64_t> device_capability() {
  return {device_attribute(cudaDevAttrComputeCapabilityMajor), device_attribute(cudaDevAttrComputeCapabilityMinor)};
}

// =============================================================================================
// registration
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("qualifiers(Tensor x) -> Tensor");
  m.def("indices(int[] grid, int[] block) -> Tensor", &indices);
  m.def("matrix_2d(Tensor x) -> Tensor");
  m.def("launch_forms(Tensor x) -> Tensor");
  m.def("launch_text() -> str", &launch_text);
  m.def("line_after_launch(Tensor x) -> int");
  m.def("smem_reverse(Tensor x) -> Tensor");
  m.def("transpose(Tensor x) -> Tensor");
  m.def("dyn_float4(Tensor x, int threads) -> Tensor[]");
  m.def("static_align() -> Tensor", &static_align);
  m.def("smem_48k(Tensor x) -> Tensor");
  m.def("smem_static_too_big() -> ()", &smem_static_too_big);
  m.def("big_dynamic_smem(int bytes, bool opt_in) -> float", &big_dynamic_smem);
  m.def("dyn_overrun() -> ()", &dyn_overrun);
  m.def("early_exit(Tensor x) -> Tensor[]");
  m.def("divergent_barrier() -> ()", &divergent_barrier);
  m.def("warp_deadlock() -> ()", &warp_deadlock);
  m.def("inter_block_spin() -> ()", &inter_block_spin);
  m.def("barrier_votes(Tensor x) -> Tensor");
  m.def("race(Tensor x, bool mirror) -> Tensor");
  m.def("shuffles(Tensor x) -> Tensor[]");
  m.def("one_warp(Tensor x) -> Tensor");
  m.def("partial_warp(Tensor x) -> Tensor[]");
  m.def("legacy_reduce(Tensor x, bool use_syncwarp) -> Tensor");
  m.def("atomics(Tensor v, Tensor f) -> Tensor[]");
  m.def("vector_atomics(Tensor f) -> Tensor");
  m.def("volatile_handoff(Tensor like) -> Tensor");
  m.def("device_assert(Tensor like, int n) -> Tensor");
  m.def("float_math(Tensor x) -> Tensor");
  m.def("int_math(Tensor x) -> Tensor");
  m.def("vectors(Tensor x) -> Tensor");
  m.def("to_half(Tensor x) -> Tensor[]");
  m.def("from_half(Tensor h, Tensor b) -> Tensor[]");
  m.def("half_math(Tensor a, Tensor b) -> Tensor");
  m.def("kernel_printf(Tensor x) -> ()");
  m.def("launch_config(int[] grid, int[] block, int smem) -> ()", &launch_config);
  m.def("error_api() -> int[]", &error_api);
  m.def("error_string(int code) -> str", &error_string);
  m.def("device_capability() -> int[]", &device_capability);
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("qualifiers", &qualifiers);
  m.impl("matrix_2d", &matrix_2d);
  m.impl("launch_forms", &launch_forms);
  m.impl("line_after_launch", &line_after_launch);
  m.impl("smem_reverse", &smem_reverse);
  m.impl("transpose", &transpose);
  m.impl("dyn_float4", &dyn_float4);
  m.impl("smem_48k", &smem_48k);
  m.impl("early_exit", &early_exit);
  m.impl("barrier_votes", &barrier_votes);
  m.impl("race", &race);
  m.impl("shuffles", &shuffles);
  m.impl("one_warp", &one_warp);
  m.impl("partial_warp", &partial_warp);
  m.impl("legacy_reduce", &legacy_reduce);
  m.impl("atomics", &atomics);
  m.impl("vector_atomics", &vector_atomics);
  m.impl("volatile_handoff", &volatile_handoff);
  m.impl("device_assert", &device_assert);
  m.impl("float_math", &float_math);
  m.impl("int_math", &int_math);
  m.impl("vectors", &vectors);
  m.impl("to_half", &to_half);
  m.impl("from_half", &from_half);
  m.impl("half_math", &half_math);
  m.impl("kernel_printf", &kernel_printf);
}
