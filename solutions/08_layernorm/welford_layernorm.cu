// welford_layernorm.cu: lesson 08's second exercise (optional). A layernorm forward with one warp per row, whose
// mean and variance come from Welford's running statistics, merged across the 32 lanes.
//
// Spec (in PyTorch), for a 2-D float32 x, weight and bias of shape [cols]:
//     out = layer_norm(x, (cols,), weight, bias, eps);  mean = x.mean(-1);  rstd = 1 / sqrt(x.var(-1, unbiased=False) + eps)
// Check it with
//     check_exercise("08", "welford_layernorm", path="welford_layernorm.cu")   or   make check LESSON=08 EX=welford_layernorm
//
// The kernel, the loads, the normalisation and the launcher are written. You write the three pieces of Welford:
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

// One value x into the triple: the mean moves by d / n, and M2 grows by d * (x - new mean), with d = x - old mean.
// No sum of squares: nothing cancels when the values sit far from 0.
__device__ Welford welford_add(Welford a, float x) {
  a.n += 1.0f;
  const float d = x - a.mean;
  a.mean += d / a.n;
  a.m2 += d * (x - a.mean);
  return a;
}

// The triple of the union of two disjoint sets: the means weighted by their counts, and M2 the two M2s plus the
// spread of the two means about the new one, d^2 * na * nb / n.
__device__ Welford welford_merge(Welford a, Welford b) {
  const float n = a.n + b.n;
  if (n == 0.0f) return a;  // two empty lanes (a row shorter than 32): b.n / n would be 0 / 0
  const float d = b.mean - a.mean, wb = b.n / n;
  return {n, a.mean + d * wb, a.m2 + b.m2 + d * d * a.n * wb};
}

// Every lane of a full warp calls this and ends with the warp's triple: a butterfly, each step merging with the
// lane `offset` away, so that after offsets 16, 8, 4, 2, 1 each lane has merged all 32.
__device__ Welford warp_welford(Welford p) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const Welford other = {__shfl_xor_sync(FULL_MASK, p.n, offset), __shfl_xor_sync(FULL_MASK, p.mean, offset),
                           __shfl_xor_sync(FULL_MASK, p.m2, offset)};
    p = welford_merge(p, other);
  }
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
