// public_styles.cu: CUDA written the way published code writes it (the CUDA samples, SGEMM_CUDA's
// runner, lock and polling idioms), which the simulator must run unchanged. Every op here is
// defined on a GPU and gives there what tests/test_sim.py expects on the simulator.
//
//   op                  what it exercises
//   samples_reduce      file-scope `extern __shared__ float sdata[];` shared by two kernels
//   samples_transpose   file-scope static `__shared__ float tile[32][33];` and a file-scope counter
//   sgemm_runner        host code that declares `dim3 gridDim(...)`, `dim3 blockDim(...)` and takes
//                       a parameter named blockDim
//   argmax              `__shared__` of a template type with a comma, a comment inside the
//                       declaration, a digit separator before a launch on the same line
//   reduce_unsigned     __reduce_min_sync / __reduce_max_sync on unsigned and on int values
//   zero_adds           atomics that leave memory unchanged, many times over (not a poll)
//   block_lock          a spin lock taken by the threads of one block in turn
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

// =============================================================================================
// samples_reduce: the CUDA samples' idiom, one dynamic shared buffer declared at file scope
extern __shared__ float sdata[];

// one thread per element: each block sums its blockDim.x elements through sdata (a tree)
__global__ void samples_reduce_kernel(const float* x, float* partial, int n) {
  unsigned int tid = threadIdx.x;
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  sdata[tid] = (i < n) ? x[i] : 0.0f;
  __syncthreads();  // the whole tile is loaded
  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) sdata[tid] += sdata[tid + s];
    __syncthreads();  // this level is summed before the next reads it
  }
  if (tid == 0) partial[blockIdx.x] = sdata[0];
}

// one block sums the partial sums, striding over them, through the same file-scope buffer
__global__ void samples_finish_kernel(const float* partial, float* out, int n) {
  unsigned int tid = threadIdx.x;
  float acc = 0.0f;
  for (int i = tid; i < n; i += blockDim.x) acc += partial[i];
  sdata[tid] = acc;
  __syncthreads();
  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) sdata[tid] += sdata[tid + s];
    __syncthreads();
  }
  if (tid == 0) out[0] = sdata[0];
}

// [the block sums of 256 elements..., the total]
at::Tensor samples_reduce(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  const int n = static_cast<int>(x.numel());
  const int threads = 256, blocks = ceil_div(n, threads);
  auto out = at::empty({blocks + 1}, x.options());
  samples_reduce_kernel<<<blocks, threads, threads * sizeof(float)>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
  samples_finish_kernel<<<1, 128, 128 * sizeof(float)>>>(out.data_ptr<float>(), out.data_ptr<float>() + blocks, blocks);
  CHECK_LAUNCH();
  return out;
}

// =============================================================================================
// samples_transpose: file-scope static shared memory
#define TILE_DIM 32
#define BLOCK_ROWS 8
__shared__ float tile[TILE_DIM][TILE_DIM + 1];  // +1: rows fall in different banks
static __shared__ int block_nonzero;             // how many elements of this tile are not zero

// a 32x8 block moves a 32x32 tile; counts[block] = the tile's nonzero elements
__global__ void samples_transpose_kernel(const float* in, float* out, int* counts, int rows, int cols) {
  int x = blockIdx.x * TILE_DIM + threadIdx.x;
  int y = blockIdx.y * TILE_DIM + threadIdx.y;
  if (threadIdx.x == 0 && threadIdx.y == 0) block_nonzero = 0;
  __syncthreads();  // the counter is zero before anyone adds
  for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
    if (x < cols && y + j < rows) {
      float v = in[(y + j) * cols + x];
      tile[threadIdx.y + j][threadIdx.x] = v;
      if (v != 0.0f) atomicAdd(&block_nonzero, 1);
    }
  __syncthreads();  // the tile is complete
  x = blockIdx.y * TILE_DIM + threadIdx.x;
  y = blockIdx.x * TILE_DIM + threadIdx.y;
  for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
    if (x < rows && y + j < cols) out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
  if (threadIdx.x == 0 && threadIdx.y == 0) counts[blockIdx.y * gridDim.x + blockIdx.x] = block_nonzero;
}

// [x transposed, nonzero count per 32x32 tile (row-major over tiles)]
std::vector<at::Tensor> samples_transpose(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DIM(x, 2);
  const int rows = static_cast<int>(x.size(0)), cols = static_cast<int>(x.size(1));
  auto out = at::empty({cols, rows}, x.options());
  dim3 grid(ceil_div(cols, TILE_DIM), ceil_div(rows, TILE_DIM)), block(TILE_DIM, BLOCK_ROWS);
  auto counts = at::empty({grid.y, grid.x}, x.options().dtype(at::kInt));
  samples_transpose_kernel<<<grid, block>>>(x.data_ptr<float>(), out.data_ptr<float>(), counts.data_ptr<int>(),
                                            rows, cols);
  CHECK_LAUNCH();
  return {out, counts};
}

// =============================================================================================
// sgemm_runner: SGEMM_CUDA's runner names its launch shapes gridDim and blockDim
#define CEIL_DIV(M, N) (((M) + (N)-1) / (N))

// one thread per element of C = A @ B (M x K times K x N), rows of C along x
__global__ void sgemm_naive(int M, int N, int K, const float* A, const float* B, float* C) {
  const unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < M && y < N) {
    float tmp = 0.0f;
    for (int i = 0; i < K; ++i) tmp += A[x * K + i] * B[i * N + y];
    C[x * N + y] = tmp;
  }
}

// a host helper whose parameter is called blockDim
static dim3 grid_for(int M, int N, dim3 blockDim) { return dim3(CEIL_DIV(M, blockDim.x), CEIL_DIV(N, blockDim.y)); }

at::Tensor sgemm_runner(const at::Tensor& a, const at::Tensor& b) {
  CHECK_INPUT(a);
  CHECK_INPUT(b);
  const int M = static_cast<int>(a.size(0)), K = static_cast<int>(a.size(1)), N = static_cast<int>(b.size(1));
  auto c = at::empty({M, N}, a.options());
  dim3 gridDim(CEIL_DIV(M, 32), CEIL_DIV(N, 32));
  dim3 blockDim(32, 32);
  TORCH_CHECK(grid_for(M, N, blockDim).x == gridDim.x && grid_for(M, N, blockDim).y == gridDim.y);
  sgemm_naive<<<gridDim, blockDim>>>(M, N, K, a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>());
  CHECK_LAUNCH();
  return c;
}

// =============================================================================================
// argmax: a shared array of a template type
template <typename V, typename I>
struct Pair {
  V value;
  I index;
};

template <typename V, typename I>
__device__ Pair<V, I> better(Pair<V, I> a, Pair<V, I> b) {
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

// one block of 1024 threads strides over x; each warp keeps its best in shared memory
__global__ void argmax_kernel(const float* x, int64_t n, Pair<float, int>* out) {
  __shared__ /* one per warp */ Pair<float, int> best[32];
  Pair<float, int> mine{-INFINITY, -1};
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) mine = better(mine, Pair<float, int>{x[i], static_cast<int>(i)});
  for (int offset = 16; offset > 0; offset /= 2) {
    Pair<float, int> other{__shfl_xor_sync(FULL_MASK, mine.value, offset), __shfl_xor_sync(FULL_MASK, mine.index, offset)};
    mine = better(mine, other);
  }
  if (threadIdx.x % 32 == 0) best[threadIdx.x / 32] = mine;
  __syncthreads();  // every warp's best is written
  if (threadIdx.x == 0) {
    Pair<float, int> b = best[0];
    for (int w = 1; w < 32; ++w) b = better(b, best[w]);
    *out = b;
  }
}

// [max value, its first index] (x must be shorter than 2^20 + 1 elements)
at::Tensor argmax(const at::Tensor& x) {
  CHECK_INPUT(x);
  auto out = at::empty({2}, x.options());  // the float value, then the bits of the int index
  const int64_t limit = 1'048'576; TORCH_CHECK(x.numel() <= limit + 1, "at most 2^20 + 1 elements"); argmax_kernel<<<1, 1024>>>(x.data_ptr<float>(), x.numel(), reinterpret_cast<Pair<float, int>*>(out.data_ptr<float>()));
  CHECK_LAUNCH();
  return out;
}

// =============================================================================================
// reduce_unsigned: __reduce_min/max_sync compare unsigned values as unsigned (sm_80 and later)
// out[warp] = [min as unsigned, max as unsigned, min as int, max as int] of the warp's 32 values
__global__ void reduce_unsigned_kernel(const int* v, int* out) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned u = static_cast<unsigned>(v[threadIdx.x]);
  const unsigned umin = __reduce_min_sync(FULL_MASK, u), umax = __reduce_max_sync(FULL_MASK, u);
  const int smin = __reduce_min_sync(FULL_MASK, v[threadIdx.x]), smax = __reduce_max_sync(FULL_MASK, v[threadIdx.x]);
  if (lane == 0) {
    out[4 * warp + 0] = static_cast<int>(umin);
    out[4 * warp + 1] = static_cast<int>(umax);
    out[4 * warp + 2] = smin;
    out[4 * warp + 3] = smax;
  }
#else
  __trap();  // no __reduce_*_sync before sm_80: reduce_unsigned refuses such a GPU first
#endif
}

at::Tensor reduce_unsigned(const at::Tensor& v) {
  CHECK_INPUT(v);
  CHECK_DTYPE(v, at::kInt);
  TORCH_CHECK(v.numel() == 64, "expected 64 values (two warps), got ", std::to_string(v.numel()));
  check_capability("reduce_unsigned", 800, "__reduce_min_sync and __reduce_max_sync");
  auto out = at::empty({2, 4}, v.options());
  reduce_unsigned_kernel<<<1, 64>>>(v.data_ptr<int>(), out.data_ptr<int>());
  CHECK_LAUNCH();
  return out;
}

// =============================================================================================
// zero_adds: an atomic that changes nothing is ordinary work, not a poll
// every thread adds 0.0f `repeats` times to one address, then 1.0f once: the sum is the thread count
__global__ void zero_adds_kernel(float* sum, int repeats) {
  for (int r = 0; r < repeats; ++r) atomicAdd(sum, 0.0f);
  atomicAdd(sum, 1.0f);
}

// `like` gives the device; returns the one-element sum
at::Tensor zero_adds(const at::Tensor& like, int64_t threads, int64_t repeats) {
  auto sum = at::zeros({1}, like.options().dtype(at::kFloat));
  zero_adds_kernel<<<1, threads>>>(sum.data_ptr<float>(), static_cast<int>(repeats));
  CHECK_LAUNCH();
  return sum;
}

// =============================================================================================
// block_lock: the threads of one block take a lock in turn and increment a plain counter
__device__ void acquire(int* lock) {
  while (atomicCAS(lock, 0, 1) != 0) {
  }
  __threadfence();  // the counter is read after the lock is held
}

__device__ void release(int* lock) {
  __threadfence();  // the counter is written before the lock is free
  atomicExch(lock, 0);
}

// each thread enters the critical section `rounds` times; it naps inside, so the others find
// the lock taken and must wait for it
__global__ void block_lock_kernel(int* lock, volatile int* counter, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    acquire(lock);
    int seen = *counter;
    __nanosleep(100);
    *counter = seen + 1;
    release(lock);
  }
}

// `like` gives the device; returns [lock, counter] after the kernel
at::Tensor block_lock(const at::Tensor& like, int64_t threads, int64_t rounds) {
  auto state = at::zeros({2}, like.options().dtype(at::kInt));
  block_lock_kernel<<<1, threads>>>(state.data_ptr<int>(), state.data_ptr<int>() + 1, static_cast<int>(rounds));
  CHECK_LAUNCH();
  return state;
}

// =============================================================================================
// registration
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("samples_reduce(Tensor x) -> Tensor");
  m.def("samples_transpose(Tensor x) -> Tensor[]");
  m.def("sgemm_runner(Tensor a, Tensor b) -> Tensor");
  m.def("argmax(Tensor x) -> Tensor");
  m.def("reduce_unsigned(Tensor v) -> Tensor");
  m.def("zero_adds(Tensor like, int threads, int repeats) -> Tensor");
  m.def("block_lock(Tensor like, int threads, int rounds) -> Tensor");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("samples_reduce", &samples_reduce);
  m.impl("samples_transpose", &samples_transpose);
  m.impl("sgemm_runner", &sgemm_runner);
  m.impl("argmax", &argmax);
  m.impl("reduce_unsigned", &reduce_unsigned);
  m.impl("zero_adds", &zero_adds);
  m.impl("block_lock", &block_lock);
}
