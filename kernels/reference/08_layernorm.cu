// 08_layernorm.cu: layer normalisation over the last dimension of a [rows, cols] matrix, variant by variant,
// and its backward. Load with `ext = load("08")`; the forward variants are out-variants:
// ext.layernorm6(x, weight, bias, eps, out, mean, rstd).
//
//   layernorm1            one thread per row, two passes for the statistics: the mean, then sum((x - mean)^2)
//   layernorm2            one thread per row, one pass: var = E[x^2] - E[x]^2, which cancels on shifted rows
//   layernorm3            one thread per row, one pass with Welford's running (count, mean, M2): no cancellation
//   layernorm4            one warp per row; Welford per lane, the 32 (count, mean, M2) triples merged with shuffles
//   layernorm5            one block per row; Welford per thread, merged in each warp, then across warps
//   layernorm6            16-byte loads and the row kept on chip (registers, then shared memory): one read of DRAM,
//                         and an exact two-pass variance from the cached row
//   layernorm6_layout     layernorm6 with the threads per row chosen by the caller: the benchmark compares layouts
//   layernorm_backward1   dx per row from two row reductions; dweight and dbias summed with atomics
//   layernorm_backward2   the same dx; dweight and dbias as per-block partial sums and a second pass (deterministic)
//   layernorm_backward2_layout  layernorm_backward2 with the threads per block chosen by the caller: the
//                         benchmark compares layouts with it
//   layernorm             functional form of layernorm6, returns (out, mean, rstd): the op registered with autograd
//   layernorm_backward    functional form of layernorm_backward2, returns (dx, dweight, dbias)
//
// y = (x - mean) * rstd * weight + bias per row, with mean = sum(x) / cols, the biased variance
// var = sum((x - mean)^2) / cols (as torch.nn.functional.layer_norm) and rstd = 1 / sqrt(var + eps).
// x: 2-D, contiguous, float32 or bfloat16, at least one column; weight, bias: [cols], x's dtype;
// out: x's shape and dtype; mean, rstd: [rows], float32 (saved for the backward). The math runs in
// float32: bf16 values are widened on load and rounded once on store.

// ---------------------------------------------------------------------------------------------
// Includes.
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>

constexpr int BLOCK = 256;  // threads per block: 8 warps
constexpr int WARPS = BLOCK / 32;
constexpr int WIDE = 1024;    // layernorm6: threads per row for rows too long for 256 threads ...
constexpr int WIDE_REGS = 4;  // ... with 4 packs each in registers (1024 threads get at most 64 registers)

// ---------------------------------------------------------------------------------------------
// Device helpers: one normalised value, Welford triples and their merge.

__device__ __forceinline__ float normalize(float x, float mean, float rstd, float w, float b) {
  return (x - mean) * rstd * w + b;
}

// Welford's running statistics of the values seen so far: their count n, mean, and M2 = sum((x - mean)^2).
// The count is a float: it enters the merge's weights, and stays exact up to 2^24 values.
struct Welford {
  float n, mean, m2;
};

// Adds one value. The mean moves by d / n; M2 grows by d * (x - new mean): no sum of squares of
// large numbers, so nothing cancels when the values sit far from 0.
__device__ __forceinline__ Welford welford_add(Welford a, float x) {
  a.n += 1.0f;
  const float d = x - a.mean;
  a.mean += d / a.n;
  a.m2 += d * (x - a.mean);
  return a;
}

// Merges the statistics of two disjoint sets (Chan et al.): the means weighted by their counts,
// and M2 corrected by the squared distance between the two means.
__device__ __forceinline__ Welford welford_merge(Welford a, Welford b) {
  const float n = a.n + b.n;
  if (n == 0.0f) return a;  // two empty sets: b.n / n would be 0 / 0
  const float d = b.mean - a.mean, wb = b.n / n;
  return {n, a.mean + d * wb, a.m2 + b.m2 + d * d * a.n * wb};
}

// Every lane of a full warp calls this; every lane ends with the warp's triple (a butterfly).
__device__ __forceinline__ Welford warp_welford(Welford p) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const Welford other = {__shfl_xor_sync(FULL_MASK, p.n, offset), __shfl_xor_sync(FULL_MASK, p.mean, offset),
                           __shfl_xor_sync(FULL_MASK, p.m2, offset)};
    p = welford_merge(p, other);
  }
  return p;
}

// The block's triple, in every thread: warps merge with shuffles, then each thread merges the
// WARPS warp triples from shared memory in the same order (so every thread gets the same bits).
__device__ __forceinline__ Welford block_welford(Welford p, Welford* scratch) {
  p = warp_welford(p);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = p;
  __syncthreads();  // every warp's triple is in shared memory
  Welford r = scratch[0];
  for (int w = 1; w < WARPS; ++w) r = welford_merge(r, scratch[w]);
  return r;
}

// ---------------------------------------------------------------------------------------------
// Kernels: the forward variants.

// layernorm_kernel1: thread r owns row r: a pass for the mean, a pass for sum((x - mean)^2), a pass to
// write. Reads the row 3 times, writes it once; a warp's 32 lanes touch 32 rows cols elements apart
// (32 transactions per warp load, as softmax1). Bounded by those scattered accesses.
template <typename T>
__global__ void layernorm_kernel1(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                  T* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                                  int64_t rows, int64_t cols, float eps) {
  const int64_t row = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const T* r = x + row * cols;  // 64-bit: row * cols passes 2^31 in large matrices
  float s = 0.0f;
  for (int64_t c = 0; c < cols; ++c) s += to_float(r[c]);
  const float m = s / cols;
  float ss = 0.0f;
  for (int64_t c = 0; c < cols; ++c) {
    const float d = to_float(r[c]) - m;
    ss += d * d;
  }
  const float rs = rsqrtf(ss / cols + eps);  // biased variance; eps inside the square root
  for (int64_t c = 0; c < cols; ++c)
    out[row * cols + c] = from_float<T>(normalize(to_float(r[c]), m, rs, to_float(w[c]), to_float(b[c])));
  mean[row] = m;
  rstd[row] = rs;
}

// layernorm_kernel2: as layernorm_kernel1, but the statistics in one pass from sum(x) and sum(x^2):
// var = E[x^2] - E[x]^2. Reads the row twice. WRONG on shifted rows: for x = 1000 + randn, E[x^2] is
// about 1e6 + 1 and float32 keeps 7 digits, so the 1 that is the variance drowns in the rounding of
// both terms (the difference can even come out negative; it is clamped at 0).
template <typename T>
__global__ void layernorm_kernel2(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                  T* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                                  int64_t rows, int64_t cols, float eps) {
  const int64_t row = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const T* r = x + row * cols;
  float s = 0.0f, sq = 0.0f;
  for (int64_t c = 0; c < cols; ++c) {
    const float v = to_float(r[c]);
    s += v;
    sq += v * v;
  }
  const float m = s / cols;
  const float rs = rsqrtf(fmaxf(sq / cols - m * m, 0.0f) + eps);
  for (int64_t c = 0; c < cols; ++c)
    out[row * cols + c] = from_float<T>(normalize(to_float(r[c]), m, rs, to_float(w[c]), to_float(b[c])));
  mean[row] = m;
  rstd[row] = rs;
}

// layernorm_kernel3: as layernorm_kernel1, with the statistics from Welford's running triple in one
// pass. Reads the row twice (statistics, then write), and the variance is as good as two passes'.
// Bounded by the scattered accesses of a thread per row, and a division per value.
template <typename T>
__global__ void layernorm_kernel3(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                  T* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                                  int64_t rows, int64_t cols, float eps) {
  const int64_t row = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const T* r = x + row * cols;
  Welford p = {0.0f, 0.0f, 0.0f};
  for (int64_t c = 0; c < cols; ++c) p = welford_add(p, to_float(r[c]));
  const float rs = rsqrtf(p.m2 / cols + eps);
  for (int64_t c = 0; c < cols; ++c)
    out[row * cols + c] = from_float<T>(normalize(to_float(r[c]), p.mean, rs, to_float(w[c]), to_float(b[c])));
  mean[row] = p.mean;
  rstd[row] = rs;
}

// layernorm_kernel4: warp w of block b owns row 8b + w; lane l takes columns l, l + 32, ... (coalesced)
// into its own Welford triple; 5 shuffle steps merge the 32 triples. Reads the row twice, writes it
// once; no barriers. Good for rows up to a few thousand columns.
template <typename T>
__global__ void __launch_bounds__(BLOCK) layernorm_kernel4(const T* __restrict__ x, const T* __restrict__ w,
                                                           const T* __restrict__ b, T* __restrict__ out,
                                                           float* __restrict__ mean, float* __restrict__ rstd,
                                                           int64_t rows, int64_t cols, float eps) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * (int64_t)WARPS + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp leaves together, so the shuffles below see all 32 lanes
  const T* r = x + row * cols;
  Welford p = {0.0f, 0.0f, 0.0f};
  for (int64_t c = lane; c < cols; c += 32) p = welford_add(p, to_float(r[c]));
  p = warp_welford(p);  // lanes with no column (cols < 32) bring n = 0: the merge skips them
  const float rs = rsqrtf(p.m2 / cols + eps);
  for (int64_t c = lane; c < cols; c += 32)
    out[row * cols + c] = from_float<T>(normalize(to_float(r[c]), p.mean, rs, to_float(w[c]), to_float(b[c])));
  if (lane == 0) {
    mean[row] = p.mean;
    rstd[row] = rs;
  }
}

// layernorm_kernel5: block b owns row b; thread t takes columns t, t + 256, ... into its Welford
// triple; the block merges them (shuffles in each warp, then the 8 warp triples). Reads the row
// twice, writes it once. Bounded by bandwidth plus the second read (mostly from L2 for long rows).
template <typename T>
__global__ void __launch_bounds__(BLOCK) layernorm_kernel5(const T* __restrict__ x, const T* __restrict__ w,
                                                           const T* __restrict__ b, T* __restrict__ out,
                                                           float* __restrict__ mean, float* __restrict__ rstd,
                                                           int64_t cols, float eps) {
  __shared__ Welford scratch[WARPS];
  const T* r = x + blockIdx.x * cols;
  T* o = out + blockIdx.x * cols;
  Welford p = {0.0f, 0.0f, 0.0f};
  for (int64_t c = threadIdx.x; c < cols; c += BLOCK) p = welford_add(p, to_float(r[c]));
  p = block_welford(p, scratch);
  const float rs = rsqrtf(p.m2 / cols + eps);
  for (int64_t c = threadIdx.x; c < cols; c += BLOCK)
    o[c] = from_float<T>(normalize(to_float(r[c]), p.mean, rs, to_float(w[c]), to_float(b[c])));
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = p.mean;
    rstd[blockIdx.x] = rs;
  }
}

// The sum of a pack's values, and the sum of their squared distances from m.
template <typename T>
__device__ __forceinline__ float pack_sum(const Pack<T>& a) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < kVec<T>; ++e) s += to_float(a.v[e]);
  return s;
}
template <typename T>
__device__ __forceinline__ float pack_sq_dev(const Pack<T>& a, float m) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < kVec<T>; ++e) {
    const float d = to_float(a.v[e]) - m;
    s += d * d;
  }
  return s;
}

// The sum over the threads that share a row: a warp (G = 32) or the whole block.
template <int G>
__device__ __forceinline__ float group_sum(float v, float (*scratch)[32]) {
  if constexpr (G == 32) {
    return warp_allreduce_sum(v);
  } else {
    float s[1] = {v};
    block_sums(s, scratch);
    return s[0];
  }
}

// layernorm_kernel6: G threads own a row (G = 32: a warp per row, 8 rows per block; else the block).
// Thread t holds packs t, t + G, ... : the first R in registers, any further ones in dynamic shared
// memory (`spill`, read back only by the thread that wrote it, so no barrier guards it). With the row
// on chip, the variance is an exact second pass, sum((x - mean)^2), at no DRAM cost. Reads x once,
// writes out once (weight and bias stay in L2): bandwidth-bound while the row fits (the launcher checks).
template <typename T, int G, int R>
__global__ void __launch_bounds__(G < BLOCK ? BLOCK : G) layernorm_kernel6(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ out,
    float* __restrict__ mean, float* __restrict__ rstd, int64_t rows, int64_t cols, float eps) {
  extern __shared__ uint4 spill[];  // uint4 in every instantiation: extern shared arrays share one name and type
  __shared__ float scratch[2][1][32];  // the mean's sum, then the variance's: one barrier each (block_sums)
  const int t = threadIdx.x % G;
  const int64_t row = G < BLOCK ? blockIdx.x * (int64_t)(BLOCK / G) + threadIdx.x / G : (int64_t)blockIdx.x;
  if (row >= rows) return;  // only in a warp-per-row block: the whole warp leaves together
  const int64_t n = cols / kVec<T>, first_spilled = (int64_t)G * R;
  const T* r = x + row * cols;
  T* o = out + row * cols;
  Pack<T> v[R];
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < R; ++k) {  // all R loads issued before their values are needed
    const int64_t j = t + (int64_t)G * k;
    if (j < n) {
      v[k] = load16(r + j * kVec<T>);
      s += pack_sum(v[k]);
    }
  }
  for (int64_t j = t + first_spilled; j < n; j += G) {  // the rest of a long row
    const Pack<T> a = load16(r + j * kVec<T>);
    memcpy(&spill[j - first_spilled], &a, 16);
    s += pack_sum(a);
  }
  const float m = group_sum<G>(s, scratch[0]) / cols;
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < R; ++k)
    if (t + (int64_t)G * k < n) ss += pack_sq_dev(v[k], m);
  for (int64_t j = t + first_spilled; j < n; j += G) {
    Pack<T> a;
    memcpy(&a, &spill[j - first_spilled], 16);
    ss += pack_sq_dev(a, m);
  }
  const float rs = rsqrtf(group_sum<G>(ss, scratch[1]) / cols + eps);
  // y for the pack at j: weight and bias as 16-byte loads too (the same for every row: L2 hits)
  auto write = [&](const Pack<T>& a, int64_t j) {
    const Pack<T> wp = load16(w + j * kVec<T>), bp = load16(b + j * kVec<T>);
    Pack<T> y;
#pragma unroll
    for (int e = 0; e < kVec<T>; ++e)
      y.v[e] = from_float<T>(normalize(to_float(a.v[e]), m, rs, to_float(wp.v[e]), to_float(bp.v[e])));
    store16(o + j * kVec<T>, y);
  };
#pragma unroll
  for (int k = 0; k < R; ++k)
    if (t + (int64_t)G * k < n) write(v[k], t + (int64_t)G * k);
  for (int64_t j = t + first_spilled; j < n; j += G) {
    Pack<T> a;
    memcpy(&a, &spill[j - first_spilled], 16);
    write(a, j);
  }
  if (t == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

// ---------------------------------------------------------------------------------------------
// Kernels: the backward.
//
// With xhat = (x - mean) * rstd and g = dy * weight, the gradient of a row is
//   dx = rstd * (g - (sum(g) + xhat * sum(g * xhat)) / cols)
// (two row reductions), and over all rows dweight = sum(dy * xhat), dbias = sum(dy): column sums.

// layernorm_backward_kernel: block b takes rows b, b + G, b + 2G, ... (G = gridDim.x, as many blocks as
// fit on the GPU at once) and keeps running column sums of dy * xhat and dy for the columns its threads
// own, so the column sums need one write per block, not one per row. With R > 0 (packed rows of at most
// THREADS * R packs) thread t owns packs t, t + THREADS, ...: it reads x and dy once into registers (all
// 2R loads before the first use), the row's two sums share one barrier (block_sums), it writes dx once
// and keeps its column sums in registers; at the end it adds them to `acc` with atomics (ATOMIC) or
// writes them to its block's row of `acc` for a second pass. With R = 0 (ragged or long rows) it reads
// x and dy twice and keeps its sums in its block's row of `acc` (zeroed), or adds each value with an
// atomic. acc: [2 * cols] (ATOMIC, zeroed) or [G, 2 * cols]: dweight then dbias.
// Reads x and dy once, writes dx once (packed rows): bound by the loads in flight while a row waits.
template <typename T, int THREADS, int R, bool ATOMIC>
__global__ void __launch_bounds__(THREADS) layernorm_backward_kernel(
    const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w, const float* __restrict__ mean,
    const float* __restrict__ rstd, T* __restrict__ dx, float* __restrict__ acc, int64_t rows, int64_t cols) {
  __shared__ float scratch[2][2][32];  // two buffers, used in turn by block_sums
  const int t = threadIdx.x;
  float* my_acc = ATOMIC ? acc : acc + blockIdx.x * 2 * cols;
  int buffer = 0;
  if constexpr (R > 0) {
    constexpr int V = kVec<T>;
    const int n = (int)(cols / V);  // at most THREADS * R packs: 32-bit offsets within a row
    const float inv_cols = 1.0f / cols;
    Pack<T> wv[R];
    float dw[R][V], db[R][V];
#pragma unroll
    for (int k = 0; k < R; ++k) {
      if (t + THREADS * k < n) wv[k] = load16(w + (t + THREADS * k) * V);
#pragma unroll
      for (int e = 0; e < V; ++e) dw[k][e] = db[k][e] = 0.0f;
    }
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
      const float m = mean[row], rs = rstd[row];
      const T* xr = x + row * cols;  // row * cols: 64-bit, it passes 2^31 in large inputs
      const T* dyr = dy + row * cols;
      Pack<T> xv[R], gv[R];
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int j = t + THREADS * k;
        if (j < n) {
          xv[k] = load16(xr + j * V);
          gv[k] = load16(dyr + j * V);
        }
      }
      float sums[2] = {0.0f, 0.0f};  // sum(g), sum(g * xhat)
#pragma unroll
      for (int k = 0; k < R; ++k) {
        if (t + THREADS * k < n) {
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const float xh = (to_float(xv[k].v[e]) - m) * rs, d = to_float(gv[k].v[e]), g = d * to_float(wv[k].v[e]);
            sums[0] += g;
            sums[1] += g * xh;
            dw[k][e] += d * xh;
            db[k][e] += d;
          }
          keep_packed(xv[k]);  // the dx pass widens them again: cheaper than twice the registers
          keep_packed(gv[k]);
        }
      }
      block_sums(sums, scratch[buffer]);
      buffer ^= 1;
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int j = t + THREADS * k;
        if (j < n) {
          Pack<T> o;
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const float xh = (to_float(xv[k].v[e]) - m) * rs, g = to_float(gv[k].v[e]) * to_float(wv[k].v[e]);
            o.v[e] = from_float<T>(rs * (g - (sums[0] + xh * sums[1]) * inv_cols));
          }
          store16(dx + row * cols + j * V, o);
        }
      }
    }
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int j = t + THREADS * k;
      if (j < n) {
        if (ATOMIC) {
#pragma unroll
          for (int e = 0; e < V; ++e) {
            atomicAdd(&my_acc[j * V + e], dw[k][e]);
            atomicAdd(&my_acc[cols + j * V + e], db[k][e]);
          }
        } else {  // V floats of a column run: whole 16-byte stores (cols is a multiple of V, so aligned)
#pragma unroll
          for (int e = 0; e < V; e += 4) {
            store16(my_acc + j * V + e, Pack<float>{{dw[k][e], dw[k][e + 1], dw[k][e + 2], dw[k][e + 3]}});
            store16(my_acc + cols + j * V + e, Pack<float>{{db[k][e], db[k][e + 1], db[k][e + 2], db[k][e + 3]}});
          }
        }
      }
    }
  } else {
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
      const float m = mean[row], rs = rstd[row];
      const T* xr = x + row * cols;
      const T* dyr = dy + row * cols;
      float sums[2] = {0.0f, 0.0f};  // sum(g), sum(g * xhat)
      for (int64_t c = t; c < cols; c += THREADS) {
        const float g = to_float(dyr[c]) * to_float(w[c]);
        sums[0] += g;
        sums[1] += g * (to_float(xr[c]) - m) * rs;
      }
      block_sums(sums, scratch[buffer]);
      buffer ^= 1;
      for (int64_t c = t; c < cols; c += THREADS) {
        const float d = to_float(dyr[c]), xh = (to_float(xr[c]) - m) * rs, g = d * to_float(w[c]);
        dx[row * cols + c] = from_float<T>(rs * (g - (sums[0] + xh * sums[1]) / cols));
        if (ATOMIC) {
          atomicAdd(&my_acc[c], d * xh);
          atomicAdd(&my_acc[cols + c], d);
        } else {  // column c of this block's row of acc belongs to this thread alone: no race
          my_acc[c] += d * xh;
          my_acc[cols + c] += d;
        }
      }
    }
  }
}

// column_sum_kernel: block b owns 32 neighbouring columns of a [parts, 2 * cols] float matrix (a warp
// reads 32 neighbouring floats of a part: one 128-byte line); its 8 warps take every 8th part each, and
// warp 0 adds the 8 warps' sums in a fixed order: the same bits on every run. Columns below cols go to
// dw, the others to db. Reads the matrix once, with parts / 8 loads in a row per thread, not parts.
template <typename T>
__global__ void __launch_bounds__(BLOCK) column_sum_kernel(const float* __restrict__ acc, int64_t parts, int64_t cols,
                                                          T* __restrict__ dw, T* __restrict__ db) {
  __shared__ float part[WARPS][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t i = blockIdx.x * (int64_t)32 + lane;
  float s = 0.0f;
  if (i < 2 * cols)
    for (int64_t p = warp; p < parts; p += WARPS) s += acc[p * 2 * cols + i];
  part[warp][lane] = s;
  __syncthreads();  // every warp's sums are in shared memory
  if (warp == 0 && i < 2 * cols) {
    float total = 0.0f;
    for (int k = 0; k < WARPS; ++k) total += part[k][lane];
    if (i < cols) dw[i] = from_float<T>(total);
    else db[i - cols] = from_float<T>(total);
  }
}

// ---------------------------------------------------------------------------------------------
// Launchers.

// x: 2-D [rows, cols], on the device, contiguous, float32 or bfloat16, at least one column.
static void check_x(const at::Tensor& x, const char* name) {
  TORCH_CHECK(KERNELS_ON_DEVICE(x), name, " must be " KERNELS_DEVICE_WORD ", got a tensor on ", x.device());
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, name,
              " must be float32 or bfloat16, got ", x.scalar_type());
  TORCH_CHECK(x.dim() == 2, name, " must have 2 dimensions [rows, cols], got shape ", shape_str(x.sizes()),
              " (reshape to 2-D first: layernorm runs over the last dimension)");
  TORCH_CHECK(x.size(1) > 0, name, " must have at least one column: the mean of an empty row is undefined, got shape ",
              shape_str(x.sizes()));
  TORCH_CHECK(x.is_contiguous(), name, " must be contiguous, got strides ", shape_str(x.strides()), " for shape ",
              shape_str(x.sizes()), " (call .contiguous() first)");
}

// `t` must be on the device, contiguous, with the given shape and dtype.
static void check_tensor(const at::Tensor& t, const char* name, c10::IntArrayRef shape, at::ScalarType dtype,
                         const char* what) {
  TORCH_CHECK(KERNELS_ON_DEVICE(t), name, " must be " KERNELS_DEVICE_WORD ", got a tensor on ", t.device());
  TORCH_CHECK(t.scalar_type() == dtype, name, " must have dtype ", c10::toString(dtype), " (", what, "), got ",
              t.scalar_type());
  TORCH_CHECK(t.sizes() == shape, name, " must have shape ", shape_str(shape), " (", what, "), got ",
              shape_str(t.sizes()));
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous (call .contiguous() first)");
}

// weight and bias: one value per column of x, in x's dtype.
static void check_params(const at::Tensor& x, const at::Tensor& weight, const char* name) {
  check_tensor(weight, name, {x.size(1)}, x.scalar_type(), "one per column of x, in x's dtype");
}

// mean and rstd: one float32 per row of x.
static void check_stats(const at::Tensor& x, const at::Tensor& s, const char* name) {
  check_tensor(s, name, {x.size(0)}, at::kFloat, "one float32 per row of x");
}

// The checks every forward variant shares; false when there is nothing to compute.
static bool forward_args(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                         const at::Tensor& out, const at::Tensor& mean, const at::Tensor& rstd) {
  check_x(x, "x");
  check_params(x, weight, "weight");
  check_params(x, bias, "bias");
  TORCH_CHECK(std::isfinite(eps) && eps >= 0, "eps must be a finite number >= 0, got ", std::to_string(eps));
  check_tensor(out, "out", x.sizes(), x.scalar_type(), "x's shape and dtype");
  check_stats(x, mean, "mean");
  check_stats(x, rstd, "rstd");
  return x.size(0) > 0;  // no rows: nothing to write, and a grid of 0 blocks is an error
}

#define LAYERNORM_ARGS(T) \
  ptr<T>(x), ptr<T>(weight), ptr<T>(bias), mut<T>(out), mut<float>(mean), mut<float>(rstd)

// layernorm1 to layernorm3: a thread per row.
#define THREAD_PER_ROW(kernel)                                                                              \
  if (!forward_args(x, weight, bias, eps, out, mean, rstd)) return;                                         \
  const int64_t blocks = ceil_div(x.size(0), (int64_t)BLOCK);                                               \
  CHECK_GRID(blocks);                                                                                       \
  auto stream = c10::cuda::getCurrentCUDAStream();                                                          \
  dispatch(x, [&](auto t) {                                                                                 \
    using T = decltype(t);                                                                                  \
    kernel<T><<<blocks, BLOCK, 0, stream>>>(LAYERNORM_ARGS(T), x.size(0), x.size(1), (float)eps);           \
  });                                                                                                       \
  CHECK_LAUNCH()

#define FORWARD_SIGNATURE(name)                                                                                    \
  void name(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps, at::Tensor& out, \
            at::Tensor& mean, at::Tensor& rstd)

FORWARD_SIGNATURE(layernorm1) { THREAD_PER_ROW(layernorm_kernel1); }
FORWARD_SIGNATURE(layernorm2) { THREAD_PER_ROW(layernorm_kernel2); }
FORWARD_SIGNATURE(layernorm3) { THREAD_PER_ROW(layernorm_kernel3); }

FORWARD_SIGNATURE(layernorm4) {
  if (!forward_args(x, weight, bias, eps, out, mean, rstd)) return;
  const int64_t blocks = ceil_div(x.size(0), (int64_t)WARPS);
  CHECK_GRID(blocks);
  auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch(x, [&](auto t) {
    using T = decltype(t);
    layernorm_kernel4<T><<<blocks, BLOCK, 0, stream>>>(LAYERNORM_ARGS(T), x.size(0), x.size(1), (float)eps);
  });
  CHECK_LAUNCH();
}

FORWARD_SIGNATURE(layernorm5) {
  if (!forward_args(x, weight, bias, eps, out, mean, rstd)) return;
  CHECK_GRID(x.size(0));
  auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch(x, [&](auto t) {
    using T = decltype(t);
    layernorm_kernel5<T><<<x.size(0), BLOCK, 0, stream>>>(LAYERNORM_ARGS(T), x.size(1), (float)eps);
  });
  CHECK_LAUNCH();
}

template <typename T, int G, int R>
static void launch6(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                    at::Tensor& out, at::Tensor& mean, at::Tensor& rstd, int64_t spill_bytes, cudaStream_t stream) {
  const int64_t rows = x.size(0), blocks = G < BLOCK ? ceil_div(rows, (int64_t)(BLOCK / G)) : rows;
  CHECK_GRID(blocks);
  auto kernel = layernorm_kernel6<T, G, R>;
  if (spill_bytes > 48 * 1024)  // above 48 KB a kernel must opt in to more dynamic shared memory
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)spill_bytes));
  kernel<<<blocks, G < BLOCK ? BLOCK : G, spill_bytes, stream>>>(LAYERNORM_ARGS(T), rows, x.size(1), (float)eps);
}

// layernorm6 picks the layout by row length in packs (n): a warp per row while the row fits in 32 lanes'
// registers, a block of 256 threads per row up to 2048 packs, 1024 threads above that with shared memory
// for what their registers cannot hold. Each thread gets only as many register packs as the row needs.
// A ragged or misaligned row, or one too long for the chip, takes layernorm_kernel5 (two reads).
FORWARD_SIGNATURE(layernorm6) {
  if (!forward_args(x, weight, bias, eps, out, mean, rstd)) return;
  auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch(x, [&](auto t) {
    using T = decltype(t);
    const int64_t rows = x.size(0), cols = x.size(1), n = cols / kVec<T>;
    const int64_t spill_bytes = std::max<int64_t>(0, n - (int64_t)WIDE * WIDE_REGS) * 16;
    const bool packed = cols % kVec<T> == 0 && aligned16(x) && aligned16(out) && aligned16(weight) && aligned16(bias);
    const bool fits = spill_bytes == 0 || spill_bytes <= device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    if (!packed || !fits) {
      CHECK_GRID(rows);
      layernorm_kernel5<T><<<rows, BLOCK, 0, stream>>>(LAYERNORM_ARGS(T), cols, (float)eps);
    } else if (n <= 32) {
      launch6<T, 32, 1>(x, weight, bias, eps, out, mean, rstd, 0, stream);
    } else if (n <= 64) {
      launch6<T, 32, 2>(x, weight, bias, eps, out, mean, rstd, 0, stream);
    } else if (n <= 128) {
      launch6<T, 32, 4>(x, weight, bias, eps, out, mean, rstd, 0, stream);
    } else if (n <= 256) {  // 1024 floats: a warp per row keeps 8 rows' loads in flight per block, not 1
      launch6<T, 32, 8>(x, weight, bias, eps, out, mean, rstd, 0, stream);
    } else if (n <= (int64_t)BLOCK * 4) {
      launch6<T, BLOCK, 4>(x, weight, bias, eps, out, mean, rstd, 0, stream);
    } else if (n <= (int64_t)BLOCK * 8) {
      launch6<T, BLOCK, 8>(x, weight, bias, eps, out, mean, rstd, 0, stream);
    } else {
      launch6<T, WIDE, WIDE_REGS>(x, weight, bias, eps, out, mean, rstd, spill_bytes, stream);
    }
  });
  CHECK_LAUNCH();
}

// layernorm6 with `threads` threads per row (32: a warp per row, 8 rows a block) and the fewest register
// packs per thread (of those compiled) that hold the row: for the benchmark's comparison of layouts.
void layernorm6_layout(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                       at::Tensor& out, at::Tensor& mean, at::Tensor& rstd, int64_t threads) {
  if (!forward_args(x, weight, bias, eps, out, mean, rstd)) return;
  auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch(x, [&](auto t) {
    using T = decltype(t);
    const int64_t n = x.size(1) / kVec<T>;
    TORCH_CHECK(x.size(1) % kVec<T> == 0 && aligned16(x) && aligned16(out) && aligned16(weight) && aligned16(bias),
                "layernorm6_layout needs rows of whole 16-byte packs, 16-byte aligned");
    const auto fits = [&](int g, int r) { return threads == g && n <= (int64_t)g * r; };
    if (fits(32, 1)) launch6<T, 32, 1>(x, weight, bias, eps, out, mean, rstd, 0, stream);
    else if (fits(32, 2)) launch6<T, 32, 2>(x, weight, bias, eps, out, mean, rstd, 0, stream);
    else if (fits(32, 4)) launch6<T, 32, 4>(x, weight, bias, eps, out, mean, rstd, 0, stream);
    else if (fits(32, 8)) launch6<T, 32, 8>(x, weight, bias, eps, out, mean, rstd, 0, stream);
    else if (fits(BLOCK, 4)) launch6<T, BLOCK, 4>(x, weight, bias, eps, out, mean, rstd, 0, stream);
    else if (fits(BLOCK, 8)) launch6<T, BLOCK, 8>(x, weight, bias, eps, out, mean, rstd, 0, stream);
    else if (fits(512, 4)) launch6<T, 512, 4>(x, weight, bias, eps, out, mean, rstd, 0, stream);
    else if (fits(WIDE, 2)) launch6<T, WIDE, 2>(x, weight, bias, eps, out, mean, rstd, 0, stream);
    else if (fits(WIDE, WIDE_REGS)) launch6<T, WIDE, WIDE_REGS>(x, weight, bias, eps, out, mean, rstd, 0, stream);
    else
      TORCH_CHECK(false, "layernorm6_layout: no layout of ", std::to_string(threads), " threads holds a row of ",
                  std::to_string(n), " packs in registers; compiled: 32 threads x up to 8 packs, 256 x 8, 512 x 4, "
                  "1024 x 4");
  });
  CHECK_LAUNCH();
}

// Functional layernorm over the last dimension of a 2-D x: the op that autograd and torch.compile see.
std::tuple<at::Tensor, at::Tensor, at::Tensor> layernorm(const at::Tensor& x, const at::Tensor& weight,
                                                         const at::Tensor& bias, double eps) {
  check_x(x, "x");
  at::Tensor out = at::empty_like(x);
  at::Tensor mean = at::empty({x.size(0)}, x.options().dtype(at::kFloat));
  at::Tensor rstd = at::empty({x.size(0)}, x.options().dtype(at::kFloat));
  layernorm6(x, weight, bias, eps, out, mean, rstd);
  return {out, mean, rstd};
}

// A layout of the backward: threads per block (and per row) and 16-byte packs per thread in registers
// (0: the unpacked path).
struct BackwardLayout {
  int threads, regs;
};

// The backward's layout by row length in packs (n): 2 register packs per thread (4 above 2048 packs),
// with as many threads as that takes. Ragged, misaligned or longer rows take the unpacked path.
static BackwardLayout backward_layout(int64_t n, bool packed) {
  if (!packed || n > (int64_t)WIDE * 4) return {BLOCK, 0};
  if (n <= (int64_t)BLOCK * 2) return {BLOCK, 2};
  if (n <= 512 * 2) return {512, 2};
  if (n <= (int64_t)WIDE * 2) return {WIDE, 2};
  return {WIDE, 4};
}

// Calls f(kernel) with the kernel compiled for layout l, or refuses a layout that is not compiled. The
// default layouts exist for both ways of summing dweight and dbias; three more for the deterministic
// one, for the benchmark's comparison of layouts (layernorm_backward2_layout).
template <typename T, bool ATOMIC, typename F>
static void with_backward_kernel(const BackwardLayout& l, F&& f) {
  const auto is = [&](int threads, int regs) { return l.threads == threads && l.regs == regs; };
  if (is(BLOCK, 0)) return f(layernorm_backward_kernel<T, BLOCK, 0, ATOMIC>);
  if (is(BLOCK, 2)) return f(layernorm_backward_kernel<T, BLOCK, 2, ATOMIC>);
  if (is(512, 2)) return f(layernorm_backward_kernel<T, 512, 2, ATOMIC>);
  if (is(WIDE, 2)) return f(layernorm_backward_kernel<T, WIDE, 2, ATOMIC>);
  if (is(WIDE, 4)) return f(layernorm_backward_kernel<T, WIDE, 4, ATOMIC>);
  if constexpr (!ATOMIC) {
    if (is(BLOCK, 4)) return f(layernorm_backward_kernel<T, BLOCK, 4, false>);
    if (is(512, 4)) return f(layernorm_backward_kernel<T, 512, 4, false>);
    if (is(WIDE, 1)) return f(layernorm_backward_kernel<T, WIDE, 1, false>);
  }
  TORCH_CHECK(false, "no backward kernel is compiled for ", std::to_string(l.threads), " threads x ",
              std::to_string(l.regs), " packs; compiled: 256 x 2 or 4, 512 x 2 or 4, 1024 x 1, 2 or 4");
}

// dx, dweight, dbias for y = layernorm(x, weight, bias) and dy = the gradient of y; mean and rstd as
// the forward saved them. ATOMIC adds the blocks' column sums into one float32 buffer with atomics
// (the order of the adds, and so the last bits, change from run to run); otherwise each block writes
// its own row of partial sums and column_sum_kernel adds them in a fixed order. `layout` overrides
// the choice by row length (threads 0: choose).
template <bool ATOMIC>
static std::tuple<at::Tensor, at::Tensor, at::Tensor> backward(const at::Tensor& dy, const at::Tensor& x,
                                                               const at::Tensor& weight, const at::Tensor& mean,
                                                               const at::Tensor& rstd,
                                                               BackwardLayout layout = {0, 0}) {
  check_x(x, "x");
  check_tensor(dy, "dy", x.sizes(), x.scalar_type(), "x's shape and dtype");
  check_params(x, weight, "weight");
  check_stats(x, mean, "mean");
  check_stats(x, rstd, "rstd");
  const int64_t rows = x.size(0), cols = x.size(1);
  at::Tensor dx = at::empty_like(x), dw = at::empty_like(weight), db = at::empty_like(weight);
  auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch(x, [&](auto t) {
    using T = decltype(t);
    const int64_t n = cols / kVec<T>;
    const bool packed = cols % kVec<T> == 0 && aligned16(x) && aligned16(dy) && aligned16(dx) && aligned16(weight);
    if (layout.threads == 0) {
      layout = backward_layout(n, packed);
    } else {
      TORCH_CHECK(packed && layout.regs > 0 && n <= (int64_t)layout.threads * layout.regs, "a layout of ",
                  std::to_string(layout.threads), " threads x ", std::to_string(layout.regs),
                  " packs needs rows of whole, aligned packs and at most threads x packs of them; got ",
                  std::to_string(n), " packs", packed ? "" : " (ragged or misaligned rows)");
    }
    with_backward_kernel<T, ATOMIC>(layout, [&](auto kernel) {
      // As many blocks as fit on the GPU at once, each walking many rows: its column sums are written
      // once, not once a row, and no block waits for a free SM.
      const int64_t sms = device_attribute(cudaDevAttrMultiProcessorCount);
      int per_sm = 2;  // the simulator runs one block at a time: any small number of parts does
#ifndef CUDASIM
      C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, layout.threads, 0));
#endif
      const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(rows, sms * std::max(per_sm, 1)));
      // the packed deterministic path writes every value of its block's row of partials: no zeros needed
      const bool zero = ATOMIC || layout.regs == 0;
      const c10::TensorOptions f32 = x.options().dtype(at::kFloat);
      at::Tensor acc = zero ? at::zeros({ATOMIC ? 1 : parts, 2 * cols}, f32) : at::empty({parts, 2 * cols}, f32);
      if (rows > 0) {
        kernel<<<parts, layout.threads, 0, stream>>>(ptr<T>(dy), ptr<T>(x), ptr<T>(weight), ptr<float>(mean),
                                                     ptr<float>(rstd), mut<T>(dx), mut<float>(acc), rows, cols);
        CHECK_LAUNCH();
      }
      column_sum_kernel<T><<<ceil_div(2 * cols, (int64_t)32), BLOCK, 0, stream>>>(ptr<float>(acc), acc.size(0), cols,
                                                                                  mut<T>(dw), mut<T>(db));
    });
  });
  CHECK_LAUNCH();
  return {dx, dw, db};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layernorm_backward1(const at::Tensor& dy, const at::Tensor& x,
                                                                   const at::Tensor& weight, const at::Tensor& mean,
                                                                   const at::Tensor& rstd) {
  return backward<true>(dy, x, weight, mean, rstd);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layernorm_backward2(const at::Tensor& dy, const at::Tensor& x,
                                                                   const at::Tensor& weight, const at::Tensor& mean,
                                                                   const at::Tensor& rstd) {
  return backward<false>(dy, x, weight, mean, rstd);
}

// layernorm_backward2 with a chosen layout: `threads` per block and the fewest register packs per thread
// (1, 2 or 4) that hold the row. For the benchmark's comparison of layouts.
std::tuple<at::Tensor, at::Tensor, at::Tensor> layernorm_backward2_layout(const at::Tensor& dy, const at::Tensor& x,
                                                                          const at::Tensor& weight,
                                                                          const at::Tensor& mean,
                                                                          const at::Tensor& rstd, int64_t threads) {
  check_x(x, "x");
  TORCH_CHECK(threads == BLOCK || threads == 512 || threads == WIDE, "threads must be 256, 512 or 1024, got ",
              std::to_string(threads));
  const int64_t n = x.size(1) / (int64_t)(16 / x.element_size());
  const int regs = n <= threads ? 1 : n <= 2 * threads ? 2 : 4;
  return backward<false>(dy, x, weight, mean, rstd, {(int)threads, regs});
}

// ---------------------------------------------------------------------------------------------
// Registration. The functional ops get their fake kernels and derivative in Python
// (kernels/lessons/lesson08.py: register_layernorm), the lesson 03 route.
#define LAYERNORM_SCHEMA "Tensor x, Tensor weight, Tensor bias, float eps, Tensor(a!) out, Tensor(b!) mean, Tensor(c!) rstd) -> ()"

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("layernorm1(" LAYERNORM_SCHEMA);
  m.def("layernorm2(" LAYERNORM_SCHEMA);
  m.def("layernorm3(" LAYERNORM_SCHEMA);
  m.def("layernorm4(" LAYERNORM_SCHEMA);
  m.def("layernorm5(" LAYERNORM_SCHEMA);
  m.def("layernorm6(" LAYERNORM_SCHEMA);
  m.def("layernorm6_layout(Tensor x, Tensor weight, Tensor bias, float eps, Tensor(a!) out, Tensor(b!) mean, "
        "Tensor(c!) rstd, int threads) -> ()");
  m.def("layernorm(Tensor x, Tensor weight, Tensor bias, float eps) -> (Tensor, Tensor, Tensor)");
  m.def("layernorm_backward1(Tensor dy, Tensor x, Tensor weight, Tensor mean, Tensor rstd) -> (Tensor, Tensor, Tensor)");
  m.def("layernorm_backward2(Tensor dy, Tensor x, Tensor weight, Tensor mean, Tensor rstd) -> (Tensor, Tensor, Tensor)");
  m.def("layernorm_backward2_layout(Tensor dy, Tensor x, Tensor weight, Tensor mean, Tensor rstd, int threads) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("layernorm_backward(Tensor dy, Tensor x, Tensor weight, Tensor mean, Tensor rstd) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("layernorm1", &layernorm1);
  m.impl("layernorm2", &layernorm2);
  m.impl("layernorm3", &layernorm3);
  m.impl("layernorm4", &layernorm4);
  m.impl("layernorm5", &layernorm5);
  m.impl("layernorm6", &layernorm6);
  m.impl("layernorm6_layout", &layernorm6_layout);
  m.impl("layernorm", &layernorm);
  m.impl("layernorm_backward1", &layernorm_backward1);
  m.impl("layernorm_backward2", &layernorm_backward2);
  m.impl("layernorm_backward2_layout", &layernorm_backward2_layout);
  m.impl("layernorm_backward", &layernorm_backward2);
}
