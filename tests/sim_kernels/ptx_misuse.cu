// ptx_misuse.cu: inline PTX that nvcc compiles but that breaks the PTX ISA's rules; on a GPU each is
// undefined (a hang, a fault, garbage or, worse, the right answer by luck). The simulator reports each
// with the line (the MARKER comments) or, where PTX defines a value but the data has not arrived,
// gives NaN. Simulator tests only (tests/test_sim_ptx.py); the wgmma cases need sm_90a to build.
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
// needs compute capability: 9.0 for mbarrier transactions, TMA and wgmma
//
//   misuse(x, what) runs one kernel; `what`:
//    1 ldmatrix with a row address that is not 16-byte aligned      12 a wgmma descriptor outside shared memory
//    2 ldmatrix.shared given a generic address                      13 wgmma.mma_async without wgmma.fence
//    3 mma.sync after lanes 16-31 returned                          14 an accumulator written before the wait
//    4 cp.async with src-size above cp-size                         15 an accumulator read before the wait (NaN)
//    5 a cp.async destination read before the wait (NaN)            16 wgmma in a block of 64 threads
//    6 an mbarrier used without mbarrier.init                       17 a TMA destination not 128-byte aligned
//    7 a wait for a phase that never completes                      18 a TMA "tensor map" that is not one
//    8 expect_tx announcing more bytes than the copy brings         19 a wgmma never waited for
//    9 expect_tx announcing fewer bytes than the copy brings        20 __cvta_generic_to_shared of global memory
//   10 one arrival more than the phase's count                     21 wgmma.wait_group while a warp of the
//   11 an mbarrier overwritten by an ordinary store                    warpgroup never commits
//                                                                  22 accumulators gone out of scope before the wait
//   23 a TMA store's staging buffer overwritten before its cp.async.bulk.wait_group.read (ordinary stores)
//   24 a cp.async into the source of a cp.async.bulk store before its wait_group.read
//   25 a bulk store never waited for: the block ends while it may still read shared memory
//   26 the global bytes of a bulk store read before its cp.async.bulk.wait_group (NaN)
#include "helpers.cuh"

#include <ATen/ops/full.h>
#include <cstdint>
#include <cuda.h>

#include "ptx_common.cuh"

// ---------------------------------------------------------------------------------------------
// Ampere
__global__ void ampere_kernel(const float* x, float* out, int what) {
  __shared__ alignas(128) uint16_t tile[16 * 64];
  __shared__ alignas(16) float staged[128];
  const int lane = threadIdx.x;
  for (int i = lane; i < 16 * 64; i += 32) tile[i] = static_cast<uint16_t>(i);
  __syncwarp();
  uint32_t r0 = 0;
  if (what == 1) {
    const uint32_t addr = smem_addr(tile) + lane * 128 + 8;
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r0) : "r"(addr));  // LDMATRIX-MISALIGNED
  }
  if (what == 2) {
    const uint64_t generic = reinterpret_cast<uint64_t>(tile + lane * 64);
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r0) : "l"(generic));  // LDMATRIX-GENERIC
  }
  if (what == 3) {
    if (lane >= 16) return;  // HALF-WARP-EXIT
    float d0, d1, d2, d3;
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %7, %7, %7};"  // MMA-HALF-WARP
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3) : "r"(0u), "r"(0u), "r"(0u), "f"(0.0f));
    out[lane] = d0 + d1 + d2 + d3;
  }
  if (what == 4)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" :: "r"(smem_addr(&staged[lane * 2])), "l"(x), "r"(12));  // CP-ASYNC-SRC-SIZE
  if (what == 5) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(smem_addr(&staged[lane])), "l"(x + lane));
    asm volatile("cp.async.commit_group;");
    __syncthreads();  // no cp.async.wait_group before this read
    out[lane] = staged[lane];
    asm volatile("cp.async.wait_all;");
  }
  if (what == 20) out[lane] = static_cast<float>(__cvta_generic_to_shared(x));  // CVTA-GLOBAL
  if (what <= 2) out[lane] = static_cast<float>(r0);
}

// ---------------------------------------------------------------------------------------------
// mbarriers and TMA: one warp; lane 0 drives the barrier
__global__ void barrier_kernel(const __grid_constant__ CUtensorMap map, const float* x, float* out, int what) {
  extern __shared__ __align__(16) unsigned char raw[];
  unsigned char* buf = raw + (((smem_addr(raw) + 1023) & ~1023u) - smem_addr(raw));
  __shared__ alignas(8) uint64_t bar;
  const uint32_t b = smem_addr(&bar);
  if (what == 6) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(b));  // MBAR-NO-INIT
    return;
  }
  if (threadIdx.x == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(b), "r"(1));
  __syncthreads();
  if (what == 7) {
    mbar_wait(&bar, 0);  // nobody arrives: phase 0 never completes
    return;
  }
  if (what == 8 || what == 9) {
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(what == 8 ? 1024 : 256));  // EXPECT-TX
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 512, [%2];"  // BULK-COPY
                   :: "r"(smem_addr(buf)), "l"(x), "r"(b));
    }
    mbar_wait(&bar, 0);
    out[threadIdx.x] = reinterpret_cast<float*>(buf)[threadIdx.x];
    return;
  }
  if (what == 10) {  // the phase has its one arrival and waits for 1024 bytes: a second arrival is one too many
    if (threadIdx.x == 0) asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(1024));
    __syncwarp();
    if (threadIdx.x == 1) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(b));  // ARRIVE-TWICE
    return;
  }
  if (what == 11) {
    if (threadIdx.x == 0) bar = 0;  // an ordinary store over the live barrier
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(b));  // MBAR-OVERWRITTEN
    return;
  }
  if (what == 17 || what == 18) {
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(1024));
      const uint64_t m = what == 17 ? reinterpret_cast<uint64_t>(&map) : reinterpret_cast<uint64_t>(x);
      asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"  // TMA-MISUSE
                   :: "r"(smem_addr(buf) + (what == 17 ? 64 : 0)), "l"(m), "r"(0), "r"(0), "r"(b));
    }
    return;
  }
}

// ---------------------------------------------------------------------------------------------
// wgmma: one warpgroup, m64n8k16 on a shared tile
__device__ __forceinline__ void wgmma_n8(float (&d)[4], uint64_t adesc, uint64_t bdesc) {
#ifdef HAS_SM90A
  asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, 1, 1, 1, 0, 0;"  // WGMMA-ISSUE
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "l"(adesc), "l"(bdesc));
#else
  (void)d, (void)adesc, (void)bdesc;
  __trap();
#endif
}

__device__ __forceinline__ uint64_t desc_none(uint32_t addr) {  // K-major, no swizzle: LBO 128, SBO 256
  return ((addr >> 4) & 0x3FFF) | (uint64_t(128 >> 4) << 16) | (uint64_t(256 >> 4) << 32);
}

// Issues a wgmma into its own local accumulators and returns before any wait: the registers it left behind
// belong to no one by the time the caller waits (case 22). The padding puts them below the frames of the wait.
__device__ __noinline__ void wgmma_into_locals(uint64_t adesc, uint64_t bdesc, float* sink) {
  volatile float pad[512];
  pad[threadIdx.x % 512] = 0.f;
  float d[4] = {0.f, 0.f, 0.f, 0.f};
#ifdef HAS_SM90A
  asm volatile("wgmma.fence.sync.aligned;");
  wgmma_n8(d, adesc, bdesc);
  asm volatile("wgmma.commit_group.sync.aligned;");
#endif
  *sink = pad[(threadIdx.x + 1) % 512];
}

__global__ void wgmma_kernel(float* out, int what) {
  __shared__ alignas(1024) uint16_t tile[64 * 16 + 8 * 16];
  for (int i = threadIdx.x; i < 64 * 16 + 8 * 16; i += blockDim.x) tile[i] = 0x3F80;  // bf16 1.0
  asm volatile("fence.proxy.async.shared::cta;");
  __syncthreads();
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  const uint32_t a = smem_addr(tile), b = a + 64 * 16 * 2;
  const uint64_t bdesc = what == 12 ? desc_none(a + 200000) : desc_none(b);
  if (what == 21 && threadIdx.x >= 32) return;  // warps 1-3 of the warpgroup leave
#ifdef HAS_SM90A
  if (what == 22) {
    wgmma_into_locals(desc_none(a), bdesc, &out[threadIdx.x]);
    asm volatile("wgmma.wait_group.sync.aligned 0;");  // SCOPE-WAIT
    return;
  }
  if (what != 13) asm volatile("wgmma.fence.sync.aligned;");
  wgmma_n8(d, desc_none(a), bdesc);
  asm volatile("wgmma.commit_group.sync.aligned;");
  if (what == 14) d[0] = 1.0f;  // ACC-WRITTEN
  if (what == 15) out[threadIdx.x] = d[1];  // read too early: the wgmma's result is not there yet
  if (what != 19) asm volatile("wgmma.wait_group.sync.aligned 0;");  // WGMMA-WAIT
#endif
  if (what != 15) out[threadIdx.x] = d[0] + d[1] + d[2] + d[3];
}

// ---------------------------------------------------------------------------------------------
// Bulk stores from shared to global memory: one warp, lane 0 stores two staging buffers of 2 x 32 floats
// (`map`: `out` as 4 rows of 32 floats, a box of 2 rows).
__global__ void store_kernel(const __grid_constant__ CUtensorMap map, const float* x, float* out, int what) {
  __shared__ alignas(128) float stage[2][64];
  const int lane = threadIdx.x;
  const uint64_t m = reinterpret_cast<uint64_t>(&map);
  for (int i = lane; i < 128; i += 32) stage[i / 64][i % 64] = static_cast<float>(i);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the stores above, seen by the TMA unit
  __syncwarp();
  if (what == 23) {
    if (lane == 0) {
      for (int k = 0; k < 2; ++k) {
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"  // TMA-STORE
                     :: "l"(m), "r"(0), "r"(2 * k), "r"(smem_addr(stage[k])) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      }
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");  // the first store has read stage[0] ...
    }
    __syncwarp();
    stage[0][lane] = -1.0f;  // ... so this is fine
    stage[1][lane] = -1.0f;  // STAGE-OVERWRITTEN: the second store may still be reading stage[1]
    __syncwarp();
    if (lane == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // BULK-WAIT-READ
  }
  if (what == 24) {
    if (lane == 0) {
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 256;" :: "l"(out), "r"(smem_addr(stage[0]))
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
    __syncwarp();
    // the next tile into the buffer, before the store's wait_group.read
    const uint32_t into = smem_addr(&stage[0][lane]);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(into), "l"(x + lane));  // CP-ASYNC-OVER-STORE
    asm volatile("cp.async.wait_all;" ::: "memory");
  }
  if (what == 25 && lane == 0) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 256;"  // STORE-NEVER-WAITED
                 :: "l"(out), "r"(smem_addr(stage[0])) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  }
  if (what == 26) {
    if (lane == 0) {
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 256;" :: "l"(out + 64),
                   "r"(smem_addr(stage[0])) : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // the reads are done, the writes may not be
    }
    __syncwarp();
    out[lane] = out[64 + lane];  // read too early: wait_group (without .read) makes the stored bytes visible
    __syncwarp();
    if (lane == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

// ---------------------------------------------------------------------------------------------
// A tensor map of `rows` rows of 32 floats at `base`, boxes of 32 x `box_rows`: the barrier cases read x through
// it (128-byte swizzle), the store cases write out (no swizzle).
static CUtensorMap rows_of_32_floats(void* base, cuuint64_t rows, cuuint32_t box_rows, CUtensorMapSwizzle swizzle) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {32, rows}, strides[1] = {128};
  const cuuint32_t box[2] = {32, box_rows}, estride[2] = {1, 1};
  CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, base, dims, strides, box, estride,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TORCH_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed");
  return map;
}

at::Tensor misuse(const at::Tensor& x, int64_t what) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(x.numel() >= 1024, "x must hold at least 1024 floats");
  at::Tensor out = at::full({128}, -1.0f, x.options());
  const int w = static_cast<int>(what);
  if (w <= 5 || w == 20) {
    ampere_kernel<<<1, 32>>>(x.data_ptr<float>(), out.data_ptr<float>(), w);
  } else if (w <= 11 || w == 17 || w == 18) {
    const CUtensorMap map = rows_of_32_floats(x.data_ptr(), 32, 8, CU_TENSOR_MAP_SWIZZLE_128B);
    barrier_kernel<<<1, 32, 4096>>>(map, x.data_ptr<float>(), out.data_ptr<float>(), w);
  } else if (w >= 23) {
    const CUtensorMap map = rows_of_32_floats(out.data_ptr(), 4, 2, CU_TENSOR_MAP_SWIZZLE_NONE);
    store_kernel<<<1, 32>>>(map, x.data_ptr<float>(), out.data_ptr<float>(), w);
  } else {
    wgmma_kernel<<<1, w == 16 ? 64 : 128>>>(out.data_ptr<float>(), w);
  }
  CHECK_LAUNCH();
  return out;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("misuse(Tensor x, int what) -> Tensor"); }

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("misuse", &misuse); }
