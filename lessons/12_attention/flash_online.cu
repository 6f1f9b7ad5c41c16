// flash_online.cu: the lesson 12 exercise. Attention in one kernel: the online softmax over tiles of keys.
//
// Spec (in PyTorch), for float32 q: [B, Hq, Tq, D] and k, v: [B, Hkv, Tk, D], contiguous, Hq a multiple of Hkv,
// D from 1 to 128; query head h reads kv head h // (Hq // Hkv):
//     s = scale * q @ k.transpose(-1, -2)                 # [B, Hq, Tq, Tk]
//     causal: s[..., i, j] = -inf where j > i + (Tk - Tq)  # the diagonal aligned to the bottom-right corner
//     out = torch.softmax(s, dim=-1) @ v;  lse = torch.logsumexp(s, dim=-1)
// except that a query row with no key to attend to (causal with Tq > Tk: its first Tq - Tk rows) gets out = 0 and
// lse = -inf (torch gives NaN there). Check it with
//     check_exercise("12", "flash_online", path="flash_online.cu")      or      make check LESSON=12
#include "helpers.cuh"

#include <algorithm>
#include <cmath>

constexpr int ROWS = 64;   // query rows per block, a thread each
constexpr int BC = 16;     // keys per tile
constexpr int DMAX = 128;  // the largest head dim: o[DMAX] lives in registers

// flash_online_kernel: thread r of block (x, h, b) owns query row i = 64x + r of head h of batch b: its scaled q in
// its own column of Qs, and its running max m, sum l and output o. Per tile of BC keys the block stages K and V in
// shared memory; each thread computes its BC scores into s[BC], then folds the whole tile into m, l and o at once.
__global__ void __launch_bounds__(ROWS) flash_online_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                                            const float* __restrict__ v, float* __restrict__ out,
                                                            float* __restrict__ lse, int Hq, int Hkv, int Tq, int Tk,
                                                            int D, bool causal, float scale) {
  __shared__ float Qs[DMAX][ROWS];  // transposed: lane r reads Qs[d][r], so a warp reads 32 consecutive floats
  __shared__ float Ks[BC][DMAX];
  __shared__ float Vs[BC][DMAX];
  const int r = threadIdx.x, i0 = blockIdx.x * ROWS, i = i0 + r;
  const int64_t bh = (int64_t)blockIdx.z * Hq + blockIdx.y;                               // this (batch, head)
  const int64_t q_at = bh * Tq * D;                                                      // its rows in q and out
  const int64_t kv_at = ((int64_t)blockIdx.z * Hkv + blockIdx.y / (Hq / Hkv)) * Tk * D;  // its kv head's rows
  const int64_t shift = (int64_t)Tk - Tq;  // causal: row i attends to keys j <= i + shift
  for (int d = 0; d < DMAX; ++d) Qs[d][r] = i < Tq && d < D ? q[q_at + (int64_t)i * D + d] * scale : 0.0f;

  int tiles = (Tk + BC - 1) / BC;
  if (causal) {
    // FILL ME IN (roughly 2 lines): the tiles this block needs when causal. Its last row, min(i0 + ROWS, Tq) - 1,
    //   attends to more keys than any other row of the block: which is the last tile that holds one of them? The
    //   tiles after it are masked for every row and need not be loaded. A row may attend to no key at all (Tq > Tk).
    //   `tiles` must be the same for every thread of the block: the tile loop has barriers (__syncthreads).
  }

  // o[] and s[] below stay in registers only where every index is known when compiling: loops over them are unrolled.
  float o[DMAX] = {};
  float m = -INFINITY, l = 0.0f;  // the running max of the scores so far, and the sum of exp(s - m) over them
  for (int t = 0; t < tiles; ++t) {
    __syncthreads();  // everyone is done with the previous tile (and, the first time, Qs is written)
    for (int e = r; e < BC * DMAX; e += ROWS) {  // consecutive threads, consecutive columns: coalesced
      const int c = e / DMAX, d = e % DMAX, j = t * BC + c;
      Ks[c][d] = j < Tk && d < D ? k[kv_at + (int64_t)j * D + d] : 0.0f;
      Vs[c][d] = j < Tk && d < D ? v[kv_at + (int64_t)j * D + d] : 0.0f;
    }
    __syncthreads();  // wait until the tile is loaded

    // This row's scores against the tile's keys: -inf past the last key and, when causal, past the row's diagonal.
    float s[BC];
#pragma unroll
    for (int c = 0; c < BC; ++c) {
      const int j = t * BC + c;
      float dot = 0.0f;
      for (int d = 0; d < DMAX; ++d) dot += Qs[d][r] * Ks[c][d];  // every lane reads the same Ks[c][d]: a broadcast
      s[c] = j < Tk && (!causal || j <= i + shift) ? dot : -INFINITY;
    }

    // FILL ME IN (roughly 16 lines): fold the tile into m, l and o. l is a sum of exp(s - m) and o a sum of
    //   exp(s - m) * v over the keys so far, both against the OLD max m. Find the new max with the tile's scores;
    //   by what factor must l and o be multiplied to be sums against it? Then add each key's exp(s - max) to l and
    //   exp(s - max) * v (Vs[c][d]) to o, and keep the new max. Work it through for a row whose tile is all masked
    //   (every s = -inf) before any key: m = -inf, and -inf - -inf is NaN. Loop over o with d < DMAX under
    //   #pragma unroll (a loop to D, a runtime value, would put o in local memory, not registers).
  }

  if (i >= Tq) return;
  // FILL ME IN (roughly 5 lines): this row's D outputs (row i of its head in out: q_at + i * D + d, in 64 bits) and
  //   its lse (bh * Tq + i): softmax divides by the sum of the exps, and log(sum exp(s)) = m + log(l). What do a row
  //   with no key (l = 0) and its lse get?
}

void flash_online(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, double scale,
                  at::Tensor& out, at::Tensor& lse) {
  CHECK_INPUT(q);
  CHECK_INPUT(k);
  CHECK_INPUT(v);
  CHECK_INPUT(out);
  CHECK_INPUT(lse);
  CHECK_DTYPE(q, at::kFloat);
  CHECK_DTYPE(k, at::kFloat);
  CHECK_DTYPE(v, at::kFloat);
  CHECK_DTYPE(out, at::kFloat);
  CHECK_DTYPE(lse, at::kFloat);
  CHECK_DIM(q, 4);
  CHECK_DIM(k, 4);
  CHECK_SAME_SHAPE(k, v);
  CHECK_SAME_SHAPE(q, out);
  const int64_t B = q.size(0), Hq = q.size(1), Tq = q.size(2), D = q.size(3), Hkv = k.size(1), Tk = k.size(2);
  TORCH_CHECK(k.size(0) == B && k.size(3) == D, "k and v must be [B, Hkv, Tk, D] with q's batch size B and head dim D, "
              "got q ", shape_str(q.sizes()), " and k ", shape_str(k.sizes()));
  TORCH_CHECK(Hkv == 0 ? Hq == 0 : Hq % Hkv == 0, "q's heads (Hq = ", std::to_string(Hq), ") must be a multiple of "
              "k's and v's (Hkv = ", std::to_string(Hkv), "): query head h reads kv head h / (Hq / Hkv)");
  TORCH_CHECK(D >= 1 && D <= DMAX, "the head dim D must be from 1 to ", std::to_string(DMAX), ", got D = ", std::to_string(D));
  TORCH_CHECK(lse.dim() == 3 && lse.size(0) == B && lse.size(1) == Hq && lse.size(2) == Tq, "lse must have shape "
              "[B, Hq, Tq] = ", shape_str({B, Hq, Tq}), ", got ", shape_str(lse.sizes()));
  TORCH_CHECK(B <= 65535 && Hq <= 65535 && Tq < (1LL << 31) - ROWS && Tk < (1LL << 31) - BC, "too large for this "
              "kernel's grid and int indices: B = ", std::to_string(B), ", Hq = ", std::to_string(Hq), ", Tq = ",
              std::to_string(Tq), ", Tk = ", std::to_string(Tk));
  if (B == 0 || Hq == 0 || Tq == 0) return;  // no output row (Tk = 0 is not empty: every row gets out = 0, lse = -inf)
  const dim3 grid(ceil_div(Tq, (int64_t)ROWS), Hq, B);
  flash_online_kernel<<<grid, ROWS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), out.data_ptr<float>(), lse.data_ptr<float>(), Hq,
      Hkv, Tq, Tk, D, causal, (float)scale);
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("flash_online(Tensor q, Tensor k, Tensor v, bool causal, float scale, Tensor(a!) out, Tensor(b!) lse) -> ()");
}
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("flash_online", &flash_online); }
