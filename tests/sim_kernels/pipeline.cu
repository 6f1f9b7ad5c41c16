// pipeline.cu: asynchronous copies from global to shared memory (<cuda_pipeline.h>: cp.async on sm_80 and
// later). tests/test_sim_pipeline.py runs the ops on sim and, with a GPU, on cuda.
//
//   op                what it exercises
//   async_copy        one block copies a byte buffer through shared memory in chunks of 4, 8 or 16 bytes,
//                     the last `zfill` bytes of each chunk written as zeros; each thread writes back its
//                     neighbour's chunk, so the barrier after the wait matters
//   pipelined_colsum  column sums of a [rows, 256] float matrix, one row per step through a ring of 2-4
//                     shared buffers filled STAGES - 1 steps ahead; `bug` plants a mistake (simulator
//                     tests only: on a GPU the result is undefined): 1 no wait, 2 no barrier after the
//                     wait, 3 a wait that leaves the step's own group in flight
//   async_misuse      one call that breaks the rules (simulator tests only): 1 a misaligned destination,
//                     2 a global destination, 3 a shared source, 4 a size of 12 bytes, 5 zfill above size,
//                     6 a local (stack) source
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <cstdint>
#include <cuda_pipeline.h>
#include <string>

constexpr int kThreads = 64;
constexpr int kChunk = 16;  // the largest copy; smaller ones use the front of each thread's slot

template <int SIZE>
__global__ void async_copy_kernel(const uint8_t* src, uint8_t* out, int zfill) {
  __shared__ alignas(16) uint8_t staged[kThreads * SIZE];
  const int t = threadIdx.x;
  __pipeline_memcpy_async(&staged[t * SIZE], src + t * SIZE, SIZE, zfill);
  __pipeline_commit();
  __pipeline_wait_prior(0);  // this thread's copy has landed
  __syncthreads();           // and everyone's
  const int from = (t + 1) % kThreads;
  for (int i = 0; i < SIZE; ++i) out[from * SIZE + i] = staged[from * SIZE + i];
}

at::Tensor async_copy(const at::Tensor& src, int64_t size, int64_t zfill) {
  CHECK_INPUT(src);
  CHECK_DTYPE(src, at::kByte);
  TORCH_CHECK(size == 4 || size == 8 || size == 16, "size must be 4, 8 or 16 bytes, got ", std::to_string(size));
  TORCH_CHECK(zfill >= 0 && zfill <= size, "zfill must be 0 to size, got ", std::to_string(zfill));
  TORCH_CHECK(src.numel() == kThreads * size, "src must hold 64 chunks of size bytes, got ", std::to_string(src.numel()));
  TORCH_CHECK(aligned16(src), "src must be 16-byte aligned");
  at::Tensor out = at::empty_like(src);
  const uint8_t* s = src.data_ptr<uint8_t>();
  uint8_t* o = out.data_ptr<uint8_t>();
  const int z = static_cast<int>(zfill);
  if (size == 4) async_copy_kernel<4><<<1, kThreads>>>(s, o, z);
  if (size == 8) async_copy_kernel<8><<<1, kThreads>>>(s, o, z);
  if (size == 16) async_copy_kernel<16><<<1, kThreads>>>(s, o, z);
  CHECK_LAUNCH();
  return out;
}

// Thread t copies floats 4t .. 4t + 3 of each row and sums the 4 columns of thread t + 1 (mod 64).
template <int STAGES>
__global__ void pipelined_colsum_kernel(const float* x, float* out, int rows, int bug) {
  __shared__ alignas(16) float ring[STAGES][kThreads * 4];
  const int t = threadIdx.x, from = (t + 1) % kThreads;
  float sum[4] = {0.f, 0.f, 0.f, 0.f};
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < rows) __pipeline_memcpy_async(&ring[s][t * 4], x + (int64_t)s * 256 + t * 4, kChunk);
    __pipeline_commit();
  }
  for (int r = 0; r < rows; ++r) {
    if (bug == 3) __pipeline_wait_prior(STAGES - 1);  // one group too many left in flight: row r's own
    else if (bug != 1) __pipeline_wait_prior(STAGES - 2);
    if (bug != 2) __syncthreads();  // every thread's copy of row r has landed; row r - 1's buffer is free
    const int next = r + STAGES - 1;
    if (next < rows) __pipeline_memcpy_async(&ring[next % STAGES][t * 4], x + (int64_t)next * 256 + t * 4, kChunk);
    __pipeline_commit();
    for (int e = 0; e < 4; ++e) sum[e] += ring[r % STAGES][from * 4 + e];
  }
  for (int e = 0; e < 4; ++e) out[from * 4 + e] = sum[e];
}

at::Tensor pipelined_colsum(const at::Tensor& x, int64_t stages, int64_t bug) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(x.dim() == 2 && x.size(1) == 256, "x must have shape [rows, 256], got ", shape_str(x.sizes()));
  TORCH_CHECK(aligned16(x), "x must be 16-byte aligned");
  at::Tensor out = at::empty({256}, x.options());
  const int rows = static_cast<int>(x.size(0)), b = static_cast<int>(bug);
  if (stages == 2) pipelined_colsum_kernel<2><<<1, kThreads>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows, b);
  else if (stages == 3) pipelined_colsum_kernel<3><<<1, kThreads>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows, b);
  else if (stages == 4) pipelined_colsum_kernel<4><<<1, kThreads>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows, b);
  else TORCH_CHECK(false, "stages must be 2, 3 or 4, got ", std::to_string(stages));
  CHECK_LAUNCH();
  return out;
}

__global__ void async_misuse_kernel(const float* x, float* y, int what) {
  __shared__ alignas(16) float buf[64];
  if (what == 1) __pipeline_memcpy_async(&buf[1], x, 8);  // MISALIGNED
  if (what == 2) __pipeline_memcpy_async(y, x, 16);  // GLOBAL-DESTINATION
  if (what == 3) __pipeline_memcpy_async(&buf[4], &buf[0], 16);  // SHARED-SOURCE
  if (what == 4) __pipeline_memcpy_async(&buf[0], x, 12);  // ODD-SIZE
  if (what == 5) __pipeline_memcpy_async(&buf[0], x, 8, 9);  // ZFILL-ABOVE-SIZE
  alignas(16) float local[4] = {x[0], x[1], x[2], x[3]};
  if (what == 6) __pipeline_memcpy_async(&buf[0], local, 16);  // LOCAL-SOURCE
  __pipeline_commit();
  __pipeline_wait_prior(0);
}

void async_misuse(const at::Tensor& x, const at::Tensor& y, int64_t what) {
  CHECK_INPUT(x);
  CHECK_INPUT(y);
  async_misuse_kernel<<<1, 32>>>(x.data_ptr<float>(), y.data_ptr<float>(), static_cast<int>(what));
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("async_copy(Tensor src, int size, int zfill) -> Tensor");
  m.def("pipelined_colsum(Tensor x, int stages, int bug) -> Tensor");
  m.def("async_misuse(Tensor x, Tensor y, int what) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("async_copy", &async_copy);
  m.impl("pipelined_colsum", &pipelined_colsum);
  m.impl("async_misuse", &async_misuse);
}
