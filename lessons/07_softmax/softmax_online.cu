// softmax_online.cu: the lesson 07 exercise. A warp-per-row online softmax over the last dimension.
//
// Spec (in PyTorch): out = torch.softmax(x, dim=-1) for a 2-D float32 x of any width, except that a row
// that is entirely -inf gives zeros (torch gives NaN there). Check it with
//     check_exercise("07", "softmax_online", path="softmax_online.cu")      or      make check LESSON=07
#include "helpers.cuh"

#include <cmath>

constexpr int BLOCK = 256;  // 8 warps per block: 8 rows per block
constexpr int WARPS = BLOCK / 32;

// A running max m of the values seen so far, and the sum s of exp(v - m) over them; {-inf, 0} for none.
struct MaxSum {
  float m, s;
};

// Merges the pairs of two disjoint sets of values into the pair of their union.
__device__ MaxSum merge(MaxSum a, MaxSum b) {
  // FILL ME IN (roughly 3 lines): the pair of the union, that is its max m and the sum of exp(v - m)
  //   over all its values. a.s is a sum of exp(v - a.m) and b.s a sum of exp(v - b.m): neither is
  //   relative to m yet. By what factor must each be multiplied before they can be added?
  //   Then work your formula through for two empty pairs, {-inf, 0} and {-inf, 0}: it must give {-inf, 0}.
  return a;
}

// softmax_online_kernel: warp w of block b owns row 8b + w; lane l reads columns l, l + 32, ...
// (coalesced) and keeps its own (max, sum) pair; the warp merges the 32 pairs, then each lane
// writes its columns. Reads the row twice, writes it once.
__global__ void softmax_online_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * (int64_t)WARPS + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp leaves together, so the shuffles below see all 32 lanes
  const float* r = x + row * cols;  // 64-bit row * cols: it passes 2^31 in large matrices
  float* o = out + row * cols;

  MaxSum p = {-INFINITY, 0.0f};
  for (int64_t c = lane; c < cols; c += 32) p = merge(p, MaxSum{r[c], 1.0f});  // one value: {v, exp(v - v)}

  // FILL ME IN (roughly 4 lines): each lane's p now holds m, the max of its own columns, and s, the sum of
  //   exp(v - m) over them. Combine the 32 lanes' pairs into the row's pair, and leave it in EVERY lane:
  //   each lane writes its columns from it below. merge() takes the place that max or + take in lesson 06's
  //   warp reductions (helpers.cuh); a pair is two floats, and a shuffle moves one. Which shuffle leaves
  //   the result in every lane, not only in lane 0?

  const float inv = 1.0f / p.s;
  for (int64_t c = lane; c < cols; c += 32) o[c] = p.m == -INFINITY ? 0.0f : __expf(r[c] - p.m) * inv;
}

void softmax_online(const at::Tensor& x, at::Tensor& out) {
  CHECK_CUDA(x);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_DIM(x, 2);
  CHECK_CONTIGUOUS(x);
  CHECK_CUDA(out);
  CHECK_SAME_DTYPE(x, out);
  CHECK_SAME_SHAPE(x, out);
  CHECK_CONTIGUOUS(out);
  const int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0 || cols == 0) return;  // nothing to write
  const int64_t blocks = ceil_div(rows, WARPS);
  CHECK_GRID(blocks);
  softmax_online_kernel<<<blocks, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("softmax_online(Tensor x, Tensor(a!) out) -> ()"); }
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("softmax_online", &softmax_online); }
