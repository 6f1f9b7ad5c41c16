// Does a TORCH_CHECK message take numbers streamed straight in? Each op below fails on purpose, its
// message built from one kind of value; tests/test_lesson04.py checks the text of each error.
//   fail_int64(x)   an int64_t: x.numel()
//   fail_int(x)     an int: x.dim()
//   fail_sizes(x)   x.sizes() (an IntArrayRef)
//   fail_dtype(x)   x.scalar_type()
// The kernels/ files format numbers with std::to_string and shape_str; this file is the evidence
// for (or against) streaming them directly, on whichever backend runs it.
#include "helpers.cuh"

#include <cstdint>

void fail_int64(const at::Tensor& x) {
  const int64_t n = x.numel();
  TORCH_CHECK(n < 0, "numel is ", n, ", streamed as an int64_t");
}

void fail_int(const at::Tensor& x) {
  const int d = static_cast<int>(x.dim());
  TORCH_CHECK(d < 0, "dim is ", d, ", streamed as an int");
}

void fail_sizes(const at::Tensor& x) { TORCH_CHECK(x.dim() < 0, "sizes are ", x.sizes(), ", streamed as sizes()"); }

void fail_dtype(const at::Tensor& x) { TORCH_CHECK(x.dim() < 0, "dtype is ", x.scalar_type()); }

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("fail_int64(Tensor x) -> ()");
  m.def("fail_int(Tensor x) -> ()");
  m.def("fail_sizes(Tensor x) -> ()");
  m.def("fail_dtype(Tensor x) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("fail_int64", &fail_int64);
  m.impl("fail_int", &fail_int);
  m.impl("fail_sizes", &fail_sizes);
  m.impl("fail_dtype", &fail_dtype);
}
