// welford_layernorm.cu: lesson 08's second exercise (optional). A layernorm forward with one warp per row, whose
// mean and variance come from Welford's running statistics, merged across the 32 lanes.
//
// Spec (in PyTorch), for a 2-D float32 x, weight and bias of shape [cols]:
//     out = layer_norm(x, (cols,), weight, bias, eps);  mean = x.mean(-1);  rstd = 1 / sqrt(x.var(-1, unbiased=False) + eps)
// Check it with
//     check_exercise("08", "welford_layernorm", path="welford_layernorm.cu")   or   make check LESSON=08 EX=welford_layernorm
//
// The kernel, the loads, the normalisation and the launcher are written. You write the three pieces of Welford
// (until then the statistics stay at 0: the check fails):
//   welford_add    one value into a lane's running (count, mean, M2)
//   welford_merge  two lanes' triples into the triple of all their values (Chan et al.)
//   warp_welford   the 32 lanes' triples into one, by shuffles: every lane ends with the row's triple
#include "helpers.cuh"

#include <string>

constexpr int BLOCK = 256;         // 8 warps a block ...
constexpr int WARPS = BLOCK / 32;  // ... each owning one row

// The running statistics of the values seen so far: their count n, their mean, and M2 = sum((x - mean)^2).
// The count is a float: it enters the merge's weights (exact up to 2^24 values).
struct Welford {
  float n, mean, m2;
};

// One value x into the triple a of the values before it; returns the triple of all of them.
__device__ Welford welford_add(Welford a, float x) {
  // FILL ME IN (roughly 4 lines): the count, then the mean and M2 updated in place, in one pass over the values
  //   (the notebook's Python `welford`). Rows of mean 100 and spread 1 are in the check: what would a sum of x * x
  //   leave of the variance in float32?
  return a;
}

// The triple of the union of two disjoint sets of values, from their two triples.
__device__ Welford welford_merge(Welford a, Welford b) {
  // FILL ME IN (roughly 4 lines): the notebook's Python `merge`. Which weights does each mean get when the two
  //   sets differ in size, and what does M2 gain from the two means being apart? A row shorter than 32 columns
  //   leaves lanes with no value at all (n = 0): merging two of those must not divide by zero.
  return a;
}

// Every lane of a full warp calls this with its own triple; every lane must return the triple of all 32.
__device__ Welford warp_welford(Welford p) {
  // FILL ME IN (roughly 6 lines): shuffles move one float at a time between lanes (as block_reduce_sum's warp
  //   step in helpers.cuh). How many merge steps reach all 32 lanes, and with which lane does each step merge,
  //   so that no lane's values are counted twice or left out?
  return p;
}

// Warp w of block b owns row 8b + w; lane l takes columns l, l + 32, ... into its triple (a row shorter than 32
// leaves lanes with none: n = 0). Every lane gets the row's triple, then writes its columns of out.
__global__ void welford_layernorm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                         const float* __restrict__ b, float* __restrict__ out,
                                         float* __restrict__ mean, float* __restrict__ rstd, int64_t rows,
                                         int64_t cols, float eps) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * (int64_t)WARPS + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp leaves together: the shuffles see all 32 lanes
  const float* xr = x + row * cols;  // 64-bit: row * cols passes 2^31 in large matrices
  Welford p = {0.0f, 0.0f, 0.0f};
  for (int64_t c = lane; c < cols; c += 32) p = welford_add(p, xr[c]);
  p = warp_welford(p);
  const float rs = rsqrtf(p.m2 / cols + eps);  // the biased variance, M2 / cols
  for (int64_t c = lane; c < cols; c += 32) out[row * cols + c] = (xr[c] - p.mean) * rs * w[c] + b[c];
  if (lane == 0) {
    mean[row] = p.mean;
    rstd[row] = rs;
  }
}

// t: a contiguous float32 tensor on the device, of shape [n] (what: what it holds).
static void check_float_vector(const at::Tensor& t, const char* name, int64_t n, const char* what) {
  CHECK_CUDA(t);
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.dim() == 1 && t.size(0) == n && t.is_contiguous(), name,
              " must be a contiguous float32 tensor of shape [", std::to_string(n), "] (", what, "), got ",
              t.scalar_type(), " of shape ", shape_str(t.sizes()));
}

// x: 2-D float32 [rows, cols] with cols >= 1, contiguous; weight, bias: [cols]; out: x's shape; mean, rstd: [rows].
void welford_layernorm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                       at::Tensor& out, at::Tensor& mean, at::Tensor& rstd) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_DIM(x, 2);
  TORCH_CHECK(x.size(1) > 0, "x must have at least one column, got shape ", shape_str(x.sizes()));
  check_float_vector(weight, "weight", x.size(1), "one per column of x");
  check_float_vector(bias, "bias", x.size(1), "one per column of x");
  CHECK_INPUT(out);
  CHECK_SAME_DTYPE(x, out);
  CHECK_SAME_SHAPE(x, out);
  check_float_vector(mean, "mean", x.size(0), "one per row of x");
  check_float_vector(rstd, "rstd", x.size(0), "one per row of x");
  if (x.size(0) == 0) return;  // no rows: nothing to write
  const int64_t blocks = ceil_div(x.size(0), (int64_t)WARPS);
  CHECK_GRID(blocks);
  welford_layernorm_kernel<<<blocks, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(),
      mean.data_ptr<float>(), rstd.data_ptr<float>(), x.size(0), x.size(1), (float)eps);
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("welford_layernorm(Tensor x, Tensor weight, Tensor bias, float eps, Tensor(a!) out, Tensor(b!) mean, "
        "Tensor(c!) rstd) -> ()");
}
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("welford_layernorm", &welford_layernorm);
}
