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
//   attention_backward1  FlashAttention 2's backward on CUDA cores: P recomputed from q, k and lse per tile; a block
//                        per key tile accumulates dK and dV over every query row of its kv head; dQ by float32 atomics.
//                        Any D up to 128
//   attention_backward2  the same on tensor cores (mma.sync), a warp per 16 keys; dQ by float32 atomics. fp16 and bf16,
//                        D 64 or 128, compute capability 8.0 or later
//   attention_backward3  attention_backward2 made deterministic: dK and dV as there, dQ by a second kernel per query
//                        tile that recomputes P and dS instead of adding into dQ with atomics. Same inputs as backward2
//   attention            functional form: attention3 where it runs (fp16/bf16, D 64 or 128, 16-byte aligned, compute
//                        capability 8.0 or later), else attention2; returns (out, lse)
//   attention_backward   functional backward: attention_backward3 where it runs (deterministic, and faster than
//                        attention_backward2 at every shape measured), else attention_backward1; returns (dq, dk, dv)
//   attention_variant, attention_backward_variant   the name of the variant the functional form runs on these inputs
//
// Conventions, the same for every op:
//   q: [B, Hq, Tq, D]; k and v: [B, Hkv, Tk, D]; all contiguous, one dtype (float32, float16 or bfloat16 where the op
//   takes it); out, dout and dq: q's shape and dtype; dk, dv: k's; lse: [B, Hq, Tq] float32.
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

// ---------------------------------------------------------------------------------------------
// Includes.
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>

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
};

// The sizes of a call: q [B, Hq, Tq, D], k and v [B, Hkv, Tk, D].
struct Dims {
  int64_t B, Hq, Hkv, Tq, Tk, D;
  bool empty() const { return B == 0 || Hq == 0 || Tq == 0; }  // no output row: nothing to launch
};

// `t` must be on the device, 4-D and contiguous.
static void check_4d(const Takes& w, const at::Tensor& t, const char* name, const char* shape) {
  TORCH_CHECK(KERNELS_ON_DEVICE(t), "`", w.op, "`: ", name, " must be " KERNELS_DEVICE_WORD ", got a tensor on ", t.device());
  TORCH_CHECK(t.dim() == 4, "`", w.op, "`: ", name, " must have 4 dimensions ", shape, ", got shape ", shape_str(t.sizes()));
  TORCH_CHECK(t.is_contiguous(), "`", w.op, "`: ", name, " must be contiguous, got strides ", shape_str(t.strides()),
              " for shape ", shape_str(t.sizes()), " (a transposed view, such as [B, T, H, D].transpose(1, 2), is not: "
              "call .contiguous() first)");
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

// `t` must be like `ref`: on the device, its dtype and shape, contiguous.
static void check_like(const Takes& w, const at::Tensor& ref, const char* ref_name, const at::Tensor& t, const char* name) {
  TORCH_CHECK(KERNELS_ON_DEVICE(t), "`", w.op, "`: ", name, " must be " KERNELS_DEVICE_WORD ", got a tensor on ", t.device());
  TORCH_CHECK(t.scalar_type() == ref.scalar_type() && t.sizes() == ref.sizes(), "`", w.op, "`: ", name, " must have ",
              ref_name, "'s shape ", shape_str(ref.sizes()), " and dtype ", ref.scalar_type(), ", got ",
              shape_str(t.sizes()), " ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "`", w.op, "`: ", name, " must be contiguous (call .contiguous() first)");
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
  check_like(w, q, "q", out, "out");
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

// Whether attention3 (and the tensor-core backward) take these inputs on this GPU.
static bool tensor_cores_take(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const bool half = q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16;
  return half && (q.size(3) == 64 || q.size(3) == 128) && aligned16(q) && aligned16(k) && aligned16(v) &&
         device_attribute(cudaDevAttrComputeCapabilityMajor) >= 8;
}

// The variant the functional attention runs on these inputs (an op of its own, so the benchmark and the tests name
// the kernel they measure from the choice itself).
std::string attention_variant(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && tensor_cores_take(q, k, v) ? "attention3" : "attention2";
}

// Functional attention: (out, lse) by attention3 where it runs, else attention2 (float32, other head dims, a GPU
// before compute capability 8.0: no gate, the op runs everywhere). The op that autograd and torch.compile see.
std::tuple<at::Tensor, at::Tensor> attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                                             double scale) {
  TORCH_CHECK(q.dim() == 4, "`attention`: q must have 4 dimensions [B, Hq, Tq, D], got shape ", shape_str(q.sizes()));
  at::Tensor out = at::empty_like(q);
  at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
  if (attention_variant(q, k, v) == "attention3") attention3(q, k, v, causal, scale, out, lse);
  else attention2(q, k, v, causal, scale, out, lse);
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
  check_like(w, q, "q", dq, "dq");
  check_like(w, k, "k", dk, "dk");
  check_like(w, v, "v", dv, "dv");
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
  return attention_variant(q, k, v) == "attention3" && aligned16(dout) ? "attention_backward3" : "attention_backward1";
}

// Functional backward: (dq, dk, dv) by attention_backward3 where it runs, else attention_backward1 (as `attention`
// picks attention3 or attention2). The op's derivative.
std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward(const at::Tensor& q, const at::Tensor& k,
                                                                  const at::Tensor& v, const at::Tensor& out,
                                                                  const at::Tensor& lse, const at::Tensor& dout,
                                                                  bool causal, double scale) {
  at::Tensor dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
  if (attention_backward_variant(q, k, v, dout) == "attention_backward3")
    attention_backward3(q, k, v, out, lse, dout, causal, scale, dq, dk, dv);
  else
    attention_backward1(q, k, v, out, lse, dout, causal, scale, dq, dk, dv);
  return {dq, dk, dv};
}

// ---------------------------------------------------------------------------------------------
// Registration. The functional ops get their fake kernels and derivative in Python (the lesson's module), the
// lesson 03 route.
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("attention1(Tensor q, Tensor k, Tensor v, bool causal, float scale, Tensor(a!) out, Tensor(b!) lse) -> ()");
  m.def("attention2(Tensor q, Tensor k, Tensor v, bool causal, float scale, Tensor(a!) out, Tensor(b!) lse) -> ()");
  m.def("attention3(Tensor q, Tensor k, Tensor v, bool causal, float scale, Tensor(a!) out, Tensor(b!) lse) -> ()");
  m.def("attention(Tensor q, Tensor k, Tensor v, bool causal, float scale) -> (Tensor, Tensor)");
  m.def("attention_backward1(Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor dout, bool causal, float scale, "
        "Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv) -> ()");
  m.def("attention_backward2(Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor dout, bool causal, float scale, "
        "Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv) -> ()");
  m.def("attention_backward3(Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor dout, bool causal, float scale, "
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
  m.impl("attention", &attention);
  m.impl("attention_backward1", &attention_backward1);
  m.impl("attention_backward2", &attention_backward2);
  m.impl("attention_backward3", &attention_backward3);
  m.impl("attention_backward", &attention_backward);
  m.impl("attention_variant", &attention_variant);
  m.impl("attention_backward_variant", &attention_backward_variant);
}
