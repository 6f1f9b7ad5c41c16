// 04_memory_bound.cu: copy and scale-add (out = a*x + y), variant by variant: a kernel that does
// almost no arithmetic runs at the speed of memory, and how close to that speed each step gets.
// Load with `ext = load("04")`; every op is an out-variant: ext.scale_add5(a, x, y, out).
//
//   copy1        one float per thread: the plain copy kernel (set against torch's out.copy_(x))
//   scale_add1   one element per thread, ceil(n / block) blocks; `block` is a parameter (the sweep)
//   scale_add2   grid-stride loop: a fixed grid (8 blocks per SM) walks any n
//   scale_add3   strided access: the same op, but consecutive threads own elements `stride` apart
//   scale_add4   float4 loads and stores (16 bytes per instruction) and the n % 4 tail; pointers
//                must be 16-byte aligned (checked)
//   scale_add5   float4, each thread with 4 float4 of x and 4 of y in flight, one pass of many
//                blocks (for when few threads fit on an SM; scale_add4 is as fast on an H100)
//   copy5        copy with scale_add5's recipe
//
// Tried and left out, measured on an H100 at 2^26 floats: a grid-stride version of scale_add5
// (4 to 16 blocks per SM, each thread looping) reached 0.91-0.93 of copy where one pass of many
// blocks reached 0.98-0.99; streaming cache hints (__ldcs loads, __stcs stores) cost about 4%.
//
// Every op takes contiguous float32 tensors of one shape (any shape, any size, empty too).
// Bytes moved per element: copy 8 (read 4, write 4); scale-add 12 (read x and y, write out).

// ---------------------------------------------------------------------------------------------
// Includes.
#include "helpers.cuh"

#include <algorithm>
#include <cstdint>
#include <string>

constexpr int BLOCK = 256;           // threads per block, unless a launcher says otherwise
constexpr int GRID_STRIDE_PER_SM = 8;  // scale_add2: 8 blocks of 256 = 2048 threads, a full H100 SM
constexpr int UNROLL = 4;            // scale_add5, copy5: float4 per thread per array

// ---------------------------------------------------------------------------------------------
// Kernels.

// copy_kernel1: thread i owns out[i]. Moves 8 B per element, one 4-byte load and store per thread.
// Consecutive threads touch consecutive floats, so a warp's 32 loads merge into 128-byte
// transactions (coalesced): bounded by memory bandwidth, and by how many loads are in flight.
__global__ void copy_kernel1(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;  // 64-bit: n may pass 2^31
  if (i < n) out[i] = x[i];  // the last block sticks out past n: its extra threads do nothing
}

// scale_add_kernel1: thread i owns out[i] = a * x[i] + y[i]. Moves 12 B per element for 2 FLOPs
// (1/6 FLOP per byte): bounded by memory bandwidth, like the copy.
__global__ void scale_add_kernel1(float a, const float* __restrict__ x, const float* __restrict__ y,
                                  float* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}

// scale_add_kernel2: a fixed grid of T threads; thread t owns elements t, t + T, t + 2T, ...
// (grid-stride loop). Each step the whole grid covers T consecutive elements, so accesses stay
// coalesced. 12 B per element; the grid no longer depends on n, and each thread's setup is
// paid once for many elements.
__global__ void scale_add_kernel2(float a, const float* __restrict__ x, const float* __restrict__ y,
                                  float* __restrict__ out, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;  // threads in the whole grid
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = a * x[i] + y[i];
  }
}

// scale_add_kernel3: the elements seen as a [rows, stride] row-major matrix; the blocks of grid
// column blockIdx.y = c walk column c, and thread r owns element r * stride + c. Neighbouring
// threads of a warp touch addresses 4 * stride bytes apart: from stride 8 on every thread needs its
// own 32-byte sector, of which it uses 4 bytes. Same result, same 12 B needed per element, up to
// 8x the bytes actually moved: bounded by wasted bandwidth.
__global__ void scale_add_kernel3(float a, const float* __restrict__ x, const float* __restrict__ y,
                                  float* __restrict__ out, int64_t n, int64_t stride) {
  const int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t e = r * stride + blockIdx.y;  // the transposed walk: one column at a time
  if (e < n) out[e] = a * x[e] + y[e];       // the last row may be short
}

// a * x + y on the four lanes of a float4.
__device__ __forceinline__ float4 scale_add_f4(float a, float4 x, float4 y) {
  return make_float4(a * x.x + y.x, a * x.y + y.y, a * x.z + y.z, a * x.w + y.w);
}

// scale_add_kernel4: thread i owns float4 i, elements 4i .. 4i+3: one 16-byte load of x, one of y,
// one 16-byte store (a quarter of the instructions of scale_add1). The last n % 4 elements (at
// most 3) do not fill a float4: threads 0..2 of the grid each take one with plain float loads.
// 12 B per element. The float4 accesses need 16-byte aligned pointers (the launcher checks).
__global__ void scale_add_kernel4(float a, const float* __restrict__ x, const float* __restrict__ y,
                                  float* __restrict__ out, int64_t n) {
  const int64_t n4 = n / 4;  // whole float4s
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n4) {
    const float4 xv = reinterpret_cast<const float4*>(x)[i];
    const float4 yv = reinterpret_cast<const float4*>(y)[i];
    reinterpret_cast<float4*>(out)[i] = scale_add_f4(a, xv, yv);
  }
  const int64_t tail = 4 * n4 + i;  // the ragged tail, after the last whole float4
  if (tail < n) out[tail] = a * x[tail] + y[tail];
}

// scale_add_kernel5: block b owns a tile of UNROLL * BLOCK float4s; thread t loads float4s
// t, t + BLOCK, t + 2 BLOCK, t + 3 BLOCK of its tile (each load instruction of a warp still
// covers 512 consecutive bytes), all 8 loads issued before the first store, so 128 bytes per
// thread are in flight while it waits for memory: enough even when few threads fit on an SM.
// 12 B per element, one pass of n / 4096 blocks: bounded by bandwidth, and close to it.
__global__ void __launch_bounds__(BLOCK) scale_add_kernel5(float a, const float* __restrict__ x,
                                                           const float* __restrict__ y,
                                                           float* __restrict__ out, int64_t n) {
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const float4* y4 = reinterpret_cast<const float4*>(y);
  float4* out4 = reinterpret_cast<float4*>(out);
  const int64_t n4 = n / 4;
  const int64_t first = blockIdx.x * (int64_t)(UNROLL * BLOCK) + threadIdx.x;
  float4 xv[UNROLL], yv[UNROLL];
#pragma unroll
  for (int k = 0; k < UNROLL; ++k) {  // all loads first: they are independent, so they overlap
    const int64_t i = first + k * BLOCK;
    if (i < n4) {
      xv[k] = x4[i];
      yv[k] = y4[i];
    }
  }
#pragma unroll
  for (int k = 0; k < UNROLL; ++k) {
    const int64_t i = first + k * BLOCK;
    if (i < n4) out4[i] = scale_add_f4(a, xv[k], yv[k]);
  }
  if (blockIdx.x == 0 && threadIdx.x < n - 4 * n4) {  // the ragged tail: at most 3 elements
    const int64_t j = 4 * n4 + threadIdx.x;
    out[j] = a * x[j] + y[j];
  }
}

// copy_kernel5: copy_kernel1's job with scale_add_kernel5's recipe: 4 float4 loads in flight per
// thread, one pass of many blocks, the tail by the first threads of block 0. 8 B per element.
__global__ void __launch_bounds__(BLOCK) copy_kernel5(const float* __restrict__ x, float* __restrict__ out,
                                                      int64_t n) {
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* out4 = reinterpret_cast<float4*>(out);
  const int64_t n4 = n / 4;
  const int64_t first = blockIdx.x * (int64_t)(UNROLL * BLOCK) + threadIdx.x;
  float4 v[UNROLL];
#pragma unroll
  for (int k = 0; k < UNROLL; ++k) {
    const int64_t i = first + k * BLOCK;
    if (i < n4) v[k] = x4[i];
  }
#pragma unroll
  for (int k = 0; k < UNROLL; ++k) {
    const int64_t i = first + k * BLOCK;
    if (i < n4) out4[i] = v[k];
  }
  if (blockIdx.x == 0 && threadIdx.x < n - 4 * n4) out[4 * n4 + threadIdx.x] = x[4 * n4 + threadIdx.x];
}

// ---------------------------------------------------------------------------------------------
// Launchers.

static void check_copy_args(const at::Tensor& x, const at::Tensor& out) {
  CHECK_INPUT(x);
  CHECK_INPUT(out);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_DTYPE(out, at::kFloat);
  CHECK_SAME_SHAPE(x, out);
}

static void check_scale_add_args(const at::Tensor& x, const at::Tensor& y, const at::Tensor& out) {
  CHECK_INPUT(x);
  CHECK_INPUT(y);
  CHECK_INPUT(out);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_DTYPE(y, at::kFloat);
  CHECK_DTYPE(out, at::kFloat);
  CHECK_SAME_SHAPE(x, y);
  CHECK_SAME_SHAPE(x, out);
}

// float4 loads and stores need addresses that are multiples of 16. A fresh tensor is (PyTorch
// allocates at 256-byte boundaries, at least), but a view such as x[1:] starts 4 bytes later.
// The number goes into the message as text (std::to_string), as everywhere in kernels/ (see helpers.cuh).
#define CHECK_ALIGNED16(t)                                                                     \
  TORCH_CHECK(reinterpret_cast<uintptr_t>((t).data_ptr()) % 16 == 0,                          \
              #t " must be 16-byte aligned for float4 loads and stores, got an address 16k + ", \
              std::to_string(reinterpret_cast<uintptr_t>((t).data_ptr()) % 16),               \
              " (a view such as x[1:] is not aligned: pass x[1:].clone(), or use scale_add1)")

// Streaming multiprocessors on the current device: a cheap attribute query (unlike
// cudaGetDeviceProperties, which fills a large struct).
static int sm_count() {
  int dev = 0, sms = 0;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

void copy1(const at::Tensor& x, at::Tensor& out) {
  check_copy_args(x, out);
  const int64_t n = x.numel();
  if (n == 0) return;  // a grid of 0 blocks is an invalid launch
  const int64_t blocks = ceil_div(n, BLOCK);
  CHECK_GRID(blocks);
  copy_kernel1<<<blocks, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(),
                                                                          out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

void scale_add1(double a, const at::Tensor& x, const at::Tensor& y, at::Tensor& out, int64_t block) {
  check_scale_add_args(x, y, out);
  TORCH_CHECK(block >= 1 && block <= 1024, "block must be 1..1024 threads (the most a block may hold), got ",
              std::to_string(block));
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t blocks = ceil_div(n, block);
  CHECK_GRID(blocks);
  // The schema's `float` is a C++ double; the kernel computes in float, as PyTorch does for fp32.
  scale_add_kernel1<<<blocks, block, 0, c10::cuda::getCurrentCUDAStream()>>>(
      static_cast<float>(a), x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

void scale_add2(double a, const at::Tensor& x, const at::Tensor& y, at::Tensor& out) {
  check_scale_add_args(x, y, out);
  const int64_t n = x.numel();
  if (n == 0) return;
  // Enough threads to fill every SM, no more than there are elements; each loops over the rest.
  const int64_t blocks = std::min<int64_t>(ceil_div(n, BLOCK), (int64_t)sm_count() * GRID_STRIDE_PER_SM);
  scale_add_kernel2<<<blocks, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(
      static_cast<float>(a), x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

void scale_add3(double a, const at::Tensor& x, const at::Tensor& y, at::Tensor& out, int64_t stride) {
  check_scale_add_args(x, y, out);
  // gridDim.y holds the column, and a grid's y dimension is at most 65535 blocks.
  TORCH_CHECK(stride >= 1 && stride <= 65535, "stride must be 1..65535 elements, got ", std::to_string(stride));
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t rows = ceil_div(n, stride);
  const int64_t blocks = ceil_div(rows, BLOCK);
  CHECK_GRID(blocks);
  const dim3 grid((unsigned)blocks, (unsigned)stride);
  scale_add_kernel3<<<grid, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(
      static_cast<float>(a), x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n, stride);
  CHECK_LAUNCH();
}

void scale_add4(double a, const at::Tensor& x, const at::Tensor& y, at::Tensor& out) {
  check_scale_add_args(x, y, out);
  CHECK_ALIGNED16(x);
  CHECK_ALIGNED16(y);
  CHECK_ALIGNED16(out);
  const int64_t n = x.numel();
  if (n == 0) return;
  // One thread per float4, and at least one block: for n < 4 there is no whole float4, only the tail.
  const int64_t blocks = std::max<int64_t>(1, ceil_div(n / 4, BLOCK));
  CHECK_GRID(blocks);
  scale_add_kernel4<<<blocks, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(
      static_cast<float>(a), x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

void scale_add5(double a, const at::Tensor& x, const at::Tensor& y, at::Tensor& out) {
  check_scale_add_args(x, y, out);
  CHECK_ALIGNED16(x);
  CHECK_ALIGNED16(y);
  CHECK_ALIGNED16(out);
  const int64_t n = x.numel();
  if (n == 0) return;
  // One pass: a tile of UNROLL * BLOCK float4s per block (4096 floats), at least one block.
  const int64_t blocks = std::max<int64_t>(1, ceil_div(n / 4, UNROLL * BLOCK));
  CHECK_GRID(blocks);
  scale_add_kernel5<<<blocks, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(
      static_cast<float>(a), x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

void copy5(const at::Tensor& x, at::Tensor& out) {
  check_copy_args(x, out);
  CHECK_ALIGNED16(x);
  CHECK_ALIGNED16(out);
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t blocks = std::max<int64_t>(1, ceil_div(n / 4, UNROLL * BLOCK));
  CHECK_GRID(blocks);
  copy_kernel5<<<blocks, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(),
                                                                          out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// Registration: the schemas PyTorch sees. `Tensor(a!) out` says the op writes into out.
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("copy1(Tensor x, Tensor(a!) out) -> ()");
  m.def("scale_add1(float a, Tensor x, Tensor y, Tensor(a!) out, int block=256) -> ()");
  m.def("scale_add2(float a, Tensor x, Tensor y, Tensor(a!) out) -> ()");
  m.def("scale_add3(float a, Tensor x, Tensor y, Tensor(a!) out, int stride) -> ()");
  m.def("scale_add4(float a, Tensor x, Tensor y, Tensor(a!) out) -> ()");
  m.def("scale_add5(float a, Tensor x, Tensor y, Tensor(a!) out) -> ()");
  m.def("copy5(Tensor x, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("copy1", &copy1);
  m.impl("scale_add1", &scale_add1);
  m.impl("scale_add2", &scale_add2);
  m.impl("scale_add3", &scale_add3);
  m.impl("scale_add4", &scale_add4);
  m.impl("scale_add5", &scale_add5);
  m.impl("copy5", &copy5);
}
