// sticky_error.cu: a sticky error. The loss of each row, out[r] = -logp[r][labels[r]], with the
// kernel asserting that each label is a class. PyTorch marks padded positions with the label -100
// (cross_entropy's ignore_index), which this kernel does not expect: the assert fails. On a GPU
// that is "device-side assert triggered", and like an illegal address it is sticky: the CUDA
// context is broken, every later CUDA call in the process fails with the same message, and only
// a new process (in Jupyter: restart the kernel) gets a working GPU back. On the simulator a
// failed assert ends the process, as a failed assert in C++ does.
//
//   broken   asserts 0 <= label < classes
//   fixed    treats -100 as "no loss here" (0) and asserts the rest
#include "helpers.cuh"

#include <cassert>

constexpr int64_t IGNORE_INDEX = -100;  // torch.nn.functional.cross_entropy's default

// nll_kernel: thread r owns row r: reads one label and one log-probability, writes one loss.
template <bool kFixed>
__global__ void nll_kernel(const float* __restrict__ logp, const int64_t* __restrict__ labels,
                           float* __restrict__ out, int64_t rows, int64_t classes) {
  const int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const int64_t label = labels[r];
  if (kFixed && label == IGNORE_INDEX) {  // FIX: a padded position has no loss
    out[r] = 0.0f;
    return;
  }
  assert(label >= 0 && label < classes);  // the bug: -100 is a label the kernel must expect
  out[r] = -logp[r * classes + label];
}

template <bool kFixed>
static void launch(const at::Tensor& logp, const at::Tensor& labels, at::Tensor& out) {
  CHECK_INPUT(logp);
  CHECK_INPUT(labels);
  CHECK_INPUT(out);
  CHECK_DTYPE(logp, at::kFloat);
  CHECK_DTYPE(labels, at::kLong);
  CHECK_DIM(logp, 2);
  const int64_t rows = logp.size(0);
  TORCH_CHECK(labels.numel() == rows && out.numel() == rows, "labels and out must hold logp.size(0) = ",
              std::to_string(rows), " values, got ", std::to_string(labels.numel()), " and ",
              std::to_string(out.numel()));
  if (rows == 0) return;
  nll_kernel<kFixed><<<ceil_div(rows, 256), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
      logp.data_ptr<float>(), labels.data_ptr<int64_t>(), out.data_ptr<float>(), rows, logp.size(1));
  CHECK_LAUNCH();
}

void broken(const at::Tensor& logp, const at::Tensor& labels, at::Tensor& out) { launch<false>(logp, labels, out); }
void fixed(const at::Tensor& logp, const at::Tensor& labels, at::Tensor& out) { launch<true>(logp, labels, out); }

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("broken(Tensor logp, Tensor labels, Tensor(a!) out) -> ()");
  m.def("fixed(Tensor logp, Tensor labels, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("broken", &broken);
  m.impl("fixed", &fixed);
}
