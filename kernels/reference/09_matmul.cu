// 09_matmul.cu: C = A @ B for row-major matrices, variant by variant, from a naive kernel toward cuBLAS,
// then on tensor cores. Load with `ext = load("09")`; every variant is an out-variant: ext.matmul5(a, b, c).
//
//   matmul1   a thread per element of C, threadIdx.x walking DOWN a column: a warp's loads are 32 rows apart
//   matmul2   the same with threadIdx.x walking ALONG a row of C: B and C accesses coalesce, A is a broadcast
//   matmul3   32x32 tiles of A and B staged in shared memory: each value read from DRAM once per tile, not 32 times
//   matmul4   1-D register blocking: a thread computes 8 elements of a column of C, reusing each B value 8 times
//   matmul5   2-D register blocking: a thread computes an 8x8 block of C as outer products of registers
//   matmul6   16-byte (float4) loads of A and B, the A tile stored transposed so its reads are float4 too
//   matmul7   warp tiling: each warp owns a 64x64 region of C, so a warp's shared-memory reads stay compact
//   matmul8   tiles retuned for the H100 and two shared-memory buffers: the next tile loads during the math
//   matmul9   tensor cores (WMMA): bf16 or fp16 A and B, fp32 accumulation, fragments from shared-memory tiles
//   matmul10  matmul9 with two shared-memory buffers and two blocks per SM
//   matmul11  tensor cores on float32 inputs rounded to TF32 (10 mantissa bits), fp32 accumulation
//   matmul12  WMMA fed by asynchronous copies (cp.async) through a 4-stage shared-memory pipeline, 64x64 warp tiles
//   matmul    functional form: matmul8 for float32, matmul12 for bfloat16 and float16
//
// Conventions, fixed for every kernel: A is [M, K], B is [K, N], C is [M, N], all row-major and contiguous,
// so element (r, c) of a matrix with `cols` columns lives at r * cols + c. Threads with consecutive
// threadIdx.x (the lanes of a warp) own consecutive COLUMNS of C: they read consecutive elements of a row
// of B and write consecutive elements of a row of C (coalesced). blockIdx.x walks the column tiles of C,
// blockIdx.y its row tiles. M, N and K may be any size: every load past an edge reads 0 instead, every
// store past an edge is skipped. FLOPs are 2 M N K (a multiply and an add per term).
//
// The fp32 variants take float32 tensors; matmul9, matmul10 and matmul12 take bfloat16 or float16 (C in the same
// dtype, rounded once from the fp32 accumulator, as torch.matmul does); matmul11 takes float32.
// Every variant runs from compute capability 7.5 (a T4) on, but for those that need 8.0: bf16 and TF32 tensor cores
// (matmul9 and matmul10 in bfloat16, matmul11) and a block of more than 64 KB of shared memory (matmul12). Built for
// an older GPU their device code traps and their launchers refuse it (kernels/lessons/lesson09.py declares the same
// gates, and the toolkit runs them on the simulator there).

// ---------------------------------------------------------------------------------------------
// Includes.
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>
#include <cuda_pipeline.h>
#include <mma.h>

// ---------------------------------------------------------------------------------------------
// Device helpers: 16-byte loads and stores that read zeros and skip writes past a row's end.

// 4 floats of a row from column c (c a multiple of 4); columns at or past `cols` read as 0.
// VEC: the row starts 16-byte aligned and cols is a multiple of 4, so a group is all in or all out
// and one 16-byte load fetches it; otherwise each float is loaded alone.
template <bool VEC>
__device__ __forceinline__ float4 load4(const float* row, int c, int cols) {
  if (VEC) return c < cols ? *reinterpret_cast<const float4*>(row + c) : make_float4(0.f, 0.f, 0.f, 0.f);
  float4 v;
  v.x = c < cols ? row[c] : 0.f;
  v.y = c + 1 < cols ? row[c + 1] : 0.f;
  v.z = c + 2 < cols ? row[c + 2] : 0.f;
  v.w = c + 3 < cols ? row[c + 3] : 0.f;
  return v;
}

// Stores 4 floats at columns c..c+3 of a row, skipping those at or past `cols`.
template <bool VEC>
__device__ __forceinline__ void store4(float* row, int c, int cols, float4 v) {
  if (VEC) {
    if (c < cols) *reinterpret_cast<float4*>(row + c) = v;
    return;
  }
  if (c < cols) row[c] = v.x;
  if (c + 1 < cols) row[c + 1] = v.y;
  if (c + 2 < cols) row[c + 2] = v.z;
  if (c + 3 < cols) row[c + 3] = v.w;
}

// ---------------------------------------------------------------------------------------------
// Kernels: the fp32 ladder.

// matmul_kernel1: thread (x, y) of block (bx, by) owns C[32 bx + x][32 by + y], a dot product of length K.
// threadIdx.x walks down the rows, so a warp's 32 loads of A are K floats apart (32 sectors each) and its
// stores to C are N floats apart; the B load is one address (a broadcast). Bounded by those scattered loads.
__global__ void matmul_kernel1(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                               int M, int N, int K) {
  const int m = blockIdx.x * 32 + threadIdx.x;
  const int n = blockIdx.y * 32 + threadIdx.y;
  if (m >= M || n >= N) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += A[(int64_t)m * K + k] * B[(int64_t)k * N + n];
  C[(int64_t)m * N + n] = acc;
}

// matmul_kernel2: thread (x, y) of block (bx, by) owns C[32 by + y][32 bx + x]: the lanes of a warp share a
// row of A (one broadcast load) and read 32 consecutive floats of a row of B (one 128-byte line).
// Each thread still reads 2K floats for 2K FLOPs: bounded by L1/L2 bandwidth, 0.25 FLOP per byte loaded.
__global__ void matmul_kernel2(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                               int M, int N, int K) {
  const int m = blockIdx.y * 32 + threadIdx.y;
  const int n = blockIdx.x * 32 + threadIdx.x;
  if (m >= M || n >= N) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += A[(int64_t)m * K + k] * B[(int64_t)k * N + n];
  C[(int64_t)m * N + n] = acc;
}

// matmul_kernel3: block (bx, by) owns the TILE x TILE tile of C at (TILE by, TILE bx); thread (x, y) one
// element of it. Per step along K the block copies a TILE x TILE tile of A and of B into shared memory
// (one float each per thread) and every thread reads TILE values of each from there. DRAM traffic falls
// by TILE; bounded now by shared-memory loads: 2 per FMA.
template <int TILE>
__global__ void __launch_bounds__(TILE * TILE) matmul_kernel3(const float* __restrict__ A, const float* __restrict__ B,
                                                              float* __restrict__ C, int M, int N, int K) {
  static_assert(TILE * TILE <= 1024, "a block has at most 1024 threads");
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int m = blockIdx.y * TILE + ty, n = blockIdx.x * TILE + tx;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += TILE) {
    // Threads past an edge load zeros (and stay: every thread must reach both barriers).
    As[ty][tx] = m < M && k0 + tx < K ? A[(int64_t)m * K + k0 + tx] : 0.f;
    Bs[ty][tx] = k0 + ty < K && n < N ? B[(int64_t)(k0 + ty) * N + n] : 0.f;
    __syncthreads();  // wait until the tile is loaded
#pragma unroll
    for (int kk = 0; kk < TILE; ++kk) acc += As[ty][kk] * Bs[kk][tx];
    __syncthreads();  // everyone is done with this tile before the next one overwrites it
  }
  if (m < M && n < N) C[(int64_t)m * N + n] = acc;
}

// matmul_kernel4: block owns a BM x BN tile of C; thread t owns TM consecutive rows of column t % BN.
// Each B value read from shared memory feeds TM FMAs (the A reads are broadcasts: a warp shares its
// rows), so shared loads per FMA fall from 2 to about 1 + 1/TM. Each thread loads one float of each tile.
template <int BM, int BN, int BK, int TM>
__global__ void __launch_bounds__(BM * BN / TM) matmul_kernel4(const float* __restrict__ A, const float* __restrict__ B,
                                                               float* __restrict__ C, int M, int N, int K) {
  constexpr int THREADS = BM * BN / TM;
  static_assert(BM % TM == 0, "TM divides the tile's rows");
  static_assert(BM * BK == THREADS && BK * BN == THREADS, "each thread loads exactly one float of each tile");
  static_assert(BN % 32 == 0, "a warp's threads share their rows of C");
  __shared__ float As[BM][BK];
  __shared__ float Bs[BK][BN];
  const int tid = threadIdx.x;
  const int col = tid % BN, row0 = (tid / BN) * TM;  // this thread's column and first row in the tile
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int ar = tid / BK, ac = tid % BK, br = tid / BN, bc = tid % BN;  // the floats this thread loads
  float acc[TM] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
    As[ar][ac] = m0 + ar < M && k0 + ac < K ? A[(int64_t)(m0 + ar) * K + k0 + ac] : 0.f;
    Bs[br][bc] = k0 + br < K && n0 + bc < N ? B[(int64_t)(k0 + br) * N + n0 + bc] : 0.f;
    __syncthreads();  // wait until the tiles are loaded
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      const float b = Bs[kk][col];  // one shared load, TM uses
#pragma unroll
      for (int i = 0; i < TM; ++i) acc[i] += As[row0 + i][kk] * b;
    }
    __syncthreads();  // done with the tiles before the next load
  }
  const int n = n0 + col;
#pragma unroll
  for (int i = 0; i < TM; ++i)
    if (m0 + row0 + i < M && n < N) C[(int64_t)(m0 + row0 + i) * N + n] = acc[i];
}

// matmul_kernel5: block owns a BM x BN tile of C; thread t owns the TM x TN block at rows TM (t / (BN/TN)),
// columns TN (t % (BN/TN)). Per step kk it loads TM values of A and TN of B into registers and adds their
// outer product: TM + TN shared loads for TM * TN FMAs (16 for 64 here). Bounded by the instruction issue
// of the loads and FMAs, and by the shared-memory stores of the tiles.
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN)) matmul_kernel5(const float* __restrict__ A, const float* __restrict__ B,
                                                                        float* __restrict__ C, int M, int N, int K) {
  constexpr int THREADS = (BM / TM) * (BN / TN);
  static_assert(BM % TM == 0 && BN % TN == 0, "the thread blocks tile the block's tile exactly");
  static_assert((BM * BK) % THREADS == 0 && (BK * BN) % THREADS == 0, "every thread loads as many floats as the others");
  __shared__ float As[BM][BK];
  __shared__ float Bs[BK][BN];
  const int tid = threadIdx.x;
  const int tr = (tid / (BN / TN)) * TM, tc = (tid % (BN / TN)) * TN;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float acc[TM][TN] = {};
  float ra[TM], rb[TN];
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int i = tid; i < BM * BK; i += THREADS) {
      const int r = i / BK, c = i % BK;
      As[r][c] = m0 + r < M && k0 + c < K ? A[(int64_t)(m0 + r) * K + k0 + c] : 0.f;
    }
    for (int i = tid; i < BK * BN; i += THREADS) {
      const int r = i / BN, c = i % BN;  // consecutive threads, consecutive columns: coalesced
      Bs[r][c] = k0 + r < K && n0 + c < N ? B[(int64_t)(k0 + r) * N + n0 + c] : 0.f;
    }
    __syncthreads();  // wait until the tiles are loaded
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
#pragma unroll
      for (int i = 0; i < TM; ++i) ra[i] = As[tr + i][kk];
#pragma unroll
      for (int j = 0; j < TN; ++j) rb[j] = Bs[kk][tc + j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];  // the outer product of a column of A and a row of B
    }
    __syncthreads();  // done with the tiles before the next load
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int m = m0 + tr + i;
#pragma unroll
    for (int j = 0; j < TN; ++j)
      if (m < M && n0 + tc + j < N) C[(int64_t)m * N + n0 + tc + j] = acc[i][j];
  }
}

// matmul_kernel6: matmul_kernel5's mapping with 16-byte moves. Global loads of A and B are float4 (4 columns
// of a row); the A tile is stored transposed (As[k][m]), so a thread's TM values of A for one k are
// consecutive and come in TM / 4 float4 shared loads, like its TN values of B. C is written as float4.
// VEC: K and N multiples of 4 and A, B, C 16-byte aligned; otherwise the same kernel loads floats one by one.
template <int BM, int BN, int BK, int TM, int TN, bool VEC>
__global__ void __launch_bounds__((BM / TM) * (BN / TN)) matmul_kernel6(const float* __restrict__ A, const float* __restrict__ B,
                                                                        float* __restrict__ C, int M, int N, int K) {
  constexpr int THREADS = (BM / TM) * (BN / TN);
  static_assert(BM % TM == 0 && BN % TN == 0, "the thread blocks tile the block's tile exactly");
  static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0 && BN % 4 == 0, "the tiles move in groups of 4 floats");
  static_assert((BM * BK / 4) % THREADS == 0 && (BK * BN / 4) % THREADS == 0, "every thread loads as many float4 as the others");
  __shared__ alignas(16) float As[BK][BM];  // transposed: As[k][m] = A[m0 + m][k0 + k]
  __shared__ alignas(16) float Bs[BK][BN];
  const int tid = threadIdx.x;
  const int tr = (tid / (BN / TN)) * TM, tc = (tid % (BN / TN)) * TN;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float acc[TM][TN] = {};
  float ra[TM], rb[TN];
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int i = tid; i < BM * BK / 4; i += THREADS) {
      const int r = i / (BK / 4), c = (i % (BK / 4)) * 4;
      const float4 v = m0 + r < M ? load4<VEC>(A + (int64_t)(m0 + r) * K, k0 + c, K) : make_float4(0.f, 0.f, 0.f, 0.f);
      As[c][r] = v.x;  // the transpose: 4 stores a column apart
      As[c + 1][r] = v.y;
      As[c + 2][r] = v.z;
      As[c + 3][r] = v.w;
    }
    for (int i = tid; i < BK * BN / 4; i += THREADS) {
      const int r = i / (BN / 4), c = (i % (BN / 4)) * 4;
      const float4 v = k0 + r < K ? load4<VEC>(B + (int64_t)(k0 + r) * N, n0 + c, N) : make_float4(0.f, 0.f, 0.f, 0.f);
      *reinterpret_cast<float4*>(&Bs[r][c]) = v;
    }
    __syncthreads();  // wait until the tiles are loaded
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
#pragma unroll
      for (int i = 0; i < TM; i += 4) *reinterpret_cast<float4*>(&ra[i]) = *reinterpret_cast<const float4*>(&As[kk][tr + i]);
#pragma unroll
      for (int j = 0; j < TN; j += 4) *reinterpret_cast<float4*>(&rb[j]) = *reinterpret_cast<const float4*>(&Bs[kk][tc + j]);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
    }
    __syncthreads();  // done with the tiles before the next load
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int m = m0 + tr + i;
    if (m >= M) break;
#pragma unroll
    for (int j = 0; j < TN; j += 4)
      store4<VEC>(C + (int64_t)m * N, n0 + tc + j, N, make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
  }
}

// The warp-tiled kernels' shapes: a block tile BM x BN x BK, cut into warp tiles WM x WN; each warp tile
// into WMITER x WNITER sub-tiles, which the 32 lanes cover with TM x TN blocks of C each (so a lane owns
// WMITER * WNITER * TM * TN values). STAGES: shared-memory buffers of the A and B tiles (1 or 2).
// MIN_BLOCKS: blocks that must fit on an SM at once (__launch_bounds__ caps the registers to allow it).
template <int BM_, int BN_, int BK_, int WM_, int WN_, int WMITER_, int WNITER_, int TM_, int TN_, int STAGES_,
          int MIN_BLOCKS_ = 1>
struct WarpTiling {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, WMITER = WMITER_, WNITER = WNITER_;
  static constexpr int TM = TM_, TN = TN_, STAGES = STAGES_, MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int WSUBM = WM / WMITER, WSUBN = WN / WNITER;  // a sub-tile
  static constexpr int WARPS = (BM / WM) * (BN / WN), THREADS = 32 * WARPS;
  static constexpr int A_LOADS = BM * BK / 4 / THREADS, B_LOADS = BK * BN / 4 / THREADS;  // float4 per thread per tile
  static_assert(BM % WM == 0 && BN % WN == 0, "the warp tiles cover the block tile exactly");
  static_assert(WM % WMITER == 0 && WN % WNITER == 0, "the sub-tiles cover the warp tile exactly");
  static_assert(WSUBM % TM == 0 && WSUBN % TN == 0 && (WSUBM / TM) * (WSUBN / TN) == 32,
                "the 32 lanes of a warp cover a sub-tile exactly");
  static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0 && BN % 4 == 0, "the tiles move in groups of 4 floats");
  static_assert(A_LOADS * THREADS * 4 == BM * BK && B_LOADS * THREADS * 4 == BK * BN,
                "every thread loads as many float4 of each tile as the others");
  static_assert(STAGES == 1 || STAGES == 2, "one or two shared-memory buffers");
  static_assert(THREADS <= 1024, "a block has at most 1024 threads");
  static_assert(STAGES * (BM + BN) * BK * 4 <= 48 * 1024, "static shared memory is at most 48 KB");
};

// Copies the A and B tiles at k0 into registers (float4 each, zeros past the edges) ...
template <class W, bool VEC>
__device__ __forceinline__ void load_tiles(const float* __restrict__ A, const float* __restrict__ B, int M, int N, int K,
                                           int m0, int n0, int k0, float4 (&a)[W::A_LOADS], float4 (&b)[W::B_LOADS]) {
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int l = 0; l < W::A_LOADS; ++l) {
    const int i = threadIdx.x + l * W::THREADS, r = i / (W::BK / 4), c = (i % (W::BK / 4)) * 4;
    a[l] = m0 + r < M ? load4<VEC>(A + (int64_t)(m0 + r) * K, k0 + c, K) : zero;
  }
#pragma unroll
  for (int l = 0; l < W::B_LOADS; ++l) {
    const int i = threadIdx.x + l * W::THREADS, r = i / (W::BN / 4), c = (i % (W::BN / 4)) * 4;
    b[l] = k0 + r < K ? load4<VEC>(B + (int64_t)(k0 + r) * N, n0 + c, N) : zero;
  }
}

// ... and from registers into shared memory, A transposed.
template <class W>
__device__ __forceinline__ void store_tiles(float (*As)[W::BM], float (*Bs)[W::BN], const float4 (&a)[W::A_LOADS],
                                            const float4 (&b)[W::B_LOADS]) {
#pragma unroll
  for (int l = 0; l < W::A_LOADS; ++l) {
    const int i = threadIdx.x + l * W::THREADS, r = i / (W::BK / 4), c = (i % (W::BK / 4)) * 4;
    As[c][r] = a[l].x;
    As[c + 1][r] = a[l].y;
    As[c + 2][r] = a[l].z;
    As[c + 3][r] = a[l].w;
  }
#pragma unroll
  for (int l = 0; l < W::B_LOADS; ++l) {
    const int i = threadIdx.x + l * W::THREADS, r = i / (W::BN / 4), c = (i % (W::BN / 4)) * 4;
    *reinterpret_cast<float4*>(&Bs[r][c]) = b[l];
  }
}

// matmul_warptile_kernel (matmul7, matmul8): block owns a BM x BN tile of C, warp w a WM x WN region of it,
// lane l a TM x TN block in each of the warp's sub-tiles. A warp's shared-memory reads for one k cover
// only its own WSUBM + WSUBN values per sub-tile (few addresses, mostly broadcasts), and each thread
// keeps WMITER*TM + WNITER*TN operands for WMITER*WNITER*TM*TN FMAs in registers. With STAGES = 2 the
// next tiles' global loads are issued before the math on the current ones and land in the other buffer:
// one barrier per step instead of two, and DRAM latency hidden behind the FMAs.
template <class W, bool VEC>
__global__ void __launch_bounds__(W::THREADS, W::MIN_BLOCKS) matmul_warptile_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                                                     float* __restrict__ C, int M, int N, int K) {
  __shared__ alignas(16) float As[W::STAGES][W::BK][W::BM];  // transposed: As[s][k][m]
  __shared__ alignas(16) float Bs[W::STAGES][W::BK][W::BN];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / (W::BN / W::WN)) * W::WM, wn = (warp % (W::BN / W::WN)) * W::WN;  // the warp's region
  const int lm = (lane / (W::WSUBN / W::TN)) * W::TM, ln = (lane % (W::WSUBN / W::TN)) * W::TN;  // the lane's block
  const int m0 = blockIdx.y * W::BM, n0 = blockIdx.x * W::BN;
  float acc[W::WMITER * W::TM][W::WNITER * W::TN] = {};
  float ra[W::WMITER * W::TM], rb[W::WNITER * W::TN];
  float4 a[W::A_LOADS], b[W::B_LOADS];
  const int steps = (K + W::BK - 1) / W::BK;

  if (W::STAGES == 2 && steps > 0) {
    load_tiles<W, VEC>(A, B, M, N, K, m0, n0, 0, a, b);
    store_tiles<W>(As[0], Bs[0], a, b);
    __syncthreads();  // the first tiles are in buffer 0
  }
  for (int s = 0; s < steps; ++s) {
    const int cur = W::STAGES == 2 ? s % 2 : 0;
    if (W::STAGES == 1) {
      load_tiles<W, VEC>(A, B, M, N, K, m0, n0, s * W::BK, a, b);
      store_tiles<W>(As[0], Bs[0], a, b);
      __syncthreads();  // wait until the tiles are loaded
    } else if (s + 1 < steps) {
      load_tiles<W, VEC>(A, B, M, N, K, m0, n0, (s + 1) * W::BK, a, b);  // in flight during the math below
    }
#pragma unroll
    for (int kk = 0; kk < W::BK; ++kk) {
#pragma unroll
      for (int i = 0; i < W::WMITER; ++i)
#pragma unroll
        for (int t = 0; t < W::TM; t += 4)
          *reinterpret_cast<float4*>(&ra[i * W::TM + t]) =
              *reinterpret_cast<const float4*>(&As[cur][kk][wm + i * W::WSUBM + lm + t]);
#pragma unroll
      for (int j = 0; j < W::WNITER; ++j)
#pragma unroll
        for (int t = 0; t < W::TN; t += 4)
          *reinterpret_cast<float4*>(&rb[j * W::TN + t]) =
              *reinterpret_cast<const float4*>(&Bs[cur][kk][wn + j * W::WSUBN + ln + t]);
#pragma unroll
      for (int i = 0; i < W::WMITER * W::TM; ++i)
#pragma unroll
        for (int j = 0; j < W::WNITER * W::TN; ++j) acc[i][j] += ra[i] * rb[j];
    }
    if (W::STAGES == 2 && s + 1 < steps)
      store_tiles<W>(As[1 - cur], Bs[1 - cur], a, b);  // the other buffer: its last readers passed the barrier below, one step ago
    __syncthreads();  // STAGES 1: done with the tiles before the next load; 2: the next tiles are in
  }
#pragma unroll
  for (int i = 0; i < W::WMITER; ++i)
#pragma unroll
    for (int t = 0; t < W::TM; ++t) {
      const int m = m0 + wm + i * W::WSUBM + lm + t;
      if (m >= M) continue;
#pragma unroll
      for (int j = 0; j < W::WNITER; ++j)
#pragma unroll
        for (int u = 0; u < W::TN; u += 4) {
          const float* v = &acc[i * W::TM + t][j * W::TN + u];
          store4<VEC>(C + (int64_t)m * N, n0 + wn + j * W::WSUBN + ln + u, N, make_float4(v[0], v[1], v[2], v[3]));
        }
    }
}

// matmul7: 128x128x16 block tiles, 4 warps of 64x64, each lane 2x2 sub-tiles of 8x4: the shape that
// suits GPUs with 100 KB of shared memory and 64K registers per SM at 2 to 3 blocks each.
using Warp7 = WarpTiling<128, 128, 16, 64, 64, 2, 2, 8, 4, 1>;
// matmul8, for the H100 (227 KB of shared memory and 64K registers per SM): 8 warps of 64x32 in a 128x128
// tile, each lane two 8x4 blocks (64 values, so fewer registers than matmul7's 128), at most 128 registers
// per thread so that two blocks (16 warps) share an SM and hide each other's latency (ptxas: no spills),
// and two 16 KB buffers so that the loads of step s + 1 overlap the math of step s.
using Warp8 = WarpTiling<128, 128, 16, 64, 32, 2, 1, 8, 4, 2, 2>;

// ---------------------------------------------------------------------------------------------
// Kernels: tensor cores (WMMA).
namespace wmma = nvcuda::wmma;

// The tensor-core kernels' shapes: block tile BM x BN x BK, warp tiles WM x WN made of FM x FN fragments
// of FRAG_M x FRAG_N x FRAG_K; STAGES shared buffers; T the input type (__nv_bfloat16, __half, or float for TF32).
template <typename T, int BM_, int BN_, int BK_, int WM_, int WN_, int STAGES_, int MIN_BLOCKS_ = 1>
struct WmmaTiling {
  static constexpr bool TF32 = sizeof(T) == 4;
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, STAGES = STAGES_, MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int FRAG_M = 16, FRAG_N = 16, FRAG_K = TF32 ? 8 : 16;  // WMMA's shapes for these types
  static constexpr int FM = WM / FRAG_M, FN = WN / FRAG_N;                   // fragments per warp tile
  static constexpr int WARPS = (BM / WM) * (BN / WN), THREADS = 32 * WARPS;
  static constexpr int VEC = 16 / sizeof(T);                                 // values per 16-byte move
  static constexpr int PAD = VEC;  // 16 bytes of padding per shared row: rows start on different banks
  static constexpr int LDA = BK + PAD, LDB = BN + PAD;  // shared row lengths, multiples of 16 bytes as WMMA requires
  static constexpr int A_LOADS = BM * BK / VEC / THREADS, B_LOADS = BK * BN / VEC / THREADS;
  static_assert(BM % WM == 0 && BN % WN == 0 && WM % FRAG_M == 0 && WN % FRAG_N == 0 && BK % FRAG_K == 0,
                "fragments cover the warp tiles and the warp tiles the block tile");
  static_assert(BK % VEC == 0 && BN % VEC == 0, "the tiles move in 16-byte groups");
  static_assert(A_LOADS * THREADS * VEC == BM * BK && B_LOADS * THREADS * VEC == BK * BN,
                "every thread moves as many 16-byte groups of each tile as the others");
  static_assert((LDA * sizeof(T)) % 16 == 0 && (LDB * sizeof(T)) % 16 == 0, "WMMA's ldm is a multiple of 16 bytes");
  static_assert((FRAG_M * LDA * sizeof(T)) % 32 == 0 && (FRAG_K * LDB * sizeof(T)) % 32 == 0,
                "each fragment starts 32-byte aligned, as load_matrix_sync requires");
  static_assert(STAGES == 1 || STAGES == 2, "one or two shared-memory buffers");
  static constexpr int SHARED = STAGES * (BM * LDA + BK * LDB) * (int)sizeof(T) + WARPS * FRAG_M * FRAG_N * 4;
  static_assert(SHARED <= 48 * 1024, "static shared memory is at most 48 KB");
};

template <typename T>
struct alignas(16) Vec16 {
  T v[16 / sizeof(T)];
};

// VEC values of a row from column c (a multiple of VEC); past `cols` they read as 0. ALIGNED: the row
// starts 16-byte aligned and cols is a multiple of VEC, so one 16-byte load fetches the group.
template <typename T, bool ALIGNED>
__device__ __forceinline__ Vec16<T> load16(const T* row, int c, int cols) {
  Vec16<T> r;
  constexpr int n = 16 / sizeof(T);
  if (ALIGNED && c < cols) {
    const uint4 raw = *reinterpret_cast<const uint4*>(row + c);
    memcpy(&r, &raw, 16);
    return r;
  }
#pragma unroll
  for (int e = 0; e < n; ++e) r.v[e] = c + e < cols ? row[c + e] : from_float<T>(0.f);
  return r;
}

template <class W, typename T, bool ALIGNED>
__device__ __forceinline__ void wmma_load_tiles(const T* __restrict__ A, const T* __restrict__ B, int M, int N, int K, int m0,
                                                int n0, int k0, Vec16<T> (&a)[W::A_LOADS], Vec16<T> (&b)[W::B_LOADS]) {
#pragma unroll
  for (int l = 0; l < W::A_LOADS; ++l) {
    const int i = threadIdx.x + l * W::THREADS, r = i / (W::BK / W::VEC), c = (i % (W::BK / W::VEC)) * W::VEC;
    a[l] = load16<T, ALIGNED>(A + (int64_t)(m0 + r) * K, k0 + c, m0 + r < M ? K : 0);  // a row past M: cols 0, all zeros
  }
#pragma unroll
  for (int l = 0; l < W::B_LOADS; ++l) {
    const int i = threadIdx.x + l * W::THREADS, r = i / (W::BN / W::VEC), c = (i % (W::BN / W::VEC)) * W::VEC;
    b[l] = load16<T, ALIGNED>(B + (int64_t)(k0 + r) * N, n0 + c, k0 + r < K ? N : 0);
  }
}

template <class W, typename T>
__device__ __forceinline__ void wmma_store_tiles(T* As, T* Bs, const Vec16<T> (&a)[W::A_LOADS], const Vec16<T> (&b)[W::B_LOADS]) {
#pragma unroll
  for (int l = 0; l < W::A_LOADS; ++l) {
    const int i = threadIdx.x + l * W::THREADS, r = i / (W::BK / W::VEC), c = (i % (W::BK / W::VEC)) * W::VEC;
    memcpy(&As[r * W::LDA + c], &a[l], 16);
  }
#pragma unroll
  for (int l = 0; l < W::B_LOADS; ++l) {
    const int i = threadIdx.x + l * W::THREADS, r = i / (W::BN / W::VEC), c = (i % (W::BN / W::VEC)) * W::VEC;
    memcpy(&Bs[r * W::LDB + c], &b[l], 16);
  }
}

// A warp's FM x FN accumulator fragments (fp32), and one step of the product: acc += (the warp's WM rows of
// the BM x BK tile `as`) x (its WN columns of the BK x BN tile `bs`), FM + FN fragment loads from shared
// memory for FM x FN mma_syncs per FRAG_K. TF32: float inputs rounded to TF32 in the fragments.
template <class W>
using Accumulators = wmma::fragment<wmma::accumulator, W::FRAG_M, W::FRAG_N, W::FRAG_K, float>[W::FM][W::FN];

template <class W>
__device__ __forceinline__ void zero_accumulators(Accumulators<W>& acc) {
#pragma unroll
  for (int i = 0; i < W::FM; ++i)
#pragma unroll
    for (int j = 0; j < W::FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
}

// bf16 fragments from shared memory by the PTX that load_matrix_sync stands for (wmma.load), with the shared
// state space named: nvcc 13 infers it for fp16 fragments (and emits ldmatrix) but not for bf16 ones, which
// become generic 4-byte loads plus movmatrix transposes. The registers are the fragment's storage, in order.
// The simulator (no PTX) and any other fragment take load_matrix_sync itself.
template <class Frag, typename T>
__device__ __forceinline__ void load_fragment_shared(Frag& f, const T* p, unsigned ldm) { wmma::load_matrix_sync(f, p, ldm); }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
template <class Use>  // wmma::matrix_a or wmma::matrix_b
__device__ __forceinline__ void load_fragment_shared(wmma::fragment<Use, 16, 16, 16, __nv_bfloat16, wmma::row_major>& f,
                                                     const __nv_bfloat16* p, unsigned ldm) {
  static_assert(sizeof(f.x) == 16, "a bf16 m16n16k16 A or B fragment is 4 registers");
  const unsigned at = (unsigned)__cvta_generic_to_shared(p);
  unsigned r[4];
  if constexpr (std::is_same<Use, wmma::matrix_a>::value)
    asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at), "r"(ldm));
  else
    asm volatile("wmma.load.b.sync.aligned.row.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at), "r"(ldm));
  memcpy(f.x, r, 16);
}
#endif

// TF32 fragments (float inputs rounded to 10 mantissa bits) exist from sm_80 on. Compiled for an older GPU, where
// the kernels that take float trap (tensor_core_arch<float>), these two are only declared.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
using Tf32 = wmma::precision::tf32;
__device__ __forceinline__ float round_to_tf32(float x) { return wmma::__float_to_tf32(x); }
#else
struct Tf32;
__device__ float round_to_tf32(float x);
#endif

// SHARED_PTX: the fragments come through load_fragment_shared (bf16: named shared loads) instead of
// load_matrix_sync.
template <class W, typename T, bool SHARED_PTX = false>
__device__ __forceinline__ void wmma_step(const T* as, const T* bs, int wm, int wn, Accumulators<W>& acc) {
  using In = typename std::conditional<W::TF32, Tf32, T>::type;
  wmma::fragment<wmma::matrix_a, W::FRAG_M, W::FRAG_N, W::FRAG_K, In, wmma::row_major> fa[W::FM];
  wmma::fragment<wmma::matrix_b, W::FRAG_M, W::FRAG_N, W::FRAG_K, In, wmma::row_major> fb;
#pragma unroll
  for (int kk = 0; kk < W::BK; kk += W::FRAG_K) {
#pragma unroll
    for (int i = 0; i < W::FM; ++i) {
      if constexpr (SHARED_PTX) load_fragment_shared(fa[i], &as[(wm + i * W::FRAG_M) * W::LDA + kk], W::LDA);
      else wmma::load_matrix_sync(fa[i], &as[(wm + i * W::FRAG_M) * W::LDA + kk], W::LDA);
      if constexpr (W::TF32)
        for (int e = 0; e < fa[i].num_elements; ++e) fa[i].x[e] = round_to_tf32(fa[i].x[e]);
    }
#pragma unroll
    for (int j = 0; j < W::FN; ++j) {
      if constexpr (SHARED_PTX) load_fragment_shared(fb, &bs[kk * W::LDB + wn + j * W::FRAG_N], W::LDB);
      else wmma::load_matrix_sync(fb, &bs[kk * W::LDB + wn + j * W::FRAG_N], W::LDB);
      if constexpr (W::TF32)
        for (int e = 0; e < fb.num_elements; ++e) fb.x[e] = round_to_tf32(fb.x[e]);
#pragma unroll
      for (int i = 0; i < W::FM; ++i) wmma::mma_sync(acc[i][j], fa[i], fb, acc[i][j]);
    }
  }
}

// matmul_wmma_kernel (matmul9, matmul10, matmul11): block owns a BM x BN tile of C, warp w a WM x WN region,
// held as FM x FN accumulator fragments (fp32) spread over the warp's registers by the hardware. Per step
// the block stages BM x BK of A and BK x BN of B in shared memory (16-byte moves); each warp loads its
// fragments from there (load_matrix_sync) and issues FM x FN mma_sync. TF32: float inputs rounded to TF32
// in the fragments. The epilogue goes through a per-warp 16x16 float tile in shared memory, so edges
// and the conversion to T are handled per element. Bounded (at these tile sizes) by the shared-memory
// loads of the fragments: Hopper's fastest kernels use wgmma with operands straight from shared memory.
template <class W, typename T, bool ALIGNED>
__global__ void __launch_bounds__(W::THREADS, W::MIN_BLOCKS) matmul_wmma_kernel(const T* __restrict__ A, const T* __restrict__ B,
                                                                 T* __restrict__ C, int M, int N, int K) {
  if constexpr (!arch_at_least(tensor_core_arch<T>())) {
    __trap();  // compiled for a GPU whose tensor cores do not take T: the launcher refuses it first
  } else {
    __shared__ alignas(32) T As[W::STAGES][W::BM * W::LDA];
    __shared__ alignas(32) T Bs[W::STAGES][W::BK * W::LDB];
    __shared__ alignas(32) float Cs[W::WARPS][W::FRAG_M * W::FRAG_N];  // a warp's staging tile for the epilogue
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = (warp / (W::BN / W::WN)) * W::WM, wn = (warp % (W::BN / W::WN)) * W::WN;
    const int m0 = blockIdx.y * W::BM, n0 = blockIdx.x * W::BN;

    Accumulators<W> acc;
    zero_accumulators<W>(acc);
    Vec16<T> a[W::A_LOADS], b[W::B_LOADS];
    const int steps = (K + W::BK - 1) / W::BK;

    if (W::STAGES == 2 && steps > 0) {
      wmma_load_tiles<W, T, ALIGNED>(A, B, M, N, K, m0, n0, 0, a, b);
      wmma_store_tiles<W, T>(As[0], Bs[0], a, b);
      __syncthreads();  // the first tiles are in buffer 0
    }
    for (int s = 0; s < steps; ++s) {
      const int cur = W::STAGES == 2 ? s % 2 : 0;
      if (W::STAGES == 1) {
        wmma_load_tiles<W, T, ALIGNED>(A, B, M, N, K, m0, n0, s * W::BK, a, b);
        wmma_store_tiles<W, T>(As[0], Bs[0], a, b);
        __syncthreads();  // wait until the tiles are loaded
      } else if (s + 1 < steps) {
        wmma_load_tiles<W, T, ALIGNED>(A, B, M, N, K, m0, n0, (s + 1) * W::BK, a, b);  // in flight during the math
      }
      wmma_step<W>(As[cur], Bs[cur], wm, wn, acc);
      if (W::STAGES == 2 && s + 1 < steps) wmma_store_tiles<W, T>(As[1 - cur], Bs[1 - cur], a, b);
      __syncthreads();  // STAGES 1: done with the tiles before the next load; 2: the next tiles are in
    }
    // Epilogue: each fragment through the warp's staging tile, then 8 values per lane with the edges checked.
    float* stage = Cs[warp];
#pragma unroll
    for (int i = 0; i < W::FM; ++i)
#pragma unroll
      for (int j = 0; j < W::FN; ++j) {
        wmma::store_matrix_sync(stage, acc[i][j], W::FRAG_N, wmma::mem_row_major);
        __syncwarp();  // the fragment is in the staging tile
        for (int e = lane; e < W::FRAG_M * W::FRAG_N; e += 32) {
          const int m = m0 + wm + i * W::FRAG_M + e / W::FRAG_N, n = n0 + wn + j * W::FRAG_N + e % W::FRAG_N;
          if (m < M && n < N) C[(int64_t)m * N + n] = from_float<T>(stage[e]);
        }
        __syncwarp();  // every lane has read the tile before the next fragment overwrites it
      }
  }
}

// matmul9: 128x128x32 tiles, 8 warps of 64x32 (4x2 fragments), one buffer.
template <typename T> using Wmma9 = WmmaTiling<T, 128, 128, 32, 64, 32, 1>;
// matmul10: the same tiles with two buffers (the next step's loads overlap the mma_syncs) and at most 128
// registers per thread, so two blocks share an SM (ptxas: no spills).
template <typename T> using Wmma10 = WmmaTiling<T, 128, 128, 32, 64, 32, 2, 2>;
// matmul11 (TF32): 128x128x16 float tiles, 8 warps of 64x32, two buffers, two blocks per SM.
using Wmma11 = WmmaTiling<float, 128, 128, 16, 64, 32, 2, 2>;

// matmul12's shapes: block tile BM x BN x BK, warp tiles WM x WN (FM x FN fragments), STAGES shared buffers in
// dynamic shared memory, each filled by cp.async (__pipeline_memcpy_async) STAGES - 1 steps ahead of its use.
template <typename T, int BM_, int BN_, int BK_, int WM_, int WN_, int STAGES_, int GROUP_ = 1, int MIN_BLOCKS_ = 1,
          bool SHARED_PTX_ = false>
struct AsyncTiling {
  static constexpr bool TF32 = sizeof(T) == 4;
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, STAGES = STAGES_;
  static constexpr int GROUP = GROUP_;  // blocks walk C in bands of GROUP row tiles (see tile_of_block)
  static constexpr int MIN_BLOCKS = MIN_BLOCKS_;  // blocks per SM that __launch_bounds__ asks registers for
  static constexpr bool SHARED_PTX = SHARED_PTX_;  // bf16 fragments by load_fragment_shared (see there)
  static constexpr int FRAG_M = 16, FRAG_N = 16, FRAG_K = TF32 ? 8 : 16;
  static constexpr int FM = WM / FRAG_M, FN = WN / FRAG_N;
  static constexpr int WARPS = (BM / WM) * (BN / WN), THREADS = 32 * WARPS;
  static constexpr int VEC = 16 / sizeof(T);  // values per 16-byte copy
  // 16 bytes of padding per shared row: the 8 rows that one phase of load_matrix_sync reads start on
  // 8 different groups of 4 banks, so the fragment loads are free of bank conflicts
  static constexpr int LDA = BK + VEC, LDB = BN + VEC;
  static constexpr int A_STAGE = BM * LDA, B_STAGE = BK * LDB;  // values per buffer
  static constexpr int SHARED = STAGES * (A_STAGE + B_STAGE) * (int)sizeof(T);
  static constexpr int EPILOGUE = WARPS * FRAG_M * FRAG_N * 4;  // a 16x16 float tile per warp, after the loop
  static_assert(BM % WM == 0 && BN % WN == 0 && WM % FRAG_M == 0 && WN % FRAG_N == 0 && BK % FRAG_K == 0,
                "fragments cover the warp tiles and the warp tiles the block tile");
  static_assert((BM * BK / VEC) % THREADS == 0 && (BK * BN / VEC) % THREADS == 0,
                "every thread issues as many 16-byte copies of each tile as the others");
  static_assert((FRAG_M * LDA * sizeof(T)) % 32 == 0 && (FRAG_K * LDB * sizeof(T)) % 32 == 0 &&
                (A_STAGE * sizeof(T)) % 128 == 0 && (B_STAGE * sizeof(T)) % 128 == 0,
                "each fragment starts 32-byte aligned, as load_matrix_sync requires");
  static_assert(STAGES >= 2 && STAGES <= 8, "2 to 8 buffers (__pipeline_wait_prior counts up to 8)");
  static_assert(GROUP >= 1, "a band holds at least one row tile");
  static_assert(SHARED <= 227 * 1024 && EPILOGUE <= SHARED, "an H100 block has at most 227 KB of shared memory");
};

// Issues this thread's part of a ROWS x COLS tile at (r0, c0) of a rows x cols matrix into shared memory
// (row length LD). ALIGNED: 16-byte copies that land later (cp.async); a copy past an edge reads nothing and
// writes 16 zero bytes (zfill), from the matrix's first address so that the source is always valid.
// Otherwise (rows not 16-byte aligned) each group is loaded value by value and stored at once; the barrier
// before its use orders it like the asynchronous copies.
template <int ROWS, int COLS, int LD, int THREADS, typename T, bool ALIGNED>
__device__ __forceinline__ void async_copy_tile(T* dst, const T* __restrict__ src, int rows, int cols, int r0, int c0) {
  constexpr int VEC = 16 / sizeof(T), COPIES = ROWS * COLS / VEC / THREADS;
#pragma unroll
  for (int l = 0; l < COPIES; ++l) {
    const int i = threadIdx.x + l * THREADS, r = i / (COLS / VEC), c = (i % (COLS / VEC)) * VEC;
    T* d = &dst[r * LD + c];
    if (ALIGNED) {
      const bool in = r0 + r < rows && c0 + c < cols;
      __pipeline_memcpy_async(d, in ? src + (int64_t)(r0 + r) * cols + c0 + c : src, 16, in ? 0 : 16);
    } else {
      const Vec16<T> v = load16<T, false>(src + (int64_t)(r0 + r) * cols, c0 + c, r0 + r < rows ? cols : 0);
      memcpy(d, &v, 16);
    }
  }
}

// Step k0's tiles into one buffer: BM x BK of A at (m0, k0), BK x BN of B at (k0, n0).
template <class W, typename T, bool ALIGNED>
__device__ __forceinline__ void async_load_tiles(T* As, T* Bs, const T* __restrict__ A, const T* __restrict__ B, int M,
                                                 int N, int K, int m0, int n0, int k0) {
  async_copy_tile<W::BM, W::BK, W::LDA, W::THREADS, T, ALIGNED>(As, A, M, K, m0, k0);
  async_copy_tile<W::BK, W::BN, W::LDB, W::THREADS, T, ALIGNED>(Bs, B, K, N, k0, n0);
}

// The tile of C that block (blockIdx.x, blockIdx.y) computes, as (row tile, column tile). Numbered in
// launch order, blocks run across all column tiles of a band of GROUP row tiles before the next band:
// the blocks resident at one time then share fewer rows of A and columns of B, which stay in L2.
// GROUP 1 is the plain order (row tile blockIdx.y, column tile blockIdx.x).
template <int GROUP>
__device__ __forceinline__ int2 tile_of_block() {
  const int tiles_n = gridDim.x, tiles_m = gridDim.y, id = blockIdx.y * tiles_n + blockIdx.x;
  const int first = id / (GROUP * tiles_n) * GROUP, rows = min(tiles_m - first, GROUP);
  const int in_band = id % (GROUP * tiles_n);
  return make_int2(first + in_band % rows, in_band / rows);
}

// matmul_wmma_async_kernel (matmul12): block owns a BM x BN tile of C, warp w a WM x WN region (FM x FN
// accumulator fragments). The tiles of A and B reach shared memory by cp.async, STAGES - 1 steps ahead:
// while the warps multiply step s, the copies for steps s + 1 .. s + STAGES - 1 are in flight, with no
// registers spent on them and one barrier per step. Each step a warp loads FM + FN fragments for FM x FN
// mma_syncs (64x64 warps: 8 loads for 16 products, where matmul10's 64x32 needs 6 for 8). The epilogue
// converts to T in a per-warp staging tile and stores 8 values (16 bytes) per lane where C allows.
// nvcc 13 turns the fp16 fragment loads into ldmatrix from shared memory, but the bf16 ones into generic
// 4-byte loads plus movmatrix transposes (cuobjdump -sass shows LDSM for one, LD and MOVM for the other);
// SHARED_PTX loads bf16 fragments with the state space named, and the two kernels become the same code.
template <class W, typename T, bool ALIGNED>
__global__ void __launch_bounds__(W::THREADS, W::MIN_BLOCKS)
    matmul_wmma_async_kernel(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int M, int N, int K) {
  if constexpr (!arch_at_least(tensor_core_arch<T>())) {
    __trap();  // compiled for a GPU whose tensor cores do not take T: the launcher refuses it first
  } else {
    extern __shared__ uint4 async_smem[];  // uint4 in every instantiation: extern shared arrays share one name and type
    T* As = reinterpret_cast<T*>(async_smem);
    T* Bs = As + W::STAGES * W::A_STAGE;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = (warp / (W::BN / W::WN)) * W::WM, wn = (warp % (W::BN / W::WN)) * W::WN;
    const int2 tile = tile_of_block<W::GROUP>();
    const int m0 = tile.x * W::BM, n0 = tile.y * W::BN;

    Accumulators<W> acc;
    zero_accumulators<W>(acc);
    const int steps = (K + W::BK - 1) / W::BK;

    // Prologue: the first STAGES - 1 steps in flight, one commit group each (empty past the last step, so
    // that the wait below always counts the same number of groups).
#pragma unroll
    for (int s = 0; s < W::STAGES - 1; ++s) {
      if (s < steps)
        async_load_tiles<W, T, ALIGNED>(As + s * W::A_STAGE, Bs + s * W::B_STAGE, A, B, M, N, K, m0, n0, s * W::BK);
      __pipeline_commit();
    }
    for (int s = 0; s < steps; ++s) {
      __pipeline_wait_prior(W::STAGES - 2);  // this thread's copies for step s have landed
      __syncthreads();  // everyone's have, and everyone is done with step s - 1's buffer
      const int next = s + W::STAGES - 1, fill = next % W::STAGES;  // step s - 1's buffer, free now
      if (next < steps)
        async_load_tiles<W, T, ALIGNED>(As + fill * W::A_STAGE, Bs + fill * W::B_STAGE, A, B, M, N, K, m0, n0, next * W::BK);
      __pipeline_commit();
      const T* as = As + (s % W::STAGES) * W::A_STAGE;
      const T* bs = Bs + (s % W::STAGES) * W::B_STAGE;
      wmma_step<W, T, W::SHARED_PTX>(as, bs, wm, wn, acc);
    }
    __pipeline_wait_prior(0);  // only empty groups are left, but no copy may land on the staging tiles
    __syncthreads();           // every warp is done with the buffers: they become the staging tiles

    // Epilogue: a fragment at a time through the warp's 16x16 float tile; lane l converts row l / 2, columns
    // 8 (l % 2) .. + 7 and stores them in 16-byte moves where they are inside C (ALIGNED: every row of C starts
    // 16-byte aligned).
    float* stage = reinterpret_cast<float*>(async_smem) + warp * W::FRAG_M * W::FRAG_N;
    const int er = lane / 2, ec = (lane % 2) * 8;
#pragma unroll
    for (int i = 0; i < W::FM; ++i)
#pragma unroll
      for (int j = 0; j < W::FN; ++j) {
        wmma::store_matrix_sync(stage, acc[i][j], W::FRAG_N, wmma::mem_row_major);
        __syncwarp();  // the fragment is in the staging tile
        const int m = m0 + wm + i * W::FRAG_M + er, n = n0 + wn + j * W::FRAG_N + ec;
        if (m < M) {
          T* row = C + (int64_t)m * N;
          if (ALIGNED && n + 8 <= N) {
#pragma unroll
            for (int q = 0; q < 8; q += W::VEC) {
              Vec16<T> out;
#pragma unroll
              for (int e = 0; e < W::VEC; ++e) out.v[e] = from_float<T>(stage[er * W::FRAG_N + ec + q + e]);
              uint4 raw;
              memcpy(&raw, &out, 16);
              *reinterpret_cast<uint4*>(row + n + q) = raw;  // one 16-byte store
            }
          } else {
            for (int e = 0; e < 8 && n + e < N; ++e) row[n + e] = from_float<T>(stage[er * W::FRAG_N + ec + e]);
          }
        }
        __syncwarp();  // every lane has read the tile before the next fragment overwrites it
      }
  }
}

// matmul12: 128x128x32 tiles, 4 warps of 64x64 (4x4 fragments), four buffers (74 KB of dynamic shared memory);
// about 250 registers per thread, so two blocks per SM; bf16 fragments loaded from the shared state space.
// The fastest of lesson09.py's sweep on an H100 in bf16 and close to it in fp16.
template <typename T> using Wmma12 = AsyncTiling<T, 128, 128, 32, 64, 64, 4, 1, 1, true>;

// ---------------------------------------------------------------------------------------------
// Launchers.

// a: [M, K] and b: [K, N], contiguous, on the device, of one of the `n` dtypes; c: [M, N], a's dtype.
static void check_operands(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
                           std::initializer_list<at::ScalarType> dtypes, const char* dtype_words) {
  for (const at::Tensor* t : {&a, &b, &c}) {
    const char* name = t == &a ? "a" : t == &b ? "b" : "c";
    TORCH_CHECK(KERNELS_ON_DEVICE(*t), name, " must be " KERNELS_DEVICE_WORD ", got a tensor on ", t->device());
    bool ok = false;
    for (auto d : dtypes) ok |= t->scalar_type() == d;
    TORCH_CHECK(ok, name, " must be ", dtype_words, ", got ", t->scalar_type());
    TORCH_CHECK(t->dim() == 2, name, " must have 2 dimensions, got shape ", shape_str(t->sizes()));
    TORCH_CHECK(t->is_contiguous(), name, " must be contiguous (row-major), got strides ", shape_str(t->strides()),
                " for shape ", shape_str(t->sizes()), " (a transposed view such as x.t() is not: call .contiguous() first)");
    TORCH_CHECK(t->size(0) < (int64_t(1) << 31) && t->size(1) < (int64_t(1) << 31), name,
                " must have fewer than 2^31 rows and columns, got shape ", shape_str(t->sizes()));
  }
  TORCH_CHECK(b.scalar_type() == a.scalar_type() && c.scalar_type() == a.scalar_type(),
              "a, b and c must have one dtype, got ", a.scalar_type(), ", ", b.scalar_type(), " and ", c.scalar_type());
  CHECK_MATMUL_SHAPES(a, b, c);
}


// A grid of tiles over C: x over the column tiles, y over the row tiles (at most 65535).
static dim3 tile_grid(int64_t M, int64_t N, int BM, int BN) {
  const int64_t gx = ceil_div(N, (int64_t)BN), gy = ceil_div(M, (int64_t)BM);
  TORCH_CHECK(gx <= 2147483647LL && gy <= 65535, "C is too large for this kernel's grid: ", std::to_string(gx),
              " x ", std::to_string(gy), " tiles (at most 65535 row tiles)");
  return dim3((unsigned)gx, (unsigned)gy);
}

// An empty C needs no launch (a grid with no blocks is a launch error); K = 0 makes C all zeros, and the
// kernels write those zeros themselves (their loops over K do not run).
static bool nothing_to_do(const at::Tensor& c) { return c.numel() == 0; }

// The checks every fp32 launcher starts with; the sizes M, N, K; false when C is empty (no launch).
static bool fp32_args(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, int& M, int& N, int& K) {
  check_operands(a, b, c, {at::kFloat}, "float32");
  M = a.size(0), K = a.size(1), N = b.size(1);
  return !nothing_to_do(c);
}

// matmul1 and matmul2: 32 x 32 threads, one per element of C; the grid follows each kernel's mapping.
void matmul1(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  int M, N, K;
  if (!fp32_args(a, b, c, M, N, K)) return;
  const dim3 grid = tile_grid(N, M, 32, 32);  // x over the row tiles, y over the column tiles: matmul_kernel1's mapping
  matmul_kernel1<<<grid, dim3(32, 32), 0, c10::cuda::getCurrentCUDAStream()>>>(ptr<float>(a), ptr<float>(b), mut<float>(c), M, N, K);
  CHECK_LAUNCH();
}

void matmul2(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  int M, N, K;
  if (!fp32_args(a, b, c, M, N, K)) return;
  matmul_kernel2<<<tile_grid(M, N, 32, 32), dim3(32, 32), 0, c10::cuda::getCurrentCUDAStream()>>>(
      ptr<float>(a), ptr<float>(b), mut<float>(c), M, N, K);
  CHECK_LAUNCH();
}

void matmul3(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  int M, N, K;
  if (!fp32_args(a, b, c, M, N, K)) return;
  constexpr int TILE = 32;
  matmul_kernel3<TILE><<<tile_grid(M, N, TILE, TILE), dim3(TILE, TILE), 0, c10::cuda::getCurrentCUDAStream()>>>(
      ptr<float>(a), ptr<float>(b), mut<float>(c), M, N, K);
  CHECK_LAUNCH();
}

void matmul4(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  int M, N, K;
  if (!fp32_args(a, b, c, M, N, K)) return;
  constexpr int BM = 64, BN = 64, BK = 8, TM = 8;
  matmul_kernel4<BM, BN, BK, TM><<<tile_grid(M, N, BM, BN), BM * BN / TM, 0, c10::cuda::getCurrentCUDAStream()>>>(
      ptr<float>(a), ptr<float>(b), mut<float>(c), M, N, K);
  CHECK_LAUNCH();
}

void matmul5(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  int M, N, K;
  if (!fp32_args(a, b, c, M, N, K)) return;
  constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
  matmul_kernel5<BM, BN, BK, TM, TN><<<tile_grid(M, N, BM, BN), (BM / TM) * (BN / TN), 0, c10::cuda::getCurrentCUDAStream()>>>(
      ptr<float>(a), ptr<float>(b), mut<float>(c), M, N, K);
  CHECK_LAUNCH();
}

// The float4 paths need every row of A, B and C to start on a 16-byte boundary: K and N multiples of 4
// and the three base pointers aligned. Anything else takes the same kernel with one-float moves.
static bool float4_ok(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  return a.size(1) % 4 == 0 && b.size(1) % 4 == 0 && aligned16(a) && aligned16(b) && aligned16(c);
}

void matmul6(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  int M, N, K;
  if (!fp32_args(a, b, c, M, N, K)) return;
  constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8, THREADS = (BM / TM) * (BN / TN);
  const dim3 grid = tile_grid(M, N, BM, BN);
  auto stream = c10::cuda::getCurrentCUDAStream();
  if (float4_ok(a, b, c))
    matmul_kernel6<BM, BN, BK, TM, TN, true><<<grid, THREADS, 0, stream>>>(ptr<float>(a), ptr<float>(b), mut<float>(c), M, N, K);
  else
    matmul_kernel6<BM, BN, BK, TM, TN, false><<<grid, THREADS, 0, stream>>>(ptr<float>(a), ptr<float>(b), mut<float>(c), M, N, K);
  CHECK_LAUNCH();
}

template <class W>
static void launch_warptile(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  int M, N, K;
  if (!fp32_args(a, b, c, M, N, K)) return;
  const dim3 grid = tile_grid(M, N, W::BM, W::BN);
  auto stream = c10::cuda::getCurrentCUDAStream();
  if (float4_ok(a, b, c))
    matmul_warptile_kernel<W, true><<<grid, W::THREADS, 0, stream>>>(ptr<float>(a), ptr<float>(b), mut<float>(c), M, N, K);
  else
    matmul_warptile_kernel<W, false><<<grid, W::THREADS, 0, stream>>>(ptr<float>(a), ptr<float>(b), mut<float>(c), M, N, K);
  CHECK_LAUNCH();
}

void matmul7(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) { launch_warptile<Warp7>(a, b, c); }
void matmul8(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) { launch_warptile<Warp8>(a, b, c); }

// The 16-byte paths need K and N to be multiples of 16 bytes of the type and the pointers aligned.
template <typename T>
static bool vec16_ok(const at::Tensor& a, const at::Tensor& b) {
  constexpr int n = 16 / sizeof(T);
  return a.size(1) % n == 0 && b.size(1) % n == 0 && aligned16(a) && aligned16(b);
}

template <class W, typename T>
static void launch_wmma(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  const int M = a.size(0), K = a.size(1), N = b.size(1);
  const dim3 grid = tile_grid(M, N, W::BM, W::BN);
  auto stream = c10::cuda::getCurrentCUDAStream();
  if (vec16_ok<T>(a, b))
    matmul_wmma_kernel<W, T, true><<<grid, W::THREADS, 0, stream>>>(ptr<T>(a), ptr<T>(b), mut<T>(c), M, N, K);
  else
    matmul_wmma_kernel<W, T, false><<<grid, W::THREADS, 0, stream>>>(ptr<T>(a), ptr<T>(b), mut<T>(c), M, N, K);
  CHECK_LAUNCH();
}

// matmul9 and matmul10 (`op`): bfloat16 or float16 in, C in the same dtype. fp16 tensor cores exist from
// compute capability 7.0, bf16 ones from 8.0 (an older GPU is refused; kernels/lessons/lesson09.py says the same).
template <template <typename> class W>
static void launch_wmma_half(const char* op, const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  check_operands(a, b, c, {at::kBFloat16, at::kHalf}, "bfloat16 or float16 (the tensor-core inputs)");
  if (nothing_to_do(c)) return;
  if (a.scalar_type() == at::kBFloat16) {
    check_capability(op, tensor_core_arch<__nv_bfloat16>(), "bf16 tensor cores", "bfloat16");
    launch_wmma<W<__nv_bfloat16>, __nv_bfloat16>(a, b, c);
  } else {
    launch_wmma<W<__half>, __half>(a, b, c);
  }
}

void matmul9(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) { launch_wmma_half<Wmma9>("matmul9", a, b, c); }
void matmul10(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) { launch_wmma_half<Wmma10>("matmul10", a, b, c); }

void matmul11(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  check_operands(a, b, c, {at::kFloat}, "float32 (rounded to TF32 on the tensor cores)");
  if (nothing_to_do(c)) return;
  check_capability("matmul11", tensor_core_arch<float>(), "TF32 tensor cores");
  launch_wmma<Wmma11, float>(a, b, c);
}

// matmul12: above 48 KB a kernel must opt in to more dynamic shared memory. The 16-byte
// copies and stores need K and N multiples of 16 bytes and A, B and C 16-byte aligned.
template <class W, typename T, bool ALIGNED>
static void launch_wmma_async_kernel(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  const int M = a.size(0), K = a.size(1), N = b.size(1);
  auto kernel = matmul_wmma_async_kernel<W, T, ALIGNED>;
  if (W::SHARED > 48 * 1024)  // per device, so at every launch (a host call of about a microsecond)
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, W::SHARED));
  kernel<<<tile_grid(M, N, W::BM, W::BN), W::THREADS, W::SHARED, c10::cuda::getCurrentCUDAStream()>>>(
      ptr<T>(a), ptr<T>(b), mut<T>(c), M, N, K);
  CHECK_LAUNCH();
}

// A block of more than 64 KB of shared memory needs compute capability 8.0 (a T4, 7.5, stops at 64 KB; bf16
// tensor cores start there too): an older GPU is refused, as kernels/lessons/lesson09.py declares.
template <template <typename> class W>
static void launch_wmma_async(const char* op, const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  check_operands(a, b, c, {at::kBFloat16, at::kHalf}, "bfloat16 or float16 (the tensor-core inputs)");
  if (nothing_to_do(c)) return;
  static_assert(W<__half>::SHARED > 64 * 1024, "a block within 64 KB of shared memory runs from 7.5 on: no gate");
  check_capability(op, 800, (std::to_string(W<__half>::SHARED / 1024) + " KB of shared memory per block").c_str());
  const bool aligned = vec16_ok<__half>(a, b) && aligned16(c);  // both types are 2 bytes: 8 values per 16 bytes
  if (a.scalar_type() == at::kBFloat16) {
    if (aligned) launch_wmma_async_kernel<W<__nv_bfloat16>, __nv_bfloat16, true>(a, b, c);
    else launch_wmma_async_kernel<W<__nv_bfloat16>, __nv_bfloat16, false>(a, b, c);
  } else {
    if (aligned) launch_wmma_async_kernel<W<__half>, __half, true>(a, b, c);
    else launch_wmma_async_kernel<W<__half>, __half, false>(a, b, c);
  }
}

void matmul12(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) { launch_wmma_async<Wmma12>("matmul12", a, b, c); }

#ifdef MATMUL12_SWEEP
// Tile shapes for the benchmark's sweep (`python -m kernels.benchmarks.lesson09 --quick --sweep`), built only
// when MATMUL12_SWEEP is defined (each instantiation costs compile time), for 16-byte aligned rows only.
#define MATMUL12_SWEEP_CONFIGS(X) \
  X(0, "128x128x32, warps 64x64, 4 stages", 128, 128, 32, 64, 64, 4, 1, 1, false) \
  X(1, "128x128x32, warps 64x64, 3 stages", 128, 128, 32, 64, 64, 3, 1, 1, false) \
  X(2, "128x128x32, warps 64x64, 5 stages", 128, 128, 32, 64, 64, 5, 1, 1, false) \
  X(3, "128x128x64, warps 64x64, 3 stages", 128, 128, 64, 64, 64, 3, 1, 1, false) \
  X(4, "128x128x32, warps 64x64, 4 stages, bands of 8", 128, 128, 32, 64, 64, 4, 8, 1, false) \
  X(5, "128x128x32, warps 64x64, 4 stages, shared-space PTX loads", 128, 128, 32, 64, 64, 4, 1, 1, true) \
  X(6, "128x256x64, warps 64x64, 3 stages, shared-space PTX loads", 128, 256, 64, 64, 64, 3, 1, 1, true)

std::vector<std::string> matmul12_sweep_configs() {
#define MATMUL12_NAME(i, name, ...) name,
  return {MATMUL12_SWEEP_CONFIGS(MATMUL12_NAME)};
#undef MATMUL12_NAME
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES, int GROUP, int MIN_BLOCKS, bool SHARED_PTX>
static void launch_sweep(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  check_operands(a, b, c, {at::kBFloat16, at::kHalf}, "bfloat16 or float16 (the tensor-core inputs)");
  TORCH_CHECK(vec16_ok<__half>(a, b) && aligned16(c), "the sweep takes 16-byte aligned rows only (K and N multiples of 8)");
  if (nothing_to_do(c)) return;
  if (a.scalar_type() == at::kBFloat16)
    launch_wmma_async_kernel<AsyncTiling<__nv_bfloat16, BM, BN, BK, WM, WN, STAGES, GROUP, MIN_BLOCKS, SHARED_PTX>, __nv_bfloat16, true>(a, b, c);
  else
    launch_wmma_async_kernel<AsyncTiling<__half, BM, BN, BK, WM, WN, STAGES, GROUP, MIN_BLOCKS, SHARED_PTX>, __half, true>(a, b, c);
}

void matmul12_sweep(const at::Tensor& a, const at::Tensor& b, at::Tensor& c, int64_t config) {
  switch (config) {
#define MATMUL12_CASE(i, name, ...) \
  case i: return launch_sweep<__VA_ARGS__>(a, b, c);
    MATMUL12_SWEEP_CONFIGS(MATMUL12_CASE)
#undef MATMUL12_CASE
  }
  TORCH_CHECK(false, "config must be one of matmul12_sweep_configs()'s indices, got ", std::to_string(config));
}
#endif

// Functional matmul of two 2-D tensors: matmul8 for float32, matmul12 for bfloat16 and float16.
at::Tensor matmul(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "a and b must have 2 dimensions, got shapes ", shape_str(a.sizes()),
              " and ", shape_str(b.sizes()));
  at::Tensor c = at::empty({a.size(0), b.size(1)}, a.options());
  if (a.scalar_type() == at::kFloat) matmul8(a, b, c);
  else matmul12(a, b, c);
  return c;
}

// ---------------------------------------------------------------------------------------------
// Registration.
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("matmul1(Tensor a, Tensor b, Tensor(a!) c) -> ()");
  m.def("matmul2(Tensor a, Tensor b, Tensor(a!) c) -> ()");
  m.def("matmul3(Tensor a, Tensor b, Tensor(a!) c) -> ()");
  m.def("matmul4(Tensor a, Tensor b, Tensor(a!) c) -> ()");
  m.def("matmul5(Tensor a, Tensor b, Tensor(a!) c) -> ()");
  m.def("matmul6(Tensor a, Tensor b, Tensor(a!) c) -> ()");
  m.def("matmul7(Tensor a, Tensor b, Tensor(a!) c) -> ()");
  m.def("matmul8(Tensor a, Tensor b, Tensor(a!) c) -> ()");
  m.def("matmul9(Tensor a, Tensor b, Tensor(a!) c) -> ()");
  m.def("matmul10(Tensor a, Tensor b, Tensor(a!) c) -> ()");
  m.def("matmul11(Tensor a, Tensor b, Tensor(a!) c) -> ()");
  m.def("matmul12(Tensor a, Tensor b, Tensor(a!) c) -> ()");
#ifdef MATMUL12_SWEEP
  m.def("matmul12_sweep(Tensor a, Tensor b, Tensor(a!) c, int config) -> ()");
  m.def("matmul12_sweep_configs() -> str[]", &matmul12_sweep_configs);
#endif
  m.def("matmul(Tensor a, Tensor b) -> Tensor");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("matmul1", &matmul1);
  m.impl("matmul2", &matmul2);
  m.impl("matmul3", &matmul3);
  m.impl("matmul4", &matmul4);
  m.impl("matmul5", &matmul5);
  m.impl("matmul6", &matmul6);
  m.impl("matmul7", &matmul7);
  m.impl("matmul8", &matmul8);
  m.impl("matmul9", &matmul9);
  m.impl("matmul10", &matmul10);
  m.impl("matmul11", &matmul11);
  m.impl("matmul12", &matmul12);
#ifdef MATMUL12_SWEEP
  m.impl("matmul12_sweep", &matmul12_sweep);
#endif
  m.impl("matmul", &matmul);
}
