// Test kernels for the toolkit: a correct vector add and the classic bugs the checker must catch.
//   add        correct
//   add_le     the `i <= n` off-by-one: writes one element past the end
//   add_notail a grid of n / 256 blocks: the ragged tail is never written
//   add_nan    returns NaN for one element
//   add_mutate writes into its input
//   add_skip   skips every 1000th element
#include "helpers.cuh"

#include <ATen/ops/empty_like.h>

__global__ void add_kernel(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out,
                           int64_t n, int bug) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  bool in_range = bug == 1 ? i <= n : i < n;
  if (!in_range) return;
  if (bug == 5 && i % 1000 == 999) return;
  float v = x[i] + y[i];
  if (bug == 3 && i == n / 2) v = __int_as_float(0x7fc00000);
  if (bug == 4) const_cast<float*>(x)[i] = 0.0f;
  out[i] = v;
}

static void launch(const at::Tensor& x, const at::Tensor& y, at::Tensor& out, int bug) {
  CHECK_INPUT(x);
  CHECK_INPUT(y);
  CHECK_INPUT(out);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_SAME_DTYPE(x, y);
  CHECK_SAME_DTYPE(x, out);
  CHECK_SAME_SHAPE(x, y);
  CHECK_SAME_SHAPE(x, out);
  const int64_t n = x.numel();
  if (n == 0) return;
  const int threads = 256;
  const int64_t blocks = bug == 2 ? n / threads : ceil_div(n, threads);
  add_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n, bug);
  CHECK_LAUNCH();
}

void add(const at::Tensor& x, const at::Tensor& y, at::Tensor& out) { launch(x, y, out, 0); }
void add_le(const at::Tensor& x, const at::Tensor& y, at::Tensor& out) { launch(x, y, out, 1); }
void add_notail(const at::Tensor& x, const at::Tensor& y, at::Tensor& out) { launch(x, y, out, 2); }
void add_nan(const at::Tensor& x, const at::Tensor& y, at::Tensor& out) { launch(x, y, out, 3); }
void add_mutate(const at::Tensor& x, const at::Tensor& y, at::Tensor& out) { launch(x, y, out, 4); }
void add_skip(const at::Tensor& x, const at::Tensor& y, at::Tensor& out) { launch(x, y, out, 5); }

// A functional op: it allocates its result, which the checker poisons through PyTorch's fill of
// uninitialized memory.
at::Tensor add_new(const at::Tensor& x, const at::Tensor& y) {
  auto out = at::empty_like(x);
  launch(x, y, out, 0);
  return out;
}
at::Tensor add_new_notail(const at::Tensor& x, const at::Tensor& y) {
  auto out = at::empty_like(x);
  launch(x, y, out, 2);
  return out;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("add(Tensor x, Tensor y, Tensor(a!) out) -> ()");
  m.def("add_le(Tensor x, Tensor y, Tensor(a!) out) -> ()");
  m.def("add_notail(Tensor x, Tensor y, Tensor(a!) out) -> ()");
  m.def("add_nan(Tensor x, Tensor y, Tensor(a!) out) -> ()");
  m.def("add_mutate(Tensor x, Tensor y, Tensor(a!) out) -> ()");
  m.def("add_skip(Tensor x, Tensor y, Tensor(a!) out) -> ()");
  m.def("add_new(Tensor x, Tensor y) -> Tensor");
  m.def("add_new_notail(Tensor x, Tensor y) -> Tensor");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("add", &add);
  m.impl("add_le", &add_le);
  m.impl("add_notail", &add_notail);
  m.impl("add_nan", &add_nan);
  m.impl("add_mutate", &add_mutate);
  m.impl("add_skip", &add_skip);
  m.impl("add_new", &add_new);
  m.impl("add_new_notail", &add_new_notail);
}
