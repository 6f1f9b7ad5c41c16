// missing_barrier.cu: a missing barrier. Each block reverses its 256 elements through shared
// memory: thread t writes slot t, then reads slot 255 - t, which another thread wrote. Without a
// __syncthreads() between the write and the read, thread t may read the slot before its owner has
// written it: a race. On a GPU the answer is often right (warps tend to run in step) and wrong
// now and then; the simulator fills shared memory with NaN at each block's start and can run the
// threads in reverse order, so the read-before-write shows every time.
//
//   broken   write, read (no barrier)
//   fixed    write, __syncthreads(), read
#include "helpers.cuh"

constexpr int BLOCK = 256;

// reverse_kernel: block b reverses x[256 b .. 256 b + 255] into out; thread t owns slot t.
// 8 B per element. n must be a multiple of 256 (checked by the launcher).
template <bool kFixed>
__global__ void reverse_kernel(const float* __restrict__ x, float* __restrict__ out) {
  __shared__ float tile[BLOCK];
  const int t = threadIdx.x;
  const int64_t base = blockIdx.x * (int64_t)BLOCK;
  tile[t] = x[base + t];
  if constexpr (kFixed) __syncthreads();  // FIX: wait until every slot of the tile is written
  out[base + t] = tile[BLOCK - 1 - t];    // the bug (without the barrier): that slot may not be written yet
}

template <bool kFixed>
static void launch(const at::Tensor& x, at::Tensor& out) {
  CHECK_INPUT(x);
  CHECK_INPUT(out);
  CHECK_SAME_SHAPE(x, out);
  CHECK_DTYPE(x, at::kFloat);
  const int64_t n = x.numel();
  TORCH_CHECK(n % BLOCK == 0, "x must hold a multiple of 256 floats, got ", std::to_string(n));
  if (n == 0) return;
  reverse_kernel<kFixed><<<n / BLOCK, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), out.data_ptr<float>());
  CHECK_LAUNCH();
}

void broken(const at::Tensor& x, at::Tensor& out) { launch<false>(x, out); }
void fixed(const at::Tensor& x, at::Tensor& out) { launch<true>(x, out); }

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("broken(Tensor x, Tensor(a!) out) -> ()");
  m.def("fixed(Tensor x, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("broken", &broken);
  m.impl("fixed", &fixed);
}
