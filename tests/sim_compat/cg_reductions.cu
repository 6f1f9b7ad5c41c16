// cg_reductions.cu: cooperative groups at block and warp level, written the way public kernels
// (llm.c's dev/cuda, the CUDA samples) write them; tests/test_sim_compat.py compares every op
// with PyTorch on the sim backend and, with a GPU, on cuda.
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
//
//   op                what it exercises
//   layernorm_rows    a warp per row: tiled_partition<32>, meta_group_rank/size, cg::reduce with plus
//   softmax_rows      a warp per row: cg::reduce with greater (max) and plus (sum)
//   row_min           a warp per row: cg::reduce with less
//   block_sums        a block reduction: tile reduce, shared memory, block.sync(), the first warp finishes
//   tile_ops          every tile member for tiles of 1 to 32 threads (shuffles, votes, ranks, sizes)
//   block_info        thread_block's ranks, sizes and indices in a 3-D block
//   compact_positive  coalesced_threads(): one atomicAdd per group of threads that take a branch
//   online_softmax    a warp per row: cg::reduce of a struct with a __device__ function (llm.c's online softmax)
//   group_views       the type-erased thread_group, tiled_partition(group, n), a tile of a tile
//   grid_sync         this_grid().sync(): the simulator refuses it (on a GPU it needs a cooperative
//                     launch, which <<<...>>> is not); tested on the sim backend only
//   divergent_sync    block.sync() at two different lines: undefined on a GPU, an error on the
//                     simulator; tested on the sim backend only
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace cg = cooperative_groups;

// ---------------------------------------------------------------------------------------------
// kernels

// One warp per row of x (N rows of C); each lane strides over the row. Reads the row twice
// (mean, then variance) and writes it once; memory-bound.
__global__ void layernorm_rows_kernel(float* __restrict__ out, const float* __restrict__ x,
                                      const float* __restrict__ weight, const float* __restrict__ bias,
                                      int N, int C) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  int row = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
  if (row >= N) return;  // the whole warp leaves together
  const float* xr = x + static_cast<int64_t>(row) * C;
  float sum = 0.0f;
  for (int i = warp.thread_rank(); i < C; i += warp.size()) sum += xr[i];
  float mean = cg::reduce(warp, sum, cg::plus<float>()) / C;
  float sq = 0.0f;
  for (int i = warp.thread_rank(); i < C; i += warp.size()) {
    float d = xr[i] - mean;
    sq += d * d;
  }
  float rstd = rsqrtf(cg::reduce(warp, sq, cg::plus<float>()) / C + 1e-5f);
  float* o = out + static_cast<int64_t>(row) * C;
  for (int i = warp.thread_rank(); i < C; i += warp.size()) o[i] = (xr[i] - mean) * rstd * weight[i] + bias[i];
}

// One warp per row: the row's max with cg::greater, then the sum of exponentials with cg::plus.
__global__ void softmax_rows_kernel(float* __restrict__ out, const float* __restrict__ x, int N, int C) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  int row = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
  if (row >= N) return;
  const float* xr = x + static_cast<int64_t>(row) * C;
  float m = -INFINITY;
  for (int i = warp.thread_rank(); i < C; i += warp.size()) m = fmaxf(m, xr[i]);
  m = cg::reduce(warp, m, cg::greater<float>());
  float s = 0.0f;
  for (int i = warp.thread_rank(); i < C; i += warp.size()) s += expf(xr[i] - m);
  s = cg::reduce(warp, s, cg::plus<float>());
  float* o = out + static_cast<int64_t>(row) * C;
  for (int i = warp.thread_rank(); i < C; i += warp.size()) o[i] = expf(xr[i] - m) / s;
}

// One warp per row: the row's minimum with cg::less, on integers.
__global__ void row_min_kernel(int* __restrict__ out, const int* __restrict__ x, int N, int C) {
  auto block = cg::this_thread_block();
  auto warp = cg::tiled_partition<32>(block);
  int row = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
  if (row >= N) return;
  int m = INT_MAX;
  for (int i = warp.thread_rank(); i < C; i += warp.size()) m = min(m, x[static_cast<int64_t>(row) * C + i]);
  m = cg::reduce(warp, m, cg::less<int>());
  if (warp.thread_rank() == 0) out[row] = m;
}

// One block per chunk of blockDim.x elements: each warp reduces its values, warp 0 adds the
// per-warp sums from shared memory. Reads every element once.
__global__ void block_sums_kernel(float* __restrict__ out, const float* __restrict__ x, int64_t n) {
  __shared__ float warp_sums[32];
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  int64_t i = static_cast<int64_t>(blockIdx.x) * block.size() + block.thread_rank();
  float v = i < n ? x[i] : 0.0f;
  v = cg::reduce(warp, v, cg::plus<float>());
  if (warp.thread_rank() == 0) warp_sums[warp.meta_group_rank()] = v;
  block.sync();  // every warp's sum is in shared memory
  if (warp.meta_group_rank() == 0) {
    float s = warp.thread_rank() < warp.meta_group_size() ? warp_sums[warp.thread_rank()] : 0.0f;
    s = cg::reduce(warp, s, cg::plus<float>());
    if (block.thread_rank() == 0) out[blockIdx.x] = s;
  }
}

// Every tile member for tiles of N threads; thread t writes kTileCols values to out[t].
constexpr int kTileCols = 13;
template <unsigned N>
__global__ void tile_ops_kernel(int* __restrict__ out, const int* __restrict__ v) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<N> tile = cg::tiled_partition<N>(block);
  const unsigned t = block.thread_rank();
  const int x = v[t];
  int* o = out + t * kTileCols;
  o[0] = tile.thread_rank();
  o[1] = tile.meta_group_rank();
  o[2] = tile.meta_group_size();
  o[3] = tile.num_threads();
  o[4] = tile.size();
  o[5] = tile.shfl(x, (tile.thread_rank() + 1) % N);
  o[6] = tile.shfl_down(x, 1);
  o[7] = tile.shfl_up(x, 1);
  o[8] = tile.shfl_xor(x, N > 1 ? 1 : 0);
  o[9] = tile.any(x > 0);
  o[10] = tile.all(x > 0);
  o[11] = static_cast<int>(tile.ballot(x > 0));
  tile.sync();
  o[12] = cg::reduce(tile, x, cg::plus<int>());
}

// thread_block's view of a 3-D block: one row of 10 values per thread, in launch order.
__global__ void block_info_kernel(int* __restrict__ out) {
  cg::thread_block block = cg::this_thread_block();
  const dim3 g = block.group_index(), t = block.thread_index(), d = block.dim_threads();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * block.num_threads() + block.thread_rank();
  int* o = out + row * 10;
  o[0] = block.thread_rank();
  o[1] = block.size();
  o[2] = block.num_threads();
  o[3] = g.x;
  o[4] = t.x;
  o[5] = t.y;
  o[6] = t.z;
  o[7] = d.x;
  o[8] = d.y;
  o[9] = d.z;
}

// Stream compaction with one atomic per coalesced group (the CUDA guide's aggregated increment):
// the threads whose value is positive take consecutive slots of `kept`; the order may vary, the
// set may not.
__global__ void compact_positive_kernel(float* __restrict__ kept, int* __restrict__ count,
                                        const float* __restrict__ x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] > 0.0f) {
    cg::coalesced_group active = cg::coalesced_threads();
    int first = 0;
    if (active.thread_rank() == 0) first = atomicAdd(count, static_cast<int>(active.size()));
    first = active.shfl(first, 0);
    kept[first + active.thread_rank()] = x[i];
  }
}

// One warp per row, one pass for max and sum: each lane keeps (max, sum of exp(x - max)); the
// pairs are merged by cg::reduce with a plain function, rescaling the smaller max's sum (a lane
// that saw no element holds (-inf, 0) and adds nothing; exp(-inf - -inf) would be a NaN).
struct MaxSum {
  float max;
  float sum;
};
__device__ MaxSum merge_max_sum(MaxSum a, MaxSum b) {
  const bool a_bigger = a.max > b.max;
  const MaxSum big = a_bigger ? a : b, small = a_bigger ? b : a;
  return {big.max, small.sum == 0.0f ? big.sum : big.sum + small.sum * expf(small.max - big.max)};
}
__global__ void online_softmax_kernel(float* __restrict__ out, const float* __restrict__ x, int N, int C) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  int row = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
  if (row >= N) return;
  const float* xr = x + static_cast<int64_t>(row) * C;
  MaxSum ms = {-INFINITY, 0.0f};
  for (int i = warp.thread_rank(); i < C; i += warp.size()) ms = merge_max_sum(ms, MaxSum{xr[i], 1.0f});
  ms = cg::reduce(warp, ms, merge_max_sum);
  float* o = out + static_cast<int64_t>(row) * C;
  for (int i = warp.thread_rank(); i < C; i += warp.size()) o[i] = expf(xr[i] - ms.max) / ms.sum;
}

// Thread t writes 6 values: its rank and size in the block as a thread_group, in a run-time tile
// of 8 (after a sync of that tile), and the meta-group rank and size of a 4-thread tile of its warp.
__global__ void group_views_kernel(int* __restrict__ out) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_group whole = block;
  cg::thread_group eight = cg::tiled_partition(whole, 8);
  cg::sync(eight);
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  cg::thread_block_tile<4> quad = cg::tiled_partition<4>(warp);
  int* o = out + block.thread_rank() * 6;
  o[0] = whole.thread_rank();
  o[1] = whole.size();
  o[2] = eight.thread_rank();
  o[3] = eight.size();
  o[4] = quad.meta_group_rank();
  o[5] = quad.meta_group_size();
}

// Every block waits for the whole grid: needs all blocks resident at once.
__global__ void grid_sync_kernel(int* __restrict__ flags) {
  cg::grid_group grid = cg::this_grid();
  if (threadIdx.x == 0) flags[blockIdx.x] = 1;
  grid.sync();
}

// The even threads wait at one barrier, the odd ones at another (a bug the simulator names).
__global__ void divergent_sync_kernel(float* __restrict__ out) {
  cg::thread_block block = cg::this_thread_block();
  if (block.thread_rank() % 2 == 0) {
    block.sync();
  } else {
    block.sync();
  }
  out[block.thread_rank()] = 1.0f;
}

// ---------------------------------------------------------------------------------------------
// launchers
static void check_rows(const at::Tensor& x, const char* name) {
  CHECK_INPUT(x);
  TORCH_CHECK(x.dim() == 2, name, " expects a 2-D tensor (rows, cols), got ", std::to_string(x.dim()), " dimensions");
}

at::Tensor layernorm_rows(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  check_rows(x, "layernorm_rows");
  CHECK_DTYPE(x, at::kFloat);
  CHECK_INPUT(weight);
  CHECK_INPUT(bias);
  const int N = x.size(0), C = x.size(1);
  TORCH_CHECK(weight.numel() == C && bias.numel() == C, "layernorm_rows: weight and bias need ", std::to_string(C), " elements");
  auto out = at::empty_like(x);
  const int block = 128, rows_per_block = block / 32;
  if (N > 0) {
    layernorm_rows_kernel<<<ceil_div(N, rows_per_block), block, 0, c10::cuda::getCurrentCUDAStream()>>>(
        out.data_ptr<float>(), x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), N, C);
    CHECK_LAUNCH();
  }
  return out;
}

at::Tensor softmax_rows(const at::Tensor& x) {
  check_rows(x, "softmax_rows");
  CHECK_DTYPE(x, at::kFloat);
  const int N = x.size(0), C = x.size(1);
  auto out = at::empty_like(x);
  if (N > 0) {
    softmax_rows_kernel<<<ceil_div(N, 2), 64, 0, c10::cuda::getCurrentCUDAStream()>>>(
        out.data_ptr<float>(), x.data_ptr<float>(), N, C);
    CHECK_LAUNCH();
  }
  return out;
}

at::Tensor row_min(const at::Tensor& x) {
  check_rows(x, "row_min");
  CHECK_DTYPE(x, at::kInt);
  const int N = x.size(0), C = x.size(1);
  auto out = at::empty({N}, x.options());
  if (N > 0) {
    row_min_kernel<<<ceil_div(N, 8), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        out.data_ptr<int>(), x.data_ptr<int>(), N, C);
    CHECK_LAUNCH();
  }
  return out;
}

at::Tensor block_sums_op(const at::Tensor& x, int64_t threads) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(threads >= 32 && threads <= 1024 && threads % 32 == 0,
              "block_sums: threads must be a multiple of 32 from 32 to 1024, got ", std::to_string(threads));
  const int64_t n = x.numel();
  const int64_t blocks = ceil_div(n, threads);
  auto out = at::empty({blocks}, x.options());
  if (blocks > 0) {
    block_sums_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        out.data_ptr<float>(), x.data_ptr<float>(), n);
    CHECK_LAUNCH();
  }
  return out;
}

at::Tensor tile_ops(const at::Tensor& v, int64_t tile) {
  CHECK_INPUT(v);
  CHECK_DTYPE(v, at::kInt);
  const int64_t threads = v.numel();
  TORCH_CHECK(threads >= 32 && threads <= 1024 && threads % 32 == 0,
              "tile_ops: v holds one value per thread of one block, a multiple of 32 up to 1024; got ", std::to_string(threads));
  auto out = at::empty({threads, kTileCols}, v.options());
  auto s = c10::cuda::getCurrentCUDAStream();
  int* o = out.data_ptr<int>();
  const int* in = v.data_ptr<int>();
  switch (tile) {
    case 1: tile_ops_kernel<1><<<1, threads, 0, s>>>(o, in); break;
    case 2: tile_ops_kernel<2><<<1, threads, 0, s>>>(o, in); break;
    case 4: tile_ops_kernel<4><<<1, threads, 0, s>>>(o, in); break;
    case 8: tile_ops_kernel<8><<<1, threads, 0, s>>>(o, in); break;
    case 16: tile_ops_kernel<16><<<1, threads, 0, s>>>(o, in); break;
    case 32: tile_ops_kernel<32><<<1, threads, 0, s>>>(o, in); break;
    default: TORCH_CHECK(false, "tile_ops: tile must be 1, 2, 4, 8, 16 or 32, got ", std::to_string(tile));
  }
  CHECK_LAUNCH();
  return out;
}

at::Tensor block_info(const at::Tensor& like, int64_t blocks, int64_t bx, int64_t by, int64_t bz) {
  CHECK_INPUT(like);
  auto out = at::empty({blocks * bx * by * bz, 10}, like.options().dtype(at::kInt));
  block_info_kernel<<<blocks, dim3(bx, by, bz), 0, c10::cuda::getCurrentCUDAStream()>>>(out.data_ptr<int>());
  CHECK_LAUNCH();
  return out;
}

std::vector<at::Tensor> compact_positive(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  const int n = x.numel();
  auto kept = at::empty({n}, x.options());
  auto count = at::zeros({1}, x.options().dtype(at::kInt));
  if (n > 0) {
    compact_positive_kernel<<<ceil_div(n, 128), 128, 0, c10::cuda::getCurrentCUDAStream()>>>(
        kept.data_ptr<float>(), count.data_ptr<int>(), x.data_ptr<float>(), n);
    CHECK_LAUNCH();
  }
  return {kept, count};
}

at::Tensor online_softmax(const at::Tensor& x) {
  check_rows(x, "online_softmax");
  CHECK_DTYPE(x, at::kFloat);
  const int N = x.size(0), C = x.size(1);
  auto out = at::empty_like(x);
  if (N > 0) {
    online_softmax_kernel<<<ceil_div(N, 4), 128, 0, c10::cuda::getCurrentCUDAStream()>>>(
        out.data_ptr<float>(), x.data_ptr<float>(), N, C);
    CHECK_LAUNCH();
  }
  return out;
}

at::Tensor group_views(const at::Tensor& like, int64_t threads) {
  CHECK_INPUT(like);
  TORCH_CHECK(threads >= 32 && threads <= 1024 && threads % 32 == 0,
              "group_views: threads must be a multiple of 32 from 32 to 1024, got ", std::to_string(threads));
  auto out = at::empty({threads, 6}, like.options().dtype(at::kInt));
  group_views_kernel<<<1, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(out.data_ptr<int>());
  CHECK_LAUNCH();
  return out;
}

void grid_sync(const at::Tensor& flags) {
  CHECK_INPUT(flags);
  CHECK_DTYPE(flags, at::kInt);
  grid_sync_kernel<<<flags.numel(), 32, 0, c10::cuda::getCurrentCUDAStream()>>>(flags.data_ptr<int>());
  CHECK_LAUNCH();
}

void divergent_sync(const at::Tensor& out) {
  CHECK_INPUT(out);
  CHECK_DTYPE(out, at::kFloat);
  divergent_sync_kernel<<<1, out.numel(), 0, c10::cuda::getCurrentCUDAStream()>>>(out.data_ptr<float>());
  CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// registration
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("layernorm_rows(Tensor x, Tensor weight, Tensor bias) -> Tensor");
  m.def("softmax_rows(Tensor x) -> Tensor");
  m.def("row_min(Tensor x) -> Tensor");
  m.def("block_sums(Tensor x, int threads) -> Tensor");
  m.def("tile_ops(Tensor v, int tile) -> Tensor");
  m.def("block_info(Tensor like, int blocks, int bx, int by, int bz) -> Tensor");
  m.def("compact_positive(Tensor x) -> Tensor[]");
  m.def("online_softmax(Tensor x) -> Tensor");
  m.def("group_views(Tensor like, int threads) -> Tensor");
  m.def("grid_sync(Tensor(a!) flags) -> ()");
  m.def("divergent_sync(Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("layernorm_rows", &layernorm_rows);
  m.impl("softmax_rows", &softmax_rows);
  m.impl("row_min", &row_min);
  m.impl("block_sums", &block_sums_op);
  m.impl("tile_ops", &tile_ops);
  m.impl("block_info", &block_info);
  m.impl("compact_positive", &compact_positive);
  m.impl("online_softmax", &online_softmax);
  m.impl("group_views", &group_views);
  m.impl("grid_sync", &grid_sync);
  m.impl("divergent_sync", &divergent_sync);
}
