// undefined_public.cu: what public kernels do that a GPU leaves undefined, or that stops a kernel,
// which the simulator must report with a clear error. Simulator tests only (tests/test_sim_public.py):
// on a GPU these return whatever the hardware gives, or hang.
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
//
//   op                  what it exercises
//   outside_mask_sum    the CUDA samples' reduce7 pattern: a shuffle down whose mask holds only the
//                       lanes that had work, so low lanes read lanes outside the mask
//   tile_deadlock       half of a tile of 64 threads waits at the tile's sync(), the other half at
//                       __syncthreads
//   trap                __trap() in one thread
#include "helpers.cuh"

#include <ATen/ops/zeros.h>
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

// One warp; the lanes below `active` have a value and reduce it with a mask of just those lanes.
__global__ void outside_mask_sum_kernel(const float* x, float* out, int active) {
  const int lane = threadIdx.x;
  const unsigned mask = __ballot_sync(FULL_MASK, lane < active);
  if (lane < active) {
    float v = x[lane];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(mask, v, offset);  // MASK-LINE
    if (lane == 0) out[0] = v;
  }
}

at::Tensor outside_mask_sum(const at::Tensor& x, int64_t active) {
  CHECK_INPUT(x);
  auto out = at::zeros({1}, x.options());
  outside_mask_sum_kernel<<<1, 32>>>(x.data_ptr<float>(), out.data_ptr<float>(), static_cast<int>(active));
  CHECK_LAUNCH();
  return out;
}

// One block of 64 threads, one tile of 64.
__global__ void tile_deadlock_kernel(int* out) {
  cg::thread_block_tile<64> tile = cg::tiled_partition<64>(cg::this_thread_block());
  if (threadIdx.x < 32)
    tile.sync();  // TILE-LINE
  else
    __syncthreads();  // BAR-LINE
  out[threadIdx.x] = 1;
}

at::Tensor tile_deadlock(const at::Tensor& like) {
  auto out = at::zeros({64}, like.options().dtype(at::kInt));
  tile_deadlock_kernel<<<1, 64>>>(out.data_ptr<int>());
  CHECK_LAUNCH();
  return out;
}

__global__ void trap_kernel(int* out) {
  if (threadIdx.x == 5) __trap();  // TRAP-LINE
  out[threadIdx.x] = 1;
}

at::Tensor trap(const at::Tensor& like) {
  auto out = at::zeros({32}, like.options().dtype(at::kInt));
  trap_kernel<<<1, 32>>>(out.data_ptr<int>());
  CHECK_LAUNCH();
  return out;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("outside_mask_sum(Tensor x, int active) -> Tensor");
  m.def("tile_deadlock(Tensor like) -> Tensor");
  m.def("trap(Tensor like) -> Tensor");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("outside_mask_sum", &outside_mask_sum);
  m.impl("tile_deadlock", &tile_deadlock);
  m.impl("trap", &trap);
}
