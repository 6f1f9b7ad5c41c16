// undefined.cu: kernels that nvcc compiles but whose result a GPU does not define, which the
// simulator must refuse with a clear error, next to the defined cases it must keep running.
// Simulator tests only: on a GPU the refused ops return whatever the hardware happens to give.
//
//   op                  what it exercises
//   exited_lane_max     a full-mask shuffle after `if (lane >= n) return;`: lanes read lanes that
//                       have exited (refused)
//   missing_lane_sum    a full-mask shuffle down in a block of 40 threads: lanes of warp 1 read
//                       lanes 8-31, which do not exist (refused)
//   exited_lane_vote    a full-mask ballot and __syncwarp after some lanes returned (defined:
//                       votes wait for the lanes that have not exited and count only those)
//   deep_recursion      a recursive device function with an 8 KB local array per call, deeper
//                       than the simulator's fiber stack unless CUDASIM_STACK_KB raises it
//   lock_never_freed    block 0 takes a lock and leaves without freeing it; block 1 spins on it
//                       (hangs forever on a GPU; a reported spin here)
//   write_one_past_end  the classic `i <= n` bound: thread n writes one element past the tensor
//                       (an illegal access where the tensor ends at unmapped memory)
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

// one warp; lanes >= n leave, the rest take the maximum with a butterfly over all 32 lanes
__global__ void exited_lane_max_kernel(const float* x, float* out, int n) {
  const int lane = threadIdx.x % 32;
  if (lane >= n) return;  // EXIT-LINE
  float v = x[lane];
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));  // SHFL-LINE
  if (lane == 0) out[0] = v;
}

at::Tensor exited_lane_max(const at::Tensor& x, int64_t n) {
  CHECK_INPUT(x);
  auto out = at::empty({1}, x.options());
  exited_lane_max_kernel<<<1, 32>>>(x.data_ptr<float>(), out.data_ptr<float>(), static_cast<int>(n));
  CHECK_LAUNCH();
  return out;
}

// 40 threads: warp 1 has 8 lanes, but the mask names all 32
__global__ void missing_lane_sum_kernel(const float* x, float* out) {
  float v = x[threadIdx.x];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(FULL_MASK, v, offset);  // MISSING-LINE
  if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = v;
}

at::Tensor missing_lane_sum(const at::Tensor& x) {
  CHECK_INPUT(x);
  TORCH_CHECK(x.numel() == 40, "expected 40 values, got ", std::to_string(x.numel()));
  auto out = at::empty({2}, x.options());
  missing_lane_sum_kernel<<<1, 40>>>(x.data_ptr<float>(), out.data_ptr<float>());
  CHECK_LAUNCH();
  return out;
}

// one warp; lanes >= n leave; the others vote with the full mask: out[lane] = the ballot
__global__ void exited_lane_vote_kernel(const float* x, int* out, int n) {
  const int lane = threadIdx.x % 32;
  if (lane >= n) return;
  const unsigned ballot = __ballot_sync(FULL_MASK, x[lane] > 0.0f);
  __syncwarp();
  out[lane] = static_cast<int>(ballot);
}

at::Tensor exited_lane_vote(const at::Tensor& x, int64_t n) {
  CHECK_INPUT(x);
  auto out = at::empty({n}, x.options().dtype(at::kInt));
  exited_lane_vote_kernel<<<1, 32>>>(x.data_ptr<float>(), out.data_ptr<int>(), static_cast<int>(n));
  CHECK_LAUNCH();
  return out;
}

// each call keeps 8 KB of locals (volatile, so the compiler keeps them): depth calls need about
// depth * 8 KB of stack. `len` is 2048, passed at run time so that no compiler unrolls the loop.
__device__ float recurse(const float* x, int n, int len, int depth) {
  volatile float local[2048];
#pragma unroll 1
  for (int i = 0; i < len; ++i) local[i] = x[(i + depth) % n];
  float here = local[depth % len];
  return depth == 0 ? here : here + recurse(x, n, len, depth - 1);
}

__global__ void deep_recursion_kernel(const float* x, float* out, int n, int len, int depth) {
  out[threadIdx.x] = recurse(x, n, len, depth);
}

// out[t] = sum over d = 0..depth of x[(d % 2048 + d) % n], for two threads
at::Tensor deep_recursion(const at::Tensor& x, int64_t depth) {
  CHECK_INPUT(x);
  auto out = at::empty({2}, x.options());
  deep_recursion_kernel<<<1, 2>>>(x.data_ptr<float>(), out.data_ptr<float>(), static_cast<int>(x.numel()), 2048,
                                  static_cast<int>(depth));
  CHECK_LAUNCH();
  return out;
}

// block 0 takes the lock and never frees it; every thread of block 1 waits for it
__global__ void lock_never_freed_kernel(int* lock) {
  if (blockIdx.x == 0) {
    if (threadIdx.x == 0) atomicCAS(lock, 0, 1);
    return;
  }
  while (atomicCAS(lock, 0, 1) != 0) {
  }
  atomicExch(lock, 0);
}

at::Tensor lock_never_freed(const at::Tensor& like) {
  auto lock = at::zeros({1}, like.options().dtype(at::kInt));
  lock_never_freed_kernel<<<2, 64>>>(lock.data_ptr<int>());
  CHECK_LAUNCH();
  return lock;
}

// one thread per element, with the bound off by one: thread n writes out[n], past the end
__global__ void write_one_past_end_kernel(float* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i <= n) out[i] = 1.0f;  // OOB-LINE
}

void write_one_past_end(const at::Tensor& out) {
  CHECK_INPUT(out);
  const int64_t n = out.numel();
  write_one_past_end_kernel<<<ceil_div(n + 1, 128), 128>>>(out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("exited_lane_max(Tensor x, int n) -> Tensor");
  m.def("missing_lane_sum(Tensor x) -> Tensor");
  m.def("exited_lane_vote(Tensor x, int n) -> Tensor");
  m.def("deep_recursion(Tensor x, int depth) -> Tensor");
  m.def("lock_never_freed(Tensor like) -> Tensor");
  m.def("write_one_past_end(Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("exited_lane_max", &exited_lane_max);
  m.impl("missing_lane_sum", &missing_lane_sum);
  m.impl("exited_lane_vote", &exited_lane_vote);
  m.impl("deep_recursion", &deep_recursion);
  m.impl("lock_never_freed", &lock_never_freed);
  m.impl("write_one_past_end", &write_one_past_end);
}
