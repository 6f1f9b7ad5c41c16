// 12_attention.cu: attention, O = softmax(scale * Q K^T + mask) V, variant by variant, forward and backward.
// Load with `ext = load("12")`; every variant is an out-variant:
//     ext.attention3(q, k, v, causal, scale, out, lse)
//     ext.attention_backward2(q, k, v, out, lse, dout, causal, scale, dq, dk, dv)
//
//   attention1           unfused, three kernels: S = scale Q K^T into a [B, Hq, Tq, Tk] float32 buffer (a tiled
//                        matmul), a masked softmax per row (a warp per row), O = P V (a tiled matmul). The Tq x Tk
//                        matrix goes to DRAM and back twice: memory and traffic grow with T^2. Any D up to 256
//   attention2           fused on CUDA cores (FlashAttention 1's idea): a thread per query row, K and V tiles streamed
//                        through shared memory, the running max, sum and output in registers, updated key by key
//                        (online softmax). Nothing of size T^2 is ever stored. Any D up to 128
//   attention3           FlashAttention 2's forward on tensor cores: a warp per 32 query rows, mma.sync m16n8k16 with
//                        fp32 accumulation, ldmatrix from XOR-swizzled shared memory, K and V tiles double-buffered
//                        by cp.async, the score tile kept in registers and fed back as the A operand of P V, one
//                        rescale of the output per tile, causal tiles above the diagonal skipped. fp16 and bf16,
//                        D 64 or 128, compute capability 8.0 or later
//   attention4           attention3's algorithm on Hopper's instructions (FlashAttention 3's structure): a producer
//                        warpgroup loads Q, then K and V tiles by TMA into a two-stage mbarrier ring; two consumer
//                        warpgroups (three at D 64) compute S = Q K^T with wgmma from shared memory, the online
//                        softmax on the accumulators, and O += P V with P from registers; a tile's scores overlap
//                        the previous tile's P V; at D 64 persistent (a block per SM walks tiles of queries). bf16,
//                        D 64 or 128, a 9.x GPU and an sm_90a build (hopper.cuh)
//   attention_backward1  FlashAttention 2's backward on CUDA cores: P recomputed from q, k and lse per tile; a block
//                        per key tile accumulates dK and dV over every query row of its kv head; dQ by float32 atomics.
//                        Any D up to 128
//   attention_backward2  the same on tensor cores (mma.sync), a warp per 16 keys; dQ by float32 atomics. fp16 and bf16,
//                        D 64 or 128, compute capability 8.0 or later
//   attention_backward3  attention_backward2 made deterministic: dK and dV as there, dQ by a second kernel per query
//                        tile that recomputes P and dS instead of adding into dQ with atomics. Same inputs as backward2
//   attention_backward4  attention_backward3 on Hopper's instructions: one warp-specialised kernel in two modes (dK
//                        and dV per 128 keys, dQ per 128 queries), TMA and wgmma, every score tile fed back from
//                        registers. Deterministic. Same inputs as attention4
//   attention_backward5  attention_backward4 with FlashAttention 3's dQ: the dK/dV kernel also computes dQ = dS K for
//                        each streamed tile (dS^T from registers into shared memory, read by both consumers' wgmma)
//                        and adds it into a float32 buffer by bulk reductions (cp.reduce.async.bulk, a warp's part
//                        at a time); a last pass rounds it into dq. 5 products instead of 7, one pass over K and V.
//                        Not deterministic. Same inputs as attention4
//   attention            functional form: attention4 on a 9.x GPU in an sm_90a build (bf16), else attention3 where it
//                        runs (fp16/bf16, D 64 or 128, 16-byte aligned, compute capability 8.0 or later), else
//                        attention2; returns (out, lse)
//   attention_backward   functional backward: attention_backward5 where attention4 runs (attention_backward4 under
//                        torch.use_deterministic_algorithms(True)), else attention_backward3 where it runs
//                        (deterministic, and faster than attention_backward2 at every shape measured), else
//                        attention_backward1; returns (dq, dk, dv)
//   attention_variant, attention_backward_variant   the name of the variant the functional form runs on these inputs
//
// Conventions, the same for every op:
//   q: [B, Hq, Tq, D]; k and v: [B, Hkv, Tk, D]; all contiguous (the Hopper variants and the functional ops: any
//   layout whose rows of D are contiguous), one dtype (float32, float16 or bfloat16 where the op takes it); out, dout
//   and dq: q's shape and dtype; dk, dv: k's; lse: [B, Hq, Tq] float32.
//   Grouped-query attention: Hq is a multiple of Hkv, and query head h reads kv head h / (Hq / Hkv) (Hkv = Hq is
//   ordinary multi-head attention, Hkv = 1 multi-query attention). In the backward, a kv head's dK and dV are sums over
//   the Hq / Hkv query heads that read it: each block of the dK/dV kernels owns keys of one kv head and walks the query
//   rows of all of its query heads, adding their terms up in its registers (no atomics, no second pass).
//   scale multiplies the scores (callers pass 1 / sqrt(D)).
//   causal: query i attends to key j iff j <= i + (Tk - Tq), the diagonal aligned to the bottom-right corner as in
//   FlashAttention 2 (PyTorch's is_causal when Tq == Tk; is_causal aligns it top-left otherwise). With Tq < Tk the
//   queries are the last Tq positions of the sequence, as when decoding with a cache. Without causal every query
//   attends to every key.
//   lse[b, h, i] = log(sum_j exp(scale * q_i . k_j)) over the keys i attends to (natural log): the backward pass
//   recomputes the probabilities from it, P_ij = exp(scale * q_i . k_j - lse_i), without a second pass for the sum.
//   A query that attends to no key (causal with Tq > Tk: the first Tq - Tk queries; or Tk = 0) has out = 0 and
//   lse = -inf, and its gradients are 0: it attends to nothing. (torch.softmax of such a row is NaN; SDPA's answer
//   depends on its version and backend.) An empty output (B, Hq or Tq = 0) launches nothing.
//   The math runs in float32: fp16 and bf16 values are widened on load and rounded once on store; the tensor-core
//   variants also round P (and in the backward dS) to the input dtype as the second matmul's operand, as
//   FlashAttention does. FLOPs: 4 B Hq Tq Tk D forward (about half that when causal), 2.5x that backward.
//
// Why a deterministic backward (attention_backward3). Float addition is not associative, and atomics add in whatever
// order the blocks reach them: attention_backward1 and 2 give dq that differs in its last bits from run to run. A
// training run then cannot be repeated bit for bit (a loss spike cannot be replayed to find its cause, two runs that
// should agree cannot be compared exactly, torch.use_deterministic_algorithms(True) cannot be honoured), and under
// data parallelism (DDP) the replicas' gradients are averaged from values that no rerun reproduces. backward3 writes
// each dq element once, from one warp, in a fixed order. The cost: its dQ kernel recomputes S = Q K^T and dP = dO V^T
// (made by the dK/dV kernel too, which no longer needs the dS round trip through shared memory), so the backward does
// 7 matmuls of the forward's size instead of 5, and reads K and V once more per query tile. Yet on an H100 it is the
// faster of the two at every shape measured (bf16, D 64 and 128, T 2048 and 8192): backward2's dK/dV kernel stalls on
// the barrier and the shared-memory round trip of its dQ step and on its float32 atomics, which cost more than the
// recomputation. So the functional attention_backward takes backward3.
// On Hopper the question comes back: FlashAttention 3 computes dQ inside the dK/dV kernel with wgmma and adds it up
// with atomics. attention_backward5 does so. With float2 atomicAdd (16 atomic instructions a thread a step) it ran
// at 0.83-1.03x the speed of attention_backward4 on an H200 over successive versions (bf16, D 64 and 128,
// T 1024-8192), and the atomics were its cost: with each consumer multiplying only its own keys' rows of dS^T (no
// barrier between the consumers, twice the atomics) the kernel took 0.50 ms instead of 0.42 (D 64, T 4096, causal).
// Now each warp stores its part of dQ into shared memory and one lane adds it with a bulk reduction, which the copy
// engine carries out while the warp goes on (FlashAttention 3's way): that kernel 0.42 -> 0.34 ms, the whole backward
// 1.15-1.18x attention_backward4 (bf16, D 64 and 128, T 2048 and 8192, causal and not). The functional op takes attention_backward5, and the
// deterministic attention_backward4 when torch.use_deterministic_algorithms(True) asks for the same bits every run.

// ---------------------------------------------------------------------------------------------
// Includes.
#include "helpers.cuh"
#include "hopper.cuh"

#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

// The Hopper helpers this file uses (kernels/include/hopper.cuh; the PTX wrappers exist where HAS_SM90A does).
using hopper::smem_addr; using hopper::align1024; using hopper::check_hopper; using hopper::hopper_kernels_in_build;
using hopper::tensor_map_nd;
#ifdef HAS_SM90A
using hopper::mbar_init; using hopper::mbar_expect_bytes; using hopper::mbar_arrive; using hopper::mbar_wait;
using hopper::tma_load; using hopper::tma_load4; using hopper::desc128; using hopper::wgmma_fence;
using hopper::wgmma_commit; using hopper::wgmma_wait; using hopper::fence_async_shared; using hopper::named_barrier; using hopper::named_barrier_arrive;
using hopper::bulk_commit; using hopper::bulk_wait_read;
#endif

constexpr float LOG2E = 1.4426950408889634f;  // exp(x) = exp2(x * log2 e)
constexpr float LN2 = 0.6931471805599453f;

// ---------------------------------------------------------------------------------------------
// Device helpers shared by every variant.

// The keys query row i attends to are keys 0 .. keys_of_row(i) - 1: a prefix, so a mask is one comparison.
// 0 for a row before the diagonal's start (causal with Tq > Tk). 64-bit sum: i + Tk can pass 2^31.
__host__ __device__ __forceinline__ int keys_of_row(int i, int Tq, int Tk, bool causal) {
  if (!causal) return Tk;
  const int64_t n = (int64_t)i + Tk - Tq + 1;
  return n < 0 ? 0 : (n > Tk ? Tk : (int)n);
}

// Where the rows of (batch b, query head h) start in q and out, and those of its kv head in k and v (elements).
struct HeadOffsets {
  int64_t q, kv, row;  // row: the first of its Tq rows in lse (and in the backward's row vectors)
};
__device__ __forceinline__ HeadOffsets head_offsets(int b, int h, int Hq, int Hkv, int Tq, int Tk, int D) {
  const int64_t bh = (int64_t)b * Hq + h, bkv = (int64_t)b * Hkv + h / (Hq / Hkv);
  return {bh * Tq * D, bkv * Tk * D, bh * Tq};
}

// A running (max, sum of exp(x - max)), merged across the lanes of a warp (lesson 07's online softmax).
struct MaxSum {
  float m, s;
};
__device__ __forceinline__ MaxSum online_merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};  // both empty: a.m - m would be -inf - -inf = NaN
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

// ---------------------------------------------------------------------------------------------
// Kernels: attention1, three kernels with the scores in DRAM.

constexpr int TILE1 = 32;  // attention1's matmuls: 32 x 32 tiles, a thread per element (1024 threads)

// attention_scores_kernel1: block (x, h, b) owns a 32 x 32 tile of S (query tile x / tiles_k, key tile x % tiles_k);
// thread (tx, ty) one score, s[i][j] = scale * q_i . k_j over D in steps of 32, both operands staged in shared
// memory (lesson 09's matmul3 with B = K^T: K's tile is read down its columns, so it is padded to 33 floats a row
// and the 32 lanes hit 32 banks). Writes Tq x Tk floats per head: bounded by those writes for D up to a few hundred.
template <typename T>
__global__ void __launch_bounds__(TILE1 * TILE1) attention_scores_kernel1(const T* __restrict__ q, const T* __restrict__ k,
                                                                          float* __restrict__ s, int Hq, int Hkv, int Tq,
                                                                          int Tk, int D, bool causal, float scale) {
  __shared__ float Qs[TILE1][TILE1 + 1];
  __shared__ float Ks[TILE1][TILE1 + 1];
  const int tiles_k = (Tk + TILE1 - 1) / TILE1;
  const int i0 = blockIdx.x / tiles_k * TILE1, j0 = blockIdx.x % tiles_k * TILE1;
  if (j0 >= keys_of_row(min(i0 + TILE1, Tq) - 1, Tq, Tk, causal)) return;  // every score of the tile is masked
  const HeadOffsets at = head_offsets(blockIdx.z, blockIdx.y, Hq, Hkv, Tq, Tk, D);
  const int tx = threadIdx.x, ty = threadIdx.y;
  float acc = 0.0f;
  for (int d0 = 0; d0 < D; d0 += TILE1) {
    const int d = d0 + tx;  // coalesced: a warp loads 32 consecutive values of one row
    Qs[ty][tx] = i0 + ty < Tq && d < D ? to_float(q[at.q + (int64_t)(i0 + ty) * D + d]) : 0.0f;
    Ks[ty][tx] = j0 + ty < Tk && d < D ? to_float(k[at.kv + (int64_t)(j0 + ty) * D + d]) : 0.0f;
    __syncthreads();  // wait until the tiles are loaded
#pragma unroll
    for (int kk = 0; kk < TILE1; ++kk) acc += Qs[ty][kk] * Ks[tx][kk];  // Qs: a broadcast; Ks: 32 banks
    __syncthreads();  // done with the tiles before the next load
  }
  if (i0 + ty < Tq && j0 + tx < Tk) s[(at.row + i0 + ty) * Tk + j0 + tx] = scale * acc;
}

// attention_softmax_kernel1: warp w of block b owns row 8b + w of S (all heads' rows stacked); lane l walks
// columns l, l + 32, ... of the keys the row attends to, keeping a running (max, sum) (lesson 07's softmax5),
// then overwrites the row with P (zeros where masked) and writes lse. Reads the row twice, writes it once.
constexpr int SOFTMAX_WARPS = 8;
__global__ void __launch_bounds__(SOFTMAX_WARPS * 32) attention_softmax_kernel1(float* __restrict__ s, float* __restrict__ lse,
                                                                                int64_t rows, int Tq, int Tk, bool causal) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * (int64_t)SOFTMAX_WARPS + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp leaves together, so the shuffles below see all 32 lanes
  const int n = keys_of_row(row % Tq, Tq, Tk, causal);
  float* r = s + row * Tk;
  MaxSum p = {-INFINITY, 0.0f};
  for (int j = lane; j < n; j += 32) p = online_merge(p, MaxSum{r[j], 1.0f});
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    p = online_merge(p, MaxSum{__shfl_xor_sync(FULL_MASK, p.m, offset), __shfl_xor_sync(FULL_MASK, p.s, offset)});
  const float inv = p.s > 0.0f ? 1.0f / p.s : 0.0f;  // n = 0: a row with no key gets P = 0
  for (int j = lane; j < Tk; j += 32) r[j] = j < n ? __expf(r[j] - p.m) * inv : 0.0f;
  if (lane == 0) lse[row] = p.s > 0.0f ? p.m + logf(p.s) : -INFINITY;
}

// attention_pv_kernel1: block (x, h, b) owns a 32 x 32 tile of O (query tile x / tiles_d, columns x % tiles_d);
// thread (tx, ty) one output, O[i][d] = sum_j P[i][j] v_j[d] over the keys in steps of 32 (causal: up to the
// tile's last row's keys), P and V tiles staged in shared memory. Reads Tq x Tk floats of P per head.
template <typename T>
__global__ void __launch_bounds__(TILE1 * TILE1) attention_pv_kernel1(const float* __restrict__ p, const T* __restrict__ v,
                                                                      T* __restrict__ out, int Hq, int Hkv, int Tq, int Tk,
                                                                      int D, bool causal) {
  __shared__ float Ps[TILE1][TILE1 + 1];
  __shared__ float Vs[TILE1][TILE1 + 1];
  const int tiles_d = (D + TILE1 - 1) / TILE1;
  const int i0 = blockIdx.x / tiles_d * TILE1, d0 = blockIdx.x % tiles_d * TILE1;
  const HeadOffsets at = head_offsets(blockIdx.z, blockIdx.y, Hq, Hkv, Tq, Tk, D);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int n = keys_of_row(min(i0 + TILE1, Tq) - 1, Tq, Tk, causal);  // past it P is 0 for every row of the tile
  float acc = 0.0f;
  for (int j0 = 0; j0 < n; j0 += TILE1) {
    Ps[ty][tx] = i0 + ty < Tq && j0 + tx < Tk ? p[(at.row + i0 + ty) * Tk + j0 + tx] : 0.0f;
    Vs[ty][tx] = j0 + ty < Tk && d0 + tx < D ? to_float(v[at.kv + (int64_t)(j0 + ty) * D + d0 + tx]) : 0.0f;
    __syncthreads();  // wait until the tiles are loaded
#pragma unroll
    for (int kk = 0; kk < TILE1; ++kk) acc += Ps[ty][kk] * Vs[kk][tx];
    __syncthreads();  // done with the tiles before the next load
  }
  if (i0 + ty < Tq && d0 + tx < D) out[at.q + (int64_t)(i0 + ty) * D + d0 + tx] = from_float<T>(acc);
}

// ---------------------------------------------------------------------------------------------
// Kernels: attention2, a thread per query row on CUDA cores.

constexpr int ROWS2 = 64;  // query rows (threads) per block
constexpr int BC2 = 16;    // keys per shared-memory tile: Qs, Ks and Vs fill the 48 KB a block gets without opting in at D 128

// attention_kernel2: thread r of block (x, h, b) owns query row 64x + r: its scaled q in its own column of Qs
// (transposed: the 32 lanes of a warp read 32 consecutive floats; q and o together, 2 x 128 floats, would not fit in
// a thread's 255 registers), its running max m, sum l and output o[DMAX] in registers. Per tile of 16 keys the
// block stages K and V in shared memory (coalesced; every lane then reads the same Ks[c][d], a broadcast); per key each thread updates m, l and o (two exps and 2 D FMAs for o). Reads K and V
// once per 64 query rows; bounded by the shared-memory loads (two per FMA) and the per-key rescale of o.
template <typename T, int DMAX>
__global__ void __launch_bounds__(ROWS2) attention_kernel2(const T* __restrict__ q, const T* __restrict__ k,
                                                           const T* __restrict__ v, T* __restrict__ out,
                                                           float* __restrict__ lse, int Hq, int Hkv, int Tq, int Tk,
                                                           int D, bool causal, float scale) {
  __shared__ float Qs[DMAX][ROWS2];
  __shared__ float Ks[BC2][DMAX];
  __shared__ float Vs[BC2][DMAX];
  const int r = threadIdx.x, i0 = blockIdx.x * ROWS2, i = i0 + r;
  const HeadOffsets at = head_offsets(blockIdx.z, blockIdx.y, Hq, Hkv, Tq, Tk, D);
  // The row's own q, once: each thread reads its row (strided across lanes, but every 32-byte sector it touches is
  // used in full by its next loads, from L1). Zeros past D and past the last row keep the dot products exact.
#pragma unroll
  for (int d = 0; d < DMAX; ++d) Qs[d][r] = i < Tq && d < D ? to_float(q[at.q + (int64_t)i * D + d]) * scale : 0.0f;
  const int n = i < Tq ? keys_of_row(i, Tq, Tk, causal) : 0;          // the keys this row attends to
  const int n_block = keys_of_row(min(i0 + ROWS2, Tq) - 1, Tq, Tk, causal);  // ... and its block's last row
  float o[DMAX] = {};
  float m = -INFINITY, l = 0.0f;
  for (int j0 = 0; j0 < n_block; j0 += BC2) {
    __syncthreads();  // everyone is done with the previous tile (and, the first time, Qs is written)
    for (int e = r; e < BC2 * DMAX; e += ROWS2) {  // consecutive threads, consecutive columns: coalesced
      const int c = e / DMAX, d = e % DMAX, j = j0 + c;
      const bool inside = j < Tk && d < D;
      Ks[c][d] = inside ? to_float(k[at.kv + (int64_t)j * D + d]) : 0.0f;
      Vs[c][d] = inside ? to_float(v[at.kv + (int64_t)j * D + d]) : 0.0f;
    }
    __syncthreads();  // wait until the tile is loaded
    const int c_end = min(BC2, n - j0);  // this row's keys in the tile (none past its diagonal)
    for (int c = 0; c < c_end; ++c) {
      float s = 0.0f;
#pragma unroll 8  // not fully: then the compiler keeps all of q in registers beside o, and at DMAX 128 spills
      for (int d = 0; d < DMAX; ++d) s += Qs[d][r] * Ks[c][d];
      const float m_new = fmaxf(m, s);
      const float alpha = __expf(m - m_new);  // rescales what was summed against the old max; exp(-inf) = 0 at first
      const float p = __expf(s - m_new);
      l = l * alpha + p;
#pragma unroll
      for (int d = 0; d < DMAX; ++d) o[d] = o[d] * alpha + p * Vs[c][d];
      m = m_new;
    }
  }
  if (i >= Tq) return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // a row with no key: out = 0
#pragma unroll
  for (int d = 0; d < DMAX; ++d)
    if (d < D) out[at.q + (int64_t)i * D + d] = from_float<T>(o[d] * inv);
  lse[at.row + i] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// ---------------------------------------------------------------------------------------------
// Tensor-core helpers (attention3, attention_backward2 and 3): the PTX of Ampere-class kernels. mma.sync m16n8k16 on
// fp16/bf16 and cp.async exist from compute capability 8.0: compiled for an older GPU these are left out and the
// kernels that use them trap (their launchers refuse such a GPU first).

// The mma.sync m16n8k16 fragments, for lane l with g = l / 4 and t = l % 4 (PTX ISA, "Matrix fragments for mma.m16n8k16"):
//   A (16 x 16, row-major): 4 registers of 2 values: (g, 2t..2t+1), (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..)
//   B (16 x 8, k x n):      2 registers: (k 2t..2t+1, n g), (k 2t + 8.., n g)
//   C (16 x 8, float):      4 values: (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)
// So the C fragments of two adjacent 16 x 8 tiles (columns 0-7 and 8-15), rounded to 16 bits and paired, are exactly
// the A fragment of the 16 x 16 tile they make: P = softmax(S) never leaves registers on its way into P V.

// A shared-memory tile of rows of W 16-bit values, its 16-byte chunks XOR-swizzled: chunk c of row r is stored at
// c ^ (r % 8) (W / 8 = 4 chunks a row: c ^ (r / 2 % 4)). ldmatrix reads one chunk from each of 8 consecutive rows:
// unswizzled those lie W * 2 bytes apart, in the same 4 banks (an 8-way conflict); swizzled, in 8 different ones.
template <int W>
__device__ __forceinline__ int swizzle(int row, int col) {
  constexpr int CHUNKS = W / 8;
  static_assert(CHUNKS == 4 || CHUNKS % 8 == 0, "rows of 32 values or a multiple of 64");
  const int x = CHUNKS >= 8 ? row % 8 : row / 2 % 4;
  return row * W + ((col / 8) ^ x) * 8 + col % 8;
}

// A lane's ldmatrix addresses in a swizzled tile of rows of W >= 64 values, row r + 16 a and column c + 16 b for its
// row r and column c (a multiple of 8 below 16): c / 8 + 2 b = (c / 8) ^ 2 b, so the swizzled chunk is
// ((c / 8) ^ (r % 8)) ^ 2 b: one XOR with a constant per step, no per-step address to keep in a register.
template <int W>
struct LaneTile {
  int base, chunk;  // r W; ((c / 8) ^ (r % 8)) 8
  __device__ __forceinline__ LaneTile(int r, int c) : base(r * W), chunk(((c / 8) ^ (r % 8)) * 8) {
    static_assert(W / 8 >= 8, "rows of 64 values or a multiple");
  }
  __device__ __forceinline__ int at(int a, int b) const { return base + 16 * a * W + (chunk ^ (16 * b)); }  // == swizzle
};

// The two 16-bit types' pairs and their mma.
template <typename T>
using Pair = typename std::conditional<std::is_same<T, __half>::value, __half2, __nv_bfloat162>::type;

// Two floats rounded to T, `lo` in the low 16 bits (the lower column): one register of an A fragment.
template <typename T>
__device__ __forceinline__ Pair<T> to_pair(float lo, float hi) {
  if constexpr (std::is_same<T, __half>::value) return __floats2half2_rn(lo, hi);
  else return __floats2bfloat162_rn(lo, hi);
}
template <typename T>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  const Pair<T> p = to_pair<T>(lo, hi);
  uint32_t u;
  memcpy(&u, &p, 4);
  return u;
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
// The shared-state-space address of a pointer into shared memory, as ldmatrix and cp.async take it.
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// 16 bytes from global to shared memory without passing through registers; zeros instead where `inside` is false
// (src-size 0: the ragged last tile), src must then still be a valid address.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool inside) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_u32(dst)), "l"(src), "r"(inside ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Four 8 x 8 matrices of 16-bit values from shared memory: lanes 8m .. 8m + 7 give the row addresses of matrix m
// (16 bytes each), and register m of every lane receives its part of matrix m (.trans: of the transposed matrix).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
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

// 2^x by the special-function unit's ex2.approx (flushes denormal results to 0, 2 ulp): the softmax's exponential.
// exp2f without --use_fast_math adds instructions to handle denormals that a probability below 2^-126 never needs.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Rows r0 .. r0 + ROWS - 1 of a [rows, D] matrix in global memory (`limit` rows exist) into a swizzled shared tile by
// cp.async, 16 bytes a copy, THREADS threads; rows past the limit are filled with zeros.
template <int ROWS, int D, int THREADS, typename T>
__device__ __forceinline__ void load_tile_async(T* tile, const T* src, int r0, int limit) {
  static_assert((ROWS * D / 8) % THREADS == 0, "every thread copies as many chunks as the others");
  constexpr int STEP = THREADS / (D / 8);  // rows apart of a thread's chunks
  if constexpr (THREADS % (D / 8) == 0 && STEP % 8 == 0 && D / 8 >= 8) {
    // Its chunks share a column and the row's swizzle (row % 8): one shared and one global address, constant offsets
    // from there (no address per chunk held in registers across the tiles).
    const int row = threadIdx.x / (D / 8), col = threadIdx.x % (D / 8) * 8;
    T* dst = tile + swizzle<D>(row, col);
    const T* from = src + (int64_t)(r0 + row) * D + col;
#pragma unroll
    for (int e = 0; e < ROWS / STEP; ++e) {
      const bool inside = r0 + row + e * STEP < limit;
      cp_async16(dst + e * STEP * D, inside ? from + e * STEP * D : src, inside);
    }
  } else {
#pragma unroll
    for (int e = threadIdx.x; e < ROWS * D / 8; e += THREADS) {
      const int row = e / (D / 8), col = e % (D / 8) * 8;
      const bool inside = r0 + row < limit;
      cp_async16(tile + swizzle<D>(row, col), inside ? src + (int64_t)(r0 + row) * D + col : src, inside);
    }
  }
}
#endif

// ---------------------------------------------------------------------------------------------
// Kernels: attention3, FlashAttention 2's forward on tensor cores.

// The tiles. A block owns BR = 16 MT WARPS query rows, a warp 16 MT of them (MT m16 tiles: each row's max and sum stay
// inside the warp, in the 4 lanes of a quad), and walks the keys in tiles of BC. Every warp reads all of K and V by
// ldmatrix per tile (4 cycles per ldmatrix.x4 at 128 bytes a cycle), so the ratio of mma's to ldmatrix's matters:
// with MT = 1 a K or V fragment serves 2 mma's, and the SM's shared memory rather than its tensor cores set the pace
// (about 250 TFLOP/s at D 128 on an H100); with MT = 2 (FlashAttention 2's 32 rows a warp) it serves 4. At D 128 the
// Q fragments (64 registers) no longer fit beside the 32 x D output (128) and the score tile, so they are read again
// from shared memory per tile (QREG false: 2 ldmatrix more per 16 columns), and the key tiles are 32 long (the
// 32 x 32 score tile, 32 registers; with tiles of 64 ptxas spills at its 255-register limit).
// Registers (ptxas -v, sm_90, CUDA 13.0): D 128, 4 warps of 32 rows, key tiles of 32: 252, no spills, 2 blocks per
// SM (64 KB of shared memory each); D 64, 4 warps of 32 rows, Q in registers, key tiles of 64: 236, 2 blocks per SM.
// 128 query rows per block either way: each K and V tile copied into shared memory serves 128 rows (2 bytes of L2
// traffic per 128 FLOPs). Measured against SDPA's FlashAttention 2 (H100, bf16, 16384 tokens; the recorded figures
// are in kernels/benchmarks/recorded/lesson12.csv): about 0.9x at D 128 and 1.0x at D 64, where 8 warps of 16 rows
// had given 0.80-0.90x and 0.80-0.82x.
template <typename T, int D_, int WARPS_, int BC_, int MT_, bool QREG_, int MIN_BLOCKS_>
struct Fwd3 {
  using Type = T;
  static constexpr int D = D_, WARPS = WARPS_, BC = BC_, MT = MT_, BR = 16 * MT * WARPS, THREADS = 32 * WARPS;
  static constexpr bool QREG = QREG_;
  static constexpr int MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int SMEM = (BR * D + 4 * BC * D) * (int)sizeof(T);  // Q, then K and V in two buffers each
  static_assert(D % 16 == 0 && BC % 16 == 0, "whole m16n8k16 steps");
};

// attention_kernel3: warp w of block (x, h, b) owns query rows BR x + 16 MT w .. + 16 MT - 1, m16 tile mt of them
// rows 16 mt ..; lane l holds rows g = l / 4 and g + 8 of each: their C fragments of the 16 x BC score tile and of
// the 16 x D output (fp32), and for both rows the running max and its own part of the sum (the 4 lanes of a quad
// share a row; they combine their sums once, at the end). Per key tile: S = Q K^T (ldmatrix of K, each fragment
// used by the MT m16 tiles; Q's fragments from registers or again from shared memory), masked only where the tile
// crosses the diagonal or the end of the keys, the online softmax in base 2 (scale * log2 e folded into one
// multiply, exp2 on the special-function unit), O rescaled once, O += P V (P from the score registers, V by
// ldmatrix.trans, each fragment used MT times). The next K and V tiles arrive by cp.async during the math: one
// barrier per tile. Causal: the blocks run in reverse order of their query tiles, so that the longest (last rows,
// most keys) start first and the short ones fill the tail. Reads Q once, K and V once per BR rows.
template <class C>
__global__ void __launch_bounds__(C::THREADS, C::MIN_BLOCKS)
    attention_kernel3(const typename C::Type* __restrict__ q, const typename C::Type* __restrict__ k,
                      const typename C::Type* __restrict__ v, typename C::Type* __restrict__ out, float* __restrict__ lse,
                      int Hq, int Hkv, int Tq, int Tk, bool causal, float scale_log2) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  using T = typename C::Type;
  constexpr int D = C::D, BR = C::BR, BC = C::BC, THREADS = C::THREADS, MT = C::MT, WR = 16 * MT;
  extern __shared__ uint4 attention_smem[];  // uint4 in every kernel: extern shared arrays share one name and type
  T* Qs = reinterpret_cast<T*>(attention_smem);  // [BR][D], swizzled
  T* Ks = Qs + BR * D;                           // [2][BC][D]
  T* Vs = Ks + 2 * BC * D;                       // [2][BC][D]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int x = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int i0 = x * BR, w0 = i0 + WR * warp;  // the block's and the warp's first rows
  const int row = w0 + lane / 4;               // this lane's rows: row + 16 mt and row + 16 mt + 8
  const HeadOffsets at = head_offsets(blockIdx.z, blockIdx.y, Hq, Hkv, Tq, Tk, D);
  const int shift = Tk - Tq;  // causal: row i attends to keys up to i + shift
  const int tiles = (keys_of_row(min(i0 + BR, Tq) - 1, Tq, Tk, causal) + BC - 1) / BC;  // tiles above the diagonal: none

  // Prologue: Q (one group), then the first K and V tiles (another); Q's fragments into registers once Q is in.
  load_tile_async<BR, D, THREADS>(Qs, q + at.q, i0, Tq);
  cp_async_commit();
  if (tiles > 0) {
    load_tile_async<BC, D, THREADS>(Ks, k + at.kv, 0, Tk);
    load_tile_async<BC, D, THREADS>(Vs, v + at.kv, 0, Tk);
  }
  cp_async_commit();
  cp_async_wait<1>();  // this thread's copies of Q have landed ...
  __syncthreads();     // ... and everyone's
  // A: matrices (rows 0-7, 8-15) x (columns 0-7, 8-15) of each 16 x 16 step of m16 tile mt
  const LaneTile<D> qa(WR * warp + lane % 8 + 8 * (lane / 8 % 2), 8 * (lane / 16));  // A: Q and (.trans) V
  const LaneTile<D> ka(lane % 8 + 8 * (lane / 16), 8 * (lane / 8 % 2));               // B without .trans: K
  const LaneTile<D> va(lane % 8 + 8 * (lane / 8 % 2), 8 * (lane / 16));
  auto load_q = [&](uint32_t(&f)[4], int mt, int kk) { ldmatrix_x4(f, Qs + qa.at(mt, kk)); };
  uint32_t qf[C::QREG ? MT : 1][C::QREG ? D / 16 : 1][4];
  if constexpr (C::QREG) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) load_q(qf[mt][kk], mt, kk);
  }

  float o[MT][D / 8][4] = {};                  // the 16 MT x D output: m16 tile mt, n8 tile dn, C fragment registers
  float m[MT][2], l[MT][2];                    // rows row + 16 mt + 8 r: the running max (in units of log2, scaled),
#pragma unroll                                 // and this lane's part of the row's sum of exp2(s - m)
  for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<0>();  // tile t has landed (this thread's copies) ...
    __syncthreads();     // ... everyone's; and every warp is done with tile t - 1, whose buffers the next copy refills
    if (t + 1 < tiles) {
      load_tile_async<BC, D, THREADS>(Ks + (t + 1) % 2 * BC * D, k + at.kv, (t + 1) * BC, Tk);
      load_tile_async<BC, D, THREADS>(Vs + (t + 1) % 2 * BC * D, v + at.kv, (t + 1) * BC, Tk);
    }
    cp_async_commit();  // an empty group after the last tile keeps the count regular
    const int j0 = t * BC;
    if (causal && j0 > w0 + WR - 1 + shift) continue;  // the whole tile lies past this warp's diagonal: P = 0
    const T* kt = Ks + t % 2 * BC * D;
    const T* vt = Vs + t % 2 * BC * D;

    // S = Q K^T: B = K^T, whose columns are K's rows: ldmatrix without .trans; one x4 gives two n8 tiles' B.
    float s[MT][BC / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qs[C::QREG ? 1 : MT][4];
      if constexpr (!C::QREG) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) load_q(qs[mt], mt, kk);
      }
#pragma unroll
      for (int jj = 0; jj < BC / 16; ++jj) {
        uint32_t kf[4];  // matrices (keys 0-7, 8-15) x (columns 0-7, 8-15): b0, b1 of n8 tile 2jj, then of 2jj + 1
        ldmatrix_x4(kf, kt + ka.at(jj, kk));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const uint32_t(&a)[4] = C::QREG ? qf[C::QREG ? mt : 0][C::QREG ? kk : 0] : qs[C::QREG ? 0 : mt];
          mma16816<T>(s[mt][2 * jj], a, kf[0], kf[1]);
          mma16816<T>(s[mt][2 * jj + 1], a, kf[2], kf[3]);
        }
      }
    }

    // Scale into units of log2, and mask where the tile crosses this warp's diagonal or the end of the keys.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int jn = 0; jn < BC / 8; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][jn][e] *= scale_log2;
    if (j0 + BC > Tk || (causal && j0 + BC - 1 > w0 + shift)) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int n = keys_of_row(row + 16 * mt + 8 * r, Tq, Tk, causal);
#pragma unroll
          for (int jn = 0; jn < BC / 8; ++jn)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              if (j0 + 8 * jn + 2 * (lane % 4) + e >= n) s[mt][jn][2 * r + e] = -INFINITY;
        }
    }

    // Online softmax: the tile's row max (the quad's 4 lanes hold a row's 2 BC / 8 values each), the new max, the
    // factor that moves what was summed so far onto it, and P = exp2(s - max) in place of the scores.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = m[mt][r];
#pragma unroll
        for (int jn = 0; jn < BC / 8; ++jn) mx = fmaxf(mx, fmaxf(s[mt][jn][2 * r], s[mt][jn][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
        const float base = mx == -INFINITY ? 0.0f : mx;  // a row with no key yet: exp2(-inf - 0) = 0, not NaN
        const float alpha = fast_exp2(m[mt][r] - base);  // 0 when m was -inf: nothing summed yet
        m[mt][r] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int jn = 0; jn < BC / 8; ++jn) {
          s[mt][jn][2 * r] = fast_exp2(s[mt][jn][2 * r] - base);
          s[mt][jn][2 * r + 1] = fast_exp2(s[mt][jn][2 * r + 1] - base);
          sum += s[mt][jn][2 * r] + s[mt][jn][2 * r + 1];
        }
        l[mt][r] = l[mt][r] * alpha + sum;
#pragma unroll
        for (int dn = 0; dn < D / 8; ++dn) {
          o[mt][dn][2 * r] *= alpha;
          o[mt][dn][2 * r + 1] *= alpha;
        }
      }

    // O += P V: A = P, two score n8 tiles per 16 keys; B = V (keys x columns, stored key-major): ldmatrix.trans.
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      uint32_t pf[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        pf[mt][0] = pack<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pf[mt][1] = pack<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pf[mt][2] = pack<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pf[mt][3] = pack<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        uint32_t vf[4];  // matrices (keys 0-7, 8-15) x (columns 0-7, 8-15), transposed: b0, b1 of n8 tiles 2dd, 2dd + 1
        ldmatrix_x4_trans(vf, vt + va.at(kk, dd));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816<T>(o[mt][2 * dd], pf[mt], vf[0], vf[1]);
          mma16816<T>(o[mt][2 * dd + 1], pf[mt], vf[2], vf[3]);
        }
      }
    }
  }
  cp_async_wait<0>();  // nothing may be in flight when the block ends

  // Epilogue: each row's sum over its quad, O / l rounded to T into this warp's own 16 MT rows of Qs (only this warp
  // read them), then 16-byte stores of whole rows (coalesced); lse = (m + log2 l) ln 2 by the quad's first lane.
  __syncwarp();  // every lane's reads of the warp's Q rows are done
  T* os = Qs + WR * warp * D;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[mt][r];
      sum += __shfl_xor_sync(FULL_MASK, sum, 1);
      sum += __shfl_xor_sync(FULL_MASK, sum, 2);
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // a row with no key: out = 0
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn)
        *reinterpret_cast<Pair<T>*>(os + swizzle<D>(16 * mt + lane / 4 + 8 * r, 8 * dn + 2 * (lane % 4))) =
            to_pair<T>(o[mt][dn][2 * r] * inv, o[mt][dn][2 * r + 1] * inv);
      const int i = row + 16 * mt + 8 * r;
      if (lane % 4 == 0 && i < Tq) lse[at.row + i] = sum > 0.0f ? (m[mt][r] + log2f(sum)) * LN2 : -INFINITY;
    }
  __syncwarp();  // the warp's rows are staged
#pragma unroll
  for (int e = lane; e < WR * D / 8; e += 32) {
    const int r = e / (D / 8), col = e % (D / 8) * 8;
    if (w0 + r < Tq)
      *reinterpret_cast<uint4*>(out + at.q + (int64_t)(w0 + r) * D + col) =
          *reinterpret_cast<const uint4*>(os + swizzle<D>(r, col));
  }
#else
  __trap();  // compiled for a GPU before compute capability 8.0: the launcher refuses it first
#endif
}

// ---------------------------------------------------------------------------------------------
// Kernel: attention4, FlashAttention 3's forward on Hopper (bf16, D 64 or 128, sm_90a).
//
// The structure of lesson 13's warp-specialised matmul with attention's two products inside. A block owns 128 query
// rows of one head (192 at D 64: Fwd4): warpgroup 0 produces, its one thread loading the rows' Q (in two buffers when
// the block walks several query tiles) and then K and V tile by tile by TMA into rings of two stages (separate
// full/empty barriers for K and V, so that S = Q K^T can start before V has landed); the other warpgroups consume,
// each 64 of the rows. A consumer computes its 64 x 128 score tile with wgmma from shared memory (Q and K both
// K-major: rows of D), runs the online softmax on the accumulator registers (the layout is
// mma.sync's C fragment, so lesson 12's softmax code carries over), and feeds P back from registers as wgmma's A
// operand against V, read MN-major (V's rows are keys: the transpose immediate). Two of FlashAttention 3's ideas:
// warp specialisation, and the overlap inside a warpgroup, where the score product of tile t is issued before the
// P V product of tile t - 1 and both run while this warpgroup waits for the first, then does tile t's softmax as
// the second finishes: the tensor cores stay busy through the exponentials. Its third, ping-pong scheduling of the
// consumers (Turns, below), at D 64 only: measured on an H200, bf16, it took D 64 from 289 to 313 TFLOP/s (T 4096,
// causal) and D 128 from 629 down to 566 (T 8192, not causal), where two consumers at 240 registers each already keep
// the tensor cores fed. (Its fp8 path is not here.) The key tiles above the diagonal are skipped as in attention3,
// a block's beyond its last row and a consumer's beyond its own last row; causal blocks run longest first.
constexpr int BN4 = 128, STAGES4 = 2, THREADS4_WS = 384;

// Where the Hopper variants find a head's rows: q, k, v, out and the gradients are [B, H, T, D] tensors whose rows
// (D values) are contiguous, in any layout of B, H and T; TMA reads them through 4-D tensor maps (D, T, H, B) and the
// epilogues store through these strides. So the transposed view of a [B, T, H, D] projection, as a model makes it,
// goes in without a copy (as it does into SDPA). z numbers the heads of all batches: z = b H + h.
struct HeadRows {
  int64_t sb, sh, st;  // elements from one batch, head, row to the next
  int heads;           // H
  __host__ __device__ int64_t row(int z, int64_t t) const { return (z / heads) * sb + (z % heads) * sh + t * st; }
};

#ifdef HAS_SM90A
// The TMA load of the box at column x, row y of head z from a head_map (4-D: D, T, H, B).
__device__ __forceinline__ void tma_load_head(void* dst, const CUtensorMap* map, int x, int y, int z, int heads,
                                              uint64_t* bar) {
  tma_load4(dst, map, x, y, z % heads, z / heads, bar);
}

// Ping-pong (FlashAttention 3's third idea): N consumer warpgroups take turns at the tensor cores. A consumer issues
// its main products (one or two commit groups of wgmma) in its turn and hands the turn on as soon as they are
// issued, so they run one consumer's after another's and a consumer's exponentials run while the next consumer's
// products do, instead of every consumer computing exponentials at once while the tensor cores wait. The turn goes
// round through named barriers 2 + c: consumer c waits at its own (128 threads), the one before it arrives there
// (128 more). Consumer 0 takes its first turn without waiting and the last consumer does not hand on its last one,
// so every arrival has its wait. Every consumer of a block must take the same number of turns. (A generation of a
// barrier cannot start before the last one completes: consumer c - 1 arrives again only after its own next wait,
// which needs consumer c's pass, which comes after consumer c's wait.)
// attention4's persistent blocks keep the turns going round from one query tile to the next: only the walk's first
// turn is taken without a wait and only its last is not handed on, so consumer 0's first turn of a tile waits for
// the last consumer's last turn of the tile before (the argument above holds across tiles).
template <int N>
struct Turns {
  int c;    // this consumer
  bool on;  // off: every consumer issues when it is ready
  __device__ __forceinline__ void take(bool first) const {
    if (on && !(first && c == 0)) named_barrier(2 + c, 256);
  }
  __device__ __forceinline__ void pass(bool last) const {
    if (on && !(last && c == N - 1)) named_barrier_arrive(2 + (c + 1) % N, 256);
  }
};
#endif
constexpr int PANEL4 = 128 * 128;  // a 128-row tile's 64 columns of bf16, 128-byte swizzled: 16 KB

// D 128: two consumer warpgroups, 128 query rows a block. D 64: three, 192 rows: a consumer's registers then hold
// 64 + 32 + 32 (S, O, P) of the 160 that three of them can have, and each K and V tile serves 1.5 times as many
// rows (FlashAttention 3's choice for D 64 too). setmaxnreg: 128 x (24 + WGS x REGS) <= 65536. PINGPONG: the
// consumers take turns at the tensor cores (D 64; see above).
template <int D>
struct Fwd4 {
  static constexpr int WGS = D == 64 ? 3 : 2, BM = 64 * WGS, THREADS = 128 * (1 + WGS), REGS = WGS == 3 ? 160 : 240;
  static constexpr bool PINGPONG = WGS == 3;
  // PERSIST (D 64): a block per SM walks query tiles (below). At D 128 the loop's state costs ptxas registers that
  // the consumers do not have (it spilled, and the kernel ran 9% slower at T 8192): a block a tile there.
  static constexpr bool PERSIST = D == 64;
  // OWN_TILES (D 64): each consumer computes only the key tiles its own rows reach (below). At D 128 a block's two
  // halves reach the same key tiles unless i0 + Tk - Tq is not a multiple of 128 (Tq ragged, or Tk - Tq), and the count
  // made ptxas spill: every consumer takes them all.
  static constexpr bool OWN_TILES = D == 64;
  static constexpr int PANELS = D / 64, TILE_BYTES = PANELS * PANEL4;  // a K or a V tile: 128 rows x D
  static constexpr int Q_PANEL = BM * 128, Q_BYTES = PANELS * Q_PANEL;  // Q: BM rows x D
  // Q_STAGES: persistent, the next tile's Q loads while this one's products run
  static constexpr int Q_STAGES = PERSIST ? 2 : 1;
  static constexpr int SMEM = Q_STAGES * Q_BYTES + 2 * STAGES4 * TILE_BYTES + 1024;  // Q, the K and V rings, alignment
};

#ifdef HAS_SM90A
// s (64 x 128 scores, fp32) += Q (64 x 16, K-major through its descriptor) K^T (16 x 128: K's rows, K-major).
// Register r of lane l of warp w holds row 16 w + l / 4 + 8 ((r / 2) % 2), column 8 (r / 4) + 2 (l % 4) + r % 2.
// accumulate 0: d = Q K^T, whatever d held (the backward's first k-step of a tile: no zeroing first).
__device__ __forceinline__ void wgmma_qk(float (&d)[64], uint64_t qdesc, uint64_t kdesc, int accumulate) {
  asm volatile("{\n"
               ".reg .pred p;\n"
               "setp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, 0;\n"
               "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(qdesc), "l"(kdesc), "r"(accumulate));
}
// o (64 x D, fp32) += P (64 x 16 of bf16, in registers: the A fragment, two of the score tile's n8 column groups)
// V (16 keys x D: V's rows, MN-major, hence the last immediate, transpose B). D = 128 and D = 64.
__device__ __forceinline__ void wgmma_pv(float (&d)[64], const uint32_t (&p)[4], uint64_t vdesc) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, {%64, %65, %66, %67}, %68, 1, 1, 1, 1;"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(p[0]), "r"(p[1]), "r"(p[2]), "r"(p[3]), "l"(vdesc));
}
__device__ __forceinline__ void wgmma_pv(float (&d)[32], const uint32_t (&p)[4], uint64_t vdesc) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, {%32, %33, %34, %35}, %36, 1, 1, 1, 1;"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(p[0]), "r"(p[1]), "r"(p[2]), "r"(p[3]), "l"(vdesc));
}
#endif

template <int D>
__global__ void __launch_bounds__(Fwd4<D>::THREADS, 1)
    attention_kernel4(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                      const __grid_constant__ CUtensorMap map_v, __nv_bfloat16* __restrict__ out,
                      HeadRows out_rows, float* __restrict__ lse, int B, int Hq, int Hkv, int Tq, int Tk, bool causal,
                      float scale_log2) {
#ifdef HAS_SM90A
  using C = Fwd4<D>;
  extern __shared__ uint4 attention_smem[];
  unsigned char* const qs = align1024(reinterpret_cast<unsigned char*>(attention_smem));
  unsigned char* const ks = qs + C::Q_STAGES * C::Q_BYTES;      // [STAGES4] tiles of K
  unsigned char* const vs = ks + STAGES4 * C::TILE_BYTES;       // [STAGES4] tiles of V
  __shared__ alignas(8) uint64_t q_full[C::Q_STAGES];   // a query tile's Q has landed
  __shared__ alignas(8) uint64_t q_empty[C::Q_STAGES];  // every consumer's products of that tile are done
  __shared__ alignas(8) uint64_t k_full[STAGES4];   // a stage's K (V) tile has landed
  __shared__ alignas(8) uint64_t v_full[STAGES4];
  __shared__ alignas(8) uint64_t k_empty[STAGES4];  // every consumer's wgmma have read it
  __shared__ alignas(8) uint64_t v_empty[STAGES4];
  // The warpgroup, broadcast from lane 0 so that the compiler knows it is the same across the warp: a consumer's
  // count of key tiles depends on it, and through it the ring's stage; derived from threadIdx.x alone, ptxas computed
  // each wgmma descriptor per thread and moved it to a uniform register (12% slower at T 4096).
  const int wg = __shfl_sync(FULL_MASK, threadIdx.x / 128, 0), shift = Tk - Tq;
  // PERSIST: a block per SM (or fewer) walks tiles of BM query rows of all heads, so that one tile's last products
  // and epilogue overlap the next one's Q and K/V loads (at T 1024, 8 x 12 heads, D 64, causal: 63 -> 55 us on an
  // H200). Causal, the tiles with the most keys go first, every head's before the next row block (x from the last
  // down); not causal, a head's tiles one after another, so that the blocks running together share K and V in L2.
  // Block b takes tile b of each round of gridDim.x tiles, the round after from the other end (walk): causal tiles
  // shrink round by round, and a block that had one of the longest takes one of the shortest of the next. (Tile b of
  // every round, the first blocks took the longest tile of each: at T 1024, 8 x 12 heads, 62 tiles of 64 rows
  // against an average of 52; at T 4096, 2 x 12 heads, 237 against 192.) Else a block a tile (gridDim.x = tiles).
  const int nx = (Tq + C::BM - 1) / C::BM, total = nx * B * Hq;
  auto walk = [&](int n) {  // this block's n-th tile (total or more: none); below 2^31 (the launcher's check)
    return n * (int)gridDim.x + (n % 2 ? (int)gridDim.x - 1 - (int)blockIdx.x : (int)blockIdx.x);
  };
  // The rows are cut into blocks of BM from the last one back, so that a ragged block (BM = 192 leaves one at every
  // power of two) is the first, its rows before 0 absent: TMA fills them with zeros and nothing of theirs is stored.
  // Causal, the first block attends to the fewest keys, so its missing rows cost the least there; cut from row 0, the
  // ragged block was the last and computed every key for rows that are not there (a quarter of the work at T 1024).
  int i0 = 0, bh = 0, bkv = 0, tiles = 0;  // tile w's first row, head (of B Hq), kv head and number of key tiles
  auto take_tile = [&](int w) {
    const int x = causal ? nx - 1 - w / (B * Hq) : w % nx;
    bh = causal ? w % (B * Hq) : w / nx;
    bkv = bh / Hq * Hkv + bh % Hq / (Hq / Hkv);
    i0 = x * C::BM - (C::BM - Tq % C::BM) % C::BM;
    tiles = (keys_of_row(min(i0 + C::BM, Tq) - 1, Tq, Tk, causal) + BN4 - 1) / BN4;
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::Q_STAGES; ++s) {
      mbar_init(&q_full[s], 1);
      mbar_init(&q_empty[s], 4 * C::WGS);  // one arrival per consumer warp
    }
    for (int s = 0; s < STAGES4; ++s) {
      mbar_init(&k_full[s], 1);   // the producer's expect_tx, then the bytes
      mbar_init(&v_full[s], 1);
      mbar_init(&k_empty[s], 4 * C::WGS);  // one arrival per consumer warp
      mbar_init(&v_empty[s], 4 * C::WGS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
    if (threadIdx.x == 0) {
      int g = 0;  // K and V tiles loaded so far: the ring's stages and phases run on from one query tile to the next
      for (int n = 0, w = walk(0); w < total; w = walk(++n)) {
        take_tile(w);
        const int qb = n % C::Q_STAGES;
        if (n >= C::Q_STAGES) mbar_wait(&q_empty[qb], (n / C::Q_STAGES - 1) % 2);
        mbar_expect_bytes(&q_full[qb], C::Q_BYTES);
        for (int p = 0; p < C::PANELS; ++p)
          tma_load_head(qs + qb * C::Q_BYTES + p * C::Q_PANEL, &map_q, 64 * p, i0, bh, Hq, &q_full[qb]);
        for (int t = 0; t < tiles; ++t, ++g) {  // key tiles from the last (the diagonal's, causal) down to 0
          const int stage = g % STAGES4, use = g / STAGES4, j = (tiles - 1 - t) * BN4;
          unsigned char* kt = ks + stage * C::TILE_BYTES;
          unsigned char* vt = vs + stage * C::TILE_BYTES;
          if (use > 0) mbar_wait(&k_empty[stage], (use - 1) % 2);
          mbar_expect_bytes(&k_full[stage], C::TILE_BYTES);
          for (int p = 0; p < C::PANELS; ++p) tma_load_head(kt + p * PANEL4, &map_k, 64 * p, j, bkv, Hkv, &k_full[stage]);
          if (use > 0) mbar_wait(&v_empty[stage], (use - 1) % 2);
          mbar_expect_bytes(&v_full[stage], C::TILE_BYTES);
          for (int p = 0; p < C::PANELS; ++p) tma_load_head(vt + p * PANEL4, &map_v, 64 * p, j, bkv, Hkv, &v_full[stage]);
        }
        if constexpr (!C::PERSIST) break;  // one tile: no state carried over (registers)
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(C::REGS));
    const int c = wg - 1, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
    int w0 = 0, row = 0;  // this warp's first row of the tile; this lane's rows: row and row + 8
    uint32_t q_at = 0;  // this consumer's 64 rows in each panel of the tile's Q
    auto qk_desc = [&](int kk) { return desc128(q_at + kk / 4 * C::Q_PANEL + kk % 4 * 32, 16, 1024); };
    auto k_desc = [&](int stage, int kk) {
      return desc128(smem_addr(ks + stage * C::TILE_BYTES) + kk / 4 * PANEL4 + kk % 4 * 32, 16, 1024);
    };
    // V as B, MN-major: 16 keys (rows of 128 bytes) a step; the next 64 columns one panel on (LBO)
    auto v_desc = [&](int stage, int kk) {
      return desc128(smem_addr(vs + stage * C::TILE_BYTES) + kk * 16 * 128, PANEL4, 1024);
    };
    auto release = [&](uint64_t* bar) {
      if (lane == 0) mbar_arrive(bar);
    };
    float s[64];     // the score tile, then its probabilities
    float o[D / 2];  // the 64 x D output: register r is row (r / 2) % 2, column 8 (r / 4) + 2 (lane % 4) + r % 2
    uint32_t p[BN4 / 16][4];
    float m[2], l[2];  // rows row and row + 8: max (log2 units), sum

    // The lambdas' t counts K and V tiles through the ring (t % STAGES4 the stage); softmax's kt is the tile of keys
    // (keys kt BN4 on).
    // S = Q K^T of tile t into s, issued (not waited for).
    auto issue_scores = [&](int t) {
      const int stage = t % STAGES4;
#pragma unroll
      for (int r = 0; r < 64; ++r) s[r] = 0.0f;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) wgmma_qk(s, qk_desc(kk), k_desc(stage, kk), 1);
      wgmma_commit();
    };
    // The online softmax of key tile kt's scores: masked, max, P = exp2(s - max) in place; returns the factors that move
    // o onto the new maxima (o is not touched here: a P V product may still be adding into it).
    auto softmax = [&](int kt, float(&alpha)[2]) {  // kt: which tile of keys
      const int j0 = kt * BN4;
#pragma unroll
      for (int r = 0; r < 64; ++r) s[r] *= scale_log2;
      if (j0 + BN4 > Tk || (causal && j0 + BN4 - 1 > w0 + shift)) {
        const int n0 = keys_of_row(row, Tq, Tk, causal), n1 = keys_of_row(row + 8, Tq, Tk, causal);
#pragma unroll
        for (int r = 0; r < 64; ++r)
          if (j0 + 8 * (r / 4) + 2 * (lane % 4) + r % 2 >= (r / 2 % 2 ? n1 : n0)) s[r] = -INFINITY;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = m[h];
#pragma unroll
        for (int r = 2 * h; r < 64; r += 4) mx = fmaxf(mx, fmaxf(s[r], s[r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
        const float base = mx == -INFINITY ? 0.0f : mx;  // a row with no key yet: exp2(-inf - 0) = 0, not NaN
        alpha[h] = fast_exp2(m[h] - base);
        m[h] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int r = 2 * h; r < 64; r += 4) {
          s[r] = fast_exp2(s[r] - base);
          s[r + 1] = fast_exp2(s[r + 1] - base);
          sum += s[r] + s[r + 1];
        }
        l[h] = l[h] * alpha[h] + sum;
      }
    };
    // P (rounded to bf16) into A fragments: keys 16 kk .. + 15 are the n8 column groups 2 kk and 2 kk + 1.
    auto pack_p = [&]() {
#pragma unroll
      for (int kk = 0; kk < BN4 / 16; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) p[kk][e] = pack<__nv_bfloat16>(s[8 * kk + 2 * e], s[8 * kk + 2 * e + 1]);
    };
    // o += P V of tile t, issued.
    auto issue_pv = [&](int t) {
      const int stage = t % STAGES4;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BN4 / 16; ++kk) wgmma_pv(o, p[kk], v_desc(stage, kk));
      wgmma_commit();
    };

    auto k_ready = [&](int t) { mbar_wait(&k_full[t % STAGES4], t / STAGES4 % 2); };
    auto v_ready = [&](int t) { mbar_wait(&v_full[t % STAGES4], t / STAGES4 % 2); };
    const Turns<C::WGS> turns{c, C::PINGPONG};  // tiles + 1 turns each a query tile

    int g = 0;  // K and V tiles taken from the ring so far
    for (int n = 0, w = walk(0); w < total; w = walk(++n)) {
      take_tile(w);
      w0 = i0 + 64 * c + 16 * warp;
      row = w0 + lane / 4;
      const int qb = n % C::Q_STAGES;
      q_at = smem_addr(qs) + qb * C::Q_BYTES + c * 64 * 128;
      // The turns go round the consumers across the block's tiles: only the walk's first turn is taken without a
      // wait and only its last is not handed on.
      const bool walk_starts = n == 0, walk_ends = !C::PERSIST || walk(n + 1) >= total;
#pragma unroll
      for (int r = 0; r < D / 2; ++r) o[r] = 0.0f;
      m[0] = m[1] = -INFINITY;
      l[0] = l[1] = 0.0f;
      // This consumer's key tiles: causal, its 64 rows can stop a tile before the block's last rows do (and the
      // ragged first block's first consumers may have no row at all). The ring brings the block's key tiles from the
      // last down (as FlashAttention 3 does), so a consumer first lets through the tiles its rows do not reach,
      // taking a turn on each without products and handing its stages back, then computes its own: every consumer
      // takes tiles + 1 turns a tile. (At T 1024, 8 x 12 heads, causal: 72 tiles of 64 rows a head instead of 81.)
      const int last = i0 + 64 * c + 63;
      const int mine = !C::OWN_TILES ? tiles
                       : last < 0 ? 0 : min(tiles, (keys_of_row(min(last, Tq - 1), Tq, Tk, causal) + BN4 - 1) / BN4);
      mbar_wait(&q_full[qb], n / C::Q_STAGES % 2);
#pragma unroll 1  // (unrolled, ptxas spilled the main loop's registers)
      for (int t = mine; t < tiles; ++t, ++g) {
        k_ready(g);  // (each wait first: an arrival before the stage's refill would count towards its last use)
        release(&k_empty[g % STAGES4]);
        v_ready(g);
        release(&v_empty[g % STAGES4]);
        turns.take(walk_starts && t == mine);
        turns.pass(false);
      }
      if (mine > 0) {
        float alpha[2];
        k_ready(g);
        turns.take(walk_starts && mine == tiles);
        issue_scores(g);
        turns.pass(false);
        wgmma_wait<0>();
        release(&k_empty[g % STAGES4]);
        softmax(mine - 1, alpha);  // o is zero: nothing to rescale
        for (int t = 1; t < mine; ++t) {
          const int u = g + t;  // tile t in the ring
          pack_p();
          k_ready(u);
          v_ready(u - 1);
          turns.take(false);
          issue_scores(u);     // tile t's scores ...
          issue_pv(u - 1);     // ... and tile t - 1's P V, both in flight
          turns.pass(false);
          wgmma_wait<1>();     // the scores are in
          release(&k_empty[u % STAGES4]);
          softmax(mine - 1 - t, alpha);   // while the P V product runs
          wgmma_wait<0>();
          release(&v_empty[(u - 1) % STAGES4]);
#pragma unroll
          for (int r = 0; r < D / 2; ++r) o[r] *= alpha[r / 2 % 2];
        }
        pack_p();
        g += mine;
        v_ready(g - 1);
        turns.take(false);
        issue_pv(g - 1);
        turns.pass(walk_ends);
        wgmma_wait<0>();
        release(&v_empty[(g - 1) % STAGES4]);
      } else {  // the tile's last turn without a product (its only one when the tile has no key)
        turns.take(walk_starts && mine == tiles);
        turns.pass(walk_ends);
      }
      release(&q_empty[qb]);  // this consumer's products of the tile are done: Q's buffer may take the tile after next

      // Epilogue: each row's sum over its quad; O / l rounded to bf16, a pair a store; lse = (m + log2 l) ln 2.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float sum = l[h];
        sum += __shfl_xor_sync(FULL_MASK, sum, 1);
        sum += __shfl_xor_sync(FULL_MASK, sum, 2);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // a row with no key: out = 0
        const int i = row + 8 * h;
        if (i >= 0 && i < Tq) {  // the first block's rows before 0 are not there
          __nv_bfloat16* orow = out + out_rows.row(bh, i) + 2 * (lane % 4);
#pragma unroll
          for (int r = 2 * h; r < D / 2; r += 4)
            *reinterpret_cast<__nv_bfloat162*>(orow + 8 * (r / 4)) = to_pair<__nv_bfloat16>(o[r] * inv, o[r + 1] * inv);
          if (lane % 4 == 0) lse[(int64_t)bh * Tq + i] = sum > 0.0f ? (m[h] + log2f(sum)) * LN2 : -INFINITY;
        }
      }
      if constexpr (!C::PERSIST) break;
    }
  }
#else
  (void)out, (void)out_rows, (void)lse, (void)B, (void)Hq, (void)Hkv, (void)Tq, (void)Tk, (void)causal, (void)scale_log2;
  __trap();  // built without sm_90a: the launcher refuses to start it
#endif
}

// ---------------------------------------------------------------------------------------------
// Kernels: attention_backward4, the backward on Hopper (bf16, D 64 or 128, sm_90a).
//
// attention_backward3's two kernels (dK and dV per key tile, then dQ per query tile, each writing its output once:
// deterministic) rebuilt as attention4 is: a producer warpgroup streams tiles by TMA, two consumer warpgroups own 64
// rows each and multiply with wgmma, and every product that takes a score tile as its A operand takes it from
// registers. One kernel, two modes. A block owns 128 rows ("own": 128 keys for dK and dV, 128 queries for dQ), loaded
// once, and walks the other side in tiles of BS rows ("streamed", kStream4: 128 at D 64, 64 at D 128), two stages
// deep:
//
//            own            streamed     scores (own x streamed)            accumulated (from registers)
//   dK, dV   K and V        Q and dO     S^T = K Q^T, dP^T = V dO^T         dV += P^T dO, dK += dS^T Q
//   dQ       Q and dO       K and V      S = Q K^T,  dP = dO V^T            dQ += dS K
//
// with P = exp2(S scale log2 e - lse log2 e) and dS = P (dP - D) as in backward3. Both score products of a step are
// issued together, and the wait for the first leaves the second running while P is computed. For dK and dV the
// query heads of a kv head's group are walked one after another, and the per-query lse and D of a streamed tile
// come into shared memory with it by TMA, from copies whose rows are padded to a multiple of the streamed tile (a TMA
// box starts on a 16-byte boundary; past Tq a query's lse is +inf, so its P is 0): attention_rows_kernel4, the
// pre-pass, writes them. In the dQ kernel a step's accumulation runs
// on into the next step's score products; the dK/dV kernel waits for it within the step (DRAIN), so there the two
// consumers take turns at the tensor cores (Turns: one's exponentials run under the other's products). Measured on an
// H200 (bf16, causal, D 64), the whole backward: T 4096 194 -> 202 TFLOP/s, T 8192 249 -> 262; in the dQ kernel turns
// gained nothing. The mask of P is a comparison and a select per element, against a bound per own row computed once
// (`bounds`): a call of keys_of_row per element compiled to a branch per element, and the dK/dV kernel spent a
// quarter of its time fetching and resolving them (H200, D 64, T 4096 causal: that kernel 405 -> 234 us).

// The streamed tiles' rows: 128 at D 64, 64 at D 128 (the score tiles S and dP take BS / 2 registers each, the
// accumulators D / 2 each).
template <int D>
constexpr int kStream4 = D == 64 ? 128 : 64;

template <int D, bool ATOMIC = false>
struct Bwd4 {
  static constexpr int BS = kStream4<D>;
  static constexpr int OWN_PANEL = 128 * 128, STR_PANEL = BS * 128;       // 64 columns of 128 or BS rows
  static constexpr int OWN_BYTES = (D / 64) * OWN_PANEL, STR_BYTES = (D / 64) * STR_PANEL;
  // attention_backward5: dS^T (128 keys x BS queries, bf16) for the dQ product, two buffers; and each consumer
  // warp's part of the step's dQ (16 x 64 float32, 4 KB) on its way to global memory
  static constexpr int DS_PANEL = 128 * 128, DS_BYTES = (BS / 64) * DS_PANEL, DQ_WARP = 16 * 64 * 4;
  static constexpr int SMEM =
      2 * OWN_BYTES + 2 * STAGES4 * STR_BYTES + (ATOMIC ? 2 * DS_BYTES + 8 * DQ_WARP : 0) + 1024;
};

#ifdef HAS_SM90A
// The same 64 rows against 64 columns (the backward's score tiles at D 128). TRANS 1: both operands MN-major (A
// transposed, its M along the stored rows), for attention_backward5's dQ = dS K from dS^T and K as they lie.
template <int TRANS = 0>
__device__ __forceinline__ void wgmma_qk(float (&d)[32], uint64_t adesc, uint64_t bdesc, int accumulate) {
  asm volatile("{\n"
               ".reg .pred p;\n"
               "setp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, %32, %33, p, 1, 1, %35, %35;\n"
               "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(adesc), "l"(bdesc), "r"(accumulate), "n"(TRANS));
}
// A bulk reduction (TMA without a tensor map): `bytes` of float32 from shared memory added into global memory, each
// element atomically, in the issuing thread's current bulk async-group. Both addresses 16-byte aligned, bytes a
// multiple of 16. The thread commits the group (bulk_commit), and before it writes the source again waits until the
// group has read it (bulk_wait_read); a block's threads must not exit before their groups have read their sources.
__device__ __forceinline__ void bulk_reduce_add(float* dst, const float* src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(dst),
               "r"(smem_addr(src)), "r"(bytes) : "memory");
}
#endif

// attention_backward5's float32 dQ sums: a head's rows padded to a whole streamed tile (Tpad), a tile's BS x D values
// in the order the dQ product leaves them in registers, so that a consumer warp's 16 x 64 part is one contiguous 4 KB
// run, written to shared memory without bank conflicts and added into global memory by one bulk reduction. The index
// in the tile of (query i, column col), both counted from the tile's corner: part (a consumer's 64 x 64: queries 64c..
// at D 64, columns 64c.. at D 128), warp (16 rows of it), then the register pair r / 2 = 2 (col % 64 / 8) + i % 16 / 8
// and the lane 4 (i % 8) + col % 8 / 2, two floats each. Eight columns from a multiple of 8 lie side by side.
template <int D>
__host__ __device__ __forceinline__ int dq_tile_index(int i, int col) {
  const int part = kStream4<D> == 128 ? i / 64 : col / 64, warp = i % 64 / 16;
  return part * 4096 + warp * 1024 + (2 * (col % 64 / 8) + i % 16 / 8) * 64 + 8 * (i % 8) + col % 8;
}

// ATOMIC (attention_backward5, with DQ false): the dK/dV kernel also adds each step's dQ = dS K into dq_acc.
template <int D, bool DQ, bool ATOMIC = false>
__global__ void __launch_bounds__(THREADS4_WS, 1)
    attention_backward_kernel4(const __grid_constant__ CUtensorMap map_own1, const __grid_constant__ CUtensorMap map_own2,
                               const __grid_constant__ CUtensorMap map_str1, const __grid_constant__ CUtensorMap map_str2,
                               const __grid_constant__ CUtensorMap map_lse, const __grid_constant__ CUtensorMap map_delta,
                               const float* __restrict__ lse2, const float* __restrict__ delta, int Tpad,
                               __nv_bfloat16* __restrict__ out1, __nv_bfloat16* __restrict__ out2, HeadRows rows1,
                               HeadRows rows2, int Hq, int Hkv,
                               int Tq, int Tk, bool causal, float scale, float scale_log2, float* __restrict__ dq_acc) {
#ifdef HAS_SM90A
  static_assert(!(DQ && ATOMIC), "ATOMIC is a mode of the dK/dV kernel");
  using C = Bwd4<D, ATOMIC>;
  constexpr int BS = C::BS;
  extern __shared__ uint4 attention_smem[];
  unsigned char* const own = align1024(reinterpret_cast<unsigned char*>(attention_smem));  // own1, then own2
  unsigned char* const str = own + 2 * C::OWN_BYTES;  // [STAGES4] x (str1, str2)
  unsigned char* const ds = str + 2 * STAGES4 * C::STR_BYTES;  // ATOMIC: [2] x dS^T
  float* const dq_s = reinterpret_cast<float*>(ds + 2 * C::DS_BYTES);  // ATOMIC: [8 consumer warps] x 16 x 64 dQ
  __shared__ alignas(8) uint64_t own_full;           // the own tiles have landed
  __shared__ alignas(8) uint64_t full[STAGES4];      // a stage's streamed tiles (and lse, D) have landed
  __shared__ alignas(8) uint64_t empty[STAGES4];     // both consumers' wgmma have read them
  __shared__ alignas(128) float lse_s[STAGES4][BS];    // dK/dV: the streamed queries' lse log2 e (+inf past Tq)
  __shared__ alignas(128) float delta_s[STAGES4][BS];  // ... and their D (0 past Tq)
  const int wg = threadIdx.x / 128, shift = Tk - Tq, groups = Hq / Hkv;
  const int x = DQ && causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // dQ: the longest query tiles first
  const int r0 = x * 128;                                                // the block's first own row
  const int b = blockIdx.z, bkv = b * Hkv + blockIdx.y / (DQ ? groups : 1);
  // the streamed tiles: dQ, the key tiles up to the block's last row's diagonal; dK/dV, per query head of the
  // group, the query tiles from the first query that reaches the block's first key
  int first = 0, per_head = 0;
  if constexpr (DQ) {
    per_head = (keys_of_row(min(r0 + 128, Tq) - 1, Tq, Tk, causal) + BS - 1) / BS;
  } else {
    const int64_t from = causal && (int64_t)r0 - shift > 0 ? (int64_t)r0 - shift : 0;
    first = from >= Tq ? 0 : (int)(from / BS);
    per_head = from >= Tq ? 0 : (Tq + BS - 1) / BS - first;
  }
  const int steps = DQ ? per_head : per_head * groups;
  auto head_of = [&](int t) { return DQ ? b * Hq + blockIdx.y : (b * Hkv + blockIdx.y) * groups + t / per_head; };
  auto col0_of = [&](int t) { return (first + (DQ ? t : t % per_head)) * BS; };
  if (threadIdx.x == 0) {
    mbar_init(&own_full, 1);
    for (int s = 0; s < STAGES4; ++s) {
      mbar_init(&full[s], 1);           // the producer's expect_tx, then the bytes
      mbar_init(&empty[s], 8);          // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
    if (threadIdx.x == 0) {
      const int own_z = DQ ? head_of(0) : bkv, own_heads = DQ ? Hq : Hkv, str_heads = DQ ? Hkv : Hq;
      mbar_expect_bytes(&own_full, 2 * C::OWN_BYTES);
      for (int p = 0; p < D / 64; ++p) {
        tma_load_head(own + p * C::OWN_PANEL, &map_own1, 64 * p, r0, own_z, own_heads, &own_full);
        tma_load_head(own + C::OWN_BYTES + p * C::OWN_PANEL, &map_own2, 64 * p, r0, own_z, own_heads, &own_full);
      }
      for (int t = 0; t < steps; ++t) {
        const int stage = t % STAGES4, use = t / STAGES4, z = DQ ? bkv : head_of(t);
        unsigned char* st = str + stage * 2 * C::STR_BYTES;
        if (use > 0) mbar_wait(&empty[stage], (use - 1) % 2);
        mbar_expect_bytes(&full[stage], 2 * C::STR_BYTES + (DQ ? 0 : 2 * BS * 4));
        if constexpr (!DQ) {  // the tile's lse and D
          tma_load(lse_s[stage], &map_lse, col0_of(t), head_of(t), &full[stage]);
          tma_load(delta_s[stage], &map_delta, col0_of(t), head_of(t), &full[stage]);
        }
        for (int p = 0; p < D / 64; ++p) {
          tma_load_head(st + p * C::STR_PANEL, &map_str1, 64 * p, col0_of(t), z, str_heads, &full[stage]);
          tma_load_head(st + C::STR_BYTES + p * C::STR_PANEL, &map_str2, 64 * p, col0_of(t), z, str_heads, &full[stage]);
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
    const int c = wg - 1, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
    const int o0 = r0 + 64 * c, w0 = o0 + 16 * warp;  // this consumer's and this warp's first own rows
    const int row = w0 + lane / 4;                     // this lane's own rows: row and row + 8
    const uint32_t own_at = smem_addr(own) + c * 64 * 128;
    auto own_desc = [&](int which, int kk) {
      return desc128(own_at + which * C::OWN_BYTES + kk / 4 * C::OWN_PANEL + kk % 4 * 32, 16, 1024);
    };
    auto str_desc = [&](int stage, int which, int kk) {  // K-major: B of the score products
      return desc128(smem_addr(str + (2 * stage + which) * C::STR_BYTES) + kk / 4 * C::STR_PANEL + kk % 4 * 32, 16,
                     1024);
    };
    auto str_mn_desc = [&](int stage, int which, int kk) {  // MN-major: B of the accumulated products
      return desc128(smem_addr(str + (2 * stage + which) * C::STR_BYTES) + kk * 16 * 128, C::STR_PANEL, 1024);
    };
    // DRAIN (dK and dV): a step's accumulation is waited for within the step. Left running into the next step, as
    // in the dQ kernel, its accumulators (2 x D / 2) and operands (2 x BS / 4) would be live beside the next score
    // tiles (2 x BS / 2): 224 registers at D 128 and 256 at D 64, more than a consumer's 240 hold with the addresses,
    // and ptxas then serialises every wgmma (its warning C7512).
    constexpr bool DRAIN = !DQ;
    float acc1[D / 2] = {};             // dK or dQ (times scale at the end)
    float acc2[DQ ? 1 : D / 2] = {};    // dV
    float s[BS / 2] = {}, dp[BS / 2] = {};  // the 64 x BS tiles S (then P) and dP (then dS)
    uint32_t pa[BS / 16][4], sa[BS / 16][4];  // P and dS as A fragments
    float lse_row[2] = {0.0f, 0.0f}, delta_row[2] = {0.0f, 0.0f};
    if constexpr (DQ) {
      const int64_t at = (int64_t)head_of(0) * Tpad;
      for (int h = 0; h < 2; ++h) {
        lse_row[h] = row + 8 * h < Tq ? lse2[at + row + 8 * h] : INFINITY;
        delta_row[h] = row + 8 * h < Tq ? delta[at + row + 8 * h] : 0.0f;
      }
    }
    // Each own row's bound on the streamed indices it pairs with. dQ: query row i attends to keys below
    // keys_of_row(i) (none past Tq). dK/dV: key row j is seen by the queries from j - shift on when causal (none when
    // j is past Tk); queries past Tq need no test, their lse is +inf (the pre-pass's padding), so their P is 0.
    int bounds[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = row + 8 * h;
      if constexpr (DQ) bounds[h] = i < Tq ? keys_of_row(i, Tq, Tk, causal) : 0;
      else {
        const int64_t from = (int64_t)i - shift;  // shift = Tk - Tq can be as large as Tk
        bounds[h] = i >= Tk ? INT_MAX : !causal || from < INT_MIN ? INT_MIN : (int)from;
      }
    }
    // dK/dV: the streamed queries' lse (or D) of register r's column, 8 (r / 4) + 2 (lane % 4) + r % 2: a column
    // pair is one 8-byte load, made by the even register and reused by the odd one
    auto column = [&](const float(&v)[BS], int r) {
      const float2 pair = *reinterpret_cast<const float2*>(&v[8 * (r / 4) + 2 * (lane % 4)]);
      return r % 2 ? pair.y : pair.x;
    };
    const Turns<2> turns{c, !DQ};  // two turns a step each: the score products, the accumulation (b5's dQ product
                                   // goes outside the turns, after both consumers meet at barrier 1)
    mbar_wait(&own_full, 0);
    // step t's col0_of(t) and head_of(t), advanced rather than divided (no step: per_head may be 0)
    int col0 = steps > 0 ? col0_of(0) : 0, head = steps > 0 ? head_of(0) : 0;
    for (int t = 0; t < steps; ++t) {
      const int stage = t % STAGES4;
      mbar_wait(&full[stage], t / STAGES4 % 2);
      turns.take(t == 0);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) wgmma_qk(s, own_desc(0, kk), str_desc(stage, 0, kk), kk > 0);
      wgmma_commit();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) wgmma_qk(dp, own_desc(1, kk), str_desc(stage, 1, kk), kk > 0);
      wgmma_commit();
      turns.pass(false);
      wgmma_wait<1>();  // the last step's accumulation and this step's S are done
      if (!DRAIN && t > 0 && lane == 0) mbar_arrive(&empty[(t - 1) % STAGES4]);
      // P, then masked where the tile crosses the diagonal or an end: a streamed index (col0 + co) against its row's
      // bound, one comparison and a select an element (a mask that called keys_of_row per element made a branch of
      // each: the dK/dV kernel spent a quarter of its time fetching and resolving them)
#pragma unroll
      for (int r = 0; r < BS / 2; ++r) s[r] = fast_exp2(s[r] * scale_log2 - (DQ ? lse_row[r / 2 % 2] : column(lse_s[stage], r)));
      const bool edge = (DQ ? (o0 + 64 > Tq || col0 + BS > Tk || (causal && col0 + BS - 1 > w0 + shift))
                            : (o0 + 64 > Tk || (causal && w0 + 15 > col0 + shift)));
      if (edge) {
#pragma unroll
        for (int r = 0; r < BS / 2; ++r) {
          const int at = col0 + 8 * (r / 4) + 2 * (lane % 4) + r % 2, bound = bounds[r / 2 % 2];
          s[r] = (DQ ? at >= bound : at < bound) ? 0.0f : s[r];
        }
      }
      wgmma_wait<0>();  // dP
#pragma unroll
      for (int r = 0; r < BS / 2; ++r) dp[r] = s[r] * (dp[r] - (DQ ? delta_row[r / 2 % 2] : column(delta_s[stage], r)));
#pragma unroll
      for (int kk = 0; kk < BS / 16; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          sa[kk][e] = pack<__nv_bfloat16>(dp[8 * kk + 2 * e], dp[8 * kk + 2 * e + 1]);
          if constexpr (!DQ) pa[kk][e] = pack<__nv_bfloat16>(s[8 * kk + 2 * e], s[8 * kk + 2 * e + 1]);
        }
      if constexpr (ATOMIC) {  // dS^T into ds[t % 2], swizzled as a TMA copy of it would be (128-byte rows)
        unsigned char* const buf = ds + (t % 2) * C::DS_BYTES;
#pragma unroll
        for (int kk = 0; kk < BS / 16; ++kk)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = 64 * c + 16 * warp + lane / 4 + 8 * (e % 2), co = 16 * kk + 8 * (e / 2) + 2 * (lane % 4);
            *reinterpret_cast<uint32_t*>(buf + co / 64 * C::DS_PANEL + key * 128 + ((co % 64 / 8) ^ (key % 8)) * 16 +
                                         co % 8 * 2) = sa[kk][e];
          }
      }
      turns.take(false);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BS / 16; ++kk) wgmma_pv(acc1, sa[kk], str_mn_desc(stage, 0, kk));
      if constexpr (!DQ) {
#pragma unroll
        for (int kk = 0; kk < BS / 16; ++kk) wgmma_pv(acc2, pa[kk], str_mn_desc(stage, 1, kk));
      }
      wgmma_commit();
      turns.pass(t == steps - 1);
      if constexpr (ATOMIC) {
        // dQ (BS queries x D) = dS (BS x 128 keys) K (128 keys x D), with both consumers' dS^T: consumer c takes
        // queries 64c.. at D 64 (BS 128), columns 64c.. at D 128 (BS 64); 64 x 64 each, A and B MN-major
        const int qa = BS == 128 ? c : 0, dpan = BS == 128 ? 0 : c;
        const uint32_t buf = smem_addr(ds + (t % 2) * C::DS_BYTES) + qa * C::DS_PANEL, kb = smem_addr(own) + dpan * C::OWN_PANEL;
        float dq[32];  // written whole by the first wgmma (scale-d 0)
        fence_async_shared();   // the stores above, before wgmma (the async proxy) reads them
        named_barrier(1, 256);  // both consumers' halves of dS^T are in
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) wgmma_qk<1>(dq, desc128(buf + kk * 16 * 128, C::DS_PANEL, 1024),
                                                   desc128(kb + kk * 16 * 128, C::OWN_PANEL, 1024), kk > 0);
        wgmma_commit();
        wgmma_wait<0>();
        if (lane == 0) mbar_arrive(&empty[stage]);
        // ds[t % 2] is written again at step t + 2, after the barrier of step t + 1, which each consumer reaches
        // after its wait above: no consumer overwrites a buffer the other still reads.
        // The warp's 16 x 64 part of dQ into its 4 KB of shared memory, in register order (dq_tile_index: lane after
        // lane, 8 bytes each, no bank conflict), then one bulk reduction of lane 0 adds it into dq_acc. The copy of
        // the last step must have read the buffer first (long done: a whole step ago), and the warp's stores must be
        // visible to the copy, which reads through the async proxy: each lane's fence, then the warp's sync.
        float* const part = dq_s + (4 * c + warp) * 1024;
        if (lane == 0) bulk_wait_read<0>();
        __syncwarp();
#pragma unroll
        for (int r = 0; r < 32; r += 2) *reinterpret_cast<float2*>(part + r / 2 * 64 + 2 * lane) = make_float2(dq[r], dq[r + 1]);
        fence_async_shared();
        __syncwarp();
        if (lane == 0) {  // the tile's rows past Tq are the padding (their dS is 0)
          bulk_reduce_add(dq_acc + ((int64_t)head * Tpad + col0) * D + dq_tile_index<D>(64 * qa + 16 * warp, 64 * dpan),
                          part, 4096);
          bulk_commit();
        }
      } else if constexpr (DRAIN) {
        wgmma_wait<0>();
        if (lane == 0) mbar_arrive(&empty[stage]);
      }
      col0 += BS;
      if (!DQ && col0 == (first + per_head) * BS) col0 = first * BS, ++head;  // the group's next query head
    }
    wgmma_wait<0>();
    if (!DRAIN && steps > 0 && lane == 0) mbar_arrive(&empty[(steps - 1) % STAGES4]);
    if (ATOMIC && lane == 0) bulk_wait_read<0>();  // the block's shared memory goes when it ends

    // Epilogue: rows of this lane's own side below their length, a pair a store.
    const int limit = DQ ? Tq : Tk;
    const int z = DQ ? head_of(0) : bkv;  // out1: dq or dk; out2: dv
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = row + 8 * h;
      if (i >= limit) continue;
#pragma unroll
      for (int r = 2 * h; r < D / 2; r += 4) {
        const int col = 8 * (r / 4) + 2 * (lane % 4);
        *reinterpret_cast<__nv_bfloat162*>(out1 + rows1.row(z, i) + col) =
            to_pair<__nv_bfloat16>(acc1[r] * scale, acc1[r + 1] * scale);
        if constexpr (!DQ)
          *reinterpret_cast<__nv_bfloat162*>(out2 + rows2.row(z, i) + col) = to_pair<__nv_bfloat16>(acc2[r], acc2[r + 1]);
      }
    }
  }
#else
  (void)lse2, (void)delta, (void)Tpad, (void)out1, (void)out2, (void)rows1, (void)rows2, (void)Hq, (void)Hkv, (void)Tq, (void)Tk, (void)causal, (void)scale,
      (void)scale_log2, (void)dq_acc;
  __trap();  // built without sm_90a: the launcher refuses to start it
#endif
}

// ---------------------------------------------------------------------------------------------
// Kernels: the backward's pre-pass and last step, shared by every backward variant.
//
// With P = softmax(S), S = scale Q K^T and the output's gradient dO (FlashAttention 2's backward, per query row i
// and key j): dV = P^T dO; dP = dO V^T; dS_ij = P_ij (dP_ij - D_i) with D_i = sum_j P_ij dP_ij = dO_i . O_i;
// dQ = scale dS K; dK = scale dS^T Q. P is recomputed per tile from q, k and the forward's lse (P = exp(S - lse)),
// so nothing of size T^2 is stored; D_i comes first, from dO and O, in a pass of its own.

// attention_rowdot_kernel: warp w of block b owns row 8b + w (every head's rows stacked): D_i = dO_i . O_i in float32.
// Reads dO and O once: bandwidth-bound, a small part of the backward.
template <typename T>
__global__ void __launch_bounds__(SOFTMAX_WARPS * 32) attention_rowdot_kernel(const T* __restrict__ dout, const T* __restrict__ out,
                                                                              float* __restrict__ delta, int64_t rows, int D) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * (int64_t)SOFTMAX_WARPS + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp leaves together
  float s = 0.0f;
  for (int d = lane; d < D; d += 32) s += to_float(dout[row * D + d]) * to_float(out[row * D + d]);
  s = warp_allreduce_sum(s);
  if (lane == 0) delta[row] = s;
}

constexpr int ROWS4_THREADS = 256;  // attention_rows_kernel4's block

// attention_rows_kernel4: attention_backward4's pre-pass over the rows of [B Hq, Tpad] (Tpad: Tq rounded up to BS):
// D_i = dO_i . O_i and lse_i log2 e for a query, 0 and +inf in the padding past Tq. A row of D bf16 values is D / 8
// chunks of 16 bytes: L = D / 8 consecutive lanes own a row (8 at D 64, 16 at D 128), a chunk of dO and of O each,
// and add their dot products up over the L lanes by shuffles. With a warp a row, each lane had loaded 2 bytes at a
// time: a warp's loads were 256 bytes, too few in flight to keep DRAM busy (an H200, 98304 rows of 64: 31 us, now 10).
template <int D>
__global__ void __launch_bounds__(ROWS4_THREADS) attention_rows_kernel4(
    const __nv_bfloat16* __restrict__ dout, HeadRows dout_rows, const __nv_bfloat16* __restrict__ out, HeadRows out_rows,
    const float* __restrict__ lse, float* __restrict__ delta, float* __restrict__ lse2, int64_t rows, int Tq, int Tpad) {
  constexpr int L = D / 8;
  const int part = threadIdx.x % L;
  const int64_t r = (blockIdx.x * (int64_t)ROWS4_THREADS + threadIdx.x) / L;
  const int64_t bh = r / Tpad;
  const int i = (int)(r % Tpad);
  float s = 0.0f;
  if (r < rows && i < Tq) {  // no early return: every lane takes part in the shuffles below
    const uint4 a = *reinterpret_cast<const uint4*>(dout + dout_rows.row((int)bh, i) + 8 * part);
    const uint4 b = *reinterpret_cast<const uint4*>(out + out_rows.row((int)bh, i) + 8 * part);
    const __nv_bfloat16* x = reinterpret_cast<const __nv_bfloat16*>(&a);
    const __nv_bfloat16* y = reinterpret_cast<const __nv_bfloat16*>(&b);
#pragma unroll
    for (int e = 0; e < 8; ++e) s += to_float(x[e]) * to_float(y[e]);
  }
#pragma unroll
  for (int o = L / 2; o > 0; o /= 2) s += __shfl_xor_sync(FULL_MASK, s, o);  // within the row's L lanes
  if (r < rows && part == 0) {
    delta[r] = s;
    lse2[r] = i < Tq ? lse[bh * Tq + i] * LOG2E : INFINITY;
  }
}

// attention_convert_kernel: dq = the float32 sums the atomics made, rounded once to T; a thread per 1 value.
template <typename T>
__global__ void attention_convert_kernel(const float* __restrict__ acc, T* __restrict__ dq, int64_t n) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
    dq[e] = from_float<T>(acc[e]);
}

// ---------------------------------------------------------------------------------------------
// Kernels: attention_backward1, FlashAttention 2's backward on CUDA cores.

constexpr int KEYS4 = 16, ROWS4 = 16, THREADS4 = 128;  // a block's keys, its query rows per step, its threads

// attention_backward_kernel1: block (x, g, b) owns keys 16x .. 16x + 15 of kv head g of batch b: their k and v in
// shared memory, their dK and dV in registers (thread t owns the (key, column) pairs t, t + 128, ...). It walks every
// query head of the group (GQA: their contributions to the shared kv head add up in those registers, no atomics)
// and every query tile of 16 rows that can attend to its keys (causal: from the diagonal on), in three phases
// between barriers: S and dP (a thread per 2 of the 16 x 16 pairs, dot products over D), then P and dS into shared
// memory; dK += dS^T Q and dV += P^T dO; dQ += dS K for the tile's rows, added into a float32 buffer with atomics
// (coalesced: consecutive threads, consecutive columns). Shared rows are padded to DMAX + 1 floats so that 16 keys
// (or 2 rows) read at one column fall in different banks. Reads Q and dO once per 16 keys; bounded by shared memory.
template <typename T, int DMAX>
__global__ void __launch_bounds__(THREADS4) attention_backward_kernel1(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, float* __restrict__ dq_acc, T* __restrict__ dk,
    T* __restrict__ dv, int Hq, int Hkv, int Tq, int Tk, int D, bool causal, float scale) {
  __shared__ float Ks[KEYS4][DMAX + 1];
  __shared__ float Vs[KEYS4][DMAX + 1];
  __shared__ float Qs[ROWS4][DMAX + 1];
  __shared__ float dOs[ROWS4][DMAX + 1];
  __shared__ float Ps[ROWS4][KEYS4 + 1];
  __shared__ float dSs[ROWS4][KEYS4 + 1];
  __shared__ float row_lse[ROWS4];
  __shared__ float row_delta[ROWS4];
  constexpr int PER = KEYS4 * DMAX / THREADS4;  // (key, column) pairs of dK and dV per thread; also (row, column) of dQ
  static_assert(PER * THREADS4 == KEYS4 * DMAX && ROWS4 == KEYS4 && DMAX % 32 == 0, "whole warps per key and per row");
  const int tid = threadIdx.x, j0 = blockIdx.x * KEYS4, b = blockIdx.z, group = Hq / Hkv;
  const int64_t kv_at = ((int64_t)b * Hkv + blockIdx.y) * Tk * D;
  for (int e = tid; e < KEYS4 * DMAX; e += THREADS4) {
    const int c = e / DMAX, d = e % DMAX;
    const bool inside = j0 + c < Tk && d < D;
    Ks[c][d] = inside ? to_float(k[kv_at + (int64_t)(j0 + c) * D + d]) : 0.0f;
    Vs[c][d] = inside ? to_float(v[kv_at + (int64_t)(j0 + c) * D + d]) : 0.0f;
  }
  float dk_acc[PER] = {}, dv_acc[PER] = {};
  // causal: row i attends to key j0 iff i >= j0 - (Tk - Tq); earlier rows' P is 0 for every key of the block
  const int first = causal ? max(0, j0 - (Tk - Tq)) / ROWS4 * ROWS4 : 0;
  for (int h = blockIdx.y * group; h < (blockIdx.y + 1) * group; ++h) {
    const int64_t bh = (int64_t)b * Hq + h, q_at = bh * Tq * D;
    for (int i0 = first; i0 < Tq; i0 += ROWS4) {
      __syncthreads();  // the previous step's tiles have been read (the first time: K and V are in)
      for (int e = tid; e < ROWS4 * DMAX; e += THREADS4) {
        const int r = e / DMAX, d = e % DMAX;
        const bool inside = i0 + r < Tq && d < D;
        Qs[r][d] = inside ? to_float(q[q_at + (int64_t)(i0 + r) * D + d]) : 0.0f;
        dOs[r][d] = inside ? to_float(dout[q_at + (int64_t)(i0 + r) * D + d]) : 0.0f;
      }
      if (tid < ROWS4) {
        // lse = -inf (a row with no key) would make exp(s - lse) infinite: +inf makes its P 0, as for rows past Tq
        const float l = i0 + tid < Tq ? lse[bh * Tq + i0 + tid] : INFINITY;
        row_lse[tid] = l == -INFINITY ? INFINITY : l;
        row_delta[tid] = i0 + tid < Tq ? delta[bh * Tq + i0 + tid] : 0.0f;
      }
      __syncthreads();  // wait until the tiles are loaded

      // Phase 1: P and dS for the 16 x 16 (row, key) pairs, 2 per thread; a warp covers 2 rows x 16 keys.
      for (int e = tid; e < ROWS4 * KEYS4; e += THREADS4) {
        const int r = e / KEYS4, c = e % KEYS4;
        float s = 0.0f, dp = 0.0f;
#pragma unroll
        for (int d = 0; d < DMAX; ++d) {
          s += Qs[r][d] * Ks[c][d];
          dp += dOs[r][d] * Vs[c][d];
        }
        const bool kept = i0 + r < Tq && j0 + c < keys_of_row(i0 + r, Tq, Tk, causal);
        const float p = kept ? __expf(scale * s - row_lse[r]) : 0.0f;
        Ps[r][c] = p;
        dSs[r][c] = p * (dp - row_delta[r]);
      }
      __syncthreads();  // P and dS are in

      // Phase 2: dV += P^T dO and dK += dS^T Q for this thread's (key, column) pairs: a warp shares its key (a
      // broadcast of P and dS) and reads 32 consecutive columns of dO and Q.
#pragma unroll
      for (int x = 0; x < PER; ++x) {
        const int c = (tid + x * THREADS4) / DMAX, d = (tid + x * THREADS4) % DMAX;
#pragma unroll
        for (int r = 0; r < ROWS4; ++r) {
          dv_acc[x] += Ps[r][c] * dOs[r][d];
          dk_acc[x] += dSs[r][c] * Qs[r][d];
        }
      }
      // Phase 3: dQ += scale dS K for this thread's (row, column) pairs, into the float32 buffer: every key block
      // adds to the same rows, so the adds are atomic.
#pragma unroll
      for (int x = 0; x < PER; ++x) {
        const int r = (tid + x * THREADS4) / DMAX, d = (tid + x * THREADS4) % DMAX;
        if (i0 + r >= Tq || d >= D) continue;
        float a = 0.0f;
#pragma unroll
        for (int c = 0; c < KEYS4; ++c) a += dSs[r][c] * Ks[c][d];
        atomicAdd(&dq_acc[q_at + (int64_t)(i0 + r) * D + d], scale * a);
      }
    }
  }
#pragma unroll
  for (int x = 0; x < PER; ++x) {
    const int c = (tid + x * THREADS4) / DMAX, d = (tid + x * THREADS4) % DMAX;
    if (j0 + c < Tk && d < D) {
      dk[kv_at + (int64_t)(j0 + c) * D + d] = from_float<T>(scale * dk_acc[x]);
      dv[kv_at + (int64_t)(j0 + c) * D + d] = from_float<T>(dv_acc[x]);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Kernels: attention_backward2 and attention_backward3, on tensor cores.

// The tiles of the dK/dV kernel. A block owns BC = 64 keys, a warp 16 of them (the m16 rows of S^T = K Q^T, so that
// dK and dV, 16 x D each, stay in the warp's registers), and walks the query rows in tiles of BR: 64 at D 64; at D 128
// 64 without dQ (attention_backward3: dK and dV take 128 registers, the 16 x 64 tiles of S^T and dP^T 64; 255 in
// all, no spills, and half the barriers and Q/dO tile loads of BR 32: measured, 0.07-0.09x of SDPA's flash backward
// faster than 32) and 32 with it (the dQ step's registers on top).
// DQ: dQ by float32 atomics (attention_backward2), else left to attention_dq_kernel3 (attention_backward3).
template <typename T, int D_, int BR_, bool DQ_, int WARPS_ = 4>
struct Bwd2 {
  using Type = T;
  static constexpr int D = D_, BR = BR_, WARPS = WARPS_, BC = 16 * WARPS, THREADS = 32 * WARPS;
  static constexpr bool DQ = DQ_;
  static constexpr int MT = BR / 16, DSPLIT = WARPS / MT;  // the dQ step: the tile's m16 tiles, the warps on each
  // K, V; Q and dO in two buffers each; dS^T [BC][BR]; lse and D_i of the query rows, two buffers each
  static constexpr int SMEM = (2 * BC * D + 4 * BR * D + BC * BR) * (int)sizeof(T) + 4 * BR * (int)sizeof(float);
  static_assert(D % 16 == 0 && BR % 16 == 0 && WARPS % MT == 0 && (D / DSPLIT) % 16 == 0, "whole m16n8k16 steps");
};

// attention_backward_kernel2: block (x, g, b) owns keys 64x .. 64x + 63 of kv head g (K and V loaded once into
// swizzled shared memory); warp w owns 16 of them: lane l holds keys g = l / 4 and g + 8 of the warp's 16 rows of
// dK and dV (fp32 C fragments). It walks every query head of the group (GQA: their dK and dV add up in registers)
// and every query tile that can attend to its keys; per tile, with Q and dO double-buffered by cp.async:
//   S^T = K Q^T and dP^T = V dO^T (A: the warp's K and V rows by ldmatrix; B: Q and dO, ldmatrix without .trans)
//   P^T = exp2(S^T scale log2 e - lse log2 e) (lse per column, from shared memory), masked; dS^T = P^T (dP^T - D)
//   dV += P^T dO and dK += dS^T Q (A: P^T and dS^T from the C registers, as in the forward; B: ldmatrix.trans)
//   DQ: dS^T to shared memory, a barrier, then dQ = dS K for the tile (warps split its m16 tiles and columns),
//   added into a float32 buffer with atomics (every key block adds to the same dQ rows).
// Reads Q and dO once per 64 keys (and lse, D); writes dK and dV once. 10 B Hq Tq Tk D FLOPs with dQ, 8 without.
template <class C>
__global__ void __launch_bounds__(C::THREADS) attention_backward_kernel2(
    const typename C::Type* __restrict__ q, const typename C::Type* __restrict__ k, const typename C::Type* __restrict__ v,
    const typename C::Type* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
    float* __restrict__ dq_acc, typename C::Type* __restrict__ dk, typename C::Type* __restrict__ dv, int Hq, int Hkv,
    int Tq, int Tk, bool causal, float scale, float scale_log2) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  using T = typename C::Type;
  constexpr int D = C::D, BR = C::BR, BC = C::BC, THREADS = C::THREADS;
  extern __shared__ uint4 attention_smem[];
  T* Ks = reinterpret_cast<T*>(attention_smem);  // [BC][D], swizzled
  T* Vs = Ks + BC * D;                           // [BC][D]
  T* Qs = Vs + BC * D;                           // [2][BR][D]
  T* dOs = Qs + 2 * BR * D;                      // [2][BR][D]
  T* dSs = dOs + 2 * BR * D;                     // [BC][BR]: dS^T, for the dQ step
  float* row_lse = reinterpret_cast<float*>(dSs + BC * BR);  // [2][BR], times log2 e
  float* row_delta = row_lse + 2 * BR;                       // [2][BR]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int j0 = blockIdx.x * BC, kw = j0 + 16 * warp;  // the block's and the warp's first keys
  const int key = kw + lane / 4;                         // this lane's keys: key and key + 8
  const int group = Hq / Hkv, shift = Tk - Tq;
  const int64_t kv_at = ((int64_t)blockIdx.z * Hkv + blockIdx.y) * Tk * D;
  const int first = causal ? max(0, j0 - shift) / BR : 0;  // earlier query tiles attend to none of the block's keys
  const int tiles = (Tq + BR - 1) / BR - first, steps = group * tiles;

  // Step s: query head blockIdx.y * group + s / tiles, query tile first + s % tiles, into buffer s % 2.
  auto load_step = [&](int s) {
    const int64_t bh = (int64_t)blockIdx.z * Hq + blockIdx.y * group + s / tiles;
    const int i0 = (first + s % tiles) * BR, buf = s % 2;
    load_tile_async<BR, D, THREADS>(Qs + buf * BR * D, q + bh * Tq * D, i0, Tq);
    load_tile_async<BR, D, THREADS>(dOs + buf * BR * D, dout + bh * Tq * D, i0, Tq);
    if (threadIdx.x < BR) {  // ordinary loads: the next barrier publishes them. A row with no key (lse = -inf) or
      const int i = i0 + threadIdx.x;  // past Tq gets +inf: its P = exp2(s - inf) = 0
      const float l = i < Tq ? lse[bh * Tq + i] : INFINITY;
      row_lse[buf * BR + threadIdx.x] = l == -INFINITY ? INFINITY : l * LOG2E;
      row_delta[buf * BR + threadIdx.x] = i < Tq ? delta[bh * Tq + i] : 0.0f;
    }
  };
  load_tile_async<BC, D, THREADS>(Ks, k + kv_at, j0, Tk);
  load_tile_async<BC, D, THREADS>(Vs, v + kv_at, j0, Tk);
  if (steps > 0) load_step(0);
  cp_async_commit();

  float dk_acc[D / 8][4] = {}, dv_acc[D / 8][4] = {};  // the warp's 16 keys x D, C fragments
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<0>();  // step s's tiles (and K, V) have landed (this thread's copies) ...
    __syncthreads();     // ... everyone's; every warp is done with step s - 1 (its buffers and dS^T)
    if (s + 1 < steps) load_step(s + 1);
    cp_async_commit();
    const int buf = s % 2, i0 = (first + s % tiles) * BR;
    const T* qt = Qs + buf * BR * D;
    const T* ot = dOs + buf * BR * D;
    const float* lse_t = row_lse + buf * BR;
    const float* delta_t = row_delta + buf * BR;

    // S^T = K Q^T and dP^T = V dO^T: A = the warp's 16 rows of K and of V; B = Q^T, dO^T, as K^T in the forward.
    float st[BR / 8][4] = {}, dpt[BR / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t kf[4], vf[4];
      ldmatrix_x4(kf, Ks + swizzle<D>(16 * warp + lane % 8 + 8 * (lane / 8 % 2), 16 * kk + 8 * (lane / 16)));
      ldmatrix_x4(vf, Vs + swizzle<D>(16 * warp + lane % 8 + 8 * (lane / 8 % 2), 16 * kk + 8 * (lane / 16)));
#pragma unroll
      for (int jj = 0; jj < BR / 16; ++jj) {
        uint32_t qf[4], of[4];
        ldmatrix_x4(qf, qt + swizzle<D>(16 * jj + lane % 8 + 8 * (lane / 16), 16 * kk + 8 * (lane / 8 % 2)));
        ldmatrix_x4(of, ot + swizzle<D>(16 * jj + lane % 8 + 8 * (lane / 16), 16 * kk + 8 * (lane / 8 % 2)));
        mma16816<T>(st[2 * jj], kf, qf[0], qf[1]);
        mma16816<T>(st[2 * jj + 1], kf, qf[2], qf[3]);
        mma16816<T>(dpt[2 * jj], vf, of[0], of[1]);
        mma16816<T>(dpt[2 * jj + 1], vf, of[2], of[3]);
      }
    }

    // P^T and dS^T in place. Masked where the warp's keys cross the tile's diagonal or the end of the keys.
    const bool masked = kw + 15 >= Tk || (causal && kw + 15 > i0 + shift);
#pragma unroll
    for (int jn = 0; jn < BR / 8; ++jn)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 8 * jn + 2 * (lane % 4) + e % 2;  // the query (column) within the tile
        float p = fast_exp2(st[jn][e] * scale_log2 - lse_t[c]);
        if (masked && key + 8 * (e / 2) >= keys_of_row(i0 + c, Tq, Tk, causal)) p = 0.0f;
        st[jn][e] = p;
        dpt[jn][e] = p * (dpt[jn][e] - delta_t[c]);
      }

    // dV += P^T dO, dK += dS^T Q: A from the registers above (two n8 tiles of queries per 16), B by ldmatrix.trans.
#pragma unroll
    for (int kq = 0; kq < BR / 16; ++kq) {
      const uint32_t pf[4] = {pack<T>(st[2 * kq][0], st[2 * kq][1]), pack<T>(st[2 * kq][2], st[2 * kq][3]),
                              pack<T>(st[2 * kq + 1][0], st[2 * kq + 1][1]), pack<T>(st[2 * kq + 1][2], st[2 * kq + 1][3])};
      const uint32_t sf[4] = {pack<T>(dpt[2 * kq][0], dpt[2 * kq][1]), pack<T>(dpt[2 * kq][2], dpt[2 * kq][3]),
                              pack<T>(dpt[2 * kq + 1][0], dpt[2 * kq + 1][1]),
                              pack<T>(dpt[2 * kq + 1][2], dpt[2 * kq + 1][3])};
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        uint32_t of[4], qf[4];
        ldmatrix_x4_trans(of, ot + swizzle<D>(16 * kq + lane % 8 + 8 * (lane / 8 % 2), 16 * dd + 8 * (lane / 16)));
        ldmatrix_x4_trans(qf, qt + swizzle<D>(16 * kq + lane % 8 + 8 * (lane / 8 % 2), 16 * dd + 8 * (lane / 16)));
        mma16816<T>(dv_acc[2 * dd], pf, of[0], of[1]);
        mma16816<T>(dv_acc[2 * dd + 1], pf, of[2], of[3]);
        mma16816<T>(dk_acc[2 * dd], sf, qf[0], qf[1]);
        mma16816<T>(dk_acc[2 * dd + 1], sf, qf[2], qf[3]);
      }
    }

    if constexpr (C::DQ) {
      // dS^T into shared memory, rounded to T (the next barrier keeps it until every warp has read it) ...
#pragma unroll
      for (int jn = 0; jn < BR / 8; ++jn)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          *reinterpret_cast<Pair<T>*>(dSs + swizzle<BR>(16 * warp + lane / 4 + 8 * r, 8 * jn + 2 * (lane % 4))) =
              to_pair<T>(dpt[jn][2 * r], dpt[jn][2 * r + 1]);
      __syncthreads();  // ... every warp's 16 keys of it are in
      // ... then dQ = dS K for m16 tile `mi` of the query tile and columns d0 .. d0 + D / DSPLIT - 1. A = dS: dS^T
      // stored key-major, so ldmatrix.trans; B = K (keys x columns), ldmatrix.trans as V in the forward.
      const int mi = warp % C::MT, d0 = warp / C::MT * (D / C::DSPLIT);
      float acc[D / C::DSPLIT / 8][4] = {};
#pragma unroll
      for (int kk = 0; kk < BC / 16; ++kk) {
        uint32_t af[4];
        ldmatrix_x4_trans(af, dSs + swizzle<BR>(16 * kk + lane % 8 + 8 * (lane / 16), 16 * mi + 8 * (lane / 8 % 2)));
#pragma unroll
        for (int dd = 0; dd < D / C::DSPLIT / 16; ++dd) {
          uint32_t bf[4];
          ldmatrix_x4_trans(bf, Ks + swizzle<D>(16 * kk + lane % 8 + 8 * (lane / 8 % 2), d0 + 16 * dd + 8 * (lane / 16)));
          mma16816<T>(acc[2 * dd], af, bf[0], bf[1]);
          mma16816<T>(acc[2 * dd + 1], af, bf[2], bf[3]);
        }
      }
      const int64_t bh = (int64_t)blockIdx.z * Hq + blockIdx.y * group + s / tiles;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = i0 + 16 * mi + lane / 4 + 8 * r;
        if (i >= Tq) continue;
        float* row = dq_acc + (bh * Tq + i) * D + d0 + 2 * (lane % 4);
#pragma unroll
        for (int dn = 0; dn < D / C::DSPLIT / 8; ++dn) {
          atomicAdd(row + 8 * dn, scale * acc[dn][2 * r]);
          atomicAdd(row + 8 * dn + 1, scale * acc[dn][2 * r + 1]);
        }
      }
    }
  }
  cp_async_wait<0>();  // nothing may be in flight when the block ends (nor land on the staging below)
  __syncthreads();     // every warp is done with Ks and Vs (the dQ step reads all of Ks)

  // Epilogue: dK (times scale) and dV rounded to T into the warp's own 16 rows of Ks and Vs, then 16-byte stores.
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int at = swizzle<D>(16 * warp + lane / 4 + 8 * r, 8 * dn + 2 * (lane % 4));
      *reinterpret_cast<Pair<T>*>(Ks + at) = to_pair<T>(scale * dk_acc[dn][2 * r], scale * dk_acc[dn][2 * r + 1]);
      *reinterpret_cast<Pair<T>*>(Vs + at) = to_pair<T>(dv_acc[dn][2 * r], dv_acc[dn][2 * r + 1]);
    }
  __syncwarp();  // the warp's rows are staged
#pragma unroll
  for (int e = lane; e < 16 * D / 8; e += 32) {
    const int r = e / (D / 8), col = e % (D / 8) * 8;
    if (kw + r >= Tk) continue;
    const int64_t at = kv_at + (int64_t)(kw + r) * D + col;
    *reinterpret_cast<uint4*>(dk + at) = *reinterpret_cast<const uint4*>(Ks + swizzle<D>(16 * warp + r, col));
    *reinterpret_cast<uint4*>(dv + at) = *reinterpret_cast<const uint4*>(Vs + swizzle<D>(16 * warp + r, col));
  }
#else
  __trap();  // compiled for a GPU before compute capability 8.0: the launcher refuses it first
#endif
}

// The tiles of attention_backward3's dQ kernel: attention3's shape with 4 warps (64 query rows) and key tiles of BC:
// 64 at D 64 and at D 128 (Q and dO fragments, 64 registers, the dQ accumulator, 64, and the 16 x 64 score and dP
// tiles, 64: 255 registers, no spills; 32 at D 128 left a K and V tile's loads and barrier per 32 keys).
template <typename T, int D_, int BC_, int WARPS_ = 4>
struct Dq3 {
  using Type = T;
  static constexpr int D = D_, WARPS = WARPS_, BR = 16 * WARPS, BC = BC_, THREADS = 32 * WARPS;
  static constexpr int SMEM = (2 * BR * D + 4 * BC * D) * (int)sizeof(T);  // Q, dO; then K and V in two buffers each
  static_assert(D % 16 == 0 && BC % 16 == 0, "whole m16n8k16 steps");
};

// attention_dq_kernel3: warp w of block (x, h, b) owns query rows 64x + 16w .. + 15, lane l rows g and g + 8 (as in
// attention_kernel3): their Q and dO fragments, lse and D_i in registers, their dQ accumulator. Per key tile
// (double-buffered by cp.async, causal tiles above the diagonal skipped): S = Q K^T and dP = dO V^T (B: ldmatrix of
// K and V), P = exp2(S scale log2 e - lse log2 e) masked, dS = P (dP - D), dQ += dS K (A: dS from the registers; B:
// K by ldmatrix.trans). No atomics: each dQ row is written once, by its warp, so two runs give the same bits. The
// price: S and dP are computed a second time (the dK/dV kernel made them too): 7 matmuls of the forward's size, not 5.
template <class C>
__global__ void __launch_bounds__(C::THREADS) attention_dq_kernel3(
    const typename C::Type* __restrict__ q, const typename C::Type* __restrict__ k, const typename C::Type* __restrict__ v,
    const typename C::Type* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
    typename C::Type* __restrict__ dq, int Hq, int Hkv, int Tq, int Tk, bool causal, float scale, float scale_log2) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  using T = typename C::Type;
  constexpr int D = C::D, BR = C::BR, BC = C::BC, THREADS = C::THREADS;
  extern __shared__ uint4 attention_smem[];
  T* Qs = reinterpret_cast<T*>(attention_smem);  // [BR][D]
  T* dOs = Qs + BR * D;                          // [BR][D]
  T* Ks = dOs + BR * D;                          // [2][BC][D]
  T* Vs = Ks + 2 * BC * D;                       // [2][BC][D]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int x = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // causal: the longest query tiles first
  const int i0 = x * BR, w0 = i0 + 16 * warp, row = w0 + lane / 4;
  const HeadOffsets at = head_offsets(blockIdx.z, blockIdx.y, Hq, Hkv, Tq, Tk, D);
  const int shift = Tk - Tq;
  const int tiles = (keys_of_row(min(i0 + BR, Tq) - 1, Tq, Tk, causal) + BC - 1) / BC;

  load_tile_async<BR, D, THREADS>(Qs, q + at.q, i0, Tq);
  load_tile_async<BR, D, THREADS>(dOs, dout + at.q, i0, Tq);
  cp_async_commit();
  if (tiles > 0) {
    load_tile_async<BC, D, THREADS>(Ks, k + at.kv, 0, Tk);
    load_tile_async<BC, D, THREADS>(Vs, v + at.kv, 0, Tk);
  }
  cp_async_commit();
  float row_lse[2], row_delta[2];  // rows row and row + 8; +inf for a row with no key or past Tq: P = 0
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = row + 8 * r < Tq ? lse[at.row + row + 8 * r] : INFINITY;
    row_lse[r] = l == -INFINITY ? INFINITY : l * LOG2E;
    row_delta[r] = row + 8 * r < Tq ? delta[at.row + row + 8 * r] : 0.0f;
  }
  cp_async_wait<1>();  // Q and dO have landed (this thread's copies) ...
  __syncthreads();     // ... and everyone's
  uint32_t qf[D / 16][4], of[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    ldmatrix_x4(qf[kk], Qs + swizzle<D>(16 * warp + lane % 8 + 8 * (lane / 8 % 2), 16 * kk + 8 * (lane / 16)));
    ldmatrix_x4(of[kk], dOs + swizzle<D>(16 * warp + lane % 8 + 8 * (lane / 8 % 2), 16 * kk + 8 * (lane / 16)));
  }

  float acc[D / 8][4] = {};  // dQ / scale: the 16 x D tile, C fragments
  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<0>();
    __syncthreads();  // tile t is in for everyone; every warp is done with tile t - 1
    if (t + 1 < tiles) {
      load_tile_async<BC, D, THREADS>(Ks + (t + 1) % 2 * BC * D, k + at.kv, (t + 1) * BC, Tk);
      load_tile_async<BC, D, THREADS>(Vs + (t + 1) % 2 * BC * D, v + at.kv, (t + 1) * BC, Tk);
    }
    cp_async_commit();
    const int j0 = t * BC;
    if (causal && j0 > w0 + 15 + shift) continue;  // the whole tile lies past this warp's diagonal
    const T* kt = Ks + t % 2 * BC * D;
    const T* vt = Vs + t % 2 * BC * D;

    float s[BC / 8][4] = {}, dp[BC / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int jj = 0; jj < BC / 16; ++jj) {
        uint32_t kf[4], vf[4];
        ldmatrix_x4(kf, kt + swizzle<D>(16 * jj + lane % 8 + 8 * (lane / 16), 16 * kk + 8 * (lane / 8 % 2)));
        ldmatrix_x4(vf, vt + swizzle<D>(16 * jj + lane % 8 + 8 * (lane / 16), 16 * kk + 8 * (lane / 8 % 2)));
        mma16816<T>(s[2 * jj], qf[kk], kf[0], kf[1]);
        mma16816<T>(s[2 * jj + 1], qf[kk], kf[2], kf[3]);
        mma16816<T>(dp[2 * jj], of[kk], vf[0], vf[1]);
        mma16816<T>(dp[2 * jj + 1], of[kk], vf[2], vf[3]);
      }

    const bool masked = j0 + BC > Tk || (causal && j0 + BC - 1 > w0 + shift);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int n = keys_of_row(row + 8 * r, Tq, Tk, causal);
#pragma unroll
      for (int jn = 0; jn < BC / 8; ++jn)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float p = fast_exp2(s[jn][2 * r + e] * scale_log2 - row_lse[r]);
          if (masked && j0 + 8 * jn + 2 * (lane % 4) + e >= n) p = 0.0f;
          s[jn][2 * r + e] = p * (dp[jn][2 * r + e] - row_delta[r]);  // dS, in place of S
        }
    }

    // dQ += dS K: A = dS (two n8 tiles of keys per 16); B = K (keys x columns, stored key-major): ldmatrix.trans.
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      const uint32_t sf[4] = {pack<T>(s[2 * kk][0], s[2 * kk][1]), pack<T>(s[2 * kk][2], s[2 * kk][3]),
                              pack<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        uint32_t kf[4];
        ldmatrix_x4_trans(kf, kt + swizzle<D>(16 * kk + lane % 8 + 8 * (lane / 8 % 2), 16 * dd + 8 * (lane / 16)));
        mma16816<T>(acc[2 * dd], sf, kf[0], kf[1]);
        mma16816<T>(acc[2 * dd + 1], sf, kf[2], kf[3]);
      }
    }
  }
  cp_async_wait<0>();  // nothing may be in flight when the block ends

  // Epilogue: dQ = scale acc rounded to T into this warp's own rows of Qs (only this warp read them), 16-byte stores.
  T* os = Qs + 16 * warp * D;
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn)
      *reinterpret_cast<Pair<T>*>(os + swizzle<D>(lane / 4 + 8 * r, 8 * dn + 2 * (lane % 4))) =
          to_pair<T>(scale * acc[dn][2 * r], scale * acc[dn][2 * r + 1]);
  __syncwarp();
#pragma unroll
  for (int e = lane; e < 16 * D / 8; e += 32) {
    const int r = e / (D / 8), col = e % (D / 8) * 8;
    if (w0 + r < Tq)
      *reinterpret_cast<uint4*>(dq + at.q + (int64_t)(w0 + r) * D + col) =
          *reinterpret_cast<const uint4*>(os + swizzle<D>(r, col));
  }
#else
  __trap();  // compiled for a GPU before compute capability 8.0: the launcher refuses it first
#endif
}

// ---------------------------------------------------------------------------------------------
// Launchers.

// What an op takes: its name (for messages), its dtypes, its head dims.
struct Takes {
  const char* op;
  bool half_only;  // float16 and bfloat16 only (the tensor-core variants); otherwise float32 too
  int max_d;       // D from 1 to max_d ...
  bool d64_128;    // ... or only 64 and 128
  bool any_rows = false;  // q, k, v, out, dout and the gradients in any layout with contiguous rows (the Hopper
                          // variants' TMA reads them so), else contiguous
};

// The sizes of a call: q [B, Hq, Tq, D], k and v [B, Hkv, Tk, D].
struct Dims {
  int64_t B, Hq, Hkv, Tq, Tk, D;
  bool empty() const { return B == 0 || Hq == 0 || Tq == 0; }  // no output row: nothing to launch
};

// Whether a 4-D tensor's rows (its last dimension) are contiguous and start a multiple of 16 bytes apart, in any order
// of the other dimensions (a dimension of size 1 has no stride that matters): what a tensor map can describe.
// A stride of 0 (a broadcast view, from expand) is no such layout: rows must lie apart.
static bool rows_contiguous(const at::Tensor& t) {
  if (t.size(3) > 1 && t.stride(3) != 1) return false;
  for (int d = 0; d < 3; ++d)
    if (t.size(d) > 1 && (t.stride(d) <= 0 || (t.stride(d) * (int64_t)t.element_size()) % 16 != 0)) return false;
  return true;
}

// Whether no two elements of `t` share an address (what an output needs: else blocks write over each other). The
// dimensions of size > 1 taken by increasing stride, each must step over the whole extent of the previous ones.
static bool no_overlap(const at::Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (int d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  std::sort(dims.begin(), dims.end());
  int64_t extent = 1;  // elements spanned by the dimensions so far
  for (const auto& [stride, size] : dims) {
    if (stride < extent) return false;
    extent = stride * size;
  }
  return true;
}

// `t` must be contiguous, or (an op that takes any layout) have contiguous rows 16 bytes apart; an output must not
// overlap itself either.
static void check_layout(const Takes& w, const at::Tensor& t, const char* name, bool output = false) {
  if (w.any_rows) {
    TORCH_CHECK(rows_contiguous(t), "`", w.op, "`: ", name, "'s rows must be contiguous and start a multiple of 16 "
                "bytes apart (its tensor map's strides; no stride of 0), got strides ", shape_str(t.strides()),
                " for shape ", shape_str(t.sizes()), output ? "" : " (call .contiguous() first)");
    TORCH_CHECK(!output || no_overlap(t), "`", w.op, "`: ", name, " must not overlap itself (an output: each element is "
                "written once), got strides ", shape_str(t.strides()), " for shape ", shape_str(t.sizes()));
  } else {
    TORCH_CHECK(t.is_contiguous(), "`", w.op, "`: ", name, " must be contiguous, got strides ", shape_str(t.strides()),
                " for shape ", shape_str(t.sizes()), " (a transposed view, such as [B, T, H, D].transpose(1, 2), is "
                "not: call .contiguous() first, or call the functional op, which takes any layout)");
  }
}

// `t` must be on the device, 4-D, in a layout the op takes.
static void check_4d(const Takes& w, const at::Tensor& t, const char* name, const char* shape) {
  TORCH_CHECK(KERNELS_ON_DEVICE(t), "`", w.op, "`: ", name, " must be " KERNELS_DEVICE_WORD ", got a tensor on ", t.device());
  TORCH_CHECK(t.dim() == 4, "`", w.op, "`: ", name, " must have 4 dimensions ", shape, ", got shape ", shape_str(t.sizes()));
  check_layout(w, t, name);
}

// The checks of q, k and v that every op starts with; their sizes.
static Dims check_qkv(const Takes& w, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  check_4d(w, q, "q", "[B, Hq, Tq, D]");
  check_4d(w, k, "k", "[B, Hkv, Tk, D]");
  check_4d(w, v, "v", "[B, Hkv, Tk, D]");
  const auto dt = q.scalar_type();
  const bool half = dt == at::kHalf || dt == at::kBFloat16;
  TORCH_CHECK(half || (!w.half_only && dt == at::kFloat), "`", w.op, "`: q must be ",
              w.half_only ? "float16 or bfloat16 (the tensor cores' inputs)" : "float32, float16 or bfloat16", ", got ", dt);
  TORCH_CHECK(k.scalar_type() == dt && v.scalar_type() == dt, "`", w.op, "`: q, k and v must have one dtype, got ",
              dt, ", ", k.scalar_type(), " and ", v.scalar_type());
  TORCH_CHECK(k.sizes() == v.sizes(), "`", w.op, "`: k and v must have the same shape [B, Hkv, Tk, D], got ",
              shape_str(k.sizes()), " and ", shape_str(v.sizes()));
  const Dims d{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3)};
  TORCH_CHECK(k.size(0) == d.B && k.size(3) == d.D, "`", w.op, "`: k must have q's batch size B and head dim D (q: ",
              shape_str(q.sizes()), ", k and v: [B, Hkv, Tk, D]), got q ", shape_str(q.sizes()), " and k ", shape_str(k.sizes()));
  TORCH_CHECK(d.Hkv == 0 ? d.Hq == 0 : d.Hq % d.Hkv == 0, "`", w.op, "`: q's heads (Hq = ", std::to_string(d.Hq),
              ") must be a multiple of k's and v's (Hkv = ", std::to_string(d.Hkv),
              "): query head h reads kv head h / (Hq / Hkv)");
  if (w.d64_128) {
    TORCH_CHECK(d.D == 64 || d.D == 128, "`", w.op, "` takes head dim D = 64 or 128, got D = ", std::to_string(d.D));
  } else {
    TORCH_CHECK(d.D >= 1 && d.D <= w.max_d, "`", w.op, "` takes head dim D from 1 to ", std::to_string(w.max_d),
                ", got D = ", std::to_string(d.D));
  }
  TORCH_CHECK(d.Tq < (int64_t(1) << 31) - 256 && d.Tk < (int64_t(1) << 31) - 256, "`", w.op,
              "`: sequence lengths must be below 2^31 - 256, got Tq = ", std::to_string(d.Tq), ", Tk = ", std::to_string(d.Tk));
  TORCH_CHECK(d.B <= 65535 && d.Hq <= 65535, "`", w.op, "`: the grid takes at most 65535 batches and 65535 heads, got B = ",
              std::to_string(d.B), ", Hq = ", std::to_string(d.Hq));
  return d;
}

// `t` must be like `ref`: on the device, its dtype and shape, in a layout the op takes (`output`: one it may write).
static void check_like(const Takes& w, const at::Tensor& ref, const char* ref_name, const at::Tensor& t, const char* name,
                       bool output = false) {
  TORCH_CHECK(KERNELS_ON_DEVICE(t), "`", w.op, "`: ", name, " must be " KERNELS_DEVICE_WORD ", got a tensor on ", t.device());
  TORCH_CHECK(t.scalar_type() == ref.scalar_type() && t.sizes() == ref.sizes(), "`", w.op, "`: ", name, " must have ",
              ref_name, "'s shape ", shape_str(ref.sizes()), " and dtype ", ref.scalar_type(), ", got ",
              shape_str(t.sizes()), " ", t.scalar_type());
  check_layout(w, t, name, output);
}

// A float32 vector per query row, [B, Hq, Tq] (lse; the backward's row sums).
static void check_rows(const Takes& w, const Dims& d, const at::Tensor& t, const char* name) {
  TORCH_CHECK(KERNELS_ON_DEVICE(t), "`", w.op, "`: ", name, " must be " KERNELS_DEVICE_WORD ", got a tensor on ", t.device());
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.dim() == 3 && t.size(0) == d.B && t.size(1) == d.Hq && t.size(2) == d.Tq,
              "`", w.op, "`: ", name, " must be float32 of shape [B, Hq, Tq] = ", shape_str({d.B, d.Hq, d.Tq}), ", got ",
              shape_str(t.sizes()), " ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "`", w.op, "`: ", name, " must be contiguous (call .contiguous() first)");
}

// The checks of a forward call; false when there is nothing to launch (no output row; no key: out = 0, lse = -inf).
static bool forward_args(const Takes& w, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale,
                         at::Tensor& out, at::Tensor& lse, Dims& d) {
  d = check_qkv(w, q, k, v);
  check_like(w, q, "q", out, "out", true);
  check_rows(w, d, lse, "lse");
  TORCH_CHECK(std::isfinite(scale), "`", w.op, "`: scale must be a finite number, got ", std::to_string(scale));
  if (d.empty()) return false;
  if (d.Tk == 0) {  // every row attends to nothing
    out.zero_();
    lse.fill_(-INFINITY);
    return false;
  }
  return true;
}

// The tensor-core variants: 16-byte copies (every row is 128 or 256 bytes, so the base pointers decide), and a GPU of
// compute capability 8.0 or later.
static void check_tensor_core_args(const Takes& w, std::initializer_list<std::pair<const at::Tensor*, const char*>> ts) {
  for (const auto& [t, name] : ts)
    TORCH_CHECK(aligned16(*t), "`", w.op, "`: ", name, " must start on a 16-byte boundary (cp.async and the stores move 16 "
                "bytes), got a view at an offset of ", std::to_string(t->storage_offset()), " elements (call .clone() first)");
  check_capability(w.op, 800, "mma.sync m16n8k16 on fp16/bf16 and cp.async");
}

// Calls f(T{}) with T = float, __half or __nv_bfloat16 for x's dtype (checked already): helpers.cuh's dispatch with
// float16 too.
template <typename F>
inline void dispatch3(const at::Tensor& x, F&& f) {
  if (x.scalar_type() == at::kFloat) f(float{});
  else if (x.scalar_type() == at::kHalf) f(__half{});
  else f(__nv_bfloat16{});
}

// The grid of a kernel with `tiles` blocks per (batch, head): x over the tiles, y the head, z the batch (as
// FlashAttention's: consecutive blocks share a head's K and V, which stay in L2).
static dim3 head_grid(int64_t tiles, const Dims& d, int64_t heads) {
  CHECK_GRID(tiles);
  return dim3((unsigned)tiles, (unsigned)heads, (unsigned)d.B);
}

void attention1(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, double scale, at::Tensor& out,
                at::Tensor& lse) {
  const Takes w{"attention1", false, 256, false};
  Dims d;
  if (!forward_args(w, q, k, v, scale, out, lse, d)) return;
  // The scores of every head: B Hq Tq Tk floats (at T = 4096, 16 heads, a batch of 8: 8 GiB). Here is the cost of
  // not fusing: memory that grows with T^2, written and read twice.
  at::Tensor s = at::empty({d.B, d.Hq, d.Tq, d.Tk}, q.options().dtype(at::kFloat));
  const int64_t tiles_q = ceil_div(d.Tq, (int64_t)TILE1), tiles_k = ceil_div(d.Tk, (int64_t)TILE1);
  const int64_t rows = d.B * d.Hq * d.Tq;
  CHECK_GRID(ceil_div(rows, (int64_t)SOFTMAX_WARPS));
  auto stream = c10::cuda::getCurrentCUDAStream();
  const dim3 tile(TILE1, TILE1);
  dispatch3(q, [&](auto t) {
    using T = decltype(t);
    attention_scores_kernel1<T><<<head_grid(tiles_q * tiles_k, d, d.Hq), tile, 0, stream>>>(
        ptr<T>(q), ptr<T>(k), mut<float>(s), d.Hq, d.Hkv, d.Tq, d.Tk, d.D, causal, (float)scale);
    CHECK_LAUNCH();
    attention_softmax_kernel1<<<ceil_div(rows, (int64_t)SOFTMAX_WARPS), SOFTMAX_WARPS * 32, 0, stream>>>(
        mut<float>(s), mut<float>(lse), rows, d.Tq, d.Tk, causal);
    CHECK_LAUNCH();
    attention_pv_kernel1<T><<<head_grid(tiles_q * ceil_div(d.D, (int64_t)TILE1), d, d.Hq), tile, 0, stream>>>(
        ptr<float>(s), ptr<T>(v), mut<T>(out), d.Hq, d.Hkv, d.Tq, d.Tk, d.D, causal);
    CHECK_LAUNCH();
  });
}

void attention2(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, double scale, at::Tensor& out,
                at::Tensor& lse) {
  const Takes w{"attention2", false, 128, false};
  Dims d;
  if (!forward_args(w, q, k, v, scale, out, lse, d)) return;
  const dim3 grid = head_grid(ceil_div(d.Tq, (int64_t)ROWS2), d, d.Hq);
  auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch3(q, [&](auto t) {
    using T = decltype(t);
    // o[DMAX] lives in registers, so its length is a template parameter: the smallest of 32, 64, 128 that holds D
    auto kernel = d.D <= 32 ? attention_kernel2<T, 32> : d.D <= 64 ? attention_kernel2<T, 64> : attention_kernel2<T, 128>;
    kernel<<<grid, ROWS2, 0, stream>>>(ptr<T>(q), ptr<T>(k), ptr<T>(v), mut<T>(out), mut<float>(lse), d.Hq, d.Hkv,
                                       d.Tq, d.Tk, d.D, causal, (float)scale);
  });
  CHECK_LAUNCH();
}

// A kernel that takes more than 48 KB of dynamic shared memory must opt in (per device, so at every launch: a host
// call of about a microsecond).
template <typename K>
static void allow_shared(K kernel, int bytes) {
  if (bytes > 48 * 1024) C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <class C>
static void launch3(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, double scale, at::Tensor& out,
                    at::Tensor& lse, const Dims& d) {
  using T = typename C::Type;
  auto kernel = attention_kernel3<C>;
  allow_shared(kernel, C::SMEM);
  kernel<<<head_grid(ceil_div(d.Tq, (int64_t)C::BR), d, d.Hq), C::THREADS, C::SMEM, c10::cuda::getCurrentCUDAStream()>>>(
      ptr<T>(q), ptr<T>(k), ptr<T>(v), mut<T>(out), mut<float>(lse), d.Hq, d.Hkv, d.Tq, d.Tk, causal,
      (float)scale * LOG2E);
  CHECK_LAUNCH();
}

void attention3(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, double scale, at::Tensor& out,
                at::Tensor& lse) {
  const Takes w{"attention3", true, 128, true};
  Dims d;
  // the GPU and the alignment first: an empty call must be refused where a full one would be
  check_tensor_core_args(w, {{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}});
  if (!forward_args(w, q, k, v, scale, out, lse, d)) return;
  dispatch3(q, [&](auto t) {
    using T = decltype(t);
    if constexpr (!std::is_same<T, float>::value) {
      if (d.D == 64) launch3<Fwd3<T, 64, 4, 64, 2, true, 2>>(q, k, v, causal, scale, out, lse, d);
      else launch3<Fwd3<T, 128, 4, 32, 2, false, 2>>(q, k, v, causal, scale, out, lse, d);
    }
  });
}

// The Hopper variants' tensor map of q, k, v or dout ([B, H, T, D], rows contiguous: rows_contiguous) as a 4-D tensor
// (D, T, H, B) with its own strides: boxes of 64 columns x `rows` rows of one head, so that rows past a head's T arrive
// as zeros, not as the next head's rows. A dimension of size 1 gets the largest stride (its index is always 0).
static CUtensorMap head_map(const at::Tensor& t, uint32_t rows) {
  const cuuint64_t dims[4] = {(cuuint64_t)t.size(3), (cuuint64_t)t.size(2), (cuuint64_t)t.size(1), (cuuint64_t)t.size(0)};
  const int64_t bytes = t.element_size();
  int64_t widest = t.size(3) * bytes;
  for (int d = 0; d < 3; ++d)
    if (t.size(d) > 1) widest = std::max(widest, t.stride(d) * bytes);
  cuuint64_t strides[3];
  for (int d = 2, i = 0; d >= 0; --d, ++i) strides[i] = (cuuint64_t)(t.size(d) > 1 ? t.stride(d) * bytes : widest);
  const cuuint32_t box[4] = {64, rows, 1, 1};
  return tensor_map_nd(t, 4, dims, strides, box);
}

// Streaming multiprocessors on the current device (attention4's persistent grid).
static int sm_count() {
  int dev = 0, sms = 0;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

// Where the epilogues store a head's rows of `t` ([B, H, T, D], rows contiguous).
static HeadRows head_rows(const at::Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2), (int)t.size(1)}; }

template <int D>
static void launch4(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, double scale,
                    at::Tensor& out, at::Tensor& lse, const Dims& d) {
  const CUtensorMap mq = head_map(q, Fwd4<D>::BM), mk = head_map(k, BN4), mv = head_map(v, BN4);
  auto kernel = attention_kernel4<D>;
  allow_shared(kernel, Fwd4<D>::SMEM);
  // PERSIST: at most a block per SM, each walking tiles of query rows, else a block a tile (tiles below 2^31: the
  // kernel counts them in an int)
  const int64_t tiles = ceil_div(d.Tq, (int64_t)Fwd4<D>::BM) * d.B * d.Hq;
  TORCH_CHECK(tiles + 2 * sm_count() < (int64_t(1) << 31), "`attention4`: ceil(Tq / ", std::to_string(Fwd4<D>::BM),
              ") * B * Hq must be below 2^31 less twice the GPU's SM count (a block computes its next tile's "
              "index, up to two rounds of the grid ahead, in an int), got ", std::to_string(tiles));
  kernel<<<(unsigned)(Fwd4<D>::PERSIST ? std::min<int64_t>(tiles, sm_count()) : tiles), Fwd4<D>::THREADS, Fwd4<D>::SMEM,
           c10::cuda::getCurrentCUDAStream()>>>(mq, mk, mv, mut<__nv_bfloat16>(out), head_rows(out), mut<float>(lse),
                                                (int)d.B, d.Hq, d.Hkv, d.Tq, d.Tk, causal, (float)scale * LOG2E);
  CHECK_LAUNCH();
}

void attention4(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, double scale, at::Tensor& out,
                at::Tensor& lse) {
  const Takes w{"attention4", true, 128, true, true};
  Dims d;
  // the GPU, the dtype and the alignment first: an empty call must be refused where a full one would be
  for (const auto& [t, name] : {std::pair<const at::Tensor*, const char*>{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}})
    TORCH_CHECK(aligned16(*t), "`attention4`: ", name, " must start on a 16-byte boundary (TMA reads whole rows), got a "
                "view at an offset of ", std::to_string(t->storage_offset()), " elements (call .clone() first)");
  check_hopper("attention4");
  TORCH_CHECK(q.scalar_type() == at::kBFloat16, "`attention4` takes bfloat16 (its wgmma instructions name the type, "
              "and they are written for bfloat16 only; attention3 takes float16 too), got ", q.scalar_type());
  TORCH_CHECK(q.dim() != 4 || q.size(0) * q.size(1) < (int64_t(1) << 31), "`attention4`: B * Hq must be below 2^31 (a "
              "tensor map's coordinate), got ", std::to_string(q.size(0) * q.size(1)));
  if (!forward_args(w, q, k, v, scale, out, lse, d)) return;
  if (d.D == 64) launch4<64>(q, k, v, causal, scale, out, lse, d);
  else launch4<128>(q, k, v, causal, scale, out, lse, d);
}

// Whether attention4 takes these inputs here: bf16, D 64 or 128, 16-byte aligned with contiguous rows (any layout),
// a 9.x GPU and an sm_90a build.
static bool hopper_takes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return q.scalar_type() == at::kBFloat16 && (q.size(3) == 64 || q.size(3) == 128) && aligned16(q) && aligned16(k) &&
         aligned16(v) && rows_contiguous(q) && rows_contiguous(k) && rows_contiguous(v) &&
         device_attribute(cudaDevAttrComputeCapabilityMajor) == 9 && hopper_kernels_in_build() &&
         q.size(0) * q.size(1) < (int64_t(1) << 31);
}

// Whether attention3 (and the tensor-core backward) take these inputs on this GPU.
static bool tensor_cores_take(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const bool half = q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16;
  return half && (q.size(3) == 64 || q.size(3) == 128) && aligned16(q) && aligned16(k) && aligned16(v) &&
         device_attribute(cudaDevAttrComputeCapabilityMajor) >= 8;
}

// The variant the functional attention runs on these inputs (an op of its own, so the benchmark and the tests name
// the kernel they measure from the choice itself).
std::string attention_variant(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || !tensor_cores_take(q, k, v)) return "attention2";
  return hopper_takes(q, k, v) ? "attention4" : "attention3";
}

// The functional ops' outputs (out, and the gradients of q, k, v) are laid out as SDPA's flash backend lays them:
// empty_like of `t` viewed as [B, T, H, D], which keeps the order of `t`'s dimensions in memory and packs them (a
// contiguous input gives a contiguous output; the model's transposed views of its [B, T, 3 C] projection give
// outputs that are [B, T, H, D] in memory, whose transpose back to [B, T, C] is free). The fake kernels in the
// lesson's module say the same.
static at::Tensor empty_heads_like(const at::Tensor& t) { return at::empty_like(t.transpose(1, 2)).transpose(1, 2); }

// Where a variant that takes contiguous tensors only writes a result meant for `into`: `into` itself when it is
// contiguous, else a new tensor (copied into `into` afterwards).
static at::Tensor contiguous_result(const at::Tensor& into) {
  return into.is_contiguous() ? into : at::empty(into.sizes(), into.options());
}

// Functional attention: (out, lse) by attention4 on an H100, attention3 where it runs, else attention2 (float32,
// other head dims, a GPU before compute capability 8.0: no gate, the op runs everywhere). Any layout of q, k and v:
// attention4 reads them where they are, the others take contiguous copies. The op that autograd and torch.compile see.
std::tuple<at::Tensor, at::Tensor> attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                                             double scale) {
  TORCH_CHECK(q.dim() == 4, "`attention`: q must have 4 dimensions [B, Hq, Tq, D], got shape ", shape_str(q.sizes()));
  at::Tensor out = empty_heads_like(q);
  at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
  const std::string variant = attention_variant(q, k, v);
  if (variant == "attention4") {
    attention4(q, k, v, causal, scale, out, lse);
    return {out, lse};
  }
  at::Tensor o = contiguous_result(out);
  if (variant == "attention3") attention3(q.contiguous(), k.contiguous(), v.contiguous(), causal, scale, o, lse);
  else attention2(q.contiguous(), k.contiguous(), v.contiguous(), causal, scale, o, lse);
  if (!o.is_same(out)) out.copy_(o);
  return {out, lse};
}

// The checks of a backward call; false when there is nothing to launch (no query or no key: every gradient 0).
static bool backward_args(const Takes& w, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& out, const at::Tensor& lse, const at::Tensor& dout, double scale,
                          at::Tensor& dq, at::Tensor& dk, at::Tensor& dv, Dims& d) {
  d = check_qkv(w, q, k, v);
  check_like(w, q, "q", out, "out");
  check_like(w, q, "q", dout, "dout");
  check_rows(w, d, lse, "lse");
  check_like(w, q, "q", dq, "dq", true);
  check_like(w, k, "k", dk, "dk", true);
  check_like(w, v, "v", dv, "dv", true);
  TORCH_CHECK(std::isfinite(scale), "`", w.op, "`: scale must be a finite number, got ", std::to_string(scale));
  if (d.empty() || d.Tk == 0) {
    dq.zero_();
    dk.zero_();
    dv.zero_();
    return false;
  }
  return true;
}

// D_i = dO_i . O_i for every query row: [B, Hq, Tq] float32.
template <typename T>
static at::Tensor row_dots(const at::Tensor& dout, const at::Tensor& out, const Dims& d, cudaStream_t stream) {
  at::Tensor delta = at::empty({d.B, d.Hq, d.Tq}, out.options().dtype(at::kFloat));
  const int64_t rows = d.B * d.Hq * d.Tq, blocks = ceil_div(rows, (int64_t)SOFTMAX_WARPS);
  CHECK_GRID(blocks);
  attention_rowdot_kernel<T><<<blocks, SOFTMAX_WARPS * 32, 0, stream>>>(ptr<T>(dout), ptr<T>(out), mut<float>(delta),
                                                                        rows, d.D);
  CHECK_LAUNCH();
  return delta;
}

// Where the atomics add dQ up: dq itself when it is float32, else a zeroed float32 buffer that finish_dq rounds into dq.
static at::Tensor dq_accumulator(at::Tensor& dq) {
  return dq.scalar_type() == at::kFloat ? dq.zero_() : at::zeros(dq.sizes(), dq.options().dtype(at::kFloat));
}
template <typename T>
static void finish_dq(const at::Tensor& acc, at::Tensor& dq, cudaStream_t stream) {
  if constexpr (!std::is_same<T, float>::value) {
    const int64_t blocks = std::min<int64_t>(ceil_div(acc.numel(), (int64_t)256), 65536);
    attention_convert_kernel<T><<<blocks, 256, 0, stream>>>(ptr<float>(acc), mut<T>(dq), acc.numel());
    CHECK_LAUNCH();
  }
}

void attention_backward1(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                         const at::Tensor& lse, const at::Tensor& dout, bool causal, double scale, at::Tensor& dq,
                         at::Tensor& dk, at::Tensor& dv) {
  const Takes w{"attention_backward1", false, 128, false};
  Dims d;
  if (!backward_args(w, q, k, v, out, lse, dout, scale, dq, dk, dv, d)) return;
  auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch3(q, [&](auto t) {
    using T = decltype(t);
    const at::Tensor delta = row_dots<T>(dout, out, d, stream);
    const at::Tensor acc = dq_accumulator(dq);
    // dK and dV live in registers, so DMAX is a template parameter: the smallest of 32, 64, 128 that holds D
    auto kernel = d.D <= 32 ? attention_backward_kernel1<T, 32>
                  : d.D <= 64 ? attention_backward_kernel1<T, 64> : attention_backward_kernel1<T, 128>;
    kernel<<<head_grid(ceil_div(d.Tk, (int64_t)KEYS4), d, d.Hkv), THREADS4, 0, stream>>>(
        ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<T>(dout), ptr<float>(lse), ptr<float>(delta), mut<float>(acc),
        mut<T>(dk), mut<T>(dv), d.Hq, d.Hkv, d.Tq, d.Tk, d.D, causal, (float)scale);
    CHECK_LAUNCH();
    finish_dq<T>(acc, dq, stream);
  });
}

template <class C>
static void launch_backward_kv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
                               const at::Tensor& lse, const at::Tensor& delta, float* dq_acc, at::Tensor& dk,
                               at::Tensor& dv, bool causal, double scale, const Dims& d, cudaStream_t stream) {
  using T = typename C::Type;
  auto kernel = attention_backward_kernel2<C>;
  allow_shared(kernel, C::SMEM);
  kernel<<<head_grid(ceil_div(d.Tk, (int64_t)C::BC), d, d.Hkv), C::THREADS, C::SMEM, stream>>>(
      ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<T>(dout), ptr<float>(lse), ptr<float>(delta), dq_acc, mut<T>(dk), mut<T>(dv),
      d.Hq, d.Hkv, d.Tq, d.Tk, causal, (float)scale, (float)scale * LOG2E);
  CHECK_LAUNCH();
}

// The tensor-core backward: dK and dV by attention_backward_kernel2, dQ by its atomics (DQ) or by attention_dq_kernel3.
template <bool DQ>
static void backward_tensor_cores(const Takes& w, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& out, const at::Tensor& lse, const at::Tensor& dout, bool causal,
                                  double scale, at::Tensor& dq, at::Tensor& dk, at::Tensor& dv) {
  Dims d;
  // the GPU and the alignment first: an empty call must be refused where a full one would be
  check_tensor_core_args(w, {{&q, "q"}, {&k, "k"}, {&v, "v"}, {&dout, "dout"}, {&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}});
  if (!backward_args(w, q, k, v, out, lse, dout, scale, dq, dk, dv, d)) return;
  auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch3(q, [&](auto t) {
    using T = decltype(t);
    if constexpr (!std::is_same<T, float>::value) {
      const at::Tensor delta = row_dots<T>(dout, out, d, stream);
      if constexpr (DQ) {
        const at::Tensor acc = dq_accumulator(dq);
        if (d.D == 64) launch_backward_kv<Bwd2<T, 64, 64, true>>(q, k, v, dout, lse, delta, mut<float>(acc), dk, dv, causal, scale, d, stream);
        else launch_backward_kv<Bwd2<T, 128, 32, true>>(q, k, v, dout, lse, delta, mut<float>(acc), dk, dv, causal, scale, d, stream);
        finish_dq<T>(acc, dq, stream);
      } else {
        if (d.D == 64) launch_backward_kv<Bwd2<T, 64, 64, false>>(q, k, v, dout, lse, delta, nullptr, dk, dv, causal, scale, d, stream);
        else launch_backward_kv<Bwd2<T, 128, 64, false>>(q, k, v, dout, lse, delta, nullptr, dk, dv, causal, scale, d, stream);
        auto launch_dq = [&](auto config) {
          using C = decltype(config);
          auto kernel = attention_dq_kernel3<C>;
          allow_shared(kernel, C::SMEM);
          kernel<<<head_grid(ceil_div(d.Tq, (int64_t)C::BR), d, d.Hq), C::THREADS, C::SMEM, stream>>>(
              ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<T>(dout), ptr<float>(lse), ptr<float>(delta), mut<T>(dq), d.Hq,
              d.Hkv, d.Tq, d.Tk, causal, (float)scale, (float)scale * LOG2E);
          CHECK_LAUNCH();
        };
        if (d.D == 64) launch_dq(Dq3<T, 64, 64>{});
        else launch_dq(Dq3<T, 128, 64>{});
      }
    }
  });
}

// attention_backward4's tensor map of its padded rows of lse or D ([B Hq, Tpad] float32), in boxes of `cols` values
// of one row (no swizzle: a box is 256 or 512 bytes; past a row's end, zeros).
static CUtensorMap row_map(const at::Tensor& t, uint32_t cols) {
  const cuuint64_t dims[2] = {(cuuint64_t)t.size(1), (cuuint64_t)t.size(0)};
  const cuuint64_t strides[1] = {(cuuint64_t)(t.size(1) * 4)};
  const cuuint32_t box[2] = {cols, 1};
  return tensor_map_nd(t, 2, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_NONE);
}

template <int D, bool DQ, bool ATOMIC = false>
static void launch_backward4(const CUtensorMap& own1, const CUtensorMap& own2, const CUtensorMap& str1,
                             const CUtensorMap& str2, const CUtensorMap& rows_lse, const CUtensorMap& rows_delta,
                             const at::Tensor& lse2, const at::Tensor& delta, at::Tensor& out1,
                             __nv_bfloat16* out2, HeadRows rows2, const Dims& d, bool causal, double scale,
                             cudaStream_t stream, float* dq_acc = nullptr) {
  auto kernel = attention_backward_kernel4<D, DQ, ATOMIC>;
  constexpr int smem = Bwd4<D, ATOMIC>::SMEM;
  allow_shared(kernel, smem);
  kernel<<<head_grid(ceil_div(DQ ? d.Tq : d.Tk, (int64_t)128), d, DQ ? d.Hq : d.Hkv), THREADS4_WS, smem,
           stream>>>(own1, own2, str1, str2, rows_lse, rows_delta, ptr<float>(lse2), ptr<float>(delta), (int)delta.size(1), mut<__nv_bfloat16>(out1), out2,
                     head_rows(out1), rows2,
                     d.Hq, d.Hkv, d.Tq, d.Tk, causal, (float)scale, (float)scale * LOG2E, dq_acc);
  CHECK_LAUNCH();
}

// attention_dq_kernel5: attention_backward5's last step, dq = scale * the float32 sums its bulk reductions made,
// rounded once, from their tiles (dq_tile_index) into dq's layout (rows of D contiguous); a thread per 8 values
// (16 bytes of dq, 32 contiguous bytes of the sums).
template <int D>
__global__ void attention_dq_kernel5(const float* __restrict__ acc, __nv_bfloat16* __restrict__ dq, HeadRows rows,
                                     int64_t n8, int Tq, int Tpad, float scale) {
  constexpr int BS = kStream4<D>;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n8; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = e * 8 / D;
    const int head = (int)(row / Tq), i = (int)(row % Tq), col = (int)(e * 8 % D);
    const float4* const from = reinterpret_cast<const float4*>(
        acc + ((int64_t)head * Tpad + i / BS * BS) * D + dq_tile_index<D>(i % BS, col));
    const float4 a = from[0], b = from[1];
    const uint4 v = {pack<__nv_bfloat16>(a.x * scale, a.y * scale), pack<__nv_bfloat16>(a.z * scale, a.w * scale),
                     pack<__nv_bfloat16>(b.x * scale, b.y * scale), pack<__nv_bfloat16>(b.z * scale, b.w * scale)};
    *reinterpret_cast<uint4*>(dq + rows.row(head, i) + col) = v;
  }
}

// The Hopper backward: the pre-pass (D and lse log2 e in padded rows), then dK and dV per 128 keys, then dQ by the
// kernel's second mode (attention_backward4), or in the same kernel by bulk reductions and a rounding pass (ATOMIC:
// attention_backward5).
template <int D, bool ATOMIC>
static void backward4(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                      const at::Tensor& lse, const at::Tensor& dout, bool causal, double scale, at::Tensor& dq,
                      at::Tensor& dk, at::Tensor& dv, const Dims& d) {
  constexpr int BS = kStream4<D>;
  auto stream = c10::cuda::getCurrentCUDAStream();
  // Tpad: Tq rounded up to the streamed tile, so that every tile's lse and D lie in the copies (+inf and 0 past Tq)
  const int64_t tpad = ceil_div(d.Tq, (int64_t)BS) * BS, rows = d.B * d.Hq * tpad;
  at::Tensor delta = at::empty({d.B * d.Hq, tpad}, lse.options()), lse2 = at::empty({d.B * d.Hq, tpad}, lse.options());
  const int64_t row_blocks = ceil_div(rows * (D / 8), (int64_t)ROWS4_THREADS);
  CHECK_GRID(row_blocks);
  attention_rows_kernel4<D><<<row_blocks, ROWS4_THREADS, 0, stream>>>(
      ptr<__nv_bfloat16>(dout), head_rows(dout), ptr<__nv_bfloat16>(out), head_rows(out), ptr<float>(lse),
      mut<float>(delta), mut<float>(lse2), rows, (int)d.Tq, (int)tpad);
  CHECK_LAUNCH();
  const CUtensorMap lse_rows = row_map(lse2, BS), delta_rows = row_map(delta, BS);
  if constexpr (ATOMIC) {
    const at::Tensor acc = at::zeros({d.B * d.Hq, tpad, d.D}, lse.options());  // whole tiles (dq_tile_index)
    launch_backward4<D, false, true>(head_map(k, 128), head_map(v, 128), head_map(q, BS), head_map(dout, BS), lse_rows,
                                     delta_rows, lse2, delta, dk, mut<__nv_bfloat16>(dv), head_rows(dv), d, causal, scale,
                                     stream, mut<float>(acc));
    const int64_t n8 = d.B * d.Hq * d.Tq * D / 8, blocks = std::min<int64_t>(ceil_div(n8, (int64_t)256), 65536);
    attention_dq_kernel5<D><<<blocks, 256, 0, stream>>>(ptr<float>(acc), mut<__nv_bfloat16>(dq), head_rows(dq), n8,
                                                        (int)d.Tq, (int)tpad, (float)scale);
    CHECK_LAUNCH();
  } else {
    launch_backward4<D, false>(head_map(k, 128), head_map(v, 128), head_map(q, BS), head_map(dout, BS), lse_rows,
                               delta_rows, lse2, delta, dk, mut<__nv_bfloat16>(dv), head_rows(dv), d, causal, scale, stream);
    launch_backward4<D, true>(head_map(q, 128), head_map(dout, 128), head_map(k, BS), head_map(v, BS), lse_rows,
                              delta_rows, lse2, delta, dq, nullptr, head_rows(dq), d, causal, scale, stream);
  }
}

// attention_backward4 and 5: the pre-pass D = rowsum(dO * O), then the dK/dV kernel, then (4) the dQ kernel or (5)
// dQ added up by that kernel's bulk reductions and rounded by a last pass (Hopper, bf16).
template <bool ATOMIC>
static void backward_hopper(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& out, const at::Tensor& lse, const at::Tensor& dout, bool causal,
                            double scale, at::Tensor& dq, at::Tensor& dk, at::Tensor& dv) {
  const Takes w{op, true, 128, true, true};
  Dims d;
  // the GPU, the dtype and the alignment first: an empty call must be refused where a full one would be
  for (const auto& [t, name] : {std::pair<const at::Tensor*, const char*>{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"},
                                {&dout, "dout"}, {&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}})
    TORCH_CHECK(aligned16(*t), "`", op, "`: ", name, " must start on a 16-byte boundary (TMA and the pre-pass read "
                "whole rows, 16 bytes at a time), got a view at an offset of ", std::to_string(t->storage_offset()),
                " elements (call .clone() first)");
  check_hopper(op);
  TORCH_CHECK(q.scalar_type() == at::kBFloat16, "`", op, "` takes bfloat16 (its wgmma instructions name the type, "
              "and they are written for bfloat16 only; attention_backward3 takes float16 too), got ", q.scalar_type());
  TORCH_CHECK(q.dim() != 4 || q.size(0) * q.size(1) < (int64_t(1) << 31), "`", op, "`: B * Hq must be below 2^31 (a "
              "tensor map's coordinate), got ", std::to_string(q.size(0) * q.size(1)));
  if (!backward_args(w, q, k, v, out, lse, dout, scale, dq, dk, dv, d)) return;
  if (d.D == 64) backward4<64, ATOMIC>(q, k, v, out, lse, dout, causal, scale, dq, dk, dv, d);
  else backward4<128, ATOMIC>(q, k, v, out, lse, dout, causal, scale, dq, dk, dv, d);
}

void attention_backward4(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                         const at::Tensor& lse, const at::Tensor& dout, bool causal, double scale, at::Tensor& dq,
                         at::Tensor& dk, at::Tensor& dv) {
  backward_hopper<false>("attention_backward4", q, k, v, out, lse, dout, causal, scale, dq, dk, dv);
}

void attention_backward5(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                         const at::Tensor& lse, const at::Tensor& dout, bool causal, double scale, at::Tensor& dq,
                         at::Tensor& dk, at::Tensor& dv) {
  backward_hopper<true>("attention_backward5", q, k, v, out, lse, dout, causal, scale, dq, dk, dv);
}

void attention_backward2(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                         const at::Tensor& lse, const at::Tensor& dout, bool causal, double scale, at::Tensor& dq,
                         at::Tensor& dk, at::Tensor& dv) {
  backward_tensor_cores<true>({"attention_backward2", true, 128, true}, q, k, v, out, lse, dout, causal, scale, dq, dk, dv);
}

void attention_backward3(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                         const at::Tensor& lse, const at::Tensor& dout, bool causal, double scale, at::Tensor& dq,
                         at::Tensor& dk, at::Tensor& dv) {
  backward_tensor_cores<false>({"attention_backward3", true, 128, true}, q, k, v, out, lse, dout, causal, scale, dq, dk, dv);
}

std::string attention_backward_variant(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& dout) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || !tensor_cores_take(q, k, v) || !aligned16(dout))
    return "attention_backward1";
  if (!hopper_takes(q, k, v) || dout.dim() != 4 || !rows_contiguous(dout)) return "attention_backward3";
  // attention_backward5 adds dQ up in whatever order its blocks reach it; torch.use_deterministic_algorithms(True)
  // asks for the same bits every run, which attention_backward4 gives
  return at::globalContext().deterministicAlgorithms() ? "attention_backward4" : "attention_backward5";
}

// Functional backward: (dq, dk, dv) by attention_backward5 (4 under deterministic algorithms), 3 or 1, as `attention`
// picks attention4, 3 or 2. The op's derivative.
std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward(const at::Tensor& q, const at::Tensor& k,
                                                                  const at::Tensor& v, const at::Tensor& out,
                                                                  const at::Tensor& lse, const at::Tensor& dout,
                                                                  bool causal, double scale) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "`attention_backward`: q, k and v must have 4 dimensions "
              "[B, H, T, D], got shapes ", shape_str(q.sizes()), ", ", shape_str(k.sizes()), " and ", shape_str(v.sizes()));
  at::Tensor dq = empty_heads_like(q), dk = empty_heads_like(k), dv = empty_heads_like(v);
  // dout as autograd hands it may be in any layout (broadcast by a sum's backward, or at an odd offset): the kernels
  // read a contiguous copy of such a one, so that it never decides the variant
  const bool readable = dout.dim() == 4 && rows_contiguous(dout) && aligned16(dout);
  const at::Tensor gout = readable ? dout : at::empty(dout.sizes(), dout.options()).copy_(dout);
  const std::string variant = attention_backward_variant(q, k, v, gout);
  if (variant == "attention_backward4" || variant == "attention_backward5") {
    // out too is read in 16-byte pieces: a copy where it is not aligned
    const bool out_readable = out.dim() == 4 && rows_contiguous(out) && aligned16(out);
    const at::Tensor o = out_readable ? out : at::empty(out.sizes(), out.options()).copy_(out);
    if (variant == "attention_backward4") attention_backward4(q, k, v, o, lse, gout, causal, scale, dq, dk, dv);
    else attention_backward5(q, k, v, o, lse, gout, causal, scale, dq, dk, dv);
    return {dq, dk, dv};
  }
  at::Tensor gq = contiguous_result(dq), gk = contiguous_result(dk), gv = contiguous_result(dv);
  if (variant == "attention_backward3")
    attention_backward3(q.contiguous(), k.contiguous(), v.contiguous(), out.contiguous(), lse, gout.contiguous(), causal,
                        scale, gq, gk, gv);
  else
    attention_backward1(q.contiguous(), k.contiguous(), v.contiguous(), out.contiguous(), lse, gout.contiguous(), causal,
                        scale, gq, gk, gv);
  for (auto [g, into] : {std::pair<at::Tensor*, at::Tensor*>{&gq, &dq}, {&gk, &dk}, {&gv, &dv}})
    if (!g->is_same(*into)) into->copy_(*g);
  return {dq, dk, dv};
}

// ---------------------------------------------------------------------------------------------
// Registration. The functional ops get their fake kernels and derivative in Python (the lesson's module), the
// lesson 03 route.
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("attention1(Tensor q, Tensor k, Tensor v, bool causal, float scale, Tensor(a!) out, Tensor(b!) lse) -> ()");
  m.def("attention2(Tensor q, Tensor k, Tensor v, bool causal, float scale, Tensor(a!) out, Tensor(b!) lse) -> ()");
  m.def("attention3(Tensor q, Tensor k, Tensor v, bool causal, float scale, Tensor(a!) out, Tensor(b!) lse) -> ()");
  m.def("attention4(Tensor q, Tensor k, Tensor v, bool causal, float scale, Tensor(a!) out, Tensor(b!) lse) -> ()");
  m.def("attention(Tensor q, Tensor k, Tensor v, bool causal, float scale) -> (Tensor, Tensor)");
  m.def("attention_backward1(Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor dout, bool causal, float scale, "
        "Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv) -> ()");
  m.def("attention_backward2(Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor dout, bool causal, float scale, "
        "Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv) -> ()");
  m.def("attention_backward3(Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor dout, bool causal, float scale, "
        "Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv) -> ()");
  m.def("attention_backward4(Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor dout, bool causal, float scale, "
        "Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv) -> ()");
  m.def("attention_backward5(Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor dout, bool causal, float scale, "
        "Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv) -> ()");
  m.def("attention_backward(Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor dout, bool causal, float scale) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("attention_variant(Tensor q, Tensor k, Tensor v) -> str");
  m.def("attention_backward_variant(Tensor q, Tensor k, Tensor v, Tensor dout) -> str");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("attention1", &attention1);
  m.impl("attention2", &attention2);
  m.impl("attention3", &attention3);
  m.impl("attention4", &attention4);
  m.impl("attention", &attention);
  m.impl("attention_backward1", &attention_backward1);
  m.impl("attention_backward2", &attention_backward2);
  m.impl("attention_backward3", &attention_backward3);
  m.impl("attention_backward4", &attention_backward4);
  m.impl("attention_backward5", &attention_backward5);
  m.impl("attention_backward", &attention_backward);
  m.impl("attention_variant", &attention_variant);
  m.impl("attention_backward_variant", &attention_backward_variant);
}
