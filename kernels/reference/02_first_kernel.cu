// 02_first_kernel.cu: vector add and elementwise square, the first kernels, step by step.
// Load with `ext = load("02")`; every op is an out-variant: ext.add2(x, y, out).
//
//   add1      the first kernel: one thread per element, `if (i < n)` guards the ragged last block;
//             a 32-bit index, so the launcher refuses tensors of 2^31 elements or more
//   add2      a 64-bit index (any size), launched on PyTorch's current stream, launch error checked
//   add3      add2 with the threads per block as an argument: try 32 ... 1024, and see 2048 fail
//   add4      templated on the element type and dispatched on the dtype: float, double, half, bfloat16
//   square5   out = x * x with the same template and dispatch: the pattern of every elementwise op
//
// add1 to add3 take float32; add4 and square5 take float32, float64, float16 or bfloat16 (all
// tensors of one dtype). Every tensor must be on the device and contiguous, of the same shape.

// ---------------------------------------------------------------------------------------------
// Includes.
#include "helpers.cuh"

#include <ATen/Dispatch.h>
#include <climits>

constexpr int THREADS = 256;  // threads per block: 8 warps; any multiple of 32 up to 1024 works

// ---------------------------------------------------------------------------------------------
// Kernels.

// add_kernel1: thread (blockIdx.x, threadIdx.x) owns element i = blockIdx.x * blockDim.x + threadIdx.x.
// Reads 8 B, writes 4 B per element: bounded by memory bandwidth. The index is an int: the
// unsigned 32-bit product blockIdx.x * blockDim.x, stored in an int, turns negative past 2^31 - 1.
__global__ void add_kernel1(const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {  // the grid is rounded up to whole blocks: threads past the end do nothing
    out[i] = x[i] + y[i];
  }
}

// add_kernel2: the same mapping with a 64-bit index, and __restrict__ (x, y and out do not
// overlap, so the compiler may load x[i] and y[i] through the read-only cache). Same 12 B per element.
__global__ void add_kernel2(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out,
                            int64_t n) {
  // cast before multiplying: blockIdx.x * blockDim.x alone is 32-bit unsigned arithmetic
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + y[i];
}

// add_kernel4: add_kernel2 for any element type. For at::Half and at::BFloat16 the + converts
// both values to float, adds, and rounds the sum back, as PyTorch's own add does.
// 3 * sizeof(scalar_t) bytes per element.
template <typename scalar_t>
__global__ void add_kernel4(const scalar_t* __restrict__ x, const scalar_t* __restrict__ y,
                            scalar_t* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + y[i];
}

// square_kernel5: thread i owns out[i] = x[i] * x[i]; reads x[i] once (a register holds it).
// 2 * sizeof(scalar_t) bytes per element: bounded by memory bandwidth.
template <typename scalar_t>
__global__ void square_kernel5(const scalar_t* __restrict__ x, scalar_t* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) {
    const scalar_t v = x[i];
    out[i] = v * v;
  }
}

// ---------------------------------------------------------------------------------------------
// Launchers: check the inputs, pick the grid, launch on the current stream, check the launch.

// The preconditions of a binary elementwise op; each error says what was expected and what came.
static void check_binary(const at::Tensor& x, const at::Tensor& y, const at::Tensor& out) {
  CHECK_INPUT(x);
  CHECK_INPUT(y);
  CHECK_INPUT(out);
  CHECK_SAME_DTYPE(x, y);
  CHECK_SAME_DTYPE(x, out);
  CHECK_SAME_SHAPE(x, y);
  CHECK_SAME_SHAPE(x, out);
}

void add1(const at::Tensor& x, const at::Tensor& y, at::Tensor& out) {
  CHECK_DTYPE(x, at::kFloat);
  const int64_t n = x.numel();
  TORCH_CHECK(n <= INT_MAX, "add1 indexes with 32-bit ints: at most ", std::to_string(INT_MAX), " elements, got ", std::to_string(n),
              " (add2 takes any size)");
  check_binary(x, y, out);
  if (n == 0) return;  // a grid of 0 blocks is an invalid launch
  const int blocks = ceil_div((int)n, THREADS);
  // <<<blocks, threads>>> with no stream: the default stream. Fine here, wrong once the caller
  // uses torch.cuda.stream(...): add2 shows the fix.
  add_kernel1<<<blocks, THREADS>>>(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), (int)n);
  CHECK_LAUNCH();
}

void add2(const at::Tensor& x, const at::Tensor& y, at::Tensor& out) {
  CHECK_DTYPE(x, at::kFloat);
  check_binary(x, y, out);
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t blocks = ceil_div(n, THREADS);
  CHECK_GRID(blocks);
  // PyTorch's current stream: the kernel runs after the work PyTorch queued before it and before
  // the work queued after it. No cudaDeviceSynchronize(): the CPU goes on queueing work.
  add_kernel2<<<blocks, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();  // a bad configuration is reported here, not by the launch itself
}

void add3(const at::Tensor& x, const at::Tensor& y, at::Tensor& out, int64_t threads) {
  CHECK_DTYPE(x, at::kFloat);
  check_binary(x, y, out);
  TORCH_CHECK(threads > 0, "threads must be positive, got ", std::to_string(threads));
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t blocks = ceil_div(n, threads);
  CHECK_GRID(blocks);
  // No check of threads <= 1024 on purpose: the lesson lets CUDA reject the launch, and
  // CHECK_LAUNCH turns that into a Python RuntimeError.
  add_kernel2<<<blocks, (unsigned)threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

void add4(const at::Tensor& x, const at::Tensor& y, at::Tensor& out) {
  check_binary(x, y, out);
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t blocks = ceil_div(n, THREADS);
  CHECK_GRID(blocks);
  // One kernel instance per dtype: the macro switches on x's dtype and names the C++ type scalar_t.
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "add4", [&] {
    add_kernel4<scalar_t><<<blocks, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n);
  });
  CHECK_LAUNCH();
}

void square5(const at::Tensor& x, at::Tensor& out) {
  CHECK_INPUT(x);
  CHECK_INPUT(out);
  CHECK_SAME_DTYPE(x, out);
  CHECK_SAME_SHAPE(x, out);
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t blocks = ceil_div(n, THREADS);
  CHECK_GRID(blocks);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "square5", [&] {
    square_kernel5<scalar_t><<<blocks, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n);
  });
  CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// Registration.

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("add1(Tensor x, Tensor y, Tensor(a!) out) -> ()");
  m.def("add2(Tensor x, Tensor y, Tensor(a!) out) -> ()");
  m.def("add3(Tensor x, Tensor y, Tensor(a!) out, int threads) -> ()");
  m.def("add4(Tensor x, Tensor y, Tensor(a!) out) -> ()");
  m.def("square5(Tensor x, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("add1", &add1);
  m.impl("add2", &add2);
  m.impl("add3", &add3);
  m.impl("add4", &add4);
  m.impl("square5", &square5);
}
