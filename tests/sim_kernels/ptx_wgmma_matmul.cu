// ptx_wgmma_matmul.cu: a Hopper bf16 matmul written with the PTX of the kernels that reach cuBLAS
// speed: TMA loads (cp.async.bulk.tensor) into 128-byte-swizzled tiles, a producer warpgroup that
// hands stages to two consumer warpgroups through mbarriers (transaction counts, phase parity), and
// wgmma.mma_async reading both operands from shared memory through matrix descriptors; setmaxnreg
// moves registers from the producer to the consumers. tests/test_sim_ptx.py runs it on sim and, on an
// H100 built for sm_90a (TORCH_CUDA_ARCH_LIST=9.0a), on cuda, against PyTorch.
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
// needs compute capability: 9.0 for TMA, wgmma and mbarrier transactions
//
//   op             what it computes
//   wgmma_matmul   C = A B in fp32 for A [M, K] and B in bf16, B given as [K, N] (b_kmajor false: its
//                  tiles are N-major for wgmma) or as B^T [N, K] (true: K-major). K a multiple of 8 (and
//                  N too when B is [K, N]): TMA rows are 16-byte multiples; ragged edges are TMA's zero fill.
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <cstdint>
#include <cuda.h>
#include <cuda_bf16.h>

#include "ptx_common.cuh"

// ---------------------------------------------------------------------------------------------
// Tiles. A block computes 128 x 128 of C; consumer warpgroup c (1 or 2) owns rows 64 (c - 1) .. +63,
// as one m64n128 accumulator (64 floats per thread). K advances 64 (128 bytes of bf16: one swizzle
// row) per stage, through STAGES stages of A (128 x 64) and B (64 x 128), 32 KB each.
constexpr int BM = 128, BN = 128, BK = 64, STAGES = 4, THREADS = 384;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BK * BN * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr size_t SMEM_BYTES = STAGES * STAGE_BYTES + 1024;  // + room to align to 1024

// A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address, leading and
// stride byte offsets in 16-byte units, swizzle mode 1 (128 bytes) in bits 62-63.
__device__ __forceinline__ uint64_t desc128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return ((addr >> 4) & 0x3FFFull) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) | (uint64_t((sbo >> 4) & 0x3FFF) << 32) |
         (1ull << 62);
}

// One TMA load of a box at (x, y) (x along the contiguous dimension) that completes on `bar`.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               :: "r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar))
               : "memory");
}

template <int TRANS_B>
__device__ __forceinline__ void wgmma_m64n128(float (&d)[64], uint64_t adesc, uint64_t bdesc) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
               "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
               "%64, %65, 1, 1, 1, 0, %66;"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                 "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                 "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                 "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                 "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(adesc), "l"(bdesc), "n"(TRANS_B));
}

// =============================================================================================
// wgmma_matmul_kernel: warpgroup 0 produces (one thread issues the TMA loads), warpgroups 1 and 2
// consume. Per stage 32 KB arrive by TMA; each consumer reads its 64 rows of A and all of B through
// descriptors. Bound by the tensor cores once the ring hides TMA's latency.
template <bool B_KMAJOR>
__global__ void __launch_bounds__(THREADS) wgmma_matmul_kernel(const __grid_constant__ CUtensorMap map_a,
                                                               const __grid_constant__ CUtensorMap map_b, float* c,
                                                               int M, int N, int K) {
  extern __shared__ __align__(16) unsigned char raw[];
  // the 128-byte swizzle repeats every 1024 bytes: TMA writes and wgmma reads each tile from there
  unsigned char* tiles = align1024(raw);
  __shared__ alignas(8) uint64_t full[STAGES];   // stage s holds tile k: its bytes have landed
  __shared__ alignas(8) uint64_t empty[STAGES];  // both consumers are done with stage s
  const int wg = threadIdx.x / 128, m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int k_tiles = (K + BK - 1) / BK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);   // the producer's arrive.expect_tx, then the bytes
      mbar_init(&empty[s], 2);  // one arrival per consumer warpgroup
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

#ifdef HAS_SM90A
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");  // the producer needs few registers
    if (threadIdx.x == 0) {
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % STAGES, round = kt / STAGES;
        if (round > 0) mbar_wait(&empty[s], (round - 1) % 2);  // the consumers released round - 1
        unsigned char* a = tiles + s * STAGE_BYTES;
        unsigned char* b = a + A_BYTES;
        mbar_expect_bytes(&full[s], STAGE_BYTES);
        tma_load(a, &map_a, kt * BK, m0, &full[s]);
        if (B_KMAJOR) {
          tma_load(b, &map_b, kt * BK, n0, &full[s]);
        } else {  // [K, N]: two boxes of 64 columns, each 64 rows of 128 bytes
          tma_load(b, &map_b, n0, kt * BK, &full[s]);
          tma_load(b + B_BYTES / 2, &map_b, n0 + 64, kt * BK, &full[s]);
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");  // and the consumers many
    float d[64];
    for (int i = 0; i < 64; ++i) d[i] = 0.0f;
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = kt % STAGES;
      mbar_wait(&full[s], (kt / STAGES) % 2);  // tile kt has landed
      const uint32_t a = smem_addr(tiles + s * STAGE_BYTES) + (wg - 1) * 64 * 128, b = smem_addr(tiles + s * STAGE_BYTES + A_BYTES);
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
      for (int k = 0; k < BK / 16; ++k) {
        // A, K-major: rows of 128 bytes, 8-row groups 1024 bytes apart; 16 more k = 32 bytes on
        const uint64_t da = desc128(a + k * 32, 16, 1024);
        if (B_KMAJOR) {
          wgmma_m64n128<0>(d, da, desc128(b + k * 32, 16, 1024));
        } else {
          // B, N-major: k rows of 128 bytes (64 n); the second 64 columns 8 KB on (LBO); 8 k rows
          // 1024 bytes apart (SBO); 16 more k = 16 rows on
          wgmma_m64n128<1>(d, da, desc128(b + k * 16 * 128, B_BYTES / 2, 1024));
        }
      }
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");  // the stage is read: release it
      if (threadIdx.x % 128 == 0) mbar_arrive(&empty[s]);
    }
    // register r of lane l of warp w: row 16 w + l / 4 + 8 ((r / 2) % 2), column 8 (r / 4) + 2 (l % 4) + r % 2
    const int w = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    for (int r = 0; r < 64; ++r) {
      const int row = m0 + (wg - 1) * 64 + 16 * w + lane / 4 + 8 * ((r / 2) % 2);
      const int col = n0 + 8 * (r / 4) + 2 * (lane % 4) + r % 2;
      if (row < M && col < N) c[(int64_t)row * N + col] = d[r];
    }
  }
#else
  (void)M, (void)N, (void)K, (void)c, (void)m0, (void)n0, (void)k_tiles, (void)wg;
  __trap();  // built without sm_90a, where wgmma and setmaxnreg do not exist
#endif
}

// ---------------------------------------------------------------------------------------------
// Launcher.
// A 2-D bf16 tensor of `cols` contiguous elements per row, read in boxes of box_cols x box_rows.
CUtensorMap tensor_map_2d(const at::Tensor& t, int64_t rows, int64_t cols, uint32_t box_cols, uint32_t box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {box_cols, box_rows}, estride[2] = {1, 1};
  CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, t.data_ptr(), dims, strides,
                                                 box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                 CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TORCH_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with error ", std::to_string(static_cast<int>(r)));
  return map;
}

at::Tensor wgmma_matmul(const at::Tensor& a, const at::Tensor& b, bool b_kmajor) {
  CHECK_INPUT(a);
  CHECK_INPUT(b);
  CHECK_DTYPE(a, at::kBFloat16);
  CHECK_DTYPE(b, at::kBFloat16);
  CHECK_DIM(a, 2);
  CHECK_DIM(b, 2);
  const int64_t M = a.size(0), K = a.size(1), N = b_kmajor ? b.size(0) : b.size(1);
  TORCH_CHECK((b_kmajor ? b.size(1) : b.size(0)) == K, "a is [M, K] and b must be ", b_kmajor ? "[N, K]" : "[K, N]",
              ", got a ", shape_str(a.sizes()), " and b ", shape_str(b.sizes()));
  TORCH_CHECK(K % 8 == 0 && (b_kmajor || N % 8 == 0), "K (and N for b [K, N]) must be multiples of 8: TMA strides "
              "are multiples of 16 bytes; got K = ", std::to_string(K), ", N = ", std::to_string(N));
  at::Tensor c = at::empty({M, N}, a.options().dtype(at::kFloat));
  if (M == 0 || N == 0) return c;
  if (K == 0) return c.zero_();
  const CUtensorMap map_a = tensor_map_2d(a, M, K, BK, BM);
  const CUtensorMap map_b = b_kmajor ? tensor_map_2d(b, N, K, BK, BN) : tensor_map_2d(b, K, N, 64, BK);
  const dim3 grid(ceil_div(N, BN), ceil_div(M, BM));
  auto stream = c10::cuda::getCurrentCUDAStream();
  if (b_kmajor) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(wgmma_matmul_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_BYTES));
    wgmma_matmul_kernel<true><<<grid, THREADS, SMEM_BYTES, stream>>>(map_a, map_b, c.data_ptr<float>(), M, N, K);
  } else {
    C10_CUDA_CHECK(cudaFuncSetAttribute(wgmma_matmul_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_BYTES));
    wgmma_matmul_kernel<false><<<grid, THREADS, SMEM_BYTES, stream>>>(map_a, map_b, c.data_ptr<float>(), M, N, K);
  }
  CHECK_LAUNCH();
  return c;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("wgmma_matmul(Tensor a, Tensor b, bool b_kmajor) -> Tensor"); }

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("wgmma_matmul", &wgmma_matmul); }
