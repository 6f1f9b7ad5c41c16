// cg_tiles.cu: cooperative groups' tiles of several warps and scans, as the CUDA samples
// (multi_warp_cg_reduce) and CUB-style code use them; tests/test_sim_public.py compares every op with
// PyTorch on the sim backend and, with a GPU, on cuda.
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
//
//   op           what it exercises
//   big_tile     tiled_partition<64 ... 512>: ranks and sizes, sync() around shared memory, shfl, any,
//                all, cg::reduce, inclusive_scan and exclusive_scan over the tile
//   warp_scans   inclusive_scan and exclusive_scan over tiles of 8 and 32 threads, with cg::plus and
//                cg::greater, and over coalesced_threads()
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>

namespace cg = cooperative_groups;

constexpr int kBigTileCols = 11;
constexpr int kScanCols = 6;

// ---------------------------------------------------------------------------------------------
// kernels

// One thread per element, blocks of 512: each thread of a tile of N reports 11 values about its tile.
template <unsigned N>
__global__ void big_tile_kernel(const int* x, int* out) {
  __shared__ int s[512];
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<N> tile = cg::tiled_partition<N>(block);
  const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  const int v = x[i];
  s[t] = v;
  tile.sync();  // the tile's values are in shared memory before a neighbour's is read
  const int base = t - static_cast<int>(tile.thread_rank());
  int* o = out + static_cast<int64_t>(i) * kBigTileCols;
  o[0] = tile.thread_rank();
  o[1] = tile.meta_group_rank();
  o[2] = tile.meta_group_size();
  o[3] = tile.size();
  o[4] = s[base + (tile.thread_rank() + 1) % N];
  o[5] = tile.shfl(v, 5);
  o[6] = tile.any(v > 6);
  o[7] = tile.all(v > -7);
  o[8] = cg::reduce(tile, v, cg::plus<int>());
  o[9] = cg::inclusive_scan(tile, v);
  o[10] = cg::exclusive_scan(tile, v);
}

// One thread per element, blocks of 64: tiles of 8 and of 32; the odd values' coalesced group.
__global__ void warp_scans_kernel(const int* x, int* out, int n) {
  cg::thread_block block = cg::this_thread_block();
  auto t8 = cg::tiled_partition<8>(block);
  auto t32 = cg::tiled_partition<32>(block);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int v = i < n ? x[i] : 0;
  const int a = cg::inclusive_scan(t8, v), b = cg::exclusive_scan(t8, v);
  const int c = cg::inclusive_scan(t32, v, cg::greater<int>()), d = cg::exclusive_scan(t32, v);
  int e = -1;
  if (v % 2 != 0) e = cg::exclusive_scan(cg::coalesced_threads(), 1);  // its rank among the odd values of the warp
  if (i >= n) return;
  int* o = out + static_cast<int64_t>(i) * kScanCols;
  o[0] = a, o[1] = b, o[2] = c, o[3] = d, o[4] = e, o[5] = cg::inclusive_scan(t32, 1);
}

// ---------------------------------------------------------------------------------------------
// launchers

at::Tensor big_tile(const at::Tensor& x, int64_t tile) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kInt);
  const int n = static_cast<int>(x.numel());
  TORCH_CHECK(n % 512 == 0, "expected a multiple of 512 values, got ", std::to_string(n));
  auto out = at::empty({n, kBigTileCols}, x.options());
  const int* xp = x.data_ptr<int>();
  int* op = out.data_ptr<int>();
  switch (tile) {
    case 64: big_tile_kernel<64><<<n / 512, 512>>>(xp, op); break;
    case 128: big_tile_kernel<128><<<n / 512, 512>>>(xp, op); break;
    case 256: big_tile_kernel<256><<<n / 512, 512>>>(xp, op); break;
    case 512: big_tile_kernel<512><<<n / 512, 512>>>(xp, op); break;
    default: TORCH_CHECK(false, "tile must be 64, 128, 256 or 512, got ", std::to_string(tile));
  }
  CHECK_LAUNCH();
  return out;
}

at::Tensor warp_scans(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kInt);
  const int n = static_cast<int>(x.numel());
  auto out = at::empty({n, kScanCols}, x.options());
  if (n) warp_scans_kernel<<<ceil_div(n, 64), 64>>>(x.data_ptr<int>(), out.data_ptr<int>(), n);
  CHECK_LAUNCH();
  return out;
}

// ---------------------------------------------------------------------------------------------
// registration

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("big_tile(Tensor x, int tile) -> Tensor");
  m.def("warp_scans(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("big_tile", &big_tile);
  m.impl("warp_scans", &warp_scans);
}
