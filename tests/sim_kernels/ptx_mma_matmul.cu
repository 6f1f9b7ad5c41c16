// ptx_mma_matmul.cu: a bf16 matmul written with the PTX that Ampere-style full-speed kernels use:
// cp.async copies into a ring of 3 shared-memory stages, XOR-swizzled tiles read with ldmatrix
// (.trans for B), mma.sync.m16n8k16 with fp32 accumulation. tests/test_sim_ptx.py runs it on sim and,
// with a GPU, on cuda, against PyTorch.
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
// needs compute capability: 8.0 for cp.async and mma.sync on bf16
//
//   op          what it computes
//   mma_matmul  C = A B for A [M, K] and B [K, N] in bf16, C in fp32; any M, K and N multiples of 8
//               (each cp.async moves 16 bytes); a ragged edge is read as zeros (cp.async src-size 0)
#include "helpers.cuh"
#include "ptx_common.cuh"  // smem_addr

#include <ATen/ops/empty.h>
#include <cstdint>
#include <cuda_bf16.h>

// ---------------------------------------------------------------------------------------------
// Tiles. A block computes a 128 x 128 tile of C with 8 warps (2 along M, 4 along N), each warp a
// 64 x 32 tile: 4 x 4 mma.m16n8k16 per 16-wide step of K. K advances 32 at a time through STAGES
// shared buffers of A (128 x 32) and B (32 x 128).
constexpr int BM = 128, BN = 128, BK = 32, STAGES = 3, THREADS = 256;
constexpr int A_STAGE = BM * BK, B_STAGE = BK * BN;  // bf16 elements per stage
constexpr size_t SMEM_BYTES = STAGES * (A_STAGE + B_STAGE) * sizeof(__nv_bfloat16);  // 48 KB

// Swizzled element offsets. A row holds 32 bf16 = 4 chunks of 16 bytes; chunk c of row r is stored at
// c ^ ((r / 2) % 4), so the 8 rows an ldmatrix reads at one chunk hit 8 different bank groups.
// A row of B holds 128 bf16 = 16 chunks; chunk c of row r is stored at c ^ (r % 8).
__device__ __forceinline__ int a_offset(int row, int col) {
  return row * BK + (((col / 8) ^ ((row / 2) % 4)) * 8) + col % 8;
}
__device__ __forceinline__ int b_offset(int row, int col) {
  return row * BN + (((col / 8) ^ (row % 8)) * 8) + col % 8;
}

// 16 bytes from global to shared, or zeros where the chunk lies outside the matrix (src-size 0; the
// source address must still be a valid one, so it is the matrix's start then).
__device__ __forceinline__ void copy16(void* dst, const void* src, bool inside) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :: "r"(smem_addr(dst)), "l"(src), "r"(inside ? 16 : 0));
}

// One stage: A tile rows m0.., cols k0..; B tile rows k0.., cols n0... 512 chunks of each, two per thread.
__device__ void load_stage(__nv_bfloat16* sa, __nv_bfloat16* sb, const __nv_bfloat16* a, const __nv_bfloat16* b,
                           int M, int N, int K, int m0, int n0, int k0) {
  for (int i = threadIdx.x; i < BM * BK / 8; i += THREADS) {
    const int row = i / (BK / 8), col = (i % (BK / 8)) * 8;
    const bool inside = m0 + row < M && k0 + col < K;
    copy16(sa + a_offset(row, col), inside ? a + (int64_t)(m0 + row) * K + k0 + col : a, inside);
  }
  for (int i = threadIdx.x; i < BK * BN / 8; i += THREADS) {
    const int row = i / (BN / 8), col = (i % (BN / 8)) * 8;
    const bool inside = k0 + row < K && n0 + col < N;
    copy16(sb + b_offset(row, col), inside ? b + (int64_t)(k0 + row) * N + n0 + col : b, inside);
  }
}

// =============================================================================================
// mma_matmul_kernel: thread t of warp w (2 x 4 warps) owns fragments of a 64 x 32 tile of C. Per
// step: A and B tiles (16 KB) arrive by cp.async two steps ahead; each element of A is read from
// shared memory 4 times (once per warp along N), of B twice. Bound by the tensor cores' operand
// delivery (ldmatrix) at this tile size.
__global__ void __launch_bounds__(THREADS) mma_matmul_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b,
                                                             float* c, int M, int N, int K) {
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16* sa = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* sb = sa + STAGES * A_STAGE;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / 4, wn = warp % 4;  // this warp's 64 x 32 tile
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int tiles = (K + BK - 1) / BK;

  float acc[4][4][4];  // [m16 tile][n8 tile][register]
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;

  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < tiles) load_stage(sa + s * A_STAGE, sb + s * B_STAGE, a, b, M, N, K, m0, n0, s * BK);
    asm volatile("cp.async.commit_group;");
  }

  for (int t = 0; t < tiles; ++t) {
    asm volatile("cp.async.wait_group %0;" :: "n"(STAGES - 2) : "memory");  // tile t has landed (this thread's part)
    __syncthreads();  // ... and every thread's; the stage read at t - 1 is free again
    const int next = t + STAGES - 1;
    if (next < tiles)
      load_stage(sa + (next % STAGES) * A_STAGE, sb + (next % STAGES) * B_STAGE, a, b, M, N, K, m0, n0, next * BK);
    asm volatile("cp.async.commit_group;");  // an empty group near the end keeps the count regular

    const __nv_bfloat16* ta = sa + (t % STAGES) * A_STAGE;
    const __nv_bfloat16* tb = sb + (t % STAGES) * B_STAGE;
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t fa[4][4], fb[4][2];
      // A: one ldmatrix.x4 per 16 x 16 tile; lane l gives row (l % 8) + 8 (l / 8 % 2), column 8 (l / 16)
      for (int i = 0; i < 4; ++i) {
        const int row = wm * 64 + i * 16 + lane % 8 + 8 * ((lane / 8) % 2), col = kk + 8 * (lane / 16);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(fa[i][0]), "=r"(fa[i][1]), "=r"(fa[i][2]), "=r"(fa[i][3])
                     : "r"(smem_addr(ta + a_offset(row, col))));
      }
      // B (k rows, n columns in shared memory): .trans gives each lane its column of k; one
      // ldmatrix.x4.trans covers two n8 tiles: lane l gives k row (l % 8) + 8 (l / 8 % 2), n column 8 (l / 16)
      for (int j = 0; j < 2; ++j) {
        const int row = kk + lane % 8 + 8 * ((lane / 8) % 2), col = wn * 32 + j * 16 + 8 * (lane / 16);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(fb[2 * j][0]), "=r"(fb[2 * j][1]), "=r"(fb[2 * j + 1][0]), "=r"(fb[2 * j + 1][1])
                     : "r"(smem_addr(tb + b_offset(row, col))));
      }
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
          asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                       "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                       : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
                       : "r"(fa[i][0]), "r"(fa[i][1]), "r"(fa[i][2]), "r"(fa[i][3]), "r"(fb[j][0]), "r"(fb[j][1]));
    }
  }
  asm volatile("cp.async.wait_all;" ::: "memory");  // nothing may be in flight when the block ends

  // lane l holds, of each m16n8 tile, rows l / 4 and l / 4 + 8, columns 2 (l % 4) and 2 (l % 4) + 1
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      for (int r = 0; r < 4; ++r) {
        const int row = m0 + wm * 64 + i * 16 + lane / 4 + 8 * (r / 2);
        const int col = n0 + wn * 32 + j * 8 + 2 * (lane % 4) + r % 2;
        if (row < M && col < N) c[(int64_t)row * N + col] = acc[i][j][r];
      }
}

// ---------------------------------------------------------------------------------------------
// Launcher.
at::Tensor mma_matmul(const at::Tensor& a, const at::Tensor& b) {
  CHECK_INPUT(a);
  CHECK_INPUT(b);
  CHECK_DTYPE(a, at::kBFloat16);
  CHECK_DTYPE(b, at::kBFloat16);
  CHECK_DIM(a, 2);
  CHECK_DIM(b, 2);
  TORCH_CHECK(a.size(1) == b.size(0), "a's columns must equal b's rows, got a ", shape_str(a.sizes()), " and b ",
              shape_str(b.sizes()));
  const int M = static_cast<int>(a.size(0)), K = static_cast<int>(a.size(1)), N = static_cast<int>(b.size(1));
  TORCH_CHECK(K % 8 == 0 && N % 8 == 0, "K and N must be multiples of 8 (16-byte copies), got K = ",
              std::to_string(K), ", N = ", std::to_string(N));
  TORCH_CHECK(aligned16(a) && aligned16(b), "a and b must be 16-byte aligned");
  at::Tensor c = at::empty({M, N}, a.options().dtype(at::kFloat));
  if (M == 0 || N == 0) return c;
  if (K == 0) return c.zero_();
  const dim3 grid(ceil_div(N, BN), ceil_div(M, BM));
  mma_matmul_kernel<<<grid, THREADS, SMEM_BYTES, c10::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const __nv_bfloat16*>(a.data_ptr()), reinterpret_cast<const __nv_bfloat16*>(b.data_ptr()),
      c.data_ptr<float>(), M, N, K);
  CHECK_LAUNCH();
  return c;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("mma_matmul(Tensor a, Tensor b) -> Tensor"); }

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("mma_matmul", &mma_matmul); }
