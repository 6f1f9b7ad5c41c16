// PLANTED BUG (tests/test_lesson06.py): the shuffles start at offset 8, so lanes 0-15 never see lanes 16-31.
// row_max.cu: the lesson 06 exercise. out[r] = max over the columns of x[r, :], one warp per row.
//
// Spec (in PyTorch): out = x.amax(dim=-1) for a 2-D float32 x of any width (31, 33, 4097 columns:
// not multiples of 32). Check it with
//     check_exercise("06", "row_max", path="row_max.cu")      or      make check LESSON=06
#include "helpers.cuh"

#include <cmath>

constexpr int BLOCK = 256;  // 8 warps per block: 8 rows per block
constexpr int WARPS = BLOCK / 32;

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
  for (int offset = 8; offset > 0; offset /= 2)  /* BUG: starts at 8 */ m = fmaxf(m, __shfl_xor_sync(FULL_MASK, m, offset));
  if (lane == 0) out[row] = m;
}

void row_max(const at::Tensor& x, at::Tensor& out) {
  CHECK_CUDA(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(x.dim() == 2, "x must have 2 dimensions [rows, cols], got ", std::to_string(x.dim()));
  TORCH_CHECK(x.is_contiguous(), "x must be contiguous (call .contiguous() first)");
  CHECK_CUDA(out);
  CHECK_DTYPE(out, at::kFloat);
  TORCH_CHECK(out.dim() == 1 && out.size(0) == x.size(0), "out must have shape [rows] = [", std::to_string(x.size(0)), "]");
  const int64_t rows = x.size(0), cols = x.size(1);
  TORCH_CHECK(cols > 0 || rows == 0, "row_max needs at least one column (the max of an empty row is undefined)");
  if (rows == 0) return;
  const int64_t blocks = ceil_div(rows, WARPS);
  CHECK_GRID(blocks);
  row_max_kernel<<<blocks, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("row_max(Tensor x, Tensor(a!) out) -> ()"); }
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("row_max", &row_max); }
