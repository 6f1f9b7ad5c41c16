// row_reductions.cu: the two lesson 06 exercises, reductions over the rows of a [rows, cols] matrix.
//
//   row_max        out[r] = max of x[r, :], one WARP per row, warp shuffles     (a warm-up, 4 lines)
//   row_sum_block  out[r] = sum of x[r, :], one BLOCK per row, a tree in shared memory with barriers
//
// Spec (in PyTorch): out = x.amax(dim=-1) and out = x.sum(dim=-1), for a 2-D float32 x of any width:
// 1 column, narrower than a warp or a block (31, 33), ragged (1000, 4097). Check them with
//     check_exercise("06", "row_max", path="row_reductions.cu")           or    make check LESSON=06
//     check_exercise("06", "row_sum_block", path="row_reductions.cu")
#include "helpers.cuh"

#include <cmath>

constexpr int BLOCK = 256;  // threads per block in both kernels
constexpr int WARPS = BLOCK / 32;

// ---------------------------------------------------------------------------------------------
// Kernels.

// row_max_kernel: warp w of block b owns row b * 8 + w; lane l reads columns l, l + 32, ...
// (32 lanes read 32 consecutive floats: coalesced), then the 32 lanes combine by shuffles.
// Reads 4 B per element, writes 4 B per row.
__global__ void row_max_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * (int64_t)WARPS + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp leaves together, so the shuffles below see all 32 lanes
  const float* r = x + row * cols;
  float m = -INFINITY;  // the start value of a max: every float is >= -inf
  for (int64_t c = lane; c < cols; c += 32) m = fmaxf(m, r[c]);
  // 5 exchanges: after the step with offset k, each lane holds the max of 2k lanes' values
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(FULL_MASK, m, offset));
  if (lane == 0) out[row] = m;
}

// row_sum_block_kernel: block b owns row b; thread t adds columns t, t + 256, t + 512, ... (256
// threads read 256 consecutive floats: coalesced), then the block adds its 256 partial sums in a
// tree in shared memory. Reads 4 B per element, writes 4 B per row: for wide rows.
__global__ void row_sum_block_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t cols) {
  __shared__ float partial[BLOCK];
  const int tid = threadIdx.x;
  const float* r = x + blockIdx.x * cols;
  float acc = 0.0f;  // a thread with no columns (a row narrower than the block) contributes 0
  for (int64_t c = tid; c < cols; c += BLOCK) acc += r[c];
  partial[tid] = acc;
  __syncthreads();  // every slot is written before any thread reads another thread's slot
  for (int s = BLOCK / 2; s > 0; s /= 2) {
    if (tid < s) partial[tid] += partial[tid + s];
    __syncthreads();  // this level is complete before the next level reads it
  }
  if (tid == 0) out[blockIdx.x] = partial[0];
}

// ---------------------------------------------------------------------------------------------
// Launchers.

static void check_row_args(const at::Tensor& x, const at::Tensor& out) {
  CHECK_CUDA(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(x.dim() == 2, "x must have 2 dimensions [rows, cols], got ", std::to_string(x.dim()));
  TORCH_CHECK(x.is_contiguous(), "x must be contiguous (call .contiguous() first)");
  CHECK_CUDA(out);
  CHECK_DTYPE(out, at::kFloat);
  TORCH_CHECK(out.dim() == 1 && out.size(0) == x.size(0), "out must have shape [rows] = [", std::to_string(x.size(0)), "]");
}

void row_max(const at::Tensor& x, at::Tensor& out) {
  check_row_args(x, out);
  const int64_t rows = x.size(0), cols = x.size(1);
  TORCH_CHECK(cols > 0 || rows == 0, "row_max needs at least one column (the max of an empty row is undefined)");
  if (rows == 0) return;
  const int64_t blocks = ceil_div(rows, WARPS);
  CHECK_GRID(blocks);
  row_max_kernel<<<blocks, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
  CHECK_LAUNCH();
}

void row_sum_block(const at::Tensor& x, at::Tensor& out) {
  check_row_args(x, out);
  const int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0) return;
  CHECK_GRID(rows);
  row_sum_block_kernel<<<rows, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), out.data_ptr<float>(), cols);
  CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// Registration.
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("row_max(Tensor x, Tensor(a!) out) -> ()");
  m.def("row_sum_block(Tensor x, Tensor(a!) out) -> ()");
}
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("row_max", &row_max);
  m.impl("row_sum_block", &row_sum_block);
}
