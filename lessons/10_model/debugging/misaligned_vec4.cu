// misaligned_vec4.cu: a misaligned vector load. out = 2 * x with float4 loads and stores (16 bytes
// per instruction), which need 16-byte aligned addresses. A fresh tensor is aligned; a view that
// starts one float in (x[1:]) is not. On a GPU: "misaligned address", a sticky error.
//
//   broken   casts the pointers to float4 whatever their alignment
//   fixed    checks the alignment (aligned16) and takes a one-float-per-thread kernel when it fails
#include "helpers.cuh"

// scale_kernel_vec4: thread v owns floats 4v .. 4v+3 (one float4 in, one out); thread nvec + t
// owns tail element 4 * nvec + t. 8 B per element in 16-byte accesses.
__global__ void scale_kernel_vec4(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  const int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, nvec = n / 4;
  if (v < nvec) {
    float4 a = reinterpret_cast<const float4*>(x)[v];  // needs x 16-byte aligned
    a.x *= 2.0f; a.y *= 2.0f; a.z *= 2.0f; a.w *= 2.0f;
    reinterpret_cast<float4*>(out)[v] = a;
  } else if (v - nvec < n % 4) {
    out[4 * nvec + (v - nvec)] = 2.0f * x[4 * nvec + (v - nvec)];
  }
}

// scale_kernel: thread i owns out[i]; 8 B per element in 4-byte accesses, any alignment.
__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * x[i];
}

static void check_args(const at::Tensor& x, const at::Tensor& out) {
  CHECK_INPUT(x);
  CHECK_INPUT(out);
  CHECK_SAME_SHAPE(x, out);
  CHECK_DTYPE(x, at::kFloat);
}

void broken(const at::Tensor& x, at::Tensor& out) {
  check_args(x, out);
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t threads = n / 4 + n % 4;
  scale_kernel_vec4<<<ceil_div(threads, 256), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

// FIX: float4 only when both pointers are 16-byte aligned.
void fixed(const at::Tensor& x, at::Tensor& out) {
  check_args(x, out);
  if (aligned16(x) && aligned16(out)) return broken(x, out);
  const int64_t n = x.numel();
  if (n == 0) return;
  scale_kernel<<<ceil_div(n, 256), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("broken(Tensor x, Tensor(a!) out) -> ()");
  m.def("fixed(Tensor x, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("broken", &broken);
  m.impl("fixed", &fixed);
}
