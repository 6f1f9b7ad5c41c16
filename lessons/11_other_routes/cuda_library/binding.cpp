// binding.cpp: the library's Python face, plain C++ compiled by the host compiler (g++ or clang++), not by
// nvcc. It holds no kernel: it checks the tensors, allocates the output and calls vector_add from the
// static library (libvector_add.a) that the link step adds.
#include <string>

#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include "vector_add.h"

#ifdef CUDASIM  // this repository's simulator runs the library's "GPU" code on CPU tensors
#define ON_DEVICE(t) ((t).device().is_cpu())
#define DEVICE_WORD "a CPU tensor (the simulator's device)"
#else
#define ON_DEVICE(t) ((t).device().is_cuda())
#define DEVICE_WORD "a CUDA tensor"
#endif

namespace {

std::string shape(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

// Each check says what it wanted and what came: the library trusts its pointers blindly.
void check_operand(const torch::Tensor& t, const char* name, const torch::Tensor& like) {
  TORCH_CHECK(ON_DEVICE(t), name, " must be " DEVICE_WORD ", got a tensor on ", t.device().str());
  TORCH_CHECK(t.scalar_type() == torch::kFloat, name, " must be float32, got ", c10::toString(t.scalar_type()));
  TORCH_CHECK(t.sizes() == like.sizes(), name, " must have a's shape ", shape(like), ", got ", shape(t));
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous (call .contiguous() first)");
}

}  // namespace

// out = a + b, written into a tensor the caller allocated (the library's own calling convention)
void add_gpu_out(const torch::Tensor& a, const torch::Tensor& b, torch::Tensor& out) {
  check_operand(a, "a", a);
  check_operand(b, "b", a);
  check_operand(out, "out", a);
  TORCH_CHECK(a.device() == b.device() && a.device() == out.device(), "a, b and out must be on one device");
  const cudaError_t err = vector_add(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), a.numel(),
                                     c10::cuda::getCurrentCUDAStream(a.device().index()).stream());
  TORCH_CHECK(err == cudaSuccess, "vector_add failed: ", cudaGetErrorString(err));
}

// a + b as a new tensor. torch::empty_like leaves it uninitialised, which is right only because the
// kernel writes every element; the checker fills such memory with NaN to prove that it does.
torch::Tensor add_gpu(const torch::Tensor& a, const torch::Tensor& b) {
  torch::Tensor out = torch::empty_like(a, torch::MemoryFormat::Contiguous);
  add_gpu_out(a, b, out);
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("add_gpu", &add_gpu, "a + b as a new tensor", pybind11::arg("a"), pybind11::arg("b"));
  m.def("add_gpu_out", &add_gpu_out, "a + b written into out", pybind11::arg("a"), pybind11::arg("b"),
        pybind11::arg("out"));
}
