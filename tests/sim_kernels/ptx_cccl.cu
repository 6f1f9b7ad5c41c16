// ptx_cccl.cu: libcu++'s <cuda/ptx> forms of Hopper's mbarrier, TMA and bulk copies (cuda::ptx::mbarrier_*,
// cp_async_bulk_tensor, cp_async_bulk, ...), in a kernel that also has the same steps as asm statements, so
// that the two can be compared (tests/test_sim_ptx.py). The cuda backend needs an sm_90 GPU; build with
// TORCH_CUDA_ARCH_LIST=9.0a as the other Hopper kernels.
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
// needs compute capability: 9.0 for TMA, bulk copies and mbarrier transactions
//
//   op           what it computes
//   cccl_tiles   for x [rows, cols] float (cols a multiple of 4), the 32 x 64 tiles A at (row0, col0) and B
//                at (row0 + 32, col0), zeros outside x: y, zeros but for 2 A + B at (row0, col0) (clipped
//                to x), and B. A comes by TMA on an mbarrier phase that every thread arrives on and waits
//                for with its state token, B by TMA on the next phase, waited for by its parity; y is
//                written by a TMA store, B by a 1-D bulk store. use_asm: the same steps as asm statements.
//   cccl_barrier the tile A at (0, 0) loaded by cuda::ptx::cp_async_bulk_tensor on a cuda::barrier (through
//                cuda::device::barrier_native_handle), waited for with the barrier's own arrive and wait
//   cccl_elect   for 64 threads: which ones cuda::ptx::elect_sync(mask) elects, with the mask of the whole
//                warp (first 32 values) and of lanes 8-15 (called by those lanes only; next 64 values)
//                (libcu++ has elect_sync since after CUDA 13.0: with an older one the op says so)
//   cccl_misuse  what = 1: a wait for a phase that nobody arrives on (the wrong parity); 2: a TMA load on a
//                barrier whose expect_tx was forgotten; 3: an expect_tx of more bytes than the copy brings;
//                4: an arrival on a barrier never initialised. The simulator reports each at its line.
//   cccl_reduce  y = y0 op every row of x, block b adding (or and-ing, ...) row b into y with one
//                cuda::ptx::cp_reduce_async_bulk: add (float32, float64, int32, int64, float16, bfloat16), min and
//                max (int32, int64, float16, bfloat16), and, or, xor (int32, int64), inc and dec (int32 read as
//                uint32); rows of at most 4096 bytes, a multiple of 16
//   cccl_tensor_reduce  y = y0 with the 16 x 32 box at (row0, col0) (clipped to y) op= x[b] for every block b, each
//                block reducing x[b] through a 2-D tensor map with one cp_reduce_async_bulk_tensor (use_asm: the asm
//                form): add (float32, float16, bfloat16, int32), min and max (float16, bfloat16, int32; float32 for
//                the simulator's refusal), and, or, xor (int32), inc and dec (int32 read as uint32)
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <ATen/ops/zeros_like.h>
#include <cstdint>
#include <cuda.h>
#include <cuda/barrier>
#include <cuda/ptx>

#include "ptx_common.cuh"

namespace ptx = cuda::ptx;

constexpr int kRows = 32, kCols = 64, kTileBytes = kRows * kCols * 4;

// =============================================================================================
// cccl_tiles
template <bool kAsm>
__global__ void cccl_tiles_kernel(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap y_map,
                                  int row0, int col0, float* b_out) {
  __shared__ alignas(128) float a[kRows * kCols];
  __shared__ alignas(128) float b[kRows * kCols];
  __shared__ uint64_t bar;
  const bool leader = threadIdx.x == 0;
  if (leader) {
    if constexpr (kAsm) {
      mbar_init(&bar, blockDim.x);
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    } else {
      ptx::mbarrier_init(&bar, blockDim.x);
      ptx::fence_proxy_async(ptx::space_shared);
    }
  }
  __syncthreads();

  // phase 0: A; every thread arrives (the leader announcing the bytes) and waits for its own state
  uint64_t state;
  if constexpr (kAsm) {
    if (leader) {
      asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 %0, [%1], %2;"
                   : "=l"(state) : "r"(smem_addr(&bar)), "r"(kTileBytes) : "memory");
      asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                   :: "r"(smem_addr(a)), "l"(&x_map), "r"(col0), "r"(row0), "r"(smem_addr(&bar)) : "memory");
    } else {
      asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(state) : "r"(smem_addr(&bar)) : "memory");
    }
    uint32_t done = 0;
    while (!done)
      asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                   : "=r"(done) : "r"(smem_addr(&bar)), "l"(state) : "memory");
  } else {
    if (leader) {
      state = ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &bar, kTileBytes);
      const int32_t at[2] = {col0, row0};
      ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, a, &x_map, at, &bar);
    } else {
      state = ptx::mbarrier_arrive(&bar);
    }
    while (!ptx::mbarrier_try_wait(&bar, state)) {
    }
  }

  // phase 1: B; the leader announces the bytes apart from its arrival, the threads wait for parity 1
  if constexpr (kAsm) {
    if (leader) {
      asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(&bar)), "r"(kTileBytes) : "memory");
      asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                   :: "r"(smem_addr(b)), "l"(&x_map), "r"(col0), "r"(row0 + kRows), "r"(smem_addr(&bar)) : "memory");
    }
    mbar_arrive(&bar);
    mbar_wait(&bar, 1);
  } else {
    if (leader) {
      ptx::mbarrier_expect_tx(ptx::sem_relaxed, ptx::scope_cta, ptx::space_shared, &bar, kTileBytes);
      ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, b, &x_map, {col0, row0 + kRows}, &bar);
    }
    ptx::mbarrier_arrive(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &bar);
    while (!ptx::mbarrier_try_wait_parity(ptx::sem_acquire, ptx::scope_cta, &bar, 1u)) {
    }
  }

  for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) a[i] = 2.0f * a[i] + b[i];
  if constexpr (kAsm) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the stores, seen by the copies
  else ptx::fence_proxy_async(ptx::space_shared);
  __syncthreads();
  if (leader) {
    if constexpr (kAsm) {
      asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];"
                   :: "l"(&y_map), "r"(col0), "r"(row0), "r"(smem_addr(a)) : "memory");
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                   :: "l"(b_out), "r"(smem_addr(b)), "r"(kTileBytes) : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    } else {
      ptx::cp_async_bulk_tensor(ptx::space_global, ptx::space_shared, &y_map, {col0, row0}, a);
      ptx::cp_async_bulk(ptx::space_global, ptx::space_shared, b_out, b, kTileBytes);
      ptx::cp_async_bulk_commit_group();
      ptx::cp_async_bulk_wait_group(ptx::n32_t<0>());
    }
  }
}

// A 2-D tensor map of a float matrix with 32 x 64 boxes.
static CUtensorMap tile_map(const at::Tensor& t) {
  alignas(128) CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(t.size(1)), static_cast<cuuint64_t>(t.size(0))};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(t.size(1)) * 4};
  const cuuint32_t box[2] = {kCols, kRows}, estride[2] = {1, 1};
  CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, t.data_ptr(), dims, strides, box, estride,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                    CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TORCH_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with error ", std::to_string(static_cast<int>(r)));
  return map;
}

std::vector<at::Tensor> cccl_tiles(const at::Tensor& x, int64_t row0, int64_t col0, bool use_asm) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_DIM(x, 2);
  TORCH_CHECK(x.size(1) % 4 == 0 && aligned16(x), "x's rows must be 16-byte multiples and x 16-byte aligned");
  TORCH_CHECK(row0 >= 0 && col0 >= 0 && col0 % 4 == 0, "row0 and col0 must not be negative, col0 a multiple of 4");
  at::Tensor y = at::zeros_like(x);
  at::Tensor b = at::empty({kRows, kCols}, x.options());
  const CUtensorMap x_map = tile_map(x), y_map = tile_map(y);
  auto kernel = use_asm ? cccl_tiles_kernel<true> : cccl_tiles_kernel<false>;
  kernel<<<1, 128>>>(x_map, y_map, static_cast<int>(row0), static_cast<int>(col0), b.data_ptr<float>());
  CHECK_LAUNCH();
  return {y, b};
}

// =============================================================================================
// cccl_barrier: <cuda/ptx> and <cuda/barrier> on one mbarrier
__global__ void cccl_barrier_kernel(const __grid_constant__ CUtensorMap x_map, float* out) {
  __shared__ alignas(128) float a[kRows * kCols];
#pragma nv_diag_suppress static_var_with_dynamic_init
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  if (threadIdx.x == 0) {
    init(&bar, blockDim.x);
    ptx::fence_proxy_async(ptx::space_shared);
  }
  __syncthreads();
  cuda::barrier<cuda::thread_scope_block>::arrival_token token;
  if (threadIdx.x == 0) {
    ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, a, &x_map, {0, 0},
                              cuda::device::barrier_native_handle(bar));
    token = cuda::device::barrier_arrive_tx(bar, 1, sizeof(a));
  } else {
    token = bar.arrive();
  }
  bar.wait(std::move(token));
  for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) out[i] = a[i];
}

at::Tensor cccl_barrier(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_DIM(x, 2);
  TORCH_CHECK(x.size(1) % 4 == 0 && aligned16(x), "x's rows must be 16-byte multiples and x 16-byte aligned");
  at::Tensor out = at::empty({kRows, kCols}, x.options());
  cccl_barrier_kernel<<<1, 128>>>(tile_map(x), out.data_ptr<float>());
  CHECK_LAUNCH();
  return out;
}

// =============================================================================================
// cccl_elect
#if defined(CUDASIM) || defined(_CUDA_PTX_ELECT_SYNC_H_)
#define HAS_PTX_ELECT_SYNC 1
__global__ void cccl_elect_kernel(int* out) {
  const int t = threadIdx.x, lane = t % 32;
  out[t] = ptx::elect_sync(0xFFFFFFFFu);
  out[64 + t] = 0;
  if (lane >= 8 && lane < 16) out[64 + t] = ptx::elect_sync(0x0000FF00u);
}
#endif

at::Tensor cccl_elect(const at::Tensor& like) {
  CHECK_INPUT(like);
  at::Tensor out = at::empty({128}, like.options().dtype(at::kInt));
#ifdef HAS_PTX_ELECT_SYNC
  cccl_elect_kernel<<<1, 64>>>(out.data_ptr<int>());
  CHECK_LAUNCH();
#else
  TORCH_CHECK(false, "this libcu++ has no cuda::ptx::elect_sync");
#endif
  return out;
}

// =============================================================================================
// cccl_misuse
__global__ void cccl_misuse_kernel(const __grid_constant__ CUtensorMap x_map, int what) {
  __shared__ alignas(128) float a[kRows * kCols];
  __shared__ uint64_t bar;
  const int32_t at[2] = {0, 0};
  if (what != 4) ptx::mbarrier_init(&bar, 1);
  if (what == 1) {
    ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &bar, kTileBytes);
    ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, a, &x_map, at, &bar);
    while (!ptx::mbarrier_try_wait_parity(&bar, 0u)) {
    }
    while (!ptx::mbarrier_try_wait_parity(&bar, 1u)) {  // CCCL-WRONG-PARITY: phase 1 has no arrivals
    }
  } else if (what == 2) {
    ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, a, &x_map, at, &bar);  // CCCL-NO-EXPECT
    ptx::mbarrier_arrive(&bar);
    while (!ptx::mbarrier_try_wait_parity(&bar, 0u)) {
    }
  } else if (what == 3) {
    ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &bar, 2 * kTileBytes);
    ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, a, &x_map, at, &bar);
    while (!ptx::mbarrier_try_wait_parity(&bar, 0u)) {  // CCCL-TOO-MANY-BYTES
    }
  } else {
    ptx::mbarrier_arrive(&bar);  // CCCL-NO-INIT
  }
}

void cccl_misuse(const at::Tensor& x, int64_t what) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_DIM(x, 2);
  TORCH_CHECK(what >= 1 && what <= 4, "what is 1 to 4");
  const CUtensorMap x_map = tile_map(x);
  cccl_misuse_kernel<<<1, 1>>>(x_map, static_cast<int>(what));
  CHECK_LAUNCH();
}

// =============================================================================================
// cccl_reduce
template <class Op, class T>
__global__ void cccl_reduce_kernel(const T* x, T* y, uint32_t n) {
  __shared__ alignas(128) T stage[4096 / sizeof(T)];
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) stage[i] = x[blockIdx.x * (size_t)n + i];
  ptx::fence_proxy_async(ptx::space_shared);  // the generic proxy's stores, then the bulk reduction's reads
  __syncthreads();
  if (threadIdx.x == 0) {
    ptx::cp_reduce_async_bulk(ptx::space_global, ptx::space_shared, Op{}, y, stage, n * static_cast<uint32_t>(sizeof(T)));
    ptx::cp_async_bulk_commit_group();
    ptx::cp_async_bulk_wait_group(ptx::n32_t<0>());
  }
}

template <class Op, class T>
void launch_reduce(const at::Tensor& x, at::Tensor& y) {
  cccl_reduce_kernel<Op, T><<<static_cast<unsigned>(x.size(0)), 64>>>(
      static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), static_cast<uint32_t>(y.numel()));
  CHECK_LAUNCH();
}

// Calls launch(tag, T{}) with the cuda::ptx tag of the operation op names, on element type T: add, min and max if
// MinMax, and, or, xor if Bits, inc and dec if Counters (no other pair is instantiated). False for another name.
template <class T, bool MinMax, bool Bits, bool Counters, class Launch>
bool with_op(const std::string& op, Launch launch) {
  if (op == "add") return launch(ptx::op_add, T{}), true;
  if constexpr (MinMax) {
    if (op == "min") return launch(ptx::op_min, T{}), true;
    if (op == "max") return launch(ptx::op_max, T{}), true;
  }
  if constexpr (Bits) {
    if (op == "and") return launch(ptx::op_and_op, T{}), true;
    if (op == "or") return launch(ptx::op_or_op, T{}), true;
    if (op == "xor") return launch(ptx::op_xor_op, T{}), true;
  }
  if constexpr (Counters) {
    if (op == "inc") return launch(ptx::op_inc, T{}), true;
    if (op == "dec") return launch(ptx::op_dec, T{}), true;
  }
  return false;
}

at::Tensor cccl_reduce(const at::Tensor& x, const at::Tensor& y0, const std::string& op) {
  CHECK_INPUT(x);
  CHECK_INPUT(y0);
  reduction_row_bytes(x, y0, 4096);
  at::Tensor y = y0.clone();
  const at::ScalarType t = x.scalar_type();
  auto launch = [&](auto tag, auto elem) { launch_reduce<decltype(tag), decltype(elem)>(x, y); };
  bool ran = false;
  if (t == at::kInt && (op == "inc" || op == "dec")) ran = with_op<uint32_t, false, false, true>(op, launch);
  else if (t == at::kFloat) ran = with_op<float, false, false, false>(op, launch);
  else if (t == at::kDouble) ran = with_op<double, false, false, false>(op, launch);
  else if (t == at::kInt) ran = with_op<int32_t, true, true, false>(op, launch);
  else if (t == at::kLong) ran = with_op<int64_t, true, true, false>(op, launch);
  else if (t == at::kHalf) ran = with_op<__half, true, false, false>(op, launch);
  else if (t == at::kBFloat16) ran = with_op<__nv_bfloat16, true, false, false>(op, launch);
  TORCH_CHECK(ran, "no cp_reduce_async_bulk form here for ", op, " on ", t);
  return y;
}

// =============================================================================================
// cccl_tensor_reduce
constexpr int kRedRows = 16, kRedCols = 32;

// (each statement written out: the simulator reads an asm template made of string literals)
template <ptx::dot_op O>
__device__ __forceinline__ void tensor_reduce_asm(const CUtensorMap* map, const int32_t (&at)[2], const void* src) {
  if constexpr (O == ptx::dot_op::add)
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(map), "r"(at[0]), "r"(at[1]), "r"(smem_addr(src)) : "memory");
  else if constexpr (O == ptx::dot_op::min)
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.min.tile.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(map), "r"(at[0]), "r"(at[1]), "r"(smem_addr(src)) : "memory");
  else if constexpr (O == ptx::dot_op::max)
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.max.tile.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(map), "r"(at[0]), "r"(at[1]), "r"(smem_addr(src)) : "memory");
  else if constexpr (O == ptx::dot_op::inc)
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.inc.tile.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(map), "r"(at[0]), "r"(at[1]), "r"(smem_addr(src)) : "memory");
  else if constexpr (O == ptx::dot_op::dec)
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.dec.tile.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(map), "r"(at[0]), "r"(at[1]), "r"(smem_addr(src)) : "memory");
  else if constexpr (O == ptx::dot_op::and_op)
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.and.tile.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(map), "r"(at[0]), "r"(at[1]), "r"(smem_addr(src)) : "memory");
  else if constexpr (O == ptx::dot_op::or_op)
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.or.tile.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(map), "r"(at[0]), "r"(at[1]), "r"(smem_addr(src)) : "memory");
  else
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.xor.tile.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(map), "r"(at[0]), "r"(at[1]), "r"(smem_addr(src)) : "memory");
}

template <ptx::dot_op O, class T, bool kAsm>
__global__ void cccl_tensor_reduce_kernel(const __grid_constant__ CUtensorMap y_map, const T* x, int row0, int col0) {
  __shared__ alignas(128) T box[kRedRows * kRedCols];
  for (int i = threadIdx.x; i < kRedRows * kRedCols; i += blockDim.x)
    box[i] = x[blockIdx.x * static_cast<size_t>(kRedRows * kRedCols) + i];
  ptx::fence_proxy_async(ptx::space_shared);
  __syncthreads();
  if (threadIdx.x == 0) {
    const int32_t at[2] = {col0, row0};
    if constexpr (kAsm) tensor_reduce_asm<O>(&y_map, at, box);
    else ptx::cp_reduce_async_bulk_tensor(ptx::space_global, ptx::space_shared, ptx::op_t<O>{}, &y_map, at, box);
    ptx::cp_async_bulk_commit_group();
    ptx::cp_async_bulk_wait_group(ptx::n32_t<0>());
  }
}

template <ptx::dot_op O, class T>
void launch_tensor_reduce(const at::Tensor& x, at::Tensor& y, CUtensorMapDataType type, int row0, int col0, bool use_asm) {
  alignas(128) CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(y.size(1)), static_cast<cuuint64_t>(y.size(0))};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(y.size(1) * y.element_size())};
  const cuuint32_t box[2] = {kRedCols, kRedRows}, estride[2] = {1, 1};
  CUresult r = tensor_map_encoder()(&map, type, 2, y.data_ptr(), dims, strides, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TORCH_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with error ", std::to_string(static_cast<int>(r)));
  auto kernel = use_asm ? cccl_tensor_reduce_kernel<O, T, true> : cccl_tensor_reduce_kernel<O, T, false>;
  kernel<<<static_cast<unsigned>(x.size(0)), 64>>>(map, static_cast<const T*>(x.data_ptr()), row0, col0);
  CHECK_LAUNCH();
}

at::Tensor cccl_tensor_reduce(const at::Tensor& x, const at::Tensor& y0, int64_t row0, int64_t col0, const std::string& op,
                              bool use_asm) {
  CHECK_INPUT(x);
  CHECK_INPUT(y0);
  TORCH_CHECK(x.dim() == 3 && x.size(0) > 0 && x.size(1) == kRedRows && x.size(2) == kRedCols && y0.dim() == 2 &&
                  x.scalar_type() == y0.scalar_type(), "x must be [blocks, 16, 32] and y0 [rows, cols] of its dtype");
  TORCH_CHECK(y0.size(1) * y0.element_size() % 16 == 0, "a row of y0 must be a multiple of 16 bytes");
  TORCH_CHECK(row0 >= 0 && col0 >= 0 && row0 < y0.size(0) && col0 < y0.size(1), "the box must start inside y0");
  at::Tensor y = y0.clone();
  const int r0 = static_cast<int>(row0), c0 = static_cast<int>(col0);
  const at::ScalarType t = x.scalar_type();
  const bool counter = t == at::kInt && (op == "inc" || op == "dec");  // an int32 tensor read as uint32
  const CUtensorMapDataType type = counter ? CU_TENSOR_MAP_DATA_TYPE_UINT32 : t == at::kFloat ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : t == at::kHalf ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                   : t == at::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_INT32;
  auto launch = [&](auto tag, auto elem) {
    launch_tensor_reduce<decltype(tag)::value, decltype(elem)>(x, y, type, r0, c0, use_asm);
  };
  bool ran = false;
  if (counter) ran = with_op<uint32_t, false, false, true>(op, launch);
  // (min and max of float32 are no form the GPU has: the tests ask only the simulator, which refuses them)
  else if (t == at::kFloat) ran = with_op<float, true, false, false>(op, launch);
  else if (t == at::kHalf) ran = with_op<__half, true, false, false>(op, launch);
  else if (t == at::kBFloat16) ran = with_op<__nv_bfloat16, true, false, false>(op, launch);
  else if (t == at::kInt) ran = with_op<int32_t, true, true, false>(op, launch);
  TORCH_CHECK(ran, "no tensor reduction here for ", op, " on ", t);
  return y;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("cccl_tiles(Tensor x, int row0, int col0, bool use_asm) -> Tensor[]");
  m.def("cccl_barrier(Tensor x) -> Tensor");
  m.def("cccl_elect(Tensor like) -> Tensor");
  m.def("cccl_misuse(Tensor x, int what) -> ()");
  m.def("cccl_reduce(Tensor x, Tensor y0, str op) -> Tensor");
  m.def("cccl_tensor_reduce(Tensor x, Tensor y0, int row0, int col0, str op, bool use_asm) -> Tensor");
}
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("cccl_tiles", &cccl_tiles);
  m.impl("cccl_barrier", &cccl_barrier);
  m.impl("cccl_elect", &cccl_elect);
  m.impl("cccl_misuse", &cccl_misuse);
  m.impl("cccl_reduce", &cccl_reduce);
  m.impl("cccl_tensor_reduce", &cccl_tensor_reduce);
}
