// matmul_blocktile.cu: the lesson 09 exercise. C = A @ B with 2-D register blocking.
//
// Spec (in PyTorch): c = a @ b for contiguous float32 a: [M, K] and b: [K, N], any M, N, K (1, 65, 1000 ...);
// a transposed or otherwise non-contiguous input is refused with an error. Check it with
//     check_exercise("09", "matmul_blocktile", path="matmul_blocktile.cu")      or      make check LESSON=09
#include "helpers.cuh"

constexpr int BM = 64, BN = 64, BK = 8;  // the block's tile of C, and the step along K
constexpr int TM = 4, TN = 4;            // each thread's block of C
constexpr int THREADS = (BM / TM) * (BN / TN);  // 256
static_assert(BM % TM == 0 && BN % TN == 0, "the threads' blocks tile the block's tile exactly");
static_assert((BM * BK) % THREADS == 0 && (BK * BN) % THREADS == 0, "every thread loads as many floats as the others");

// matmul_blocktile_kernel: block (bx, by) owns the BM x BN tile of C at rows BM by, columns BN bx; thread t
// owns the TM x TN block at rows tr.., columns tc.. of it. Per step along K the block stages a BM x BK tile
// of A and a BK x BN tile of B in shared memory; each thread then adds BK outer products of TM values of
// A and TN values of B, held in registers: TM + TN shared loads for TM * TN FMAs.
__global__ void __launch_bounds__(THREADS) matmul_blocktile_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                                                   float* __restrict__ C, int M, int N, int K) {
  __shared__ float As[BM][BK];
  __shared__ float Bs[BK][BN];
  const int tid = threadIdx.x;
  const int tr = (tid / (BN / TN)) * TM, tc = (tid % (BN / TN)) * TN;  // this thread's block within the tile
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;                 // the tile within C
  float acc[TM][TN] = {};
  float ra[TM], rb[TN];
  for (int k0 = 0; k0 < K; k0 += BK) {
    // Stage the tiles; past an edge of A or B, store 0 (it adds nothing to the sums).
    for (int i = tid; i < BM * BK; i += THREADS) {
      const int r = i / BK, c = i % BK;
      As[r][c] = m0 + r < M && k0 + c < K ? A[(int64_t)(m0 + r) * K + k0 + c] : 0.f;
    }
    for (int i = tid; i < BK * BN; i += THREADS) {
      const int r = i / BN, c = i % BN;
      Bs[r][c] = k0 + r < K && n0 + c < N ? B[(int64_t)(k0 + r) * N + n0 + c] : 0.f;
    }
    __syncthreads();  // wait until the tiles are loaded

    // FILL ME IN (roughly 6 lines): for each kk in 0 .. BK-1,
    //   1. load this thread's TM values of A's column kk (rows tr .. tr+TM-1 of As) into ra,
    //   2. load its TN values of B's row kk (columns tc .. tc+TN-1 of Bs) into rb,
    //   3. add their outer product: acc[i][j] += ra[i] * rb[j] for every i < TM, j < TN.

    __syncthreads();  // done with the tiles before the next step overwrites them
  }

  // FILL ME IN (roughly 5 lines): write acc[i][j] to C at row m0 + tr + i, column n0 + tc + j,
  // skipping the elements past the bottom or the right edge of C (M and N need not be multiples of 64).
}

void matmul_blocktile(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  CHECK_INPUT(a);
  CHECK_INPUT(b);
  CHECK_INPUT(c);
  CHECK_DTYPE(a, at::kFloat);
  CHECK_DTYPE(b, at::kFloat);
  CHECK_DTYPE(c, at::kFloat);
  CHECK_DIM(a, 2);
  CHECK_DIM(b, 2);
  CHECK_DIM(c, 2);
  CHECK_MATMUL_SHAPES(a, b, c);
  const int M = a.size(0), K = a.size(1), N = b.size(1);
  if (M == 0 || N == 0) return;  // nothing to write (K = 0 still writes zeros)
  const dim3 grid(ceil_div(N, BN), ceil_div(M, BM));  // x over the column tiles, y over the row tiles
  TORCH_CHECK(grid.y <= 65535, "a has too many rows for this grid: ", std::to_string(M));
  matmul_blocktile_kernel<<<grid, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), M, N, K);
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("matmul_blocktile(Tensor a, Tensor b, Tensor(a!) c) -> ()"); }
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("matmul_blocktile", &matmul_blocktile); }
