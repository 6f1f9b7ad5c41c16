// 13_hopper_matmul.cu: C = A @ B in bf16 (or fp16) with fp32 accumulation on Hopper's tensor cores, from the
// Ampere-style kernel that lesson 09 ended near to the structure of the kernels that reach cuBLAS.
// Load with `ext = load("13")` (on an H100 it builds for sm_90a, the only target with wgmma and setmaxnreg, as it
// does for any file with code under __CUDA_ARCH_FEAT_SM90_ALL); every variant is an out-variant:
// ext.matmul13_4(a, b, c).
//
//   matmul13_1  mma.sync m16n8k16 fed by ldmatrix from XOR-swizzled shared tiles, the tiles filled by cp.async
//               through a 4-stage ring: what lesson 09's WMMA kernel becomes with the PTX spelled out (8.0 and up)
//   matmul13_2  TMA loads (cp.async.bulk.tensor) into 128-byte-swizzled tiles, completing on an mbarrier that counts
//               their bytes (expect_tx); one warpgroup issues wgmma.mma_async reading both operands from shared
//               memory through descriptors; a 4-stage ring refilled by one of its own threads after a barrier
//   matmul13_3  warp specialisation: a producer warpgroup (one thread issues TMA) and two consumer warpgroups
//               (wgmma), handing stages back and forth through full and empty mbarriers with phase parity;
//               setmaxnreg moves registers from the producer to the consumers; a 128x256 tile per block
//   matmul13_4  persistent: one block per SM walks the tiles of C in a grouped (L2-friendly) order, its ring
//               running on across tiles, so the next tile's loads overlap this tile's epilogue
//   matmul13_5  matmul13_4 with the epilogue through shared memory: each consumer rounds its accumulators to
//               bf16 into 128-byte-swizzled 64x64 tiles and one thread writes them to C by TMA stores; A and B
//               may each be row- or column-major (the transpose of a contiguous tensor, such as w.t())
//   matmul13_6  matmul13_5 in thread-block clusters of 2: the two blocks of a cluster take vertically adjacent
//               tiles of C, which read the same B, and each loads half of B's stage by TMA multicast into both
//   matmul13    functional form: matmul13_5 where it runs (compute capability 9.0, an sm_90a build, rows of
//               16-byte multiples), else matmul13_1
//   linear13    act(x @ w.T + bias), nn.Linear's layout, with the bias and a ReLU or GELU applied in matmul13_5's
//               epilogue (H100 only)
//   scaled_mm13 torch._scaled_mm's fp8 product: e4m3 A (row-major) and B (column-major), per-tensor scales, bf16 out;
//               matmul13_5's kernel with e4m3 wgmma (H100 only)
//
// Conventions: A is [M, K], B is [K, N], C is [M, N], row-major and contiguous (matmul13_5 also takes A and B
// column-major), one dtype (bfloat16 or float16);
// the products accumulate in fp32 and C is rounded once, as torch.matmul does. M, N and K may be any size for
// matmul13_1 (tiles past an edge read zeros: cp.async's zero fill, or value by value where rows are not 16-byte
// aligned). The TMA variants need what TMA needs: K and N multiples of 8 (each row a multiple of 16 bytes) and
// 16-byte aligned tensors; ragged edges are TMA's: boxes past an edge of A or B arrive zero-filled, and stores past
// an edge of C are dropped (matmul13_5) or skipped by a guard. FLOPs are 2 M N K.
//
// matmul13_6 takes row-major A and B only (its multicast is written for B's four boxes).

// ---------------------------------------------------------------------------------------------
// Includes.
#include "helpers.cuh"
#include "hopper.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/zeros.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

// The Hopper helpers this file uses (kernels/include/hopper.cuh; the PTX wrappers exist where HAS_SM90A does).
using hopper::smem_addr; using hopper::align1024; using hopper::check_hopper; using hopper::hopper_kernels_in_build;
using hopper::tensor_map;
#ifdef HAS_SM90A
using hopper::mbar_init; using hopper::mbar_expect_bytes; using hopper::mbar_arrive; using hopper::mbar_wait;
using hopper::tma_load; using hopper::fence_async_shared; using hopper::named_barrier; using hopper::desc128;
using hopper::wgmma_fence; using hopper::wgmma_commit; using hopper::wgmma_wait; using hopper::bulk_commit;
using hopper::bulk_wait_read;
#endif

// ---------------------------------------------------------------------------------------------
// Device helpers shared by every variant.

// The two 16-bit types' pairs: two floats rounded to T, `lo` in the low 16 bits (the lower column).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t u;
  if constexpr (std::is_same<T, __half>::value) {
    const __half2 p = __floats2half2_rn(lo, hi);
    memcpy(&u, &p, 4);
  } else {
    const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
    memcpy(&u, &p, 4);
  }
  return u;
}

// ---------------------------------------------------------------------------------------------
// Kernel 1: mma.sync, ldmatrix and cp.async (compute capability 8.0 and up).

// The mma.sync m16n8k16 fragments, for lane l with g = l / 4 and t = l % 4 (PTX ISA, "Matrix fragments for
// mma.m16n8k16"):
//   A (16 x 16, row-major): 4 registers of 2 values: (g, 2t..2t+1), (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..)
//   B (16 x 8, k x n):      2 registers: (k 2t..2t+1, n g), (k 2t + 8.., n g)
//   C (16 x 8, float):      4 values: (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)
// ldmatrix.x4 loads four 8x8 matrices: lanes 8j .. 8j + 7 give the 16-byte row addresses of matrix j, and register
// j of every lane receives that lane's part of it. With lane l pointing at row l % 16, column 8 (l / 16) of a 16x16
// block, the four registers are exactly an A fragment; with .trans on a [k][n] tile they are the B fragments of
// two n8 tiles side by side.

// The tiles of kernel 1: 128x128 of C per block, 32 deep per stage, four warps of 64x64, four stages.
struct Tiles1 {
  static constexpr int BM = 128, BN = 128, BK = 32, STAGES = 4, WM = 64, WN = 64;
  static constexpr int WARPS = (BM / WM) * (BN / WN), THREADS = 32 * WARPS;
  static constexpr int MT = WM / 16, NT = WN / 8;  // m16 and n8 tiles per warp
  static constexpr int A_STAGE = BM * BK, B_STAGE = BK * BN;  // values per stage
  static constexpr int SHARED = STAGES * (A_STAGE + B_STAGE) * 2;  // 64 KB: two blocks per SM
};

// Where value (row, col) of a shared tile with rows of W 16-bit values lives: its 16-byte chunks XOR-swizzled.
// ldmatrix reads one chunk from each of 8 consecutive rows; unswizzled those would share 4 banks when rows are
// 128 bytes or more apart in multiples of 128 (an 8-way conflict). Rows of 32 values (64 bytes, 4 chunks) put two
// rows in each 128 bytes, so their chunk is XORed with (row / 2) % 4; longer rows with row % 8.
template <int W>
__device__ __forceinline__ int swz(int row, int col) {
  constexpr int CHUNKS = W / 8;
  static_assert(CHUNKS == 4 || CHUNKS % 8 == 0, "rows of 32 values or a multiple of 64");
  const int x = CHUNKS == 4 ? row / 2 % 4 : row % 8;
  return row * W + ((col / 8) ^ x) * 8 + col % 8;
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
// 16 bytes from global to shared memory without passing through registers; zeros where `inside` is false
// (src-size 0: the ragged last tile; src must still be a valid address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool inside) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(inside ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
// c += a b for a 16 x 16 A and a 16 x 8 B in T, c in float32.
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same<T, __half>::value)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A ROWS x COLS tile at (r0, c0) of a rows x cols matrix into a swizzled shared tile, 8 values (16 bytes) a move.
// ALIGNED (every row 16-byte aligned, cols a multiple of 8): cp.async, zero-filled past an edge. Otherwise value by
// value through registers, stored at once; the barrier before the tile's use orders both kinds alike.
template <int ROWS, int COLS, int THREADS, typename T, bool ALIGNED>
__device__ __forceinline__ void load_tile1(T* tile, const T* __restrict__ src, int rows, int cols, int r0, int c0) {
  constexpr int MOVES = ROWS * COLS / 8 / THREADS;
  static_assert(MOVES * THREADS * 8 == ROWS * COLS, "every thread moves as many chunks as the others");
#pragma unroll
  for (int l = 0; l < MOVES; ++l) {
    const int i = threadIdx.x + l * THREADS, r = i / (COLS / 8), c = (i % (COLS / 8)) * 8;
    T* dst = tile + swz<COLS>(r, c);
    const bool row_in = r0 + r < rows;
    if constexpr (ALIGNED) {
      const bool in = row_in && c0 + c < cols;
      cp_async16(dst, in ? src + (int64_t)(r0 + r) * cols + c0 + c : src, in);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e)
        dst[e] = row_in && c0 + c + e < cols ? src[(int64_t)(r0 + r) * cols + c0 + c + e] : from_float<T>(0.f);
    }
  }
}
#endif

// matmul13_kernel1: block owns a 128x128 tile of C, warp w a 64x64 region of it (4 x 8 mma tiles of 16x8, 128 fp32
// accumulators a lane). Per 32-deep stage a warp issues 4 ldmatrix.x4 of A and 4 ldmatrix.x4.trans of B per k16,
// each fragment feeding 8 (A) or 4 (B) mma.sync. The tiles arrive by cp.async three stages ahead; one barrier a
// stage. Bounded by the issue of ldmatrix and mma.sync from four warps per block (two blocks an SM): every operand
// passes through registers, and a warp waits for each mma.sync; wgmma reads shared memory and runs asynchronously.
template <typename T, bool ALIGNED>
__global__ void __launch_bounds__(Tiles1::THREADS, 2)
    matmul13_kernel1(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // mma.sync m16n8k16 and cp.async need 8.0: the launcher refuses an older GPU first
#else
  using W = Tiles1;
  extern __shared__ uint4 smem1[];
  T* As = reinterpret_cast<T*>(smem1);
  T* Bs = As + W::STAGES * W::A_STAGE;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / (W::BN / W::WN)) * W::WM, wn = (warp % (W::BN / W::WN)) * W::WN;
  const int m0 = blockIdx.y * W::BM, n0 = blockIdx.x * W::BN;
  const int steps = (K + W::BK - 1) / W::BK;
  float acc[W::MT][W::NT][4] = {};

  auto load_stage = [&](int stage, int step) {
    load_tile1<W::BM, W::BK, W::THREADS, T, ALIGNED>(As + stage * W::A_STAGE, A, M, K, m0, step * W::BK);
    load_tile1<W::BK, W::BN, W::THREADS, T, ALIGNED>(Bs + stage * W::B_STAGE, B, K, N, step * W::BK, n0);
  };
  // The first STAGES - 1 stages in flight, a commit group each (empty past the last step, so that the wait below
  // always counts the same number of groups).
#pragma unroll
  for (int s = 0; s < W::STAGES - 1; ++s) {
    if (s < steps) load_stage(s, s);
    cp_async_commit();
  }
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<W::STAGES - 2>();  // this thread's copies for step s have landed
    __syncthreads();                 // everyone's have, and everyone is done with step s - 1's stage
    const int next = s + W::STAGES - 1;
    if (next < steps) load_stage(next % W::STAGES, next);  // into step s - 1's stage, free now
    cp_async_commit();
    const T* as = As + (s % W::STAGES) * W::A_STAGE;
    const T* bs = Bs + (s % W::STAGES) * W::B_STAGE;
#pragma unroll
    for (int kk = 0; kk < W::BK; kk += 16) {
      uint32_t a[W::MT][4], b[W::NT / 2][4];
#pragma unroll
      for (int mt = 0; mt < W::MT; ++mt)
        ldmatrix_x4(a[mt], as + swz<W::BK>(wm + 16 * mt + lane % 16, kk + lane / 16 * 8));
#pragma unroll
      for (int np = 0; np < W::NT / 2; ++np)  // registers: b0, b1 of n8 tile 2 np, then b0, b1 of tile 2 np + 1
        ldmatrix_x4_trans(b[np], bs + swz<W::BN>(kk + lane % 16, wn + 16 * np + lane / 16 * 8));
#pragma unroll
      for (int mt = 0; mt < W::MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < W::NT; ++nt)
          mma16816<T>(acc[mt][nt], a[mt], b[nt / 2][nt % 2 * 2], b[nt / 2][nt % 2 * 2 + 1]);
    }
  }
  cp_async_wait<0>();  // nothing may be in flight when the block ends

  // Epilogue: each lane's pairs of adjacent columns, rounded to T, straight to C (4-byte stores where the pair is
  // inside C and aligned: ALIGNED makes N a multiple of 8).
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < W::MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = m0 + wm + 16 * mt + g + 8 * h;
      if (m >= M) continue;
      T* row = C + (int64_t)m * N;
#pragma unroll
      for (int nt = 0; nt < W::NT; ++nt) {
        const int n = n0 + wn + 8 * nt + 2 * t;
        const float lo = acc[mt][nt][2 * h], hi = acc[mt][nt][2 * h + 1];
        if (ALIGNED) {
          if (n < N) *reinterpret_cast<uint32_t*>(row + n) = pack2<T>(lo, hi);
        } else {
          if (n < N) row[n] = from_float<T>(lo);
          if (n + 1 < N) row[n + 1] = from_float<T>(hi);
        }
      }
    }
#endif
}

// ---------------------------------------------------------------------------------------------
// Hopper helpers: mbarriers, TMA, wgmma (compute capability 9.0, sm_90a).

// The tiles of the wgmma kernels: K advances 64 values (128 bytes: one row of the 128-byte swizzle) a stage; a
// warpgroup's wgmma is m64n256k16, so a consumer owns 64 rows x 256 columns of C (128 fp32 accumulators a thread).
// B arrives as four boxes of 64 columns (128 bytes, the widest box the 128-byte swizzle takes) x 64 rows of k.
constexpr int HBK = 64, HBN = 256, STAGES = 4;
constexpr int BOX = 64;                       // columns of a box of B (and of C in matmul13_5's stores)
constexpr int B_BOX_BYTES = BOX * HBK * 2;    // 8 KB: one box of B, 64 k-rows of 128 bytes
constexpr int B_STAGE_BYTES = HBN * HBK * 2;  // 32 KB

// The operands' layouts in global memory, as bits: row-major is the default; A_COLUMN_MAJOR means A is the
// transpose of a row-major [K, M] tensor (a.t() of it, strides (1, M)); B_COLUMN_MAJOR, B the transpose of a
// row-major [N, K] (w.t() for nn.Linear's weight w). A tensor map always describes the row-major tensor in memory.
constexpr int ROW_MAJOR = 0, A_COLUMN_MAJOR = 1, B_COLUMN_MAJOR = 2;

// What the TMA-store epilogue does to each fp32 value before rounding: nothing (a plain matmul), or add bias[n] (a
// vector of N values of T), then maybe an activation, or multiply by scale_a * scale_b (scaled_mm13's fp8 product). Fused into the matmul, the bias and the activation cost no pass
// over C in memory. A template argument: as a choice made at run time, in the innermost loop of the epilogue, it made
// matmul13_5 slower at 4096^3 on an H100 even with no bias and no activation (223 us against 197 in the next run:
// one measurement each).
enum Epilogue : int { EPI_NONE = 0, EPI_BIAS = 1, EPI_BIAS_RELU = 2, EPI_BIAS_GELU = 3, EPI_SCALE = 4 };
constexpr bool has_bias(int epi) { return epi == EPI_BIAS || epi == EPI_BIAS_RELU || epi == EPI_BIAS_GELU; }

// The input types: bf16 and fp16, and the 8-bit float e4m3 (scaled_mm13), whose products come out in bf16. A stage
// holds rows of 128 bytes of K whatever the type: 64 values of a 16-bit type, 128 of e4m3, and 4 wgmma each.
using fp8 = __nv_fp8_e4m3;
template <typename T>
struct OutType {
  using type = T;
};
template <>
struct OutType<fp8> {
  using type = __nv_bfloat16;
};
template <typename T>
using Out = typename OutType<T>::type;
template <typename T>
constexpr int kStageK = HBK * 2 / static_cast<int>(sizeof(T));

#ifdef HAS_SM90A
// The same box delivered to every block of the cluster named in `mask` (bit r: the block of rank r), each at the
// same place in its own shared memory, completing on each one's barrier at `bar`'s place (matmul13_6).
__device__ __forceinline__ void tma_load_multicast(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar,
                                                   uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar)), "h"(mask)
      : "memory");
}
// One arrival on the barrier at `bar`'s place in the shared memory of the cluster's block of rank `rank`. The
// default semantics (release at the block's scope) are enough for a consumer that hands a stage back: what must be
// over before the other block's copy overwrites the stage is this warp's wgmma reading it, which wgmma.wait_group
// has seen finish. `.release.cluster` would also wait for every earlier memory operation of the thread to be
// visible cluster-wide: on the H100 that made matmul13_6 1.7 times slower (0.54-0.57x cuBLAS at 4096^3 in three
// runs, 0.97x without; runs outside the recorded benchmark). CUTLASS's remote arrival has no qualifier either.
__device__ __forceinline__ void mbar_arrive_remote(uint64_t* bar, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(bar)), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
// Every thread of every block of the cluster gets here before any goes on (cooperative_groups' cluster.sync()).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// A TMA store of a shared box to (x, y); the parts outside the tensor are dropped.
__device__ __forceinline__ void tma_store(const CUtensorMap* map, int x, int y, const void* src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(src)) : "memory");
}
// A K-major tile (rows of 64 k, 128 bytes; A row-major) or B K-major (rows of 64 k for each n; B column-major, as
// nn.Linear's weight is): 8-row groups 1024 bytes apart (SBO); wgmma step kk (k16, or k32 of e4m3) is 32 bytes on.
__device__ __forceinline__ uint64_t k_major_desc(uint32_t t, int kk) { return desc128(t + kk * 32, 16, 1024); }
// An MN-major tile (B row-major: the [K, N] rows of B; or A column-major): k-rows of 128 bytes (64 n, or 64 m); the
// next 64 columns one box (8 KB) on (LBO); 8 k-rows 1024 bytes apart (SBO); k16 step kk is 16 rows on.
__device__ __forceinline__ uint64_t mn_major_desc(uint32_t t, int kk) {
  return desc128(t + kk * 16 * 128, B_BOX_BYTES, 1024);
}

// d (64 x 256, fp32, spread over the warpgroup) += A (64 x 16) B (16 x 256) (64 x 32 and 32 x 256 for e4m3), both
// read from shared memory through their descriptors; asynchronous until wgmma_wait. The immediates TRANS_A and TRANS_B say each tile's layout: 0 is
// K-major (rows of k: A row-major, B column-major), 1 MN-major (A column-major, B row-major). Register r of lane l of
// warp w holds row 16 w + l / 4 + 8 ((r / 2) % 2), column 8 (r / 4) + 2 (l % 4) + r % 2.
template <typename T, int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n256(float (&d)[128], uint64_t adesc, uint64_t bdesc) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
                 "}, %128, %129, 1, 1, 1, %130, %131;"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
                   "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
                   "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
                   "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
                   "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
                   "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
                   "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
                   "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
                   "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),
                   "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]),
                   "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),
                   "+f"(d[126]), "+f"(d[127])
                 : "l"(adesc), "l"(bdesc), "n"(TRANS_A), "n"(TRANS_B));
  } else if constexpr (std::is_same<T, __half>::value) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
                 "}, %128, %129, 1, 1, 1, %130, %131;"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
                   "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
                   "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
                   "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
                   "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
                   "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
                   "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
                   "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
                   "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),
                   "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]),
                   "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),
                   "+f"(d[126]), "+f"(d[127])
                 : "l"(adesc), "l"(bdesc), "n"(TRANS_A), "n"(TRANS_B));
  } else {  // e4m3: K = 32 a wgmma; both operands K-major, so no transpose immediates
    static_assert(TRANS_A == 0 && TRANS_B == 0, "wgmma on 8-bit floats reads A and B K-major only");
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
                 "}, %128, %129, 1, 1, 1;"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
                   "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
                   "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
                   "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
                   "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
                   "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
                   "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
                   "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
                   "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),
                   "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]),
                   "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),
                   "+f"(d[126]), "+f"(d[127])
                 : "l"(adesc), "l"(bdesc));
  }
}

// One stage's loads, all completing on `full` with their byte count. A row-major: the BM x 64 box at (k0, m0), rows of
// k; column-major: BM / 64 boxes of 64 k-rows x 64 m at (m0 + 64 j, k0). B row-major: four 64 x 64 boxes at
// (n0 + 64 j, k0), rows of n; column-major: one box of 256 n-rows x 64 k at (k0, n0). Either way a consumer's 64 rows
// of A are 8 KB on from the previous consumer's, and a stage holds the same bytes.
// CLUSTER 2 (matmul13_6, B row-major): the two blocks of a cluster need the same B; each loads two of its four boxes
// and multicasts them to both, so a stage still brings each block its 48 KB, half of B's from the other block.
template <int BM, int LAYOUT = ROW_MAJOR, int CLUSTER = 1>
__device__ __forceinline__ void load_stage(unsigned char* stage, const CUtensorMap* map_a, const CUtensorMap* map_b,
                                           int m0, int n0, int k0, uint64_t* full, uint32_t rank = 0) {
  static_assert(CLUSTER == 1 || LAYOUT == ROW_MAJOR, "the cluster's multicast is written for a row-major B");
  mbar_expect_bytes(full, BM * HBK * 2 + B_STAGE_BYTES);
  if constexpr (LAYOUT & A_COLUMN_MAJOR) {
#pragma unroll
    for (int j = 0; j < BM / 64; ++j) tma_load(stage + j * 64 * HBK * 2, map_a, m0 + 64 * j, k0, full);
  } else {
    tma_load(stage, map_a, k0, m0, full);
  }
  unsigned char* b = stage + BM * HBK * 2;
  if constexpr (LAYOUT & B_COLUMN_MAJOR) {
    tma_load(b, map_b, k0, n0, full);
  } else if constexpr (CLUSTER == 1) {
#pragma unroll
    for (int j = 0; j < HBN / BOX; ++j) tma_load(b + j * B_BOX_BYTES, map_b, n0 + BOX * j, k0, full);
  } else {
    constexpr int mine = HBN / BOX / CLUSTER;  // boxes this block loads for the cluster
#pragma unroll
    for (int j = rank * mine; j < (rank + 1) * mine; ++j)
      tma_load_multicast(b + j * B_BOX_BYTES, map_b, n0 + BOX * j, k0, full, (1u << CLUSTER) - 1);
  }
}

// A stage's 4 wgmma steps (k16, or k32 of e4m3) for one consumer: its 64 rows of A (at shared address a), all 256
// columns of B.
template <typename T, int LAYOUT = ROW_MAJOR>
__device__ __forceinline__ void wgmma_stage(float (&d)[128], uint32_t a, uint32_t b) {
  constexpr bool a_mn = LAYOUT & A_COLUMN_MAJOR, b_k = LAYOUT & B_COLUMN_MAJOR;
  wgmma_fence();  // the accumulators' registers are the wgmma's from here
#pragma unroll
  for (int kk = 0; kk < HBK / 16; ++kk)
    wgmma_m64n256<T, a_mn ? 1 : 0, b_k ? 0 : 1>(d, a_mn ? mn_major_desc(a, kk) : k_major_desc(a, kk),
                                               b_k ? k_major_desc(b, kk) : mn_major_desc(b, kk));
  wgmma_commit();
}

template <int EPI>
__device__ __forceinline__ float activate(float v) {
  if constexpr (EPI == EPI_BIAS_RELU) return v < 0.f ? 0.f : v;  // NaN stays NaN, as in torch.relu
  if constexpr (EPI == EPI_BIAS_GELU) return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));  // the exact GELU
  return v;
}

// The warpgroup's accumulators (64 rows from row0, 256 columns from n0) rounded to T and stored straight from the
// registers: pairs of adjacent columns, 4 bytes each (N is a multiple of 8, so a pair is all in or all out).
template <typename T>
__device__ __forceinline__ void store_direct(const float (&d)[128], T* __restrict__ C, int M, int N, int row0, int n0) {
  const int w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < 128; r += 2) {
    const int m = row0 + 16 * w + lane / 4 + 8 * (r / 2 % 2), n = n0 + 8 * (r / 4) + 2 * (lane % 4);
    if (m < M && n < N) *reinterpret_cast<uint32_t*>(C + (int64_t)m * N + n) = pack2<T>(d[r], d[r + 1]);
  }
}
#endif

// ---------------------------------------------------------------------------------------------
// Kernel 2: TMA and wgmma from one warpgroup.

constexpr int BM2 = 64;  // one warpgroup: one m64 row band
constexpr int STAGE2_BYTES = BM2 * HBK * 2 + B_STAGE_BYTES;      // 40 KB
constexpr int SHARED2 = STAGES * STAGE2_BYTES + 1024;             // + room to align to 1024

// matmul13_kernel2: block (one warpgroup, 128 threads) owns 64 x 256 of C. Per 64-deep stage, TMA brings 8 KB of A
// and 32 KB of B into a 4-stage ring (one mbarrier a stage counts the bytes); the warpgroup issues 4 wgmma
// m64n256k16 reading both from shared memory, and keeps one stage's wgmma in flight while it waits for the next
// stage. Thread 0 refills a stage once every warp is done with it: a block-wide barrier each stage, and the refill
// is issued by a thread that also computes. Bounded by those stalls: one block per SM (160 KB of ring) leaves the
// tensor cores idle while the warpgroup waits.
template <typename T>
__global__ void __launch_bounds__(128, 1)
    matmul13_kernel2(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                     T* __restrict__ C, int M, int N, int K) {
#ifdef HAS_SM90A
  extern __shared__ __align__(16) unsigned char smem2[];
  unsigned char* ring = align1024(smem2);
  __shared__ alignas(8) uint64_t full[STAGES];  // stage s holds its step's tiles: their bytes have landed
  const int m0 = blockIdx.y * BM2, n0 = blockIdx.x * HBN, steps = (K + HBK - 1) / HBK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) mbar_init(&full[s], 1);  // one arrival: the expect_tx of thread 0
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (int s = 0; s < STAGES && s < steps; ++s)
      load_stage<BM2>(ring + s * STAGE2_BYTES, &map_a, &map_b, m0, n0, s * HBK, &full[s]);
  }
  __syncthreads();  // the barriers are initialised before anyone waits on them

  float d[128];
#pragma unroll
  for (int r = 0; r < 128; ++r) d[r] = 0.f;
  for (int s = 0; s < steps; ++s) {
    const int stage = s % STAGES;
    mbar_wait(&full[stage], s / STAGES % 2);  // use s / STAGES of this stage's barrier: step s's tiles are in
    const uint32_t a = smem_addr(ring + stage * STAGE2_BYTES);
    wgmma_stage<T>(d, a, a + BM2 * HBK * 2);
    wgmma_wait<1>();  // step s - 1's wgmma (this warp's part) has read its stage
    __syncthreads();  // every warp's has
    const int refill = s - 1 + STAGES;  // into step s - 1's stage
    if (threadIdx.x == 0 && s >= 1 && refill < steps)
      load_stage<BM2>(ring + (refill % STAGES) * STAGE2_BYTES, &map_a, &map_b, m0, n0, refill * HBK,
                      &full[refill % STAGES]);
  }
  wgmma_wait<0>();
  store_direct<T>(d, C, M, N, m0, n0);
#else
  (void)M, (void)N, (void)K, (void)C;
  __trap();  // built without sm_90a: the launcher refuses to start it
#endif
}

// ---------------------------------------------------------------------------------------------
// Kernels 3, 4 and 5: warp specialisation; persistent; TMA stores.

constexpr int WS_BM = 128, WS_THREADS = 384;                    // a producer and two consumer warpgroups
constexpr int A_WS_BYTES = WS_BM * HBK * 2;                     // 16 KB
constexpr int STAGE_WS_BYTES = A_WS_BYTES + B_STAGE_BYTES;      // 48 KB
constexpr int C_BOX_BYTES = 64 * BOX * 2;                       // a 64 x 64 tile of C: 8 KB
// the ring, then two staging tiles of C per consumer (matmul13_5), then room to align to 1024: 225 KB of the 227
constexpr int SHARED_WS = STAGES * STAGE_WS_BYTES + 1024;
constexpr int SHARED_WS_STORE = SHARED_WS + 2 * 2 * C_BOX_BYTES;
// matmul13_4/5 walk C in bands of GROUP row tiles (see tile_at). On an H100 bands of 4, 8 and 16 timed within 1% of
// each other at 4096^3 and 8192^3; row by row (1) was 11-17% slower at 8192^3, where A and B (256 MB) overflow L2.
constexpr int GROUP = 16;

// Tile t of C (of tiles_m x tiles_n) as (row tile, column tile). GROUP 1: row by row. Otherwise the tiles run down
// bands of `group` row tiles, column by column: the tiles in flight at one time (one per SM) then cover a squarer
// patch of C, and the rows of A and columns of B they read are fewer and stay in L2.
__device__ __forceinline__ int2 tile_at(int t, int tiles_m, int tiles_n, int group) {
  const int first = t / (group * tiles_n) * group, rows = min(tiles_m - first, group);
  const int in_band = t % (group * tiles_n);
  return make_int2(first + in_band % rows, in_band / rows);
}

// matmul13_ws_kernel: warpgroup 0 produces, warpgroups 1 and 2 consume. The producer's one thread walks this block's
// tiles and their k-steps, waiting for a stage to be empty, then announcing its 48 KB on the stage's full barrier
// and issuing the TMA loads. Consumer c waits for a stage to be full, issues 4 wgmma m64n256k16 on rows 64 c .. + 63
// of the tile, and hands the previous stage back (one arrival per warp on its empty barrier) once its wgmma have
// read it. No block-wide barrier in the loop: the producer runs up to STAGES steps ahead, across tiles too.
// PERSISTENT: gridDim.x blocks (one per SM) take tiles blockIdx.x, + gridDim.x, ... in the grouped order;
// otherwise one tile per block, row by row. TMA_STORE: the epilogue stages 64 x 64 tiles of C in shared memory
// (128-byte swizzle, two buffers per consumer) and one thread stores each by TMA; otherwise registers to C.
// LAYOUT (ROW_MAJOR, A_COLUMN_MAJOR, B_COLUMN_MAJOR or both): how A and B lie in memory; only the loads and the
// descriptors change. EPI: what TMA_STORE's epilogue does on the way out (bias: N values of T, for EPI_BIAS*).
// Bounded by the tensor cores once the ring hides TMA's latency; then by the epilogue (not overlapped with the
// next tile's math: both consumers finish a tile together) and by the last wave's idle SMs.
// CLUSTER 2 (matmul13_6): the blocks run in clusters of 2 along x, and a cluster takes two vertically adjacent tiles
// at a time, rank r the row tile 2 i + r: they need the same tiles of B, so each block loads half of every stage's B
// and multicasts it to both (load_stage). A stage is then written by both blocks' loads, so it may be refilled only
// when both blocks' consumers are done with it: each consumer warp arrives on its own block's empty barrier and on
// the other block's (16 arrivals a phase). The blocks synchronise as a cluster after initialising their barriers
// (the other block's must exist before a copy or an arrival reaches them) and before they exit (a block's shared
// memory and barriers must outlive the other's copies into them and arrivals on them).
template <typename T, bool PERSISTENT, bool TMA_STORE, int LAYOUT = ROW_MAJOR, int EPI = EPI_NONE, int CLUSTER = 1>
__global__ void __launch_bounds__(WS_THREADS, 1)
    matmul13_ws_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                       const __grid_constant__ CUtensorMap map_c, Out<T>* __restrict__ C, int M, int N, int K,
                       int group, const Out<T>* __restrict__ bias, const float* __restrict__ scale_a,
                       const float* __restrict__ scale_b) {
  static_assert(TMA_STORE || EPI == EPI_NONE, "the bias, the activation and the scales are applied by the TMA-store "
                "epilogue only");
  static_assert(CLUSTER == 1 || (CLUSTER == 2 && PERSISTENT), "clusters of 2, for the persistent kernel");
#ifdef HAS_SM90A
  extern __shared__ __align__(16) unsigned char smem_ws[];
  unsigned char* ring = align1024(smem_ws);
  __shared__ alignas(8) uint64_t full[STAGES];   // the stage's bytes have landed
  __shared__ alignas(8) uint64_t empty[STAGES];  // both consumers' wgmma have read the stage
  const int wg = threadIdx.x / 128, tiles_m = (M + WS_BM - 1) / WS_BM, tiles_n = (N + HBN - 1) / HBN;
  // the work comes in units of CLUSTER vertically adjacent tiles, one per block of a cluster (one tile without)
  const int units_m = (tiles_m + CLUSTER - 1) / CLUSTER, units = units_m * tiles_n;
  const int steps = (K + kStageK<T> - 1) / kStageK<T>;
  const uint32_t rank = CLUSTER > 1 ? cluster_rank() : 0;
  const int first = blockIdx.x / CLUSTER, stride = gridDim.x / CLUSTER;  // this block's cluster, and how many
  auto tile_of = [&](int t) {
    int2 unit = PERSISTENT ? tile_at(t, units_m, tiles_n, max(group / CLUSTER, 1))
                           : make_int2(t / tiles_n, t % tiles_n);
    unit.x = unit.x * CLUSTER + rank;  // the tile of rank r (past the last row tile for an odd count: no rows of C)
    return unit;
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);             // the producer's expect_tx, then the bytes
      mbar_init(&empty[s], 8 * CLUSTER);  // one arrival per consumer warp of each block of the cluster
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  // the barriers are initialised before anyone waits on them (in a cluster: before the other block's copies and
  // arrivals reach them); no block-wide barrier after this
  if constexpr (CLUSTER > 1) cluster_sync();
  else __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");  // the producer needs few registers ...
    if (threadIdx.x == 0) {
      int it = 0;  // this block's k-steps so far, over all its tiles: the ring's position
      for (int t = first; t < units; t += stride) {
        const int2 tile = tile_of(t);
        for (int s = 0; s < steps; ++s, ++it) {
          const int stage = it % STAGES, use = it / STAGES;
          if (use > 0) mbar_wait(&empty[stage], (use - 1) % 2);  // the consumers released the stage's last use
          load_stage<WS_BM, LAYOUT, CLUSTER>(ring + stage * STAGE_WS_BYTES, &map_a, &map_b, tile.x * WS_BM,
                                             tile.y * HBN, s * kStageK<T>, &full[stage], rank);
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");  // ... and the consumers many: 128 x (40 + 2 x 232) <= 65536
    const int c = wg - 1, lane = threadIdx.x % 32;
    float scale = 1.f;  // EPI_SCALE: the product's scale, read once (two device scalars, as torch._scaled_mm takes)
    if constexpr (EPI == EPI_SCALE) scale = *scale_a * *scale_b;
    float d[128];
    int it = 0;
    bool other_stored = true;  // TMA_STORE: no store is in flight yet, so either wait is right
    auto release = [&](uint64_t* empty_bar) {  // this warp is done with the stage: in every block that wrote it
      mbar_arrive(empty_bar);
      if constexpr (CLUSTER > 1) mbar_arrive_remote(empty_bar, rank ^ 1);
    };
    for (int t = first; t < units; t += stride) {
      const int2 tile = tile_of(t);
      const int row0 = tile.x * WS_BM + 64 * c, n0 = tile.y * HBN;
#pragma unroll
      for (int r = 0; r < 128; ++r) d[r] = 0.f;
      for (int s = 0; s < steps; ++s, ++it) {
        const int stage = it % STAGES;
        mbar_wait(&full[stage], it / STAGES % 2);
        const uint32_t a = smem_addr(ring + stage * STAGE_WS_BYTES);
        wgmma_stage<T, LAYOUT>(d, a + c * 64 * 128, a + A_WS_BYTES);
        wgmma_wait<1>();  // the previous step's wgmma have read their stage: hand it back
        if (s > 0 && lane == 0) release(&empty[(it - 1) % STAGES]);
      }
      wgmma_wait<0>();
      if (steps > 0 && lane == 0) release(&empty[(it - 1) % STAGES]);

      if constexpr (!TMA_STORE) {
        store_direct<Out<T>>(d, C, M, N, row0, n0);
      } else {
        // Four 64 x 64 tiles of C through two 8 KB buffers: while TMA stores one, the threads fill the other.
        // Lane l writes its pairs at row l / 4 (+ 8), chunk n / 8 XOR row % 8: one 16-byte chunk of 8 different
        // rows per store instruction, 8 different bank groups. A box wholly outside C is not stored: then the
        // newest store group may be this buffer's own, and the wait must let none remain (`other_stored`, kept
        // across tiles by the leader: whether the newest box, the other buffer's, was stored).
        unsigned char* stage_c = ring + STAGES * STAGE_WS_BYTES + c * 2 * C_BOX_BYTES;
        const int w = threadIdx.x % 128 / 32, leader = threadIdx.x % 128 == 0;
#pragma unroll
        for (int j = 0; j < HBN / BOX; ++j) {
          unsigned char* buf = stage_c + (j % 2) * C_BOX_BYTES;
          if (leader) {  // the store that last read this buffer is done
            if (other_stored) bulk_wait_read<1>();  // every group but the newest (the other buffer's)
            else bulk_wait_read<0>();
          }
          named_barrier(1 + c, 128);              // ... and everyone in the warpgroup knows it
#pragma unroll
          for (int r = 32 * j; r < 32 * j + 32; r += 2) {
            const int row = 16 * w + lane / 4 + 8 * (r / 2 % 2), col = 8 * (r / 4 % 8) + 2 * (lane % 4);
            float lo = d[r], hi = d[r + 1];
            if constexpr (EPI == EPI_SCALE) {
              lo *= scale;
              hi *= scale;
            }
            if constexpr (has_bias(EPI)) {
              if (n0 + BOX * j + col < N) {  // a pair is all in or all out: N is a multiple of 8
                lo += to_float(bias[n0 + BOX * j + col]);
                hi += to_float(bias[n0 + BOX * j + col + 1]);
              }
            }
            const uint32_t v = pack2<Out<T>>(activate<EPI>(lo), activate<EPI>(hi));
            memcpy(buf + row * 128 + ((col / 8) ^ (row % 8)) * 16 + (col % 8) * 2, &v, 4);
          }
          fence_async_shared();       // this thread's stores are visible to the TMA engine ...
          named_barrier(1 + c, 128);  // ... and everyone's are in
          other_stored = row0 < M && n0 + BOX * j < N;
          if (leader && other_stored) {
            tma_store(&map_c, n0 + BOX * j, row0, buf);
            bulk_commit();
          }
        }
      }
    }
    if (TMA_STORE && threadIdx.x % 128 == 0) bulk_wait_read<0>();  // shared memory must outlive the reads
  }
  if constexpr (CLUSTER > 1) cluster_sync();  // the other block's copies into this one and arrivals on it are over
#else
  (void)M, (void)N, (void)K, (void)C, (void)group, (void)bias, (void)scale_a, (void)scale_b;
  __trap();  // built without sm_90a: the launcher refuses to start it
#endif
}

// ---------------------------------------------------------------------------------------------
// Launchers.

// Whether t is the transpose of a contiguous tensor (strides (1, rows): x.t() of a row-major x) and not row-major
// itself (a tensor that is both, such as one column, counts as row-major).
static bool column_major(const at::Tensor& t) { return t.dim() == 2 && !t.is_contiguous() && t.t().is_contiguous(); }

// The operands' layout bits (ROW_MAJOR, A_COLUMN_MAJOR, B_COLUMN_MAJOR).
static int layout_of(const at::Tensor& a, const at::Tensor& b) {
  return (column_major(a) ? A_COLUMN_MAJOR : 0) | (column_major(b) ? B_COLUMN_MAJOR : 0);
}

// a: [M, K] and b: [K, N], contiguous (or, with any_layout, either may be column-major), on the device, bfloat16 or
// float16; c: [M, N], contiguous, the same dtype.
static void check_operands(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, bool any_layout = false) {
  for (const at::Tensor* t : {&a, &b, &c}) {
    const char* name = t == &a ? "a" : t == &b ? "b" : "c";
    TORCH_CHECK(KERNELS_ON_DEVICE(*t), name, " must be " KERNELS_DEVICE_WORD ", got a tensor on ", t->device());
    TORCH_CHECK(t->scalar_type() == at::kBFloat16 || t->scalar_type() == at::kHalf, name,
                " must be bfloat16 or float16 (the tensor-core inputs), got ", t->scalar_type());
    TORCH_CHECK(t->dim() == 2, name, " must have 2 dimensions, got shape ", shape_str(t->sizes()));
    if (any_layout && t != &c) {
      TORCH_CHECK(t->is_contiguous() || column_major(*t), name, " must be contiguous (row-major) or the transpose of "
                  "a contiguous tensor (column-major, such as x.t()), got strides ", shape_str(t->strides()),
                  " for shape ", shape_str(t->sizes()), ": call .contiguous() first");
    } else {
      TORCH_CHECK(t->is_contiguous(), name, " must be contiguous (row-major), got strides ", shape_str(t->strides()),
                  " for shape ", shape_str(t->sizes()),
                  t == &c ? "" : " (a transposed view such as x.t() is not: call .contiguous() first)");
    }
    TORCH_CHECK(t->size(0) < (int64_t(1) << 31) && t->size(1) < (int64_t(1) << 31), name,
                " must have fewer than 2^31 rows and columns, got shape ", shape_str(t->sizes()));
  }
  TORCH_CHECK(b.scalar_type() == a.scalar_type() && c.scalar_type() == a.scalar_type(),
              "a, b and c must have one dtype, got ", a.scalar_type(), ", ", b.scalar_type(), " and ", c.scalar_type());
  CHECK_MATMUL_SHAPES(a, b, c);
}

// Whether every row of A, B and C starts 16 bytes aligned: K and N multiples of 8, the tensors 16-byte aligned.
static bool rows16(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  return a.size(1) % 8 == 0 && b.size(1) % 8 == 0 && aligned16(a) && aligned16(b) && aligned16(c);
}

template <typename T, bool ALIGNED>
static void launch1(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  const int M = a.size(0), K = a.size(1), N = b.size(1);
  const int64_t gx = ceil_div((int64_t)N, (int64_t)Tiles1::BN), gy = ceil_div((int64_t)M, (int64_t)Tiles1::BM);
  TORCH_CHECK(gy <= 65535, "C has too many rows for this kernel's grid: ", std::to_string(M), " (at most ",
              std::to_string(65535 * Tiles1::BM), ")");
  auto kernel = matmul13_kernel1<T, ALIGNED>;
  // above 48 KB a kernel must opt in to more dynamic shared memory (per device, so at every launch: about a
  // microsecond of host time)
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tiles1::SHARED));
  kernel<<<dim3((unsigned)gx, (unsigned)gy), Tiles1::THREADS, Tiles1::SHARED, c10::cuda::getCurrentCUDAStream()>>>(
      ptr<T>(a), ptr<T>(b), mut<T>(c), M, N, K);
  CHECK_LAUNCH();
}

void matmul13_1(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  check_operands(a, b, c);
  if (c.numel() == 0) return;
  check_capability("matmul13_1", 800, "mma.sync m16n8k16 on bf16/fp16 and cp.async");
  const bool aligned = rows16(a, b, c);
  if (a.scalar_type() == at::kBFloat16) {
    if (aligned) launch1<__nv_bfloat16, true>(a, b, c);
    else launch1<__nv_bfloat16, false>(a, b, c);
  } else {
    if (aligned) launch1<__half, true>(a, b, c);
    else launch1<__half, false>(a, b, c);
  }
}

// Whether the rows TMA reads and writes are multiples of 16 bytes: those in memory, K and N long for a row-major A
// and B (and C), M long for a column-major A, K long for a column-major B. '' if so, else what is wrong, in words.
static std::string tma_rows_problem(const at::Tensor& a, const at::Tensor& b) {
  const int layout = layout_of(a, b);
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  const bool need_m = layout & A_COLUMN_MAJOR, need_k = !(layout & A_COLUMN_MAJOR) || (layout & B_COLUMN_MAJOR);
  if ((!need_m || M % 8 == 0) && (!need_k || K % 8 == 0) && N % 8 == 0) return {};
  const std::string dims = need_m && need_k ? "M, K and N" : need_m ? "M and N" : "K and N";
  const std::string got = (need_m ? "M = " + std::to_string(M) + ", " : std::string()) +
                          (need_k ? "K = " + std::to_string(K) + ", " : std::string()) + "N = " + std::to_string(N);
  const char* why = layout == ROW_MAJOR ? "" : layout == A_COLUMN_MAJOR ? " (a is column-major: its rows are M long)" :
                    layout == B_COLUMN_MAJOR ? " (b is column-major: its rows are K long)" :
                    " (a and b are column-major: rows of M and of K)";
  return "whose rows in memory must be multiples of 16 bytes: " + dims + " must be multiples of 8" + why + ", got " +
         got;
}

// The TMA variants' preconditions, after the common ones; false when C is empty. K = 0 writes zeros (a tensor map
// cannot describe an empty matrix).
static bool hopper_args(const char* op, const at::Tensor& a, const at::Tensor& b, at::Tensor& c,
                        bool any_layout = false) {
  check_operands(a, b, c, any_layout);
  if (c.numel() == 0) return false;
  check_hopper(op);
  const std::string rows = tma_rows_problem(a, b);
  TORCH_CHECK(rows.empty(), "`", op, "` reads A and B by TMA, ", rows, " (matmul13_1 takes any shape)");
  TORCH_CHECK(aligned16(a) && aligned16(b) && aligned16(c), "`", op, "` needs a, b and c 16-byte aligned (TMA), got "
              "a view that starts elsewhere: call .contiguous() on a fresh tensor (matmul13_1 takes any)");
  if (a.size(1) == 0) {
    c.zero_();
    return false;
  }
  return true;
}

template <typename T>
static void launch2(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  const int M = a.size(0), K = a.size(1), N = b.size(1);
  const int64_t gy = ceil_div((int64_t)M, (int64_t)BM2);
  TORCH_CHECK(gy <= 65535, "C has too many rows for this kernel's grid: ", std::to_string(M), " (at most ",
              std::to_string(65535 * BM2), ")");
  const CUtensorMap map_a = tensor_map(a, HBK, BM2), map_b = tensor_map(b, BOX, HBK);
  auto kernel = matmul13_kernel2<T>;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SHARED2));
  kernel<<<dim3((unsigned)ceil_div(N, HBN), (unsigned)gy), 128, SHARED2, c10::cuda::getCurrentCUDAStream()>>>(
      map_a, map_b, mut<T>(c), M, N, K);
  CHECK_LAUNCH();
}

void matmul13_2(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  if (!hopper_args("matmul13_2", a, b, c)) return;
  if (a.scalar_type() == at::kBFloat16) launch2<__nv_bfloat16>(a, b, c);
  else launch2<__half>(a, b, c);
}

// PERSISTENT: one block per SM (fewer for a small C); else one per tile. A column-major operand's tensor map
// describes the row-major tensor it is the transpose of (a.t(): [K, M]; b.t(): [N, K]), in the boxes load_stage reads.
// CLUSTER 2: clusters of two blocks along x (cudaLaunchKernelEx's cluster attribute), as many as the GPU runs at once
// (cudaOccupancyMaxActiveClusters: a cluster's blocks must find SMs in one GPC, so fewer than one per two SMs may fit,
// and a persistent cluster that has to wait for a free pair doubles the time).
template <typename T, bool PERSISTENT, bool TMA_STORE, int LAYOUT, int EPI = EPI_NONE, int CLUSTER = 1>
static void launch_ws(const at::Tensor& a, const at::Tensor& b, at::Tensor& c, int group, const Out<T>* bias = nullptr,
                      const float* scale_a = nullptr, const float* scale_b = nullptr) {
  const int M = a.size(0), K = a.size(1), N = b.size(1);
  const int64_t units =
      ceil_div(ceil_div((int64_t)M, (int64_t)WS_BM), (int64_t)CLUSTER) * ceil_div((int64_t)N, (int64_t)HBN);
  TORCH_CHECK(units < (int64_t(1) << 31), "C has too many tiles for this kernel: ", std::to_string(units));
  const int64_t sms = device_attribute(cudaDevAttrMultiProcessorCount);
  const int64_t blocks = CLUSTER * (PERSISTENT ? std::min<int64_t>(units, sms / CLUSTER) : units);
  constexpr int KS = kStageK<T>;  // a box's K: 128 bytes of it
  const CUtensorMap map_a = LAYOUT & A_COLUMN_MAJOR ? tensor_map(a.t(), 64, KS) : tensor_map(a, KS, WS_BM);
  const CUtensorMap map_b = LAYOUT & B_COLUMN_MAJOR ? tensor_map(b.t(), KS, HBN) : tensor_map(b, BOX, KS);
  const CUtensorMap map_c = TMA_STORE ? tensor_map(c, BOX, 64) : map_b;  // unused without TMA stores
  constexpr int shared = TMA_STORE ? SHARED_WS_STORE : SHARED_WS;
  auto kernel = matmul13_ws_kernel<T, PERSISTENT, TMA_STORE, LAYOUT, EPI, CLUSTER>;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared));
  if constexpr (CLUSTER > 1) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3((unsigned)(CLUSTER * units));
    config.blockDim = dim3(WS_THREADS);
    config.dynamicSmemBytes = shared;
    config.stream = c10::cuda::getCurrentCUDAStream();
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CLUSTER;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    int fit = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&fit, kernel, &config));
    TORCH_CHECK(fit > 0, "no cluster of ", CLUSTER, " blocks of ", shared, " bytes of shared memory fits this GPU");
    config.gridDim = dim3((unsigned)(CLUSTER * std::min<int64_t>(units, fit)));
    C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, map_a, map_b, map_c, mut<Out<T>>(c), M, N, K, group, bias,
                                      scale_a, scale_b));
  } else {
    kernel<<<(unsigned)blocks, WS_THREADS, shared, c10::cuda::getCurrentCUDAStream()>>>(
        map_a, map_b, map_c, mut<Out<T>>(c), M, N, K, group, bias, scale_a, scale_b);
  }
  CHECK_LAUNCH();
}

// The layouts are compiled for the TMA-store kernel only (matmul13_5, linear13); the others take row-major operands.
template <typename T, bool PERSISTENT, bool TMA_STORE>
static void launch_layout(const at::Tensor& a, const at::Tensor& b, at::Tensor& c, int group) {
  if constexpr (TMA_STORE) {
    switch (layout_of(a, b)) {
      case A_COLUMN_MAJOR: return launch_ws<T, PERSISTENT, TMA_STORE, A_COLUMN_MAJOR>(a, b, c, group);
      case B_COLUMN_MAJOR: return launch_ws<T, PERSISTENT, TMA_STORE, B_COLUMN_MAJOR>(a, b, c, group);
      case A_COLUMN_MAJOR | B_COLUMN_MAJOR:
        return launch_ws<T, PERSISTENT, TMA_STORE, A_COLUMN_MAJOR | B_COLUMN_MAJOR>(a, b, c, group);
      default: break;
    }
  }
  launch_ws<T, PERSISTENT, TMA_STORE, ROW_MAJOR>(a, b, c, group);
}

template <bool PERSISTENT, bool TMA_STORE>
static void matmul_ws(const char* op, const at::Tensor& a, const at::Tensor& b, at::Tensor& c, int group = GROUP) {
  if (!hopper_args(op, a, b, c, TMA_STORE)) return;
  if (a.scalar_type() == at::kBFloat16) launch_layout<__nv_bfloat16, PERSISTENT, TMA_STORE>(a, b, c, group);
  else launch_layout<__half, PERSISTENT, TMA_STORE>(a, b, c, group);
}

// linear13's kernels: matmul13_5's, B column-major, with the bias and the activation in the epilogue.
template <typename T>
static void launch_linear(const at::Tensor& x, const at::Tensor& b, at::Tensor& y, const at::Tensor& bias, int epi) {
  constexpr int L = B_COLUMN_MAJOR;
  if (epi == EPI_BIAS_RELU) launch_ws<T, true, true, L, EPI_BIAS_RELU>(x, b, y, GROUP, ptr<T>(bias));
  else if (epi == EPI_BIAS_GELU) launch_ws<T, true, true, L, EPI_BIAS_GELU>(x, b, y, GROUP, ptr<T>(bias));
  else launch_ws<T, true, true, L, EPI_BIAS>(x, b, y, GROUP, ptr<T>(bias));
}

void matmul13_3(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  matmul_ws<false, false>("matmul13_3", a, b, c);
}
void matmul13_4(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  matmul_ws<true, false>("matmul13_4", a, b, c);
}
void matmul13_5(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  matmul_ws<true, true>("matmul13_5", a, b, c);
}
void matmul13_6(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  if (!hopper_args("matmul13_6", a, b, c)) return;  // row-major operands (the multicast is written for them)
  if (a.scalar_type() == at::kBFloat16) launch_ws<__nv_bfloat16, true, true, ROW_MAJOR, EPI_NONE, 2>(a, b, c, GROUP);
  else launch_ws<__half, true, true, ROW_MAJOR, EPI_NONE, 2>(a, b, c, GROUP);
}

#ifdef MATMUL13_SWEEP
// The persistent variants with another band height (`group` row tiles; 1 is row by row), for the benchmark's sweep;
// built only when MATMUL13_SWEEP is defined.
void matmul13_sweep(const at::Tensor& a, const at::Tensor& b, at::Tensor& c, int64_t variant, int64_t group) {
  TORCH_CHECK(variant == 4 || variant == 5, "variant must be 4 or 5, got ", std::to_string(variant));
  TORCH_CHECK(group >= 1 && group <= 1024, "group must be 1 to 1024, got ", std::to_string(group));
  if (variant == 4) matmul_ws<true, false>("matmul13_sweep", a, b, c, (int)group);
  else matmul_ws<true, true>("matmul13_sweep", a, b, c, (int)group);
}
#endif

// Functional matmul of two 2-D bf16/fp16 tensors, each row- or column-major: matmul13_5 where it runs, else
// matmul13_1 (on row-major copies).
at::Tensor matmul13(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "a and b must have 2 dimensions, got shapes ", shape_str(a.sizes()),
              " and ", shape_str(b.sizes()));
  at::Tensor c = at::empty({a.size(0), b.size(1)}, a.options());
  check_operands(a, b, c, true);
  const bool hopper = device_attribute(cudaDevAttrComputeCapabilityMajor) == 9 && tma_rows_problem(a, b).empty() &&
                      aligned16(a) && aligned16(b) && hopper_kernels_in_build();
  if (hopper) matmul13_5(a, b, c);
  else matmul13_1(a.contiguous(), b.contiguous(), c);
  return c;
}

// y = act(x @ w.T + bias), nn.Linear's product followed by an activation, in one kernel: x [M, K] row-major, w [N, K]
// (nn.Linear's weight: w.t() is a column-major B, the K-major layout wgmma reads without a transpose), bias [N] or
// None, act "none", "relu" or "gelu" (the exact, erf GELU: torch.nn.functional.gelu's default). matmul13_5's kernel
// with the bias and the activation applied to the fp32 accumulators before C is rounded once.
at::Tensor linear13(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias,
                    c10::string_view act) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2, "x and w must have 2 dimensions (x: [M, K], w: [N, K]), got shapes ",
              shape_str(x.sizes()), " and ", shape_str(w.sizes()));
  TORCH_CHECK(x.size(1) == w.size(1), "x: [M, K] and w: [N, K] must have one K, got shapes ", shape_str(x.sizes()),
              " and ", shape_str(w.sizes()));
  for (const at::Tensor* t : {&x, &w}) {
    const char* name = t == &x ? "x" : "w";
    TORCH_CHECK(KERNELS_ON_DEVICE(*t), name, " must be " KERNELS_DEVICE_WORD ", got a tensor on ", t->device());
    TORCH_CHECK(t->scalar_type() == at::kBFloat16 || t->scalar_type() == at::kHalf, name,
                " must be bfloat16 or float16 (the tensor-core inputs), got ", t->scalar_type());
  }
  TORCH_CHECK(w.scalar_type() == x.scalar_type(), "x and w must have one dtype, got ", x.scalar_type(), " and ",
              w.scalar_type());
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "x and w must be contiguous (row-major), got strides ",
              shape_str(x.strides()), " and ", shape_str(w.strides()));
  TORCH_CHECK(x.size(1) % 8 == 0 && w.size(0) % 8 == 0, "`linear13` reads x and w by TMA and writes y by TMA, whose "
              "rows must be multiples of 16 bytes: K and N must be multiples of 8, got K = ", std::to_string(x.size(1)),
              ", N = ", std::to_string(w.size(0)));
  TORCH_CHECK(aligned16(x) && aligned16(w), "`linear13` needs x and w 16-byte aligned (TMA), got a view that starts "
              "elsewhere: call .contiguous() on a fresh tensor");
  const int code = act == "none" ? EPI_BIAS : act == "relu" ? EPI_BIAS_RELU : act == "gelu" ? EPI_BIAS_GELU : -1;
  TORCH_CHECK(code >= 0, "act must be \"none\", \"relu\" or \"gelu\", got \"", std::string(act), "\"");
  if (bias) {
    const at::Tensor& v = *bias;
    TORCH_CHECK(KERNELS_ON_DEVICE(v), "bias must be " KERNELS_DEVICE_WORD ", got a tensor on ", v.device());
    TORCH_CHECK(v.scalar_type() == x.scalar_type(), "bias must have x's dtype (", x.scalar_type(), "), got ",
                v.scalar_type());
    TORCH_CHECK(v.dim() == 1 && v.size(0) == w.size(0), "bias must have shape [N] = [", std::to_string(w.size(0)),
                "], got ", shape_str(v.sizes()));
    TORCH_CHECK(v.is_contiguous(), "bias must be contiguous, got strides ", shape_str(v.strides()));
  }
  at::Tensor y = at::empty({x.size(0), w.size(0)}, x.options());
  if (y.numel() == 0) return y;
  check_hopper("linear13");  // before K = 0's answer too: the op runs where its kernel runs, or nowhere
  const at::Tensor b = w.t();
  // no bias: zeros, so that one kernel per activation serves both (N values: nothing beside the product)
  const at::Tensor v = bias ? *bias : at::zeros({w.size(0)}, x.options());
  if (x.size(1) == 0) {  // K = 0: the product is zeros; the bias and the activation still apply
    y.copy_(v.expand_as(y));
    if (code == EPI_BIAS_RELU) y.relu_();
    if (code == EPI_BIAS_GELU) y = at::gelu(y);
    return y;
  }
  if (!hopper_args("linear13", x, b, y, true)) return y;
  if (x.scalar_type() == at::kBFloat16) launch_linear<__nv_bfloat16>(x, b, y, v, code);
  else launch_linear<__half>(x, b, y, v, code);
  return y;
}

// C = (A @ B) * scale_a * scale_b in bf16 from e4m3 inputs, as torch._scaled_mm(a, b, scale_a, scale_b,
// out_dtype=torch.bfloat16) computes it: a [M, K] row-major, b [K, N] column-major (b = w.t() of a row-major
// w [N, K]: wgmma reads 8-bit operands K-major only, and so does cuBLAS), scale_a and scale_b float32 scalars on the
// device (one value each: per-tensor scaling). matmul13_5's kernel with e4m3 wgmma (K = 32 an instruction, twice
// the values per byte and per cycle of bf16) and the scales applied in the epilogue.
at::Tensor scaled_mm13(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a, const at::Tensor& scale_b) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "a and b must have 2 dimensions (a: [M, K], b: [K, N]), got shapes ",
              shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  TORCH_CHECK(a.size(1) == b.size(0), "a's columns must equal b's rows (a: [M, K], b: [K, N]), got shapes ",
              shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  for (const at::Tensor* t : {&a, &b, &scale_a, &scale_b}) {
    const char* name = t == &a ? "a" : t == &b ? "b" : t == &scale_a ? "scale_a" : "scale_b";
    TORCH_CHECK(KERNELS_ON_DEVICE(*t), name, " must be " KERNELS_DEVICE_WORD ", got a tensor on ", t->device());
    if (t == &a || t == &b) {
      TORCH_CHECK(t->scalar_type() == at::kFloat8_e4m3fn, name, " must be float8_e4m3fn, got ", t->scalar_type());
      TORCH_CHECK(t->size(0) < (int64_t(1) << 31) && t->size(1) < (int64_t(1) << 31), name,
                  " must have fewer than 2^31 rows and columns, got shape ", shape_str(t->sizes()));
    } else {
      TORCH_CHECK(t->scalar_type() == at::kFloat && t->numel() == 1, name, " must be a float32 tensor of one value "
                  "(a per-tensor scale), got ", t->scalar_type(), " of shape ", shape_str(t->sizes()));
    }
  }
  TORCH_CHECK(a.is_contiguous(), "a must be contiguous (row-major), got strides ", shape_str(a.strides()));
  TORCH_CHECK(b.t().is_contiguous(), "b must be column-major (the transpose of "
              "a contiguous [N, K] tensor, such as w.t()): wgmma reads 8-bit operands K-major only; got strides ",
              shape_str(b.strides()), " for shape ", shape_str(b.sizes()));
  at::Tensor c = at::empty({a.size(0), b.size(1)}, a.options().dtype(at::kBFloat16));
  if (c.numel() == 0) return c;
  check_hopper("scaled_mm13");
  TORCH_CHECK(a.size(1) % 16 == 0 && b.size(1) % 8 == 0, "`scaled_mm13` reads a and b by TMA and writes C by TMA, "
              "whose rows must be multiples of 16 bytes: K must be a multiple of 16 (rows of a and of b.t()) and N of "
              "8 (rows of C in bf16), got K = ", std::to_string(a.size(1)), ", N = ", std::to_string(b.size(1)));
  TORCH_CHECK(aligned16(a) && aligned16(b), "`scaled_mm13` needs a and b 16-byte aligned (TMA), got a view that starts "
              "elsewhere: call .contiguous() on a fresh tensor");
  if (a.size(1) == 0) return c.zero_();
  launch_ws<fp8, true, true, B_COLUMN_MAJOR, EPI_SCALE>(a, b, c, GROUP, nullptr, ptr<float>(scale_a),
                                                        ptr<float>(scale_b));
  return c;
}

// ---------------------------------------------------------------------------------------------
// Registration.
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("matmul13_1(Tensor a, Tensor b, Tensor(a!) c) -> ()");
  m.def("matmul13_2(Tensor a, Tensor b, Tensor(a!) c) -> ()");
  m.def("matmul13_3(Tensor a, Tensor b, Tensor(a!) c) -> ()");
  m.def("matmul13_4(Tensor a, Tensor b, Tensor(a!) c) -> ()");
  m.def("matmul13_5(Tensor a, Tensor b, Tensor(a!) c) -> ()");
  m.def("matmul13_6(Tensor a, Tensor b, Tensor(a!) c) -> ()");
#ifdef MATMUL13_SWEEP
  m.def("matmul13_sweep(Tensor a, Tensor b, Tensor(a!) c, int variant, int group) -> ()");
#endif
  m.def("matmul13(Tensor a, Tensor b) -> Tensor");
  m.def("linear13(Tensor x, Tensor w, Tensor? bias=None, str act='none') -> Tensor");
  m.def("scaled_mm13(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b) -> Tensor");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("matmul13_1", &matmul13_1);
  m.impl("matmul13_2", &matmul13_2);
  m.impl("matmul13_3", &matmul13_3);
  m.impl("matmul13_4", &matmul13_4);
  m.impl("matmul13_5", &matmul13_5);
  m.impl("matmul13_6", &matmul13_6);
#ifdef MATMUL13_SWEEP
  m.impl("matmul13_sweep", &matmul13_sweep);
#endif
  m.impl("matmul13", &matmul13);
  m.impl("linear13", &linear13);
  m.impl("scaled_mm13", &scaled_mm13);
}
