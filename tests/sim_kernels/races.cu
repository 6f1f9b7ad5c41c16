// races.cu: kernels with the races and out-of-range accesses that the simulator's race and bounds check
// must find, each beside its correct form, which it must pass. tests/test_sim_races.py runs them on the
// simulator with the check on; the correct forms run on cuda too where a GPU is (the racy ones give
// wrong answers there only some of the time: that is the point of finding them without a GPU).
//
//   op               bug = false                                  bug = true
//   column_sums      8 warps combine their column sums through    8 warps `+=` into the same sums in global
//                    shared memory, then one warp stores them     memory (lesson 08's mistake)
//   block_total      thread 0 of each block atomicAdds its sum    thread 0 of each block `+=` its sum into out[0]
//   wmma_tiles       a WMMA matmul through shared tiles, a        the barrier after the multiply left out: the
//                    barrier after each step's multiply            next step's loads overwrite tiles still read
//   reverse_block    each block reverses its slice through         the barrier between the writes and the
//                    shared memory, a barrier between              reads left out
//   warp_swap        a warp swaps values through shared memory     the __syncwarp() left out
//                    with __syncwarp() between
//   flag_any         every positive element's thread sets a flag   each sets it to its own index (two writes
//                    to 1 (the same value: a harmless race)        of different values)
//   last_block       the CUDA samples' "last block" sum: plain     (no bug form)
//                    partial sums, __threadfence(), an atomic
//                    ticket, the last block adds the partials
//   fill_tiles       64x64 tiles written to a rows x cols output,  the guard left out: a ragged edge is
//                    each element guarded                          written far past the end
//   row_sums_window  rows summed in windows of 64 rows, the last  the last window read in full, past the last
//                    window cut at the last row                    row (lesson 08's loop without its min)
//   mbarrier_ring    warp 0 fills a 2-stage ring in shared memory  `bug` (RingBug) plants a mistake of the
//                    with plain stores (or `bulk`: cp.async.bulk)  hand-off: 1 the consumers read without waiting,
//                    and arrives on a stage's `full` mbarrier;     2 they wait for the wrong parity, 3 the producer
//                    warps 1 and 2 wait on its phase, read, and    refills a stage without waiting on `empty`, 4 it
//                    release the stage on its `empty` mbarrier     arrives before it writes, 5 the consumers
//                    (a 9.0 GPU; the simulator anywhere)           release the stage before they read it
//   named_handoff    warp 0 fills a shared tile and arrives at      `bug` (HandoffBug): 1 warp 2, which takes no part,
//                    named barrier 1 (bar.arrive 1, 64); warp 1     reads the tile; 2 warp 0 reads back, after its
//                    waits there (bar.sync 1, 64) and reads it      arrival, what warp 1 wrote after its wait
//   cluster_reverse  one block of 64 threads (a launch without        the cluster.sync() left out
//                    clusters: a cluster of one) reverses x through
//                    shared memory, cluster.sync() between
//                    (a 9.0 GPU; the simulator anywhere)
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <mma.h>

// ---------------------------------------------------------------------------------------------
// column_sums: block (32 columns) x 8 warps; warp w adds rows w, w + 8, ... of its lane's column.
__global__ void column_sums_kernel(const float* x, float* sums, int rows, int cols, bool bug) {
  __shared__ float part[8][32];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, c = blockIdx.x * 32 + lane;
  float s = 0.0f;
  if (c < cols)
    for (int r = w; r < rows; r += 8) s += x[static_cast<int64_t>(r) * cols + c];
  if (bug) {
    if (c < cols) sums[c] += s;  // eight warps read-modify-write one element: a race
    return;
  }
  part[w][lane] = s;
  __syncthreads();  // every warp's part is written
  if (w == 0 && c < cols) {
    float t = 0.0f;
    for (int k = 0; k < 8; ++k) t += part[k][lane];
    sums[c] = t;
  }
}

at::Tensor column_sums(const at::Tensor& x, bool bug) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  const int rows = static_cast<int>(x.size(0)), cols = static_cast<int>(x.size(1));
  auto sums = at::zeros({cols}, x.options());
  if (cols == 0) return sums;
  column_sums_kernel<<<ceil_div(cols, 32), 256>>>(x.data_ptr<float>(), sums.data_ptr<float>(), rows, cols, bug);
  CHECK_LAUNCH();
  return sums;
}

// ---------------------------------------------------------------------------------------------
// block_total: each block of 256 sums its slice in shared memory; thread 0 adds it into out[0].
__global__ void block_total_kernel(const float* x, float* out, int64_t n, bool bug) {
  __shared__ float s[256];
  const int64_t i = blockIdx.x * 256ll + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();  // this level's sums are written before the next level reads them
  }
  if (threadIdx.x == 0) {
    if (bug) out[0] += s[0];  // every block's thread 0 read-modify-writes one element: a race
    else atomicAdd(out, s[0]);
  }
}

at::Tensor block_total(const at::Tensor& x, bool bug) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  auto out = at::zeros({1}, x.options());
  const int64_t n = x.numel();
  if (n == 0) return out;
  block_total_kernel<<<ceil_div(n, 256), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n, bug);
  CHECK_LAUNCH();
  return out;
}

// ---------------------------------------------------------------------------------------------
// wmma_tiles: C = A B for n x n fp16 (n a multiple of 32); a block of 4 warps owns a 32x32 tile of C,
// warp (wy, wx) its 16x16 quarter; each step stages 32x16 of A and 16x32 of B in shared memory.
__global__ void wmma_tiles_kernel(const __half* a, const __half* b, float* c, int n, bool bug) {
  using namespace nvcuda;
  __shared__ alignas(32) __half as[32 * 16];
  __shared__ alignas(32) __half bs[16 * 32];
  const int warp = threadIdx.x / 32, wy = warp / 2, wx = warp % 2;
  const int row0 = blockIdx.y * 32, col0 = blockIdx.x * 32;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  for (int k0 = 0; k0 < n; k0 += 16) {
    for (int e = threadIdx.x; e < 32 * 16; e += blockDim.x) {
      as[e] = a[static_cast<int64_t>(row0 + e / 16) * n + k0 + e % 16];
      bs[e] = b[static_cast<int64_t>(k0 + e / 32) * n + col0 + e % 32];
    }
    __syncthreads();  // the tiles are loaded
    wmma::load_matrix_sync(fa, as + wy * 16 * 16, 16);
    wmma::load_matrix_sync(fb, bs + wx * 16, 32);
    wmma::mma_sync(acc, fa, fb, acc);
    if (!bug) __syncthreads();  // every warp is done with the tiles before the next step overwrites them
  }
  wmma::store_matrix_sync(c + static_cast<int64_t>(row0 + wy * 16) * n + col0 + wx * 16, acc, n, wmma::mem_row_major);
}

at::Tensor wmma_tiles(const at::Tensor& a, const at::Tensor& b, bool bug) {
  CHECK_INPUT(a);
  CHECK_INPUT(b);
  CHECK_DTYPE(a, at::kHalf);
  CHECK_DTYPE(b, at::kHalf);
  const int n = static_cast<int>(a.size(0));
  TORCH_CHECK(n % 32 == 0 && a.size(1) == n && b.size(0) == n && b.size(1) == n,
              "wmma_tiles: expected two square matrices whose size is a multiple of 32");
  auto c = at::empty({n, n}, a.options().dtype(at::kFloat));
  wmma_tiles_kernel<<<dim3(n / 32, n / 32), 128>>>(reinterpret_cast<const __half*>(a.data_ptr()),
                                                   reinterpret_cast<const __half*>(b.data_ptr()),
                                                   c.data_ptr<float>(), n, bug);
  CHECK_LAUNCH();
  return c;
}

// ---------------------------------------------------------------------------------------------
// reverse_block: out[i] is x at the mirrored place of i's block of 256 (zero past the end).
__global__ void reverse_block_kernel(const float* x, float* out, int64_t n, bool bug) {
  __shared__ float s[256];
  const int64_t i = blockIdx.x * 256ll + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  if (!bug) __syncthreads();  // every thread's value is in place before any is read
  if (i < n) out[i] = s[255 - threadIdx.x];
}

at::Tensor reverse_block(const at::Tensor& x, bool bug) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  auto out = at::empty({x.numel()}, x.options());
  const int64_t n = x.numel();
  if (n == 0) return out;
  reverse_block_kernel<<<ceil_div(n, 256), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n, bug);
  CHECK_LAUNCH();
  return out;
}

// ---------------------------------------------------------------------------------------------
// warp_swap: one warp; out[lane] = x[31 - lane], passed through shared memory.
__global__ void warp_swap_kernel(const float* x, float* out, bool bug) {
  __shared__ float s[32];
  s[threadIdx.x] = x[threadIdx.x];
  if (!bug) __syncwarp();  // the warp's writes are done (and visible) before its reads
  out[threadIdx.x] = s[31 - threadIdx.x];
}

at::Tensor warp_swap(const at::Tensor& x, bool bug) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(x.numel() == 32, "warp_swap: expected 32 floats");
  auto out = at::empty({32}, x.options());
  warp_swap_kernel<<<1, 32>>>(x.data_ptr<float>(), out.data_ptr<float>(), bug);
  CHECK_LAUNCH();
  return out;
}

// ---------------------------------------------------------------------------------------------
// flag_any: a flag set by every thread whose element is positive.
__global__ void flag_any_kernel(const float* x, int* flag, int64_t n, bool bug) {
  const int64_t i = blockIdx.x * 64ll + threadIdx.x;
  if (i < n && x[i] > 0.0f) *flag = bug ? static_cast<int>(i) + 1 : 1;
}

at::Tensor flag_any(const at::Tensor& x, bool bug) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  auto flag = at::zeros({1}, x.options().dtype(at::kInt));
  const int64_t n = x.numel();
  if (n == 0) return flag;
  flag_any_kernel<<<ceil_div(n, 64), 64>>>(x.data_ptr<float>(), flag.data_ptr<int>(), n, bug);
  CHECK_LAUNCH();
  return flag;
}

// ---------------------------------------------------------------------------------------------
// last_block: the CUDA samples' threadFenceReduction. Every block writes its partial sum with a plain
// store; the last block to take a ticket adds them all.
__device__ unsigned int blocks_done = 0;

__global__ void last_block_kernel(const float* x, float* partial, float* out, int64_t n) {
  __shared__ float s[256];
  __shared__ bool last;
  const int64_t i = blockIdx.x * 256ll + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = s[0];
    __threadfence();  // the partial is visible to every block before the ticket is taken
    const unsigned ticket = atomicInc(&blocks_done, gridDim.x);
    last = ticket == gridDim.x - 1;
  }
  __syncthreads();  // every thread sees `last`
  if (last && threadIdx.x == 0) {
    float t = 0.0f;
    for (unsigned b = 0; b < gridDim.x; ++b) t += partial[b];
    out[0] = t;
    blocks_done = 0;  // atomicInc wrapped it already; reset for the next launch
  }
}

at::Tensor last_block(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  const int64_t n = x.numel();
  auto out = at::zeros({1}, x.options());
  if (n == 0) return out;
  const int64_t blocks = ceil_div(n, 256);
  auto partial = at::empty({blocks}, x.options());
  last_block_kernel<<<blocks, 256>>>(x.data_ptr<float>(), partial.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
  return out;
}

// ---------------------------------------------------------------------------------------------
// fill_tiles: out[r][c] = r * cols + c, in 64x64 tiles of 256 threads (16 elements each).
__global__ void fill_tiles_kernel(float* out, int rows, int cols, bool bug) {
  const int r0 = blockIdx.y * 64, c0 = blockIdx.x * 64;
  for (int e = threadIdx.x; e < 64 * 64; e += 256) {
    const int r = r0 + e / 64, c = c0 + e % 64;
    if (bug || (r < rows && c < cols)) out[static_cast<int64_t>(r) * cols + c] = static_cast<float>(r * cols + c);
  }
}

void fill_tiles(at::Tensor& out, bool bug) {
  CHECK_INPUT(out);
  CHECK_DTYPE(out, at::kFloat);
  TORCH_CHECK(out.dim() == 2, "fill_tiles: expected a 2-D output");
  const int rows = static_cast<int>(out.size(0)), cols = static_cast<int>(out.size(1));
  if (rows == 0 || cols == 0) return;
  fill_tiles_kernel<<<dim3(ceil_div(cols, 64), ceil_div(rows, 64)), 256>>>(out.data_ptr<float>(), rows, cols, bug);
  CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// row_sums_window: out[r] = the sum of row r; block b sums rows 64b .. 64b + 63, one thread per row.
__global__ void row_sums_window_kernel(const float* x, float* out, int rows, int cols, bool bug) {
  const int r0 = blockIdx.x * 64;
  const int r1 = bug ? r0 + 64 : min(r0 + 64, rows);  // the window ends at the last row
  const int r = r0 + threadIdx.x;
  if (r >= r1) return;
  float s = 0.0f;
  for (int c = 0; c < cols; ++c) s += x[static_cast<int64_t>(r) * cols + c];
  if (r < rows) out[r] = s;
}

at::Tensor row_sums_window(const at::Tensor& x, bool bug) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  const int rows = static_cast<int>(x.size(0)), cols = static_cast<int>(x.size(1));
  auto out = at::empty({rows}, x.options());
  if (rows == 0) return out;
  auto kernel = row_sums_window_kernel;  // launched through a local pointer, which the launch reads from this stack
  kernel<<<ceil_div(rows, 64), 64>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols, bug);
  CHECK_LAUNCH();
  return out;
}

// ---------------------------------------------------------------------------------------------
// mbarrier_ring: out[c] = the sum over rows r of x[r][c] + x[r][63 - c], x: [rows, 64]. Warp 0 produces: it copies
// row r into stage r % 2 of a ring, then arrives on the stage's `full` mbarrier (one arrival a phase): with plain
// stores (two floats a lane, then lane 0 arrives), or with `bulk` a cp.async.bulk of the row that completes on the
// barrier (lane 0 arrives with expect_tx, then issues it). Warps 1 and 2 consume: every lane waits for the stage's
// phase, reads two elements (each element is read by both warps), and lane 0 of each warp arrives on `empty` (two
// arrivals a phase), which the producer's lane 0 waits on before the stage is refilled. Row r is use u = r / 2 of its
// stage: the phase of `full` that it completes is the stage's u-th, of parity u % 2. The __syncwarp()s pass what one
// lane waited for, or what every lane wrote, on to (or from) the lane that arrives: an mbarrier orders the arriving
// thread's accesses before the waiting threads', and a warp barrier orders the warp's. PTX's mbarrier.try_wait is
// sm_90's; below 9.0 the kernel traps (the launcher refuses such a GPU first).
enum RingBug : int {
  kRingCorrect = 0,
  kRingNoWait = 1,       // the consumers read without waiting
  kRingWrongParity = 2,  // they wait for the phase of the other parity (the one before the row's)
  kRingNoEmptyWait = 3,  // the producer refills a stage without waiting on `empty`
  kRingEarlyArrive = 4,  // the producer arrives before it writes (plain stores only)
  kRingEarlyRelease = 5  // the consumers arrive on `empty` before they read
};

#if defined(CUDASIM) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
#define RING_HAS_TRY_WAIT 1
__device__ __forceinline__ uint32_t ring_smem(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ring_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(ring_smem(bar)), "r"(count));
}
__device__ __forceinline__ void ring_arrive(uint64_t* bar) {  // release: this thread's accesses before it
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(ring_smem(bar)) : "memory");
}
__device__ __forceinline__ void ring_expect_bytes(uint64_t* bar, uint32_t bytes) {  // an arrival, and bytes to come
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(ring_smem(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void ring_wait(uint64_t* bar, uint32_t parity) {  // acquire: the phase's arrivals' accesses
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "RING_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra RING_WAIT;\n"
      "}\n" ::"r"(ring_smem(bar)), "r"(parity) : "memory");
}
__device__ __forceinline__ void ring_bulk_load(float* dst, const float* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(ring_smem(dst)), "l"(src), "r"(bytes), "r"(ring_smem(bar)) : "memory");
}
#endif

__global__ void mbarrier_ring_kernel(const float* x, float* out, int rows, int bug, bool bulk) {
#ifdef RING_HAS_TRY_WAIT
  __shared__ alignas(16) float ring[2][64];
  __shared__ alignas(8) uint64_t full[2];
  __shared__ alignas(8) uint64_t empty[2];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < 2; ++s) {
      ring_init(&full[s], 1);
      ring_init(&empty[s], 2);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();  // the barriers are initialised before anyone uses them
  if (warp == 0) {
    for (int r = 0; r < rows; ++r) {
      const int s = r % 2, u = r / 2;
      const float* row = x + static_cast<int64_t>(r) * 64;
      if (lane == 0 && u > 0 && bug != kRingNoEmptyWait) ring_wait(&empty[s], (u - 1) % 2);  // use u - 1 is read
      if (bulk) {
        if (lane == 0) {
          ring_expect_bytes(&full[s], 64 * sizeof(float));
          ring_bulk_load(ring[s], row, 64 * sizeof(float), &full[s]);  // lands before the phase completes
        }
        continue;
      }
      __syncwarp();  // ... and so every lane may overwrite the stage
      if (lane == 0 && bug == kRingEarlyArrive) ring_arrive(&full[s]);
      for (int c = lane; c < 64; c += 32) ring[s][c] = row[c];
      __syncwarp();  // every lane's stores come before lane 0's arrival
      if (lane == 0 && bug != kRingEarlyArrive) ring_arrive(&full[s]);
    }
  } else {
    const int c = (warp - 1) * 32 + lane;
    float sum = 0.0f;
    for (int r = 0; r < rows; ++r) {
      const int s = r % 2, u = r / 2;
      if (bug != kRingNoWait) ring_wait(&full[s], bug == kRingWrongParity ? (u + 1) % 2 : u % 2);  // row r is there
      if (bug == kRingEarlyRelease) {
        __syncwarp();
        if (lane == 0) ring_arrive(&empty[s]);
      }
      sum += ring[s][c] + ring[s][63 - c];
      __syncwarp();  // every lane's reads come before lane 0's arrival
      if (lane == 0 && bug != kRingEarlyRelease) ring_arrive(&empty[s]);
    }
    out[c] = sum;
  }
#else
  (void)x, (void)out, (void)rows, (void)bug, (void)bulk;
  __trap();
#endif
}

at::Tensor mbarrier_ring(const at::Tensor& x, int64_t bug, bool bulk) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(x.dim() == 2 && x.size(1) == 64, "mbarrier_ring: expected x of shape [rows, 64], got ",
              shape_str(x.sizes()));
  TORCH_CHECK(bug >= kRingCorrect && bug <= kRingEarlyRelease && !(bulk && bug == kRingEarlyArrive),
              "mbarrier_ring: bug must be 0 (none) to 5, and not 4 (an arrival before the stores) with bulk, got ",
              std::to_string(bug));
  TORCH_CHECK(!bulk || reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0,
              "mbarrier_ring: cp.async.bulk needs x 16-byte aligned");
  check_capability("mbarrier_ring", 900, "mbarrier.try_wait and cp.async.bulk");
  auto out = at::empty({64}, x.options());
  mbarrier_ring_kernel<<<1, 96>>>(x.data_ptr<float>(), out.data_ptr<float>(), static_cast<int>(x.size(0)),
                                  static_cast<int>(bug), bulk);
  CHECK_LAUNCH();
  return out;
}

// ---------------------------------------------------------------------------------------------
// named_handoff: out[c] = 2 x[c] + 2 x[63 - c] for c < 64, x: [64], out: [128] (zeros past 64 in the correct form).
// Warp 0 writes 2 x into a shared tile and arrives at named barrier 1 for 64 threads (bar.arrive); warp 1 waits there
// (bar.sync) and reads the tile; warp 2 takes no part. A named barrier for part of the block orders the participants'
// accesses before the waiting threads' later ones, and nothing else: with bug 1 warp 2 reads the tile too, with
// nothing between it and warp 0's stores; with bug 2 warp 0 reads, after its arrival, what warp 1 writes after its
// wait (an arrival does not wait, so it acquires nothing).
enum HandoffBug : int { kHandoffCorrect = 0, kHandoffBystander = 1, kHandoffArriverReads = 2 };

__global__ void named_handoff_kernel(const float* x, float* out, int bug) {
  __shared__ float tile[64], back[64];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == 0) {
    for (int c = lane; c < 64; c += 32) tile[c] = 2.0f * x[c];
    asm volatile("bar.arrive 1, 64;" ::: "memory");  // warp 0's stores, for the threads that wait at barrier 1
    if (bug == kHandoffArriverReads)
      for (int c = lane; c < 64; c += 32) out[64 + c] = back[c];
  } else if (warp == 1) {
    asm volatile("bar.sync 1, 64;" ::: "memory");  // warp 0 has arrived: its stores are in the tile
    for (int c = lane; c < 64; c += 32) {
      out[c] = tile[c] + tile[63 - c];
      back[c] = 1.0f;
    }
  } else if (bug == kHandoffBystander) {
    for (int c = lane; c < 64; c += 32) out[64 + c] = tile[c];
  }
}

at::Tensor named_handoff(const at::Tensor& x, int64_t bug) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(x.dim() == 1 && x.size(0) == 64, "named_handoff: expected x of shape [64], got ", shape_str(x.sizes()));
  TORCH_CHECK(bug >= kHandoffCorrect && bug <= kHandoffArriverReads, "named_handoff: bug must be 0 (none) to 2, got ",
              std::to_string(bug));
  auto out = at::zeros({128}, x.options());
  named_handoff_kernel<<<1, 96>>>(x.data_ptr<float>(), out.data_ptr<float>(), static_cast<int>(bug));
  CHECK_LAUNCH();
  return out;
}

// ---------------------------------------------------------------------------------------------
// cluster_reverse: out = x reversed, x: [64]. One block of two warps, launched without clusters: the block is a
// cluster of one, and the cluster's barrier (barrier.cluster.arrive and .wait) orders its threads as __syncthreads
// does. Thread-block clusters are sm_90's; below 9.0 the kernel traps (the launcher refuses such a GPU first).
__global__ void cluster_reverse_kernel(const float* x, float* out, bool bug) {
#if defined(CUDASIM) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
  __shared__ float mirror[64];
  mirror[threadIdx.x] = x[threadIdx.x];
  if (!bug) cooperative_groups::this_cluster().sync();  // every thread's value is in place before any is read
  out[threadIdx.x] = mirror[63 - threadIdx.x];
#else
  (void)x, (void)out, (void)bug;
  __trap();
#endif
}

at::Tensor cluster_reverse(const at::Tensor& x, bool bug) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(x.dim() == 1 && x.size(0) == 64, "cluster_reverse: expected x of shape [64], got ",
              shape_str(x.sizes()));
  check_capability("cluster_reverse", 900, "barrier.cluster");
  auto out = at::empty({64}, x.options());
  cluster_reverse_kernel<<<1, 64>>>(x.data_ptr<float>(), out.data_ptr<float>(), bug);
  CHECK_LAUNCH();
  return out;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("column_sums(Tensor x, bool bug) -> Tensor");
  m.def("block_total(Tensor x, bool bug) -> Tensor");
  m.def("wmma_tiles(Tensor a, Tensor b, bool bug) -> Tensor");
  m.def("reverse_block(Tensor x, bool bug) -> Tensor");
  m.def("warp_swap(Tensor x, bool bug) -> Tensor");
  m.def("flag_any(Tensor x, bool bug) -> Tensor");
  m.def("last_block(Tensor x) -> Tensor");
  m.def("fill_tiles(Tensor(a!) out, bool bug) -> ()");
  m.def("row_sums_window(Tensor x, bool bug) -> Tensor");
  m.def("mbarrier_ring(Tensor x, int bug, bool bulk) -> Tensor");
  m.def("named_handoff(Tensor x, int bug) -> Tensor");
  m.def("cluster_reverse(Tensor x, bool bug) -> Tensor");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("column_sums", &column_sums);
  m.impl("block_total", &block_total);
  m.impl("wmma_tiles", &wmma_tiles);
  m.impl("reverse_block", &reverse_block);
  m.impl("warp_swap", &warp_swap);
  m.impl("flag_any", &flag_any);
  m.impl("last_block", &last_block);
  m.impl("row_sums_window", &row_sums_window);
  m.impl("fill_tiles", &fill_tiles);
  m.impl("mbarrier_ring", &mbarrier_ring);
  m.impl("named_handoff", &named_handoff);
  m.impl("cluster_reverse", &cluster_reverse);
}
