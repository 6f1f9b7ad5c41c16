// samples_idioms.cu: shared-memory idioms of the CUDA samples (cudaTensorCoreGemm, reduction),
// written the way they write them; tests/test_sim_compat.py compares every op with PyTorch on the
// sim backend and, with a GPU, on cuda.
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
//
//   op                 what it exercises
//   transpose          `extern __shared__ float tile[][TILE + 1];`: dynamic shared memory as rows of a
//                      fixed length (a pointer to rows), padded against bank conflicts
//   block_sums_scratch `__shared__ cg::block_tile_memory<256> scratch;` and this_thread_block(scratch);
//                      the partial sums in dynamic shared memory reached through a struct whose member
//                      function declares the extern array (the samples' SharedMemory<T>), for float
//                      and double
#include "helpers.cuh"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace cg = cooperative_groups;

constexpr int TILE = 32;       // the transpose tile is TILE x TILE
constexpr int TILE_ROWS = 8;   // a block of TILE x TILE_ROWS threads, each moving TILE / TILE_ROWS rows
constexpr int SUM_THREADS = 256;

// ---------------------------------------------------------------------------------------------
// kernels

// One block per TILE x TILE tile of x (rows x cols): reads the tile row by row (coalesced) into
// shared memory and writes it column by column to out (cols x rows), coalesced again. The extra
// column of the tile puts a column's elements in different banks. 8 bytes moved per element.
__global__ void transpose_kernel(float* __restrict__ out, const float* __restrict__ x, int rows, int cols) {
  extern __shared__ float tile[][TILE + 1];
  const int c = blockIdx.x * TILE + threadIdx.x;
  for (int r = blockIdx.y * TILE + threadIdx.y, k = threadIdx.y; k < TILE; r += TILE_ROWS, k += TILE_ROWS)
    if (r < rows && c < cols) tile[k][threadIdx.x] = x[static_cast<int64_t>(r) * cols + c];
  __syncthreads();  // the whole tile is loaded before any column is read
  const int oc = blockIdx.y * TILE + threadIdx.x;  // out's column is x's row
  for (int orow = blockIdx.x * TILE + threadIdx.y, k = threadIdx.y; k < TILE; orow += TILE_ROWS, k += TILE_ROWS)
    if (orow < cols && oc < rows) out[static_cast<int64_t>(orow) * rows + oc] = tile[threadIdx.x][k];
}

// Dynamic shared memory seen as T*, whatever T the kernel is instantiated with: one extern array of
// a fixed type, declared in a member function, as the CUDA samples' SharedMemory<T> does.
template <typename T>
struct DynamicShared {
  __device__ T* get() {
    extern __shared__ unsigned char dynamic_bytes[];
    return reinterpret_cast<T*>(dynamic_bytes);
  }
};

// One block of SUM_THREADS threads per SUM_THREADS elements of x: each warp sums its 32 values with
// cg::reduce, the warps' sums meet in dynamic shared memory, and the first warp adds them up.
// Reads each element once; out gets one sum per block.
template <typename T>
__global__ void block_sums_scratch_kernel(T* __restrict__ out, const T* __restrict__ x, int64_t n) {
  __shared__ cg::block_tile_memory<SUM_THREADS> scratch;
  cg::thread_block block = cg::this_thread_block(scratch);
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  T* partial = DynamicShared<T>().get();
  const int64_t i = blockIdx.x * static_cast<int64_t>(SUM_THREADS) + block.thread_rank();
  const T v = cg::reduce(warp, i < n ? x[i] : T(0), cg::plus<T>());
  if (warp.thread_rank() == 0) partial[warp.meta_group_rank()] = v;
  block.sync();  // every warp's sum is in shared memory
  if (warp.meta_group_rank() == 0) {
    const T s = cg::reduce(warp, warp.thread_rank() < warp.meta_group_size() ? partial[warp.thread_rank()] : T(0),
                           cg::plus<T>());
    if (warp.thread_rank() == 0) out[blockIdx.x] = s;
  }
}

// ---------------------------------------------------------------------------------------------
// launchers
at::Tensor transpose(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(x.dim() == 2, "transpose expects a 2-D tensor (rows, cols), got ", std::to_string(x.dim()), " dimensions");
  const int rows = x.size(0), cols = x.size(1);
  auto out = at::empty({cols, rows}, x.options());
  if (out.numel() == 0) return out;
  const dim3 grid(ceil_div(cols, TILE), ceil_div(rows, TILE));
  const dim3 block(TILE, TILE_ROWS);
  const size_t smem = TILE * (TILE + 1) * sizeof(float);
  transpose_kernel<<<grid, block, smem, c10::cuda::getCurrentCUDAStream()>>>(
      out.data_ptr<float>(), x.data_ptr<float>(), rows, cols);
  CHECK_LAUNCH();
  return out;
}

at::Tensor block_sums_scratch(const at::Tensor& x) {
  CHECK_INPUT(x);
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble,
              "block_sums_scratch expects float32 or float64, got ", x.scalar_type());
  const int64_t n = x.numel();
  const int64_t blocks = ceil_div(n, static_cast<int64_t>(SUM_THREADS));
  auto out = at::empty({blocks}, x.options());
  if (blocks == 0) return out;
  const size_t smem = SUM_THREADS / 32 * x.element_size();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "block_sums_scratch", [&] {
    block_sums_scratch_kernel<scalar_t><<<blocks, SUM_THREADS, smem, c10::cuda::getCurrentCUDAStream()>>>(
        out.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), n);
  });
  CHECK_LAUNCH();
  return out;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("transpose(Tensor x) -> Tensor");
  m.def("block_sums_scratch(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("transpose", &transpose);
  m.impl("block_sums_scratch", &block_sums_scratch);
}
