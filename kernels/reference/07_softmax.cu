// 07_softmax.cu: softmax over the last dimension of a [rows, cols] matrix, variant by variant, and its backward.
// Load with `ext = load("07")`; every variant is an out-variant: ext.softmax6(x, out).
//
//   softmax1          one thread per row, three passes over its row: neighbouring threads read addresses a row apart
//   softmax2          one block per row; the max and the sum as shared-memory trees (lesson 06's sum3)
//   softmax3          one warp per row; the max and the sum with shuffles: no shared memory, no barrier
//   softmax4          one block per row; shuffles in each warp, shared memory across warps (block_reduce_*)
//   softmax5          online softmax: the max and the sum in one pass by merging (max, sum) pairs; 2 passes, not 3
//   softmax6          16-byte loads and the row kept on chip (registers, then shared memory): one read of DRAM
//   softmax7          fused scale + causal mask + softmax (attention scores): masked columns are never read;
//                     the kept part of a row is read once into registers (softmax6's layouts by row length)
//   softmax_backward1 dx = y * (dy - sum(dy * y)), one block per row, with 16-byte loads where the rows allow
//   softmax_backward2 the same with the threads per row sized to the row: a warp per row (4 rows a block) for
//                     short rows, 128 to 1024 threads for longer ones, so each thread holds up to 8 packs of y
//                     and of dy (more bytes in flight per thread), all loaded before the first multiply
//   softmax           functional form of softmax6 (returns y), the op registered with autograd
//   softmax_backward  functional form of softmax_backward2 (returns dx): the op's derivative
//
// x: 2-D, contiguous, float32 or bfloat16; out (and every other tensor of a call): x's shape and dtype.
// The math runs in float32: bf16 values are widened on load and rounded once on store.
// A row that is entirely -inf (a fully masked row) has no finite maximum, and exp(-inf - -inf) is NaN.
// Here its softmax is defined as all zeros: it attends to nothing. (torch.softmax returns NaN there.)

// ---------------------------------------------------------------------------------------------
// Includes.
#include "helpers.cuh"

#include <ATen/ops/empty_like.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

constexpr int BLOCK = 256;  // threads per block: 8 warps
constexpr int WARPS = BLOCK / 32;
constexpr int REGS = 8;        // softmax6, backward: at most 8 16-byte packs of a row per thread in registers
constexpr int WIDE = 1024;     // softmax6: threads per row for rows too long for 256 threads ...
constexpr int WIDE_REGS = 4;   // ... with 4 packs each in registers: 1024 threads get at most 64 registers

// ---------------------------------------------------------------------------------------------
// Device helpers: the softmax of one value, (max, sum) pairs. (to_float, from_float<T>, the 16-byte
// Pack<T> with load16 and store16, dispatch, ptr and mut come from helpers.cuh.)

// One output value from the row's max m and 1 / sum. A row without a finite max (all -inf) gets 0:
// computing exp(x - m) there would be exp(-inf - -inf) = exp(NaN).
// __expf is the hardware's fast exponential (ex2.approx after a multiply by log2 e): a few ulps
// of error that grow with |x - m|, far inside the float32 tolerance for the values that matter.
__device__ __forceinline__ float softmax_at(float x, float m, float inv_sum) {
  return m == -INFINITY ? 0.0f : __expf(x - m) * inv_sum;
}

// A running (max, sum of exp(x - max)) over the values seen so far; {-inf, 0} before the first.
struct MaxSum {
  float m, s;
};

// Adds one value: when x is a new maximum, the sum so far is rescaled to it. One exp per value.
__device__ __forceinline__ MaxSum online_add(MaxSum a, float x) {
  if (x > a.m) return {x, a.s * __expf(a.m - x) + 1.0f};  // a.m = -inf: 0 * 0 + 1
  if (x == -INFINITY) return a;                           // adds exp(-inf) = 0; with a.m = -inf, exp(NaN)
  return {a.m, a.s + __expf(x - a.m)};
}

// Merges two pairs: both sums rescaled to the larger max. Both maxima -inf means both are empty.
__device__ __forceinline__ MaxSum online_merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};  // a.m - m would be -inf - -inf = NaN
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

// Every lane of a full warp calls this; every lane ends with the warp's merged pair (a butterfly).
__device__ __forceinline__ MaxSum warp_merge(MaxSum p) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const MaxSum other = {__shfl_xor_sync(FULL_MASK, p.m, offset), __shfl_xor_sync(FULL_MASK, p.s, offset)};
    p = online_merge(p, other);
  }
  return p;
}

// The block's pair, in every thread: warps merge with shuffles, then each thread merges the
// WARPS warp pairs from shared memory in the same order (so every thread gets the same bits).
__device__ __forceinline__ MaxSum block_merge(MaxSum p, MaxSum* scratch) {
  p = warp_merge(p);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = p;
  __syncthreads();  // every warp's pair is in shared memory
  MaxSum r = scratch[0];
  for (int w = 1; w < WARPS; ++w) r = online_merge(r, scratch[w]);
  return r;
}

struct MaxOp {
  __device__ static float combine(float a, float b) { return fmaxf(a, b); }
};
struct SumOp {
  __device__ static float combine(float a, float b) { return a + b; }
};

// Lesson 06's sum3 tree over BLOCK values, returned to every thread.
template <class Op>
__device__ __forceinline__ float tree_reduce(float v, float* partial) {
  const int tid = threadIdx.x;
  partial[tid] = v;
  __syncthreads();  // every value is in before anyone reads a neighbour's
  for (int s = BLOCK / 2; s > 0; s /= 2) {
    if (tid < s) partial[tid] = Op::combine(partial[tid], partial[tid + s]);
    __syncthreads();  // this level is complete before the next reads it
  }
  const float result = partial[0];
  __syncthreads();  // everyone has read partial[0] before the next tree overwrites it
  return result;
}

// ---------------------------------------------------------------------------------------------
// Kernels: the forward variants.

// softmax_kernel1: thread r owns row r and walks it three times (max, sum, write).
// Reads the row 3 times, writes it once; at each step the 32 lanes of a warp touch 32 different
// rows, cols elements apart: 32 memory transactions per warp load. Bounded by those scattered accesses.
template <typename T>
__global__ void softmax_kernel1(const T* __restrict__ x, T* __restrict__ out, int64_t rows, int64_t cols) {
  const int64_t row = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const T* r = x + row * cols;  // 64-bit: row * cols passes 2^31 in a 65536 x 65536 matrix
  T* o = out + row * cols;
  float m = -INFINITY;
  for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, to_float(r[c]));
  float s = 0.0f;
  if (m != -INFINITY)
    for (int64_t c = 0; c < cols; ++c) s += __expf(to_float(r[c]) - m);
  const float inv = 1.0f / s;
  for (int64_t c = 0; c < cols; ++c) o[c] = from_float<T>(softmax_at(to_float(r[c]), m, inv));
}

// softmax_kernel2: block b owns row b; thread t takes columns t, t + 256, ... (coalesced); the max
// and the sum are each a shared-memory tree of 8 levels. Reads the row 3 times (the 2nd and 3rd
// mostly from L1/L2), writes it once. Bounded by the 2 x 9 barriers per row for short rows.
template <typename T>
__global__ void __launch_bounds__(BLOCK) softmax_kernel2(const T* __restrict__ x, T* __restrict__ out, int64_t cols) {
  __shared__ float partial[BLOCK];
  const T* r = x + blockIdx.x * cols;
  T* o = out + blockIdx.x * cols;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, to_float(r[c]));
  m = tree_reduce<MaxOp>(m, partial);
  float s = 0.0f;
  if (m != -INFINITY)
    for (int64_t c = threadIdx.x; c < cols; c += BLOCK) s += __expf(to_float(r[c]) - m);
  const float inv = 1.0f / tree_reduce<SumOp>(s, partial);
  for (int64_t c = threadIdx.x; c < cols; c += BLOCK) o[c] = from_float<T>(softmax_at(to_float(r[c]), m, inv));
}

// softmax_kernel3: warp w of block b owns row 8b + w; lane l takes columns l, l + 32, ...; the max
// and the sum are 5 shuffles each. Reads the row 3 times, writes it once. No barriers: good for
// rows up to a few thousand columns; on wider rows 32 threads keep too few loads in flight.
template <typename T>
__global__ void __launch_bounds__(BLOCK) softmax_kernel3(const T* __restrict__ x, T* __restrict__ out, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * (int64_t)WARPS + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp leaves together, so the shuffles below see all 32 lanes
  const T* r = x + row * cols;
  T* o = out + row * cols;
  float m = -INFINITY;
  for (int64_t c = lane; c < cols; c += 32) m = fmaxf(m, to_float(r[c]));
  m = warp_reduce_max(m);  // every lane gets the max (xor butterfly)
  float s = 0.0f;
  if (m != -INFINITY)
    for (int64_t c = lane; c < cols; c += 32) s += __expf(to_float(r[c]) - m);
  const float inv = 1.0f / warp_allreduce_sum(s);
  for (int64_t c = lane; c < cols; c += 32) o[c] = from_float<T>(softmax_at(to_float(r[c]), m, inv));
}

// softmax_kernel4: as softmax_kernel2, but each block reduction is 5 shuffles per warp, one
// barrier, and 5 more shuffles (block_reduce_max/sum from helpers.cuh). Reads the row 3 times,
// writes it once; 4 barriers per row instead of 18. Bounded by the 2nd and 3rd reads.
template <typename T>
__global__ void __launch_bounds__(BLOCK) softmax_kernel4(const T* __restrict__ x, T* __restrict__ out, int64_t cols) {
  __shared__ float scratch[32];
  const T* r = x + blockIdx.x * cols;
  T* o = out + blockIdx.x * cols;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, to_float(r[c]));
  m = block_reduce_max(m, scratch, -INFINITY);
  float s = 0.0f;
  if (m != -INFINITY)
    for (int64_t c = threadIdx.x; c < cols; c += BLOCK) s += __expf(to_float(r[c]) - m);
  const float inv = 1.0f / block_reduce_sum(s, scratch);
  for (int64_t c = threadIdx.x; c < cols; c += BLOCK) o[c] = from_float<T>(softmax_at(to_float(r[c]), m, inv));
}

// softmax_kernel5: block b owns row b; each thread keeps a running (max, sum) over its columns
// (online softmax, Milakov and Gimelshein 2018), then the block merges the pairs. Reads the row
// twice, writes it once; one exp per value per pass. Bounded by bandwidth plus the second read.
template <typename T>
__global__ void __launch_bounds__(BLOCK) softmax_kernel5(const T* __restrict__ x, T* __restrict__ out, int64_t cols) {
  __shared__ MaxSum scratch[WARPS];
  const T* r = x + blockIdx.x * cols;
  T* o = out + blockIdx.x * cols;
  MaxSum p = {-INFINITY, 0.0f};
  for (int64_t c = threadIdx.x; c < cols; c += BLOCK) p = online_add(p, to_float(r[c]));
  p = block_merge(p, scratch);
  const float inv = 1.0f / p.s;
  for (int64_t c = threadIdx.x; c < cols; c += BLOCK) o[c] = from_float<T>(softmax_at(to_float(r[c]), p.m, inv));
}

// The max of a pack's values, and the sum of their exp(v - m).
template <typename T>
__device__ __forceinline__ float pack_max(const Pack<T>& a, float m) {
#pragma unroll
  for (int e = 0; e < kVec<T>; ++e) m = fmaxf(m, to_float(a.v[e]));
  return m;
}
template <typename T>
__device__ __forceinline__ float pack_sum_exp(const Pack<T>& a, float m) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < kVec<T>; ++e) s += __expf(to_float(a.v[e]) - m);
  return s;
}
template <typename T>
__device__ __forceinline__ Pack<T> pack_softmax(const Pack<T>& a, float m, float inv) {
  Pack<T> y;
#pragma unroll
  for (int e = 0; e < kVec<T>; ++e) y.v[e] = from_float<T>(softmax_at(to_float(a.v[e]), m, inv));
  return y;
}

// softmax_warp_kernel6: for rows of at most 32 * R packs. Warp w of block b owns row 8b + w; lane l
// loads packs l, l + 32, ... into registers (all R loads issued before the first use), then the max
// and the sum with shuffles from those registers. Reads the row once, writes it once: bandwidth-bound.
template <typename T, int R>
__global__ void __launch_bounds__(BLOCK) softmax_warp_kernel6(const T* __restrict__ x, T* __restrict__ out, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * (int64_t)WARPS + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp leaves together
  const int64_t n = cols / kVec<T>;
  const T* r = x + row * cols;
  T* o = out + row * cols;
  Pack<T> v[R];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int64_t j = lane + 32 * k;
    if (j < n) {
      v[k] = load16(r + j * kVec<T>);
      m = pack_max(v[k], m);
    }
  }
  m = warp_reduce_max(m);
  float s = 0.0f;
  if (m != -INFINITY) {
#pragma unroll
    for (int k = 0; k < R; ++k)
      if (lane + 32 * k < n) s += pack_sum_exp(v[k], m);
  }
  const float inv = 1.0f / warp_allreduce_sum(s);
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int64_t j = lane + 32 * k;
    if (j < n) store16(o + j * kVec<T>, pack_softmax(v[k], m, inv));
  }
}

// softmax_kernel6: for longer rows. Block b owns row b with THREADS threads; thread t holds packs
// t, t + THREADS, ... : the first R in registers, any further ones in dynamic shared memory
// (`spill`, read back only by the thread that wrote it, so no barrier guards it). Reads the row
// once, writes it once: bandwidth-bound while the row fits on chip (the launcher checks).
template <typename T, int THREADS, int R>
__global__ void __launch_bounds__(THREADS) softmax_kernel6(const T* __restrict__ x, T* __restrict__ out, int64_t cols) {
  extern __shared__ uint4 spill[];  // uint4 in every instantiation: extern shared arrays share one name and type
  __shared__ float scratch[32];
  const int tid = threadIdx.x;
  const int64_t n = cols / kVec<T>;
  const T* r = x + blockIdx.x * cols;
  T* o = out + blockIdx.x * cols;
  Pack<T> v[R];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int64_t j = tid + (int64_t)THREADS * k;
    if (j < n) {
      v[k] = load16(r + j * kVec<T>);
      m = pack_max(v[k], m);
    }
  }
  for (int64_t j = tid + (int64_t)THREADS * R; j < n; j += THREADS) {  // the rest of a long row
    const Pack<T> a = load16(r + j * kVec<T>);
    memcpy(&spill[j - (int64_t)THREADS * R], &a, 16);
    m = pack_max(a, m);
  }
  m = block_reduce_max(m, scratch, -INFINITY);
  float s = 0.0f;
  if (m != -INFINITY) {
#pragma unroll
    for (int k = 0; k < R; ++k)
      if (tid + (int64_t)THREADS * k < n) s += pack_sum_exp(v[k], m);
    for (int64_t j = tid + (int64_t)THREADS * R; j < n; j += THREADS) {
      Pack<T> a;
      memcpy(&a, &spill[j - (int64_t)THREADS * R], 16);
      s += pack_sum_exp(a, m);
    }
  }
  const float inv = 1.0f / block_reduce_sum(s, scratch);
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int64_t j = tid + (int64_t)THREADS * k;
    if (j < n) store16(o + j * kVec<T>, pack_softmax(v[k], m, inv));
  }
  for (int64_t j = tid + (int64_t)THREADS * R; j < n; j += THREADS) {
    Pack<T> a;
    memcpy(&a, &spill[j - (int64_t)THREADS * R], 16);
    store16(o + j * kVec<T>, pack_softmax(a, m, inv));
  }
}

// softmax_causal_kernel7: attention scores. Row r is query i = r % q_len; column j is kept as
// x * scale where j <= i and masked (-inf, so 0 out) where j > i. Block b owns row b, with
// softmax_kernel5's online pairs over the kept columns only: the masked ones are never read, just
// written as 0. Reads the kept part twice and writes the whole row: about 2/3 of softmax5's traffic
// on a square causal matrix. softmax7 takes it for rows that softmax_causal_kernel7_packed cannot hold
// (ragged, misaligned or too long).
template <typename T>
__global__ void __launch_bounds__(BLOCK) softmax_causal_kernel7(const T* __restrict__ x, T* __restrict__ out, int64_t cols,
                                                                float scale, int64_t q_len) {
  __shared__ MaxSum scratch[WARPS];
  const T* r = x + blockIdx.x * cols;
  T* o = out + blockIdx.x * cols;
  const int64_t kept = std::min<int64_t>(blockIdx.x % q_len + 1, cols);  // columns 0..i
  MaxSum p = {-INFINITY, 0.0f};
  for (int64_t c = threadIdx.x; c < kept; c += BLOCK) p = online_add(p, to_float(r[c]) * scale);
  p = block_merge(p, scratch);
  const float inv = 1.0f / p.s;
  for (int64_t c = threadIdx.x; c < cols; c += BLOCK)
    o[c] = from_float<T>(c < kept ? softmax_at(to_float(r[c]) * scale, p.m, inv) : 0.0f);
}

// softmax_causal_kernel7_packed: softmax7 for rows of whole 16-byte packs, at most GROUP * R of them, the row
// in registers as softmax6 keeps it: GROUP threads own a row, a warp (GROUP 32, THREADS / 32 rows a block, no
// barrier: attention rows of a few hundred to 2048 keys, where a block per row is mostly idle threads and
// barriers) or the whole block (GROUP = THREADS, longer rows). Only the packs that hold a kept column are
// loaded; in the pack that straddles the diagonal the masked columns are skipped, and the packs after it are
// stored as zeros without being read. Reads the kept part once and writes the whole row.
template <typename T, int THREADS, int GROUP, int R>
__global__ void __launch_bounds__(THREADS) softmax_causal_kernel7_packed(const T* __restrict__ x, T* __restrict__ out,
                                                                         int64_t rows, int64_t cols, float scale,
                                                                         int64_t q_len) {
  static_assert(GROUP == 32 || GROUP == THREADS, "a row belongs to one warp or to the whole block");
  __shared__ float scratch[32];
  const int t = threadIdx.x % GROUP;
  const int64_t row = blockIdx.x * (int64_t)(THREADS / GROUP) + threadIdx.x / GROUP;
  if (row >= rows) return;  // only in the last block of the warp layout, and the whole warp leaves together
  const int n = (int)(cols / kVec<T>);  // at most GROUP * R packs: 32-bit offsets within the row
  const int kept = (int)std::min<int64_t>(row % q_len + 1, cols);
  const int kept_packs = (int)ceil_div(kept, kVec<T>);
  const T* r = x + row * cols;
  T* o = out + row * cols;
  Pack<T> v[R];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int j = t + GROUP * k;
    if (j < kept_packs) {
      v[k] = load16(r + j * kVec<T>);
#pragma unroll
      for (int e = 0; e < kVec<T>; ++e)
        if (j * kVec<T> + e < kept) m = fmaxf(m, to_float(v[k].v[e]) * scale);
    }
  }
  if constexpr (GROUP == 32) m = warp_reduce_max(m);  // every thread of the row gets the max
  else m = block_reduce_max(m, scratch, -INFINITY);
  float s = 0.0f;
  if (m != -INFINITY) {  // a row whose kept scores are all -inf: zeros, not exp(-inf - -inf) = NaN
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int j = t + GROUP * k;
      if (j < kept_packs) {
#pragma unroll
        for (int e = 0; e < kVec<T>; ++e)
          if (j * kVec<T> + e < kept) s += __expf(to_float(v[k].v[e]) * scale - m);
      }
    }
  }
  if constexpr (GROUP == 32) s = warp_allreduce_sum(s);
  else s = block_reduce_sum(s, scratch);
  const float inv = 1.0f / s;
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int j = t + GROUP * k;
    if (j < n) {
      Pack<T> y;
#pragma unroll
      for (int e = 0; e < kVec<T>; ++e)
        y.v[e] = from_float<T>(j < kept_packs && j * kVec<T> + e < kept ? softmax_at(to_float(v[k].v[e]) * scale, m, inv)
                                                                       : 0.0f);
      store16(o + j * kVec<T>, y);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Kernels: the backward.

// softmax_backward_kernel1: block b owns row b; dot = sum(dy * y) over the row (block_reduce_sum),
// then dx = y * (dy - dot). With VEC (cols a multiple of the pack and every tensor 16-byte aligned)
// thread t keeps its packs t, t + 256, ... of y and dy in registers: reads y and dy once, writes dx
// once, bandwidth-bound. Without VEC (or for rows longer than 256 * R packs) it reads them twice.
template <typename T, int R>
__global__ void __launch_bounds__(BLOCK) softmax_backward_kernel1(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                                                                  int64_t cols) {
  __shared__ float scratch[32];
  const int tid = threadIdx.x;
  const int64_t base = blockIdx.x * cols;
  float dot = 0.0f;
  if constexpr (R > 0) {
    const int64_t n = cols / kVec<T>;
    Pack<T> yv[R], gv[R];
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int64_t j = tid + (int64_t)BLOCK * k;
      if (j < n) {
        yv[k] = load16(y + base + j * kVec<T>);
        gv[k] = load16(dy + base + j * kVec<T>);
#pragma unroll
        for (int e = 0; e < kVec<T>; ++e) dot += to_float(yv[k].v[e]) * to_float(gv[k].v[e]);
      }
    }
    dot = block_reduce_sum(dot, scratch);
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int64_t j = tid + (int64_t)BLOCK * k;
      if (j < n) {
        Pack<T> g;
#pragma unroll
        for (int e = 0; e < kVec<T>; ++e) g.v[e] = from_float<T>(to_float(yv[k].v[e]) * (to_float(gv[k].v[e]) - dot));
        store16(dx + base + j * kVec<T>, g);
      }
    }
  } else {
    for (int64_t c = tid; c < cols; c += BLOCK) dot += to_float(y[base + c]) * to_float(dy[base + c]);
    dot = block_reduce_sum(dot, scratch);
    for (int64_t c = tid; c < cols; c += BLOCK)
      dx[base + c] = from_float<T>(to_float(y[base + c]) * (to_float(dy[base + c]) - dot));
  }
}

// softmax_backward_kernel2: GROUP threads own a row: a warp (GROUP 32, THREADS / 32 rows per block,
// no barrier) or the whole block (GROUP = THREADS). Thread t of the group holds packs t, t + GROUP, ...
// of y and dy in registers, R of each: every load is issued before the first multiply, so 2R loads
// per thread are in flight together, and the packs stay 16 bytes in registers (keep_packed) rather than
// widened to float. Reads y and dy once, writes dx once: bandwidth-bound.
// Needs cols a multiple of the pack, 16-byte aligned rows and a row of at most GROUP * R packs.
template <typename T, int THREADS, int GROUP, int R>
__global__ void __launch_bounds__(THREADS) softmax_backward_kernel2(const T* __restrict__ y, const T* __restrict__ dy,
                                                                    T* __restrict__ dx, int64_t rows, int64_t cols) {
  static_assert(GROUP == 32 || GROUP == THREADS, "a row belongs to one warp or to the whole block");
  __shared__ float scratch[1][32];  // one row a block, so one reduction: block_sums' single barrier
  const int t = threadIdx.x % GROUP;
  const int64_t row = blockIdx.x * (int64_t)(THREADS / GROUP) + threadIdx.x / GROUP;
  if (row >= rows) return;  // only in the last block of the warp layout, and the whole warp leaves together
  const int n = (int)(cols / kVec<T>);  // at most GROUP * R packs: 32-bit offsets within the row
  const int64_t base = row * cols;      // 64-bit: row * cols passes 2^31 in large matrices
  const T* yr = y + base;
  const T* dyr = dy + base;
  T* dxr = dx + base;
  Pack<T> yv[R], gv[R];
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int j = t + GROUP * k;
    if (j < n) {
      yv[k] = load16(yr + j * kVec<T>);
      gv[k] = load16(dyr + j * kVec<T>);
    }
  }
  float dot = 0.0f;
#pragma unroll
  for (int k = 0; k < R; ++k)
    if (t + GROUP * k < n) {
#pragma unroll
      for (int e = 0; e < kVec<T>; ++e) dot += to_float(yv[k].v[e]) * to_float(gv[k].v[e]);
      keep_packed(yv[k]);  // the output pass widens them again: cheaper than holding twice the registers
      keep_packed(gv[k]);
    }
  if constexpr (GROUP == 32) {
    dot = warp_allreduce_sum(dot);
  } else {
    float d[1] = {dot};
    block_sums(d, scratch);
    dot = d[0];
  }
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int j = t + GROUP * k;
    if (j < n) {
      Pack<T> g;
#pragma unroll
      for (int e = 0; e < kVec<T>; ++e) g.v[e] = from_float<T>(to_float(yv[k].v[e]) * (to_float(gv[k].v[e]) - dot));
      store16(dxr + j * kVec<T>, g);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Launchers.

// x: 2-D [rows, cols], on the device, contiguous, float32 or bfloat16.
static void check_x(const at::Tensor& x, const char* name) {
  TORCH_CHECK(KERNELS_ON_DEVICE(x), name, " must be " KERNELS_DEVICE_WORD ", got a tensor on ", x.device());
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, name,
              " must be float32 or bfloat16, got ", x.scalar_type());
  TORCH_CHECK(x.dim() == 2, name, " must have 2 dimensions [rows, cols], got shape ", shape_str(x.sizes()),
              " (reshape to 2-D first: softmax runs over the last dimension)");
  TORCH_CHECK(x.is_contiguous(), name, " must be contiguous, got strides ", shape_str(x.strides()), " for shape ",
              shape_str(x.sizes()), " (call .contiguous() first)");
}

// `t` must match x: the same device, shape and dtype, contiguous.
static void check_like(const at::Tensor& x, const at::Tensor& t, const char* name) {
  TORCH_CHECK(KERNELS_ON_DEVICE(t), name, " must be " KERNELS_DEVICE_WORD ", got a tensor on ", t.device());
  TORCH_CHECK(t.scalar_type() == x.scalar_type(), name, " must have x's dtype ", x.scalar_type(), ", got ", t.scalar_type());
  TORCH_CHECK(t.sizes() == x.sizes(), name, " must have x's shape ", shape_str(x.sizes()), ", got ", shape_str(t.sizes()));
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous (call .contiguous() first)");
}

// The checks every forward variant shares; false when there is nothing to compute.
static bool forward_args(const at::Tensor& x, const at::Tensor& out) {
  check_x(x, "x");
  check_like(x, out, "out");
  return x.size(0) > 0 && x.size(1) > 0;  // an empty matrix: nothing to write, and a grid of 0 blocks is an error
}

void softmax1(const at::Tensor& x, at::Tensor& out) {
  if (!forward_args(x, out)) return;
  const int64_t rows = x.size(0), cols = x.size(1), blocks = ceil_div(rows, (int64_t)BLOCK);
  CHECK_GRID(blocks);
  auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch(x, [&](auto t) {
    using T = decltype(t);
    softmax_kernel1<T><<<blocks, BLOCK, 0, stream>>>(ptr<T>(x), mut<T>(out), rows, cols);
  });
  CHECK_LAUNCH();
}

// softmax2, softmax4, softmax5: one block per row.
#define BLOCK_PER_ROW(kernel)                                                                             \
  if (!forward_args(x, out)) return;                                                                      \
  CHECK_GRID(x.size(0));                                                                                  \
  auto stream = c10::cuda::getCurrentCUDAStream();                                                        \
  dispatch(x, [&](auto t) {                                                                               \
    using T = decltype(t);                                                                                \
    kernel<T><<<x.size(0), BLOCK, 0, stream>>>(ptr<T>(x), mut<T>(out), x.size(1));                        \
  });                                                                                                     \
  CHECK_LAUNCH()

void softmax2(const at::Tensor& x, at::Tensor& out) { BLOCK_PER_ROW(softmax_kernel2); }
void softmax4(const at::Tensor& x, at::Tensor& out) { BLOCK_PER_ROW(softmax_kernel4); }
void softmax5(const at::Tensor& x, at::Tensor& out) { BLOCK_PER_ROW(softmax_kernel5); }

void softmax3(const at::Tensor& x, at::Tensor& out) {
  if (!forward_args(x, out)) return;
  const int64_t rows = x.size(0), blocks = ceil_div(rows, (int64_t)WARPS);
  CHECK_GRID(blocks);
  auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch(x, [&](auto t) {
    using T = decltype(t);
    softmax_kernel3<T><<<blocks, BLOCK, 0, stream>>>(ptr<T>(x), mut<T>(out), rows, x.size(1));
  });
  CHECK_LAUNCH();
}

template <typename T, int R>
static void launch_warp6(const at::Tensor& x, at::Tensor& out, cudaStream_t stream) {
  const int64_t rows = x.size(0), blocks = ceil_div(rows, (int64_t)WARPS);
  CHECK_GRID(blocks);
  softmax_warp_kernel6<T, R><<<blocks, BLOCK, 0, stream>>>(ptr<T>(x), mut<T>(out), rows, x.size(1));
}

// softmax6 picks the layout by row length in packs (n): a warp per row while the row fits in 32 lanes'
// registers, a block of 256 threads per row up to 2048 packs, 1024 threads above that with shared memory
// for what their registers cannot hold. Each thread gets only as many register packs as the row needs
// (registers are what limits how many threads an SM runs). A ragged or misaligned row, or one too long
// for the chip, takes softmax_kernel5 (two reads).
void softmax6(const at::Tensor& x, at::Tensor& out) {
  if (!forward_args(x, out)) return;
  CHECK_GRID(x.size(0));
  auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch(x, [&](auto t) {
    using T = decltype(t);
    const int64_t rows = x.size(0), cols = x.size(1), n = cols / kVec<T>;
    const int64_t spill_bytes = std::max<int64_t>(0, n - (int64_t)WIDE * WIDE_REGS) * 16;
    const bool packed = cols % kVec<T> == 0 && aligned16(x) && aligned16(out);
    const bool fits = spill_bytes == 0 || spill_bytes <= device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    if (!packed || !fits) {
      softmax_kernel5<T><<<rows, BLOCK, 0, stream>>>(ptr<T>(x), mut<T>(out), cols);
    } else if (n <= 32) {
      launch_warp6<T, 1>(x, out, stream);
    } else if (n <= 64) {
      launch_warp6<T, 2>(x, out, stream);
    } else if (n <= 128) {
      launch_warp6<T, 4>(x, out, stream);
    } else if (n <= 256) {
      launch_warp6<T, 8>(x, out, stream);
    } else if (n <= (int64_t)BLOCK * 4) {
      softmax_kernel6<T, BLOCK, 4><<<rows, BLOCK, 0, stream>>>(ptr<T>(x), mut<T>(out), cols);
    } else if (n <= (int64_t)BLOCK * REGS) {
      softmax_kernel6<T, BLOCK, REGS><<<rows, BLOCK, 0, stream>>>(ptr<T>(x), mut<T>(out), cols);
    } else {
      auto kernel = softmax_kernel6<T, WIDE, WIDE_REGS>;
      if (spill_bytes > 48 * 1024)  // above 48 KB a kernel must opt in to more dynamic shared memory
        C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)spill_bytes));
      kernel<<<rows, WIDE, spill_bytes, stream>>>(ptr<T>(x), mut<T>(out), cols);
    }
  });
  CHECK_LAUNCH();
}

template <typename T, int THREADS, int GROUP, int R>
static void launch_causal7(const at::Tensor& x, at::Tensor& out, double scale, int64_t q_len, cudaStream_t stream) {
  const int64_t rows = x.size(0), blocks = ceil_div(rows, (int64_t)(THREADS / GROUP));
  CHECK_GRID(blocks);
  softmax_causal_kernel7_packed<T, THREADS, GROUP, R><<<blocks, THREADS, 0, stream>>>(ptr<T>(x), mut<T>(out), rows,
                                                                                     x.size(1), (float)scale, q_len);
}

// softmax(x * scale with columns j > row % q_len set to -inf): x holds the scores of q_len queries
// (rows) against cols keys, for any number of (batch, head) blocks stacked along the rows.
void softmax7(const at::Tensor& x, double scale, int64_t q_len, at::Tensor& out) {
  check_x(x, "x");
  check_like(x, out, "out");
  TORCH_CHECK(q_len > 0 && x.size(0) % q_len == 0, "q_len must be positive and divide the rows of x (",
              std::to_string(x.size(0)), "), got ", std::to_string(q_len));
  TORCH_CHECK(std::isfinite(scale), "scale must be a finite number, got ", std::to_string(scale));
  if (x.size(0) == 0 || x.size(1) == 0) return;
  CHECK_GRID(x.size(0));
  auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch(x, [&](auto t) {
    using T = decltype(t);
    const int64_t n = x.size(1) / kVec<T>;
    if (x.size(1) % kVec<T> != 0 || !aligned16(x) || !aligned16(out) || n > (int64_t)WIDE * WIDE_REGS)
      softmax_causal_kernel7<T><<<x.size(0), BLOCK, 0, stream>>>(ptr<T>(x), mut<T>(out), x.size(1), (float)scale, q_len);
    else if (n <= 32) launch_causal7<T, BLOCK, 32, 1>(x, out, scale, q_len, stream);
    else if (n <= 64) launch_causal7<T, BLOCK, 32, 2>(x, out, scale, q_len, stream);
    else if (n <= 128) launch_causal7<T, BLOCK, 32, 4>(x, out, scale, q_len, stream);
    else if (n <= 256) launch_causal7<T, BLOCK, 32, 8>(x, out, scale, q_len, stream);
    else if (n <= BLOCK * 4) launch_causal7<T, BLOCK, BLOCK, 4>(x, out, scale, q_len, stream);
    else if (n <= BLOCK * REGS) launch_causal7<T, BLOCK, BLOCK, REGS>(x, out, scale, q_len, stream);
    else launch_causal7<T, WIDE, WIDE, WIDE_REGS>(x, out, scale, q_len, stream);
  });
  CHECK_LAUNCH();
}

// Functional softmax over the last dimension of a 2-D x: the op that autograd and torch.compile see.
at::Tensor softmax(const at::Tensor& x) {
  check_x(x, "x");
  at::Tensor out = at::empty_like(x);
  softmax6(x, out);
  return out;
}

// The checks both backward variants share; false when there is nothing to compute.
static bool backward_args(const at::Tensor& y, const at::Tensor& dy, const at::Tensor& dx) {
  check_x(y, "y");
  check_like(y, dy, "dy");
  check_like(y, dx, "dx");
  if (y.size(0) == 0 || y.size(1) == 0) return false;
  CHECK_GRID(y.size(0));
  return true;
}

// True when every row of the three tensors starts 16-byte aligned and is whole packs long.
template <typename T>
static bool packed_rows(const at::Tensor& y, const at::Tensor& dy, const at::Tensor& dx) {
  return y.size(1) % kVec<T> == 0 && aligned16(y) && aligned16(dy) && aligned16(dx);
}

template <typename T>
static void launch_backward1(const at::Tensor& y, const at::Tensor& dy, at::Tensor& dx, cudaStream_t stream) {
  const int64_t rows = y.size(0), cols = y.size(1), n = cols / kVec<T>;
  const bool packed = packed_rows<T>(y, dy, dx);
  if (packed && n <= (int64_t)BLOCK * 4) {
    softmax_backward_kernel1<T, 4><<<rows, BLOCK, 0, stream>>>(ptr<T>(y), ptr<T>(dy), mut<T>(dx), cols);
  } else if (packed && n <= (int64_t)BLOCK * REGS) {
    softmax_backward_kernel1<T, REGS><<<rows, BLOCK, 0, stream>>>(ptr<T>(y), ptr<T>(dy), mut<T>(dx), cols);
  } else {
    softmax_backward_kernel1<T, 0><<<rows, BLOCK, 0, stream>>>(ptr<T>(y), ptr<T>(dy), mut<T>(dx), cols);
  }
}

// dx = y * (dy - sum(dy * y)) per row, for y = softmax(x) and dy = the gradient of y.
void softmax_backward1(const at::Tensor& y, const at::Tensor& dy, at::Tensor& dx) {
  if (!backward_args(y, dy, dx)) return;
  dispatch(y, [&](auto t) { launch_backward1<decltype(t)>(y, dy, dx, c10::cuda::getCurrentCUDAStream()); });
  CHECK_LAUNCH();
}

template <typename T, int THREADS, int GROUP, int R>
static void launch_backward2(const at::Tensor& y, const at::Tensor& dy, at::Tensor& dx, cudaStream_t stream) {
  const int64_t rows = y.size(0), blocks = ceil_div(rows, (int64_t)(THREADS / GROUP));
  CHECK_GRID(blocks);
  softmax_backward_kernel2<T, THREADS, GROUP, R><<<blocks, THREADS, 0, stream>>>(ptr<T>(y), ptr<T>(dy), mut<T>(dx),
                                                                                rows, y.size(1));
}

// softmax_backward2 sizes the threads of a row to its length in packs (n), so that each thread holds
// between half of R and R packs of each tensor: a warp per row up to 256 packs, then blocks of 128,
// 256 (float32) or 512 (bf16) and 1024 threads, none of which spills registers (ptxas -v; a bf16
// block of 256 threads with 8 packs did). A ragged or misaligned row, or one of more than 4096 packs,
// takes softmax_backward_kernel1's paths.
void softmax_backward2(const at::Tensor& y, const at::Tensor& dy, at::Tensor& dx) {
  if (!backward_args(y, dy, dx)) return;
  auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch(y, [&](auto t) {
    using T = decltype(t);
    const int64_t n = y.size(1) / kVec<T>;
    if (!packed_rows<T>(y, dy, dx) || n > 1024 * 4) launch_backward1<T>(y, dy, dx, stream);
    else if (n <= 32) launch_backward2<T, 128, 32, 1>(y, dy, dx, stream);
    else if (n <= 64) launch_backward2<T, 128, 32, 2>(y, dy, dx, stream);
    else if (n <= 128) launch_backward2<T, 128, 32, 4>(y, dy, dx, stream);
    else if (n <= 256) launch_backward2<T, 128, 32, 8>(y, dy, dx, stream);
    else if (n <= 128 * 4) launch_backward2<T, 128, 128, 4>(y, dy, dx, stream);
    else if (n <= 128 * 8) launch_backward2<T, 128, 128, 8>(y, dy, dx, stream);
    else if (n > 2048) launch_backward2<T, 1024, 1024, 4>(y, dy, dx, stream);
    else if constexpr (sizeof(T) == 4) launch_backward2<T, 256, 256, 8>(y, dy, dx, stream);
    else launch_backward2<T, 512, 512, 4>(y, dy, dx, stream);  // bf16 in 256 threads x 8 packs spilled
  });
  CHECK_LAUNCH();
}

// The functional backward: dx for y = softmax(x) and its gradient dy, by the faster variant.
at::Tensor softmax_backward(const at::Tensor& y, const at::Tensor& dy) {
  check_x(y, "y");
  check_like(y, dy, "dy");
  at::Tensor dx = at::empty_like(y);
  softmax_backward2(y, dy, dx);
  return dx;
}

// ---------------------------------------------------------------------------------------------
// Registration. The functional ops get their fake kernels and derivative in Python
// (kernels/lessons/lesson07.py: register_softmax), the lesson 03 route.
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("softmax1(Tensor x, Tensor(a!) out) -> ()");
  m.def("softmax2(Tensor x, Tensor(a!) out) -> ()");
  m.def("softmax3(Tensor x, Tensor(a!) out) -> ()");
  m.def("softmax4(Tensor x, Tensor(a!) out) -> ()");
  m.def("softmax5(Tensor x, Tensor(a!) out) -> ()");
  m.def("softmax6(Tensor x, Tensor(a!) out) -> ()");
  m.def("softmax7(Tensor x, float scale, int q_len, Tensor(a!) out) -> ()");
  m.def("softmax(Tensor x) -> Tensor");
  m.def("softmax_backward1(Tensor y, Tensor dy, Tensor(a!) dx) -> ()");
  m.def("softmax_backward2(Tensor y, Tensor dy, Tensor(a!) dx) -> ()");
  m.def("softmax_backward(Tensor y, Tensor dy) -> Tensor");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("softmax1", &softmax1);
  m.impl("softmax2", &softmax2);
  m.impl("softmax3", &softmax3);
  m.impl("softmax4", &softmax4);
  m.impl("softmax5", &softmax5);
  m.impl("softmax6", &softmax6);
  m.impl("softmax7", &softmax7);
  m.impl("softmax", &softmax);
  m.impl("softmax_backward1", &softmax_backward1);
  m.impl("softmax_backward2", &softmax_backward2);
  m.impl("softmax_backward", &softmax_backward);
}
