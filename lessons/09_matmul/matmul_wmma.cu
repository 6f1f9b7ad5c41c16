// matmul_wmma.cu: the second (optional) lesson 09 exercise. C = A @ B on tensor cores with WMMA.
//
// Spec (in PyTorch): c = (a.float() @ b.float()) for contiguous bfloat16 a: [M, K] and b: [K, N], any M, N, K;
// c is float32 (the fp32 accumulator, stored as it is). Check it with
//     check_exercise("09", "matmul_wmma", path="matmul_wmma.cu")      or      make check LESSON=09 EX=matmul_wmma
#include "helpers.cuh"

#include <cuda_bf16.h>
#include <mma.h>

namespace wmma = nvcuda::wmma;

constexpr int F = 16;            // a fragment is 16 x 16 (x 16 deep)
constexpr int BM = 32, BN = 64;  // the block's tile of C: 2 x 4 fragments, one per warp
constexpr int BK = 32;           // the step along K: two fragments deep
constexpr int THREADS = 32 * (BM / F) * (BN / F);  // 8 warps
static_assert(BM % F == 0 && BN % F == 0 && BK % F == 0, "fragments cover the tiles exactly");

// matmul_wmma_kernel: block (bx, by) owns the BM x BN tile of C at rows BM by, columns BN bx; warp w owns
// the 16 x 16 fragment at rows 16 (w / 4), columns 16 (w % 4) of it. Per step the block stages 32 x 32 of A
// and 32 x 64 of B (bf16) in shared memory; each warp walks the step's depth a fragment (16) at a time,
// loading a fragment of A and one of B from the tiles and multiplying them.
__global__ void __launch_bounds__(THREADS) matmul_wmma_kernel(const __nv_bfloat16* __restrict__ A,
                                                              const __nv_bfloat16* __restrict__ B, float* __restrict__ C,
                                                              int M, int N, int K) {
  __shared__ alignas(32) __nv_bfloat16 As[BM * BK];  // row-major, BK per row
  __shared__ alignas(32) __nv_bfloat16 Bs[BK * BN];  // row-major, BN per row
  __shared__ alignas(32) float Cs[THREADS / 32][F * F];  // each warp's result, for the edge-checked store
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / (BN / F)) * F, wn = (warp % (BN / F)) * F;  // the warp's fragment within the tile
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const __nv_bfloat16 zero = __float2bfloat16(0.f);

  wmma::fragment<wmma::matrix_a, F, F, F, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, F, F, F, __nv_bfloat16, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, F, F, F, float> acc;
  // FILL ME IN (1 line): start the accumulator at 0 (wmma::fill_fragment).
  for (int k0 = 0; k0 < K; k0 += BK) {
    // Stage the tiles; past an edge of A or B, store 0 (it adds nothing to the sums).
    for (int i = threadIdx.x; i < BM * BK; i += THREADS) {
      const int r = i / BK, c = i % BK;
      As[i] = m0 + r < M && k0 + c < K ? A[(int64_t)(m0 + r) * K + k0 + c] : zero;
    }
    for (int i = threadIdx.x; i < BK * BN; i += THREADS) {
      const int r = i / BN, c = i % BN;
      Bs[i] = k0 + r < K && n0 + c < N ? B[(int64_t)(k0 + r) * N + n0 + c] : zero;
    }
    __syncthreads();  // wait until the tiles are loaded

    // FILL ME IN (roughly 5 lines): for each 16-deep slice kk = 0, F, ... of the step's BK, load this warp's
    // 16 x 16 of the A tile (rows wm .., columns kk ..) into fa and its 16 x 16 of the B tile (rows kk ..,
    // columns wn ..) into fb with wmma::load_matrix_sync (a pointer to the fragment's first element, and the
    // length of a row of the shared array it lies in), then acc += fa @ fb (mma_sync).
    __syncthreads();  // done with the tiles before the next step overwrites them
  }

  // Through shared memory, so that each lane can check the edges of C element by element.
  wmma::store_matrix_sync(Cs[warp], acc, F, wmma::mem_row_major);
  __syncwarp();  // the warp's fragment is in Cs before its lanes read it
  for (int e = lane; e < F * F; e += 32) {
    const int m = m0 + wm + e / F, n = n0 + wn + e % F;
    if (m < M && n < N) C[(int64_t)m * N + n] = Cs[warp][e];
  }
}

void matmul_wmma(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  CHECK_INPUT(a);
  CHECK_INPUT(b);
  CHECK_INPUT(c);
  CHECK_DTYPE(a, at::kBFloat16);
  CHECK_DTYPE(b, at::kBFloat16);
  CHECK_DTYPE(c, at::kFloat);
  CHECK_DIM(a, 2);
  CHECK_DIM(b, 2);
  CHECK_DIM(c, 2);
  CHECK_MATMUL_SHAPES(a, b, c);
  const int M = a.size(0), K = a.size(1), N = b.size(1);
  if (M == 0 || N == 0) return;  // nothing to write (K = 0 still writes zeros)
  const dim3 grid(ceil_div(N, BN), ceil_div(M, BM));  // x over the column tiles, y over the row tiles
  TORCH_CHECK(grid.y <= 65535, "a has too many rows for this grid: ", std::to_string(M));
  matmul_wmma_kernel<<<grid, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      static_cast<const __nv_bfloat16*>(a.data_ptr()), static_cast<const __nv_bfloat16*>(b.data_ptr()),
      c.data_ptr<float>(), M, N, K);
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("matmul_wmma(Tensor a, Tensor b, Tensor(a!) c) -> ()"); }
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("matmul_wmma", &matmul_wmma); }
