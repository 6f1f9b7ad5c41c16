// swiglu.cu: lesson 05's exercise: SwiGLU's gate, out = silu(a) * b, forward and backward, fused.
//
//   swiglu(a, b, out)                        out = silu(a) * b,  silu(a) = a * sigmoid(a)
//   swiglu_backward(grad, a, b, da, db)      da = grad * b * silu'(a),  db = grad * silu(a)
//                                            silu'(a) = s * (1 + a * (1 - s)),  s = sigmoid(a)
//
// a, b, grad, out, da, db: one shape (any), contiguous, float32 or bfloat16, 16-byte aligned.
// The math runs in float32; bf16 values are widened on load and rounded once on store.
// Eager PyTorch runs two kernels forward (silu, then the product) and more backward; here each
// direction is one pass: 3 tensors moved forward, 5 backward.
//
// (The solution.) relu_add_bias_kernel2 in kernels/reference/05_fused.cu has the
// skeleton to follow: 16-byte vectors, UNROLL of them per thread loaded before any is used, and a
// scalar tail for the last n % V elements.

// ---------------------------------------------------------------------------------------------
// Includes.
#include "helpers.cuh"

#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>
#include <cstring>

constexpr int BLOCK = 256;  // threads per block
constexpr int UNROLL = 4;   // 16-byte vectors per thread

// ---------------------------------------------------------------------------------------------
// Device helpers (as in 05_fused.cu, except that Vec<T> here is always 16 bytes: write Vec<T> and
// load_vec(p) where the reference writes Vec<T, V> and load_vec<V>(p)). to_float, from_float<T>,
// kVec<T> (4 floats or 8 bf16 in 16 bytes), dispatch, ptr and mut come from helpers.cuh.
template <typename T>
struct alignas(16) Vec {
  T v[kVec<T>];
};
// 16 bytes move as one uint4 (one instruction); memcpy views them as T values in registers.
template <typename T> __device__ __forceinline__ Vec<T> load_vec(const T* p) {
  const uint4 bits = *reinterpret_cast<const uint4*>(p);  // p must be 16-byte aligned
  Vec<T> r;
  memcpy(&r, &bits, sizeof(r));
  return r;
}
template <typename T> __device__ __forceinline__ void store_vec(T* p, const Vec<T>& r) {
  uint4 bits;
  memcpy(&bits, &r, sizeof(r));
  *reinterpret_cast<uint4*>(p) = bits;  // one 16-byte store; p must be 16-byte aligned
}

__device__ __forceinline__ float sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }

// ---------------------------------------------------------------------------------------------
// Kernels.

// swiglu_kernel: thread t of block blk owns the vectors blk*BLOCK*UNROLL + t + u*BLOCK, u < UNROLL
// (vector v holds elements v*V .. v*V + V-1); block 0 also does the tail elements nvec*V .. n-1.
// Moves 3 x sizeof(T) bytes per element (a, b in; out out); bounded by memory.
template <typename T>
__global__ void swiglu_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, int64_t n) {
  constexpr int V = kVec<T>;
  const int64_t nvec = n / V;  // whole vectors
  const int64_t first = blockIdx.x * (int64_t)(BLOCK * UNROLL) + threadIdx.x;
  Vec<T> as[UNROLL], bs[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {  // every load first: 2 * UNROLL in flight
    const int64_t v = first + u * BLOCK;
    if (v < nvec) {
      as[u] = load_vec(a + v * V);
      bs[u] = load_vec(b + v * V);
    }
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int64_t v = first + u * BLOCK;
    if (v < nvec) {
      Vec<T> o;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float ak = to_float(as[u].v[k]);
        o.v[k] = from_float<T>(ak * sigmoid(ak) * to_float(bs[u].v[k]));
      }
      store_vec(out + v * V, o);
    }
  }
  const int64_t t = nvec * V + threadIdx.x;  // the tail: fewer than V elements, block 0 does them
  if (blockIdx.x == 0 && t < n) {
    const float at = to_float(a[t]);
    out[t] = from_float<T>(at * sigmoid(at) * to_float(b[t]));
  }
}

// swiglu_backward_kernel: the same mapping; reads grad, a, b and writes da, db: 5 x sizeof(T)
// bytes per element; bounded by memory.
template <typename T>
__global__ void swiglu_backward_kernel(const T* __restrict__ grad, const T* __restrict__ a, const T* __restrict__ b,
                                       T* __restrict__ da, T* __restrict__ db, int64_t n) {
  constexpr int V = kVec<T>;
  const int64_t nvec = n / V;
  const int64_t first = blockIdx.x * (int64_t)(BLOCK * UNROLL) + threadIdx.x;
  Vec<T> gs[UNROLL], as[UNROLL], bs[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {  // 3 * UNROLL loads in flight
    const int64_t v = first + u * BLOCK;
    if (v < nvec) {
      gs[u] = load_vec(grad + v * V);
      as[u] = load_vec(a + v * V);
      bs[u] = load_vec(b + v * V);
    }
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int64_t v = first + u * BLOCK;
    if (v < nvec) {
      Vec<T> da_v, db_v;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float g = to_float(gs[u].v[k]), ak = to_float(as[u].v[k]), bk = to_float(bs[u].v[k]);
        const float s = sigmoid(ak);
        da_v.v[k] = from_float<T>(g * bk * s * (1.0f + ak * (1.0f - s)));
        db_v.v[k] = from_float<T>(g * ak * s);
      }
      store_vec(da + v * V, da_v);
      store_vec(db + v * V, db_v);
    }
  }
  const int64_t t = nvec * V + threadIdx.x;
  if (blockIdx.x == 0 && t < n) {
    const float g = to_float(grad[t]), at = to_float(a[t]), bt = to_float(b[t]);
    const float s = sigmoid(at);
    da[t] = from_float<T>(g * bt * s * (1.0f + at * (1.0f - s)));
    db[t] = from_float<T>(g * at * s);
  }
}

// ---------------------------------------------------------------------------------------------
// Launchers.

static void check_operand(const at::Tensor& a, const at::Tensor& t, const char* name) {
  CHECK_INPUT(t);
  TORCH_CHECK(t.scalar_type() == a.scalar_type(), name, " must have a's dtype ", a.scalar_type(), ", got ", t.scalar_type());
  TORCH_CHECK(t.sizes() == a.sizes(), name, " must have a's shape ", shape_str(a.sizes()), ", got ", shape_str(t.sizes()));
  TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, name,
              " must start at a 16-byte aligned address for 16-byte loads (a view at an odd offset is not; .clone() it)");
}

static int64_t check_all(std::initializer_list<std::pair<const at::Tensor*, const char*>> ts) {
  const at::Tensor& a = *ts.begin()->first;
  CHECK_CUDA(a);
  TORCH_CHECK(a.scalar_type() == at::kFloat || a.scalar_type() == at::kBFloat16,
              "a must be float32 or bfloat16, got ", a.scalar_type());
  for (const auto& [t, name] : ts) check_operand(a, *t, name);
  return a.numel();
}

void swiglu(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  const int64_t n = check_all({{&a, "a"}, {&b, "b"}, {&out, "out"}});
  if (n == 0) return;  // a grid of 0 blocks is an error
  auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch(a, [&](auto t) {
    using T = decltype(t);
    // at least one block, so that block 0 exists to do the tail when n < V
    const int64_t blocks = std::max<int64_t>(1, ceil_div(n / kVec<T>, (int64_t)BLOCK * UNROLL));
    CHECK_GRID(blocks);
    swiglu_kernel<T><<<blocks, BLOCK, 0, stream>>>(ptr<T>(a), ptr<T>(b), mut<T>(out), n);
    CHECK_LAUNCH();
  });
}

void swiglu_backward(const at::Tensor& grad, const at::Tensor& a, const at::Tensor& b, at::Tensor& da, at::Tensor& db) {
  const int64_t n = check_all({{&a, "a"}, {&grad, "grad"}, {&b, "b"}, {&da, "da"}, {&db, "db"}});
  if (n == 0) return;
  auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch(a, [&](auto t) {
    using T = decltype(t);
    const int64_t blocks = std::max<int64_t>(1, ceil_div(n / kVec<T>, (int64_t)BLOCK * UNROLL));
    CHECK_GRID(blocks);
    swiglu_backward_kernel<T><<<blocks, BLOCK, 0, stream>>>(ptr<T>(grad), ptr<T>(a), ptr<T>(b), mut<T>(da), mut<T>(db), n);
    CHECK_LAUNCH();
  });
}

// ---------------------------------------------------------------------------------------------
// Registration.
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("swiglu(Tensor a, Tensor b, Tensor(a!) out) -> ()");
  m.def("swiglu_backward(Tensor grad, Tensor a, Tensor b, Tensor(a!) da, Tensor(b!) db) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("swiglu", &swiglu);
  m.impl("swiglu_backward", &swiglu_backward);
}
