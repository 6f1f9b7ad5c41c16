// late_error.cu: an error reported later than its cause. A row gather, out[r] = table[ids[r]]
// (an embedding lookup), fed an id that is far out of range. On a GPU the launch returns at once
// and the kernel fails while Python has moved on: the error surfaces at the next call that waits
// for the GPU (a .item(), a print, a copy to the CPU), with a traceback that points there.
// CUDA_LAUNCH_BLOCKING=1 makes every launch wait, so the error names the launch itself.
//
//   broken   reads table[ids[r]] for whatever id it is given
//   fixed    the launcher checks every id against the table's rows first, and says which is wrong
#include "helpers.cuh"

// gather_kernel: thread (r, c) copies table[ids[r]][c] to out[r][c]; 8 B per element.
__global__ void gather_kernel(const float* __restrict__ table, const int64_t* __restrict__ ids,
                              float* __restrict__ out, int64_t rows, int64_t cols) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  out[i] = table[ids[r] * cols + c];  // the bug is upstream: nobody checked that ids[r] < rows
}

static void launch(const at::Tensor& table, const at::Tensor& ids, at::Tensor& out) {
  CHECK_INPUT(table);
  CHECK_INPUT(ids);
  CHECK_INPUT(out);
  CHECK_DTYPE(table, at::kFloat);
  CHECK_DTYPE(ids, at::kLong);
  CHECK_DIM(table, 2);
  const int64_t rows = ids.numel(), cols = table.size(1);
  TORCH_CHECK(out.numel() == rows * cols, "out must hold ids.numel() * table.size(1) = ",
              std::to_string(rows * cols), " floats, got ", std::to_string(out.numel()));
  if (rows * cols == 0) return;
  gather_kernel<<<ceil_div(rows * cols, 256), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
      table.data_ptr<float>(), ids.data_ptr<int64_t>(), out.data_ptr<float>(), rows, cols);
  CHECK_LAUNCH();  // catches a bad configuration only: the kernel has not run yet
}

void broken(const at::Tensor& table, const at::Tensor& ids, at::Tensor& out) { launch(table, ids, out); }

// FIX: check the ids before the launch. min() and max() wait for the GPU (two small reductions and
// a copy): fine here; in a training loop check the data once, where it is loaded.
void fixed(const at::Tensor& table, const at::Tensor& ids, at::Tensor& out) {
  if (ids.numel() > 0) {
    const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
    TORCH_CHECK(lo >= 0 && hi < table.size(0), "ids must lie in [0, ", std::to_string(table.size(0)),
                ") (the table's rows), got ids from ", std::to_string(lo), " to ", std::to_string(hi));
  }
  launch(table, ids, out);
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("broken(Tensor table, Tensor ids, Tensor(a!) out) -> ()");
  m.def("fixed(Tensor table, Tensor ids, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("broken", &broken);
  m.impl("fixed", &fixed);
}
