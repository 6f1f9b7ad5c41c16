// ws_matmul.cu: the lesson 13 exercise. A warp-specialised Hopper matmul: the hand-off between a TMA producer and
// two wgmma consumer warpgroups through full and empty mbarriers, and the descriptors wgmma reads its tiles by.
//
// Spec (in PyTorch), for bfloat16 a: [M, K] and b: [K, N], contiguous, K and N multiples of 8 (TMA reads rows of
// 16-byte multiples):
//     c = (a.float() @ b.float()).bfloat16()        # fp32 accumulation, rounded once
// Check it with
//     check_exercise("13", "ws_matmul", path="ws_matmul.cu")      or      make check LESSON=13
// It runs on the simulator anywhere, and on a GPU of compute capability 9.0 (an H100) built for sm_90a.
#include "helpers.cuh"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <cstring>

// wgmma and setmaxnreg exist only in the target sm_90a; load() builds a file that uses this macro for sm_90a on an
// H100. The simulator runs every branch.
#if defined(CUDASIM) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HAS_SM90A 1
#endif
__device__ int ws_kernel_built =
#ifdef HAS_SM90A
    1;
#else
    0;
#endif

// A block computes 128 x 128 of C: consumer warpgroup wg (1 or 2) owns rows 64 (wg - 1) .. + 63 as one m64n128
// accumulator (64 floats a thread). K advances 64 values (128 bytes: one row of the 128-byte swizzle) a stage, through
// a ring of 2 stages of A (128 rows x 64 k) and B (64 k x 128 columns, as two boxes of 64 columns), 32 KB each.
constexpr int BM = 128, BN = 128, BK = 64, STAGES = 2, THREADS = 384;
constexpr int A_BYTES = BM * BK * 2, B_BOX_BYTES = BK * 64 * 2, STAGE_BYTES = A_BYTES + 2 * B_BOX_BYTES;
constexpr int SHARED = STAGES * STAGE_BYTES + 1024;  // + room to align the ring to 1024 bytes

// ---------------------------------------------------------------------------------------------
// The PTX, one wrapper an instruction (lesson 13's reference file explains each).

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

#ifdef HAS_SM90A
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}
// One arrival that also announces `bytes` of copies completing on the barrier in this phase.
__device__ __forceinline__ void mbar_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// One arrival.
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// Wait until the phase of this parity (0 or 1) has completed: use u of a barrier is the phase of parity u % 2.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(smem_addr(bar)), "r"(parity) : "memory");
}
// A TMA load of the box at (x, y) (x along the contiguous dimension), completing on `bar` with its bytes.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Wait until at most N of the warpgroup's committed wgmma groups are in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// d (64 x 128, fp32) += A (64 x 16, K-major) B (16 x 128, N-major: trans-b 1), both read from shared memory through
// descriptors. Register r of lane l of warp w holds row 16 w + l / 4 + 8 ((r / 2) % 2), column 8 (r / 4) + 2 (l % 4)
// + r % 2.
__device__ __forceinline__ void wgmma_m64n128(float (&d)[64], uint64_t adesc, uint64_t bdesc) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
               "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
               "%64, %65, 1, 1, 1, 0, 1;"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
                 "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
                 "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
                 "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
                 "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
                 "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
                 "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
                 "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(adesc), "l"(bdesc));
}
#endif

// The first 1024-byte boundary in a dynamic shared buffer: the 128-byte swizzle repeats every 1024 bytes from shared
// address 0, so TMA (which writes a tile swizzled) and wgmma (which reads it) agree on a tile that starts there.
__device__ __forceinline__ unsigned char* align1024(unsigned char* raw) {
  return raw + (((smem_addr(raw) + 1023) & ~1023u) - smem_addr(raw));
}

// ---------------------------------------------------------------------------------------------
// The descriptors: how wgmma finds a 64-row slice of A (its 64 x 16 operand) or a 16-row slice of B (16 x 128) in a
// tile that TMA wrote 128-byte swizzled. PTX ISA, "Matrix Descriptor Format": bits 0-13 the start address, 16-29 the
// leading byte offset (LBO), 32-45 the stride byte offset (SBO), all three in 16-byte units (>> 4, 14 bits each);
// bits 62-63 the swizzle mode (1: 128 bytes, 2: 64, 3: 32, 0: none), which must be the one TMA wrote the tile with.
// With the 128-byte swizzle a core block is 8 rows of 128 bytes (1024 bytes: one period of the swizzle); SBO is the
// distance from one 8-row block to the next.
constexpr uint32_t SWIZZLE_128B = 1;

__device__ __forceinline__ uint64_t desc(uint32_t addr, uint32_t lbo, uint32_t sbo, uint32_t swizzle) {
  // FILL ME IN (roughly 2 lines): the four fields at their bits, each cut to its width (& 0x3FFF for the 14-bit
  //   ones); shift in 64 bits (uint64_t), or the high fields fall off a 32-bit int.
  return 0;
}
// A, K-major: row m of the tile holds its 64 k (128 bytes); 8-row blocks 1024 bytes apart (SBO). The k16 slice kk
// starts 16 values (32 bytes) along the row: the swizzle is applied to the address, so the start simply moves on.
// A K-major swizzled operand whose K fits in one row has no leading offset to speak of (16 by convention).
__device__ __forceinline__ uint64_t a_desc(uint32_t a, int kk) {
  return 0;  // FILL ME IN (1 line): desc(...) of the slice kk of the A tile at shared address a
}
// B, N-major (trans-b): row k of a box holds 64 columns (128 bytes); 8 k-rows 1024 bytes apart (SBO); the next 64
// columns are the next box, B_BOX_BYTES on (LBO). The k16 slice kk starts 16 rows (16 x 128 bytes) down.
__device__ __forceinline__ uint64_t b_desc(uint32_t b, int kk) {
  return 0;  // FILL ME IN (1 line): desc(...) of the slice kk of the B tile at shared address b
}

// ---------------------------------------------------------------------------------------------
// ws_matmul_kernel: warpgroup 0 produces, warpgroups 1 and 2 consume; no block-wide barrier after the set-up.
//   full[s]   the stage's tiles have landed: one arrival (the producer's expect_tx) plus STAGE_BYTES of TMA
//   empty[s]  every consumer warp's wgmma have read the stage: 8 arrivals (lane 0 of each consumer warp)
// Step s (one BK slice of K) uses stage s % STAGES; it is that stage's use u = s / STAGES, and the phase of a barrier
// that completes for use u has parity u % 2.
__global__ void __launch_bounds__(THREADS, 1)
    ws_matmul_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                     __nv_bfloat16* __restrict__ C, int M, int N, int K) {
#ifdef HAS_SM90A
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* ring = align1024(smem);
  __shared__ alignas(8) uint64_t full[STAGES];
  __shared__ alignas(8) uint64_t empty[STAGES];
  const int wg = threadIdx.x / 128, m0 = blockIdx.y * BM, n0 = blockIdx.x * BN, steps = (K + BK - 1) / BK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();  // the barriers are initialised before anyone uses them

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");  // the producer needs few registers, the consumers many
    if (threadIdx.x == 0) {
      for (int s = 0; s < steps; ++s) {
        const int stage = s % STAGES, use = s / STAGES;
        unsigned char* a = ring + stage * STAGE_BYTES;
        // FILL ME IN (roughly 2 lines): before the loads below may write the stage, its previous use (if it had
        //   one) must be over: every consumer warp has released it on empty[stage]. Which phase of that barrier
        //   completed then? And full[stage] must learn how many bytes this use brings before they land.
        tma_load(a, &map_a, s * BK, m0, &full[stage]);
        tma_load(a + A_BYTES, &map_b, n0, s * BK, &full[stage]);
        tma_load(a + A_BYTES + B_BOX_BYTES, &map_b, n0 + 64, s * BK, &full[stage]);
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int c = wg - 1, lane = threadIdx.x % 32;
    float d[64];
#pragma unroll
    for (int r = 0; r < 64; ++r) d[r] = 0.f;
    for (int s = 0; s < steps; ++s) {
      const int stage = s % STAGES;
      const uint32_t a = smem_addr(ring + stage * STAGE_BYTES);
      // FILL ME IN (1 line): wait until step s's tiles have landed in the stage: which phase of full[stage]?
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) wgmma_m64n128(d, a_desc(a + c * 64 * 128, kk), b_desc(a + A_BYTES, kk));
      wgmma_commit();
      wgmma_wait<1>();  // at most one group in flight: step s's; step s - 1's (this warp's part) has completed
      // FILL ME IN (1 line): hand a stage back to the producer: one arrival per consumer warp (lane 0), on the
      //   empty barrier of the one stage that no wgmma of this warp reads any more.
    }
    wgmma_wait<0>();  // every wgmma is done before the accumulators are read

    // The epilogue: pairs of adjacent columns rounded to bf16, 4 bytes each (N is a multiple of 8: a pair is all in
    // C or all out).
    const int w = threadIdx.x % 128 / 32;
#pragma unroll
    for (int r = 0; r < 64; r += 2) {
      const int m = m0 + 64 * c + 16 * w + lane / 4 + 8 * (r / 2 % 2), n = n0 + 8 * (r / 4) + 2 * (lane % 4);
      if (m < M && n < N) {
        const __nv_bfloat162 v = __floats2bfloat162_rn(d[r], d[r + 1]);
        memcpy(C + (int64_t)m * N + n, &v, 4);
      }
    }
  }
#else
  (void)M, (void)N, (void)K, (void)C;
  __trap();  // built without sm_90a: the launcher refuses to start it
#endif
}

// ---------------------------------------------------------------------------------------------
// Launcher.

// cuTensorMapEncodeTiled through the runtime's driver entry point, so that the extension needs no libcuda link.
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// A tensor map of a row-major bf16 matrix read in boxes of box_cols x box_rows, 128-byte swizzled; TMA fills the
// parts of a box outside the matrix with zeros (and counts them in the barrier's bytes all the same).
static CUtensorMap tensor_map(const at::Tensor& t, uint32_t box_cols, uint32_t box_rows) {
  static EncodeTiled encode = nullptr;
  if (!encode) {
    void* got = nullptr;
    cudaDriverEntryPointQueryResult found;
    C10_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &got, 12000, cudaEnableDefault, &found));
    TORCH_CHECK(found == cudaDriverEntryPointSuccess && got,
                "cuTensorMapEncodeTiled is not available from this driver");
    encode = reinterpret_cast<EncodeTiled>(got);
  }
  CUtensorMap map;
  const cuuint64_t dims[2] = {(cuuint64_t)t.size(1), (cuuint64_t)t.size(0)};
  const cuuint64_t strides[1] = {(cuuint64_t)t.size(1) * 2};
  const cuuint32_t box[2] = {box_cols, box_rows}, unit[2] = {1, 1};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, t.data_ptr(), dims, strides, box, unit,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TORCH_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled refused a tensor of shape ", shape_str(t.sizes()),
              " (error ", std::to_string((int)r), ")");
  return map;
}

// a: [M, K], b: [K, N], c: [M, N], bfloat16, contiguous; K and N multiples of 8.
void ws_matmul(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  const at::Tensor* tensors[3] = {&a, &b, &c};
  for (const at::Tensor* t : tensors) {
    const char* name = t == &a ? "a" : t == &b ? "b" : "c";
    TORCH_CHECK(KERNELS_ON_DEVICE(*t), name, " must be " KERNELS_DEVICE_WORD ", got a tensor on ", t->device());
    TORCH_CHECK(t->scalar_type() == at::kBFloat16, name, " must be bfloat16, got ", t->scalar_type());
    TORCH_CHECK(t->dim() == 2, name, " must have 2 dimensions, got shape ", shape_str(t->sizes()));
    TORCH_CHECK(t->is_contiguous(), name, " must be contiguous (row-major), got strides ", shape_str(t->strides()),
                " for shape ", shape_str(t->sizes()), " (call .contiguous() first)");
  }
  CHECK_MATMUL_SHAPES(a, b, c);
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  if (c.numel() == 0) return;
  check_capability("ws_matmul", 900, "TMA, mbarrier transactions and wgmma");
#ifndef CUDASIM
  int built = 0;
  C10_CUDA_CHECK(cudaMemcpyFromSymbol(&built, ws_kernel_built, sizeof(int)));
  TORCH_CHECK(built == 1, "`ws_matmul` needs a build for sm_90a (wgmma and setmaxnreg exist in that target only), "
              "got one without it: load() builds for sm_90a on an H100 unless TORCH_CUDA_ARCH_LIST names the targets, "
              "so add 9.0a to it");
#endif
  TORCH_CHECK(K % 8 == 0 && N % 8 == 0 && aligned16(a) && aligned16(b) && aligned16(c), "`ws_matmul` reads by TMA, "
              "whose rows must be 16-byte multiples: K and N must be multiples of 8 and the tensors 16-byte aligned, "
              "got K = ", std::to_string(K), ", N = ", std::to_string(N));
  TORCH_CHECK(M < (int64_t(1) << 31) && N < (int64_t(1) << 31) && ceil_div(M, (int64_t)BM) <= 65535,
              "ws_matmul takes at most ", std::to_string(65535 * BM), " rows and 2^31 - 1 columns, got [M, N] = ",
              shape_str({M, N}));
  if (K == 0) {  // a tensor map cannot describe an empty matrix: C is all zeros
    c.zero_();
    return;
  }
  const CUtensorMap map_a = tensor_map(a, BK, BM), map_b = tensor_map(b, 64, BK);
  C10_CUDA_CHECK(cudaFuncSetAttribute(ws_matmul_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SHARED));
  ws_matmul_kernel<<<dim3((unsigned)ceil_div(N, (int64_t)BN), (unsigned)ceil_div(M, (int64_t)BM)), THREADS, SHARED,
                     c10::cuda::getCurrentCUDAStream()>>>(map_a, map_b, mut<__nv_bfloat16>(c), (int)M, (int)N, (int)K);
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("ws_matmul(Tensor a, Tensor b, Tensor(a!) c) -> ()"); }

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("ws_matmul", &ws_matmul); }
