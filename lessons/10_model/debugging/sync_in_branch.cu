// sync_in_branch.cu: `__syncthreads()` inside `if (i < n)`, a pattern common in published examples.
// Each block sums its 256 elements of x with a tree in shared memory. In the last block the threads
// past n skip the branch and its barrier, and go on to the tree's barriers, while the others wait
// at the one in the branch. CUDA requires every thread of the block to reach the same
// __syncthreads(); a GPU may hang, or let the threads through at different barriers and sum
// slots that were never written. The simulator stops with an error naming both lines.
//
//   broken   the load and its barrier inside `if (i < n)`
//   fixed    every thread stores a value (0 past the end) and reaches the barrier
#include "helpers.cuh"

constexpr int BLOCK = 256;

// block_sum_kernel: block b sums x[256 b .. 256 b + 255] into out[b]; thread t owns one element
// and slot t of shared memory. 4 B read per element.
template <bool kFixed>
__global__ void block_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  __shared__ float partial[BLOCK];
  const int t = threadIdx.x;
  const int64_t i = blockIdx.x * (int64_t)BLOCK + t;
  if constexpr (kFixed) {
    partial[t] = i < n ? x[i] : 0.0f;  // FIX: past the end, a zero that the tree can add
    __syncthreads();                   // reached by every thread of the block
  } else if (i < n) {
    partial[t] = x[i];
    __syncthreads();  // the bug: threads with i >= n never get here
  }
  for (int stride = BLOCK / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();  // wait until this level of the tree is written
  }
  if (t == 0) out[blockIdx.x] = partial[0];
}

template <bool kFixed>
static void launch(const at::Tensor& x, at::Tensor& out) {
  CHECK_INPUT(x);
  CHECK_INPUT(out);
  CHECK_DTYPE(x, at::kFloat);
  const int64_t n = x.numel(), blocks = ceil_div(n, BLOCK);
  TORCH_CHECK(out.numel() == blocks, "out must hold ceil(n / 256) = ", std::to_string(blocks),
              " block sums, got ", std::to_string(out.numel()));
  if (n == 0) return;
  block_sum_kernel<kFixed><<<blocks, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), out.data_ptr<float>(), n);
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
