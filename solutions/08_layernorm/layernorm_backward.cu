// layernorm_backward.cu: the lesson 08 exercise. The backward of layernorm over the last dimension.
//
// Spec (in PyTorch), for a 2-D float32 x, weight and bias of shape [cols], y = layer_norm(x, (cols,), weight, bias):
//     dx, dweight, dbias = torch.autograd.grad(y, (x, weight, bias), dy)
// computed from the mean and rstd = 1 / sqrt(var + eps) that the forward saved, one per row. Check it with
//     check_exercise("08", "layernorm_backward", path="layernorm_backward.cu")      or      make check LESSON=08
//
// The forward (layernorm_forward) is written: one block per row, two passes. You write the backward:
//   layernorm_dx_kernel       one block per row: dx = rstd * (g - (sum(g) + xhat * sum(g * xhat)) / cols),
//                             g = dy * weight, xhat = (x - mean) * rstd
//   layernorm_dparams_kernel  column sums dweight = sum(dy * xhat), dbias = sum(dy), a slice of rows per
//                             block, written as partial sums; column_sum_kernel (written) adds the slices
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

constexpr int BLOCK = 256;          // threads per block in the row kernels
constexpr int TX = 32;              // layernorm_dparams_kernel: 32 columns per block (one warp across them) ...
constexpr int TY = 8;               // ... times 8 threads down the rows
constexpr int ROWS_PER_PART = 64;   // ... over a slice of 64 rows: one partial sum per slice and column

// layernorm_forward_kernel (written): block b owns row b; the mean, then the biased variance
// sum((x - mean)^2) / cols, each a block_reduce_sum; rstd = 1 / sqrt(var + eps).
__global__ void layernorm_forward_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                         const float* __restrict__ b, float* __restrict__ out,
                                         float* __restrict__ mean, float* __restrict__ rstd, int64_t cols, float eps) {
  __shared__ float scratch[32];
  const float* xr = x + blockIdx.x * cols;  // 64-bit: row * cols passes 2^31 in large matrices
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += BLOCK) s += xr[c];
  const float m = block_reduce_sum(s, scratch) / cols;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += BLOCK) ss += (xr[c] - m) * (xr[c] - m);
  const float var = block_reduce_sum(ss, scratch) / cols;
  const float rs = rsqrtf(var + eps);
  for (int64_t c = threadIdx.x; c < cols; c += BLOCK) out[blockIdx.x * cols + c] = (xr[c] - m) * rs * w[c] + b[c];
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = m;
    rstd[blockIdx.x] = rs;
  }
}

// layernorm_dx_kernel: block b owns row b; thread t takes columns t, t + 256, ... Two row sums,
// then dx. Reads x and dy twice, writes dx once.
__global__ void layernorm_dx_kernel(const float* __restrict__ dy, const float* __restrict__ x,
                                    const float* __restrict__ w, const float* __restrict__ mean,
                                    const float* __restrict__ rstd, float* __restrict__ dx, int64_t cols) {
  __shared__ float scratch[32];
  const float* xr = x + blockIdx.x * cols;
  const float* dyr = dy + blockIdx.x * cols;
  const float m = mean[blockIdx.x], rs = rstd[blockIdx.x];
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += BLOCK) {
    const float g = dyr[c] * w[c];
    sg += g;
    sgx += g * (xr[c] - m) * rs;
  }
  sg = block_reduce_sum(sg, scratch);
  sgx = block_reduce_sum(sgx, scratch);
  for (int64_t c = threadIdx.x; c < cols; c += BLOCK) {
    const float g = dyr[c] * w[c], xh = (xr[c] - m) * rs;
    dx[blockIdx.x * cols + c] = rs * (g - (sg + xh * sgx) / cols);
  }
}

// layernorm_dparams_kernel: block (bx, by) owns columns 32 bx .. 32 bx + 31 of rows by * 64 ..
// by * 64 + 63; thread (tx, ty) adds rows ty, ty + 8, ... of that slice for column 32 bx + tx (a warp
// reads 32 neighbouring columns of one row: coalesced). The 8 threads of a column combine through
// shared memory, and thread ty = 0 writes the slice's partial sums: partial[by][c] and partial[by][cols + c].
__global__ void layernorm_dparams_kernel(const float* __restrict__ dy, const float* __restrict__ x,
                                         const float* __restrict__ mean, const float* __restrict__ rstd,
                                         float* __restrict__ partial, int64_t rows, int64_t cols) {
  // no padding needed: a warp is one ty, so its writes and, at each k, ty = 0's reads are 32 neighbouring floats
  __shared__ float sum_w[TY][TX];
  __shared__ float sum_b[TY][TX];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = blockIdx.x * (int64_t)TX + tx;
  const int64_t r0 = blockIdx.y * (int64_t)ROWS_PER_PART, r1 = std::min<int64_t>(r0 + ROWS_PER_PART, rows);
  float sw = 0.0f, sb = 0.0f;
  if (c < cols) {
    for (int64_t r = r0 + ty; r < r1; r += TY) {
      const float d = dy[r * cols + c];
      sw += d * (x[r * cols + c] - mean[r]) * rstd[r];
      sb += d;
    }
  }
  sum_w[ty][tx] = sw;
  sum_b[ty][tx] = sb;
  __syncthreads();  // every thread's sums are in before thread ty = 0 adds them
  if (ty == 0 && c < cols) {
    for (int k = 1; k < TY; ++k) {
      sw += sum_w[k][tx];
      sb += sum_b[k][tx];
    }
    partial[blockIdx.y * 2 * cols + c] = sw;
    partial[blockIdx.y * 2 * cols + cols + c] = sb;
  }
}

// column_sum_kernel (written): thread i owns column i of the [parts, 2 * cols] partial sums and adds
// the parts in order (the same bits on every run): dweight for i < cols, dbias above.
__global__ void column_sum_kernel(const float* __restrict__ partial, int64_t parts, int64_t cols,
                                  float* __restrict__ dw, float* __restrict__ db) {
  const int64_t i = blockIdx.x * (int64_t)BLOCK + threadIdx.x;
  if (i >= 2 * cols) return;
  float s = 0.0f;
  for (int64_t p = 0; p < parts; ++p) s += partial[p * 2 * cols + i];
  if (i < cols) dw[i] = s;
  else db[i - cols] = s;
}

// x: 2-D float32 [rows, cols] with cols >= 1, contiguous, on the device; `t` one float32 per column or row.
static void check_x(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_DIM(x, 2);
  TORCH_CHECK(x.size(1) > 0, "x must have at least one column, got shape ", shape_str(x.sizes()));
}
static void check_vector(const at::Tensor& t, const char* name, int64_t n, const char* what) {
  CHECK_CUDA(t);
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.dim() == 1 && t.size(0) == n && t.is_contiguous(), name,
              " must be a contiguous float32 tensor of shape [", std::to_string(n), "] (", what, "), got ",
              t.scalar_type(), " of shape ", shape_str(t.sizes()));
}

void layernorm_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                       at::Tensor& out, at::Tensor& mean, at::Tensor& rstd) {
  check_x(x);
  check_vector(weight, "weight", x.size(1), "one per column of x");
  check_vector(bias, "bias", x.size(1), "one per column of x");
  CHECK_INPUT(out);
  CHECK_SAME_DTYPE(x, out);
  CHECK_SAME_SHAPE(x, out);
  check_vector(mean, "mean", x.size(0), "one per row of x");
  check_vector(rstd, "rstd", x.size(0), "one per row of x");
  if (x.size(0) == 0) return;  // no rows: nothing to write
  CHECK_GRID(x.size(0));
  layernorm_forward_kernel<<<x.size(0), BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(),
      mean.data_ptr<float>(), rstd.data_ptr<float>(), x.size(1), (float)eps);
  CHECK_LAUNCH();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layernorm_backward(const at::Tensor& dy, const at::Tensor& x,
                                                                  const at::Tensor& weight, const at::Tensor& mean,
                                                                  const at::Tensor& rstd) {
  check_x(x);
  CHECK_INPUT(dy);
  CHECK_SAME_DTYPE(x, dy);
  CHECK_SAME_SHAPE(x, dy);
  check_vector(weight, "weight", x.size(1), "one per column of x");
  check_vector(mean, "mean", x.size(0), "one per row of x");
  check_vector(rstd, "rstd", x.size(0), "one per row of x");
  const int64_t rows = x.size(0), cols = x.size(1), parts = ceil_div(rows, (int64_t)ROWS_PER_PART);
  at::Tensor dx = at::empty_like(x), dw = at::empty_like(weight), db = at::empty_like(weight);
  // Not zeroed: layernorm_dparams_kernel writes every element (=, not +=). The check fills empty memory with NaN,
  // so a partial sum that is read before it is written, or added to, comes out NaN.
  at::Tensor partial = at::empty({parts, 2 * cols}, x.options());
  auto stream = c10::cuda::getCurrentCUDAStream();
  if (rows > 0) {
    CHECK_GRID(rows);
    layernorm_dx_kernel<<<rows, BLOCK, 0, stream>>>(dy.data_ptr<float>(), x.data_ptr<float>(), weight.data_ptr<float>(),
                                                    mean.data_ptr<float>(), rstd.data_ptr<float>(), dx.data_ptr<float>(), cols);
    CHECK_LAUNCH();
    TORCH_CHECK(parts <= 65535, "x has too many rows for the grid's y dimension: ", std::to_string(rows));
    const dim3 grid(ceil_div(cols, (int64_t)TX), parts), block(TX, TY);
    layernorm_dparams_kernel<<<grid, block, 0, stream>>>(dy.data_ptr<float>(), x.data_ptr<float>(), mean.data_ptr<float>(),
                                                         rstd.data_ptr<float>(), partial.data_ptr<float>(), rows, cols);
    CHECK_LAUNCH();
  }
  column_sum_kernel<<<ceil_div(2 * cols, (int64_t)BLOCK), BLOCK, 0, stream>>>(partial.data_ptr<float>(), parts,
                                                                              cols, dw.data_ptr<float>(), db.data_ptr<float>());
  CHECK_LAUNCH();
  return {dx, dw, db};
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("layernorm_forward(Tensor x, Tensor weight, Tensor bias, float eps, Tensor(a!) out, Tensor(b!) mean, "
        "Tensor(c!) rstd) -> ()");
  m.def("layernorm_backward(Tensor dy, Tensor x, Tensor weight, Tensor mean, Tensor rstd) -> (Tensor, Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("layernorm_forward", &layernorm_forward);
  m.impl("layernorm_backward", &layernorm_backward);
}
