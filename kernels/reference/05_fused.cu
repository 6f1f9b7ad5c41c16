// 05_fused.cu: fused elementwise kernels: several PyTorch ops in one pass over memory.
// Load with `ext = load("05")`; the numbered ops are out-variants: ext.relu_add_bias2(x, y, bias, out).
//
//   relu_add_bias1           out = relu(x) + y + bias, one thread per element, scalar loads
//   relu_add_bias2           the same with 16-byte vectors (4 floats or 8 bf16), 4 vectors per thread
//                            in flight, a scalar tail for the last n % V elements          (the fast one)
//   bias_gelu3               out = gelu(x + bias), tanh approximation or erf, relu_add_bias2's skeleton
//   relu_add_bias_backward4  dx = grad * (x > 0) and dbias = grad summed over rows, in one pass:
//                            each thread owns fixed columns and walks down the rows
//   bias_gelu_backward5      dx = grad * gelu'(x + bias) and dbias = dx summed over rows, in one pass
//   relu_add_bias, relu_add_bias_backward, bias_gelu, bias_gelu_backward
//                            functional ops (they allocate and return their outputs) over 2, 4, 3
//                            and 5, for register_autograd and torch.compile
//
// Shapes: x, y, grad, out and dx have any shape with C = x.size(-1) columns (a [rows, C] matrix
// in memory); bias and dbias have shape [C]: one bias per column (per feature), as nn.Linear's.
// Dtypes: float32 or bfloat16, the same for every tensor of a call; the math runs in float32
// inside the kernel (bf16 values are widened on load and rounded once on store).
// (relu_add_bias's backward for y is grad itself: no kernel needed.)

// ---------------------------------------------------------------------------------------------
// Includes.
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>

constexpr int BLOCK = 256;  // threads per block in the 1-D kernels
constexpr int UNROLL = 4;   // 16-byte vectors per thread: 4 independent loads per input in flight
constexpr int TX = 32;      // the backward's 2-D blocks: 32 threads across columns (one warp) ...
constexpr int TY = 8;       // ... times 8 rows of threads
constexpr int ROWS_IN_FLIGHT = 2;  // rows a backward thread loads before computing: 4 loads in flight

// ---------------------------------------------------------------------------------------------
// Device helpers: float conversion, 16-byte vectors, the activations.

// to_float, from_float<T>, kVec<T> (values of T in 16 bytes), dispatch, ptr, mut: helpers.cuh.

// N values of T moved together. alignas makes a 16-byte Vec 16-byte aligned, as a 16-byte access needs.
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// A full 16-byte Vec goes through memory as a uint4 (a 16-byte type the CUDA headers define, so
// the cast is one 16-byte instruction: LDG.E.128 / STG.E.128 in the SASS), and memcpy moves those
// bytes into the T array in registers: the well-defined way to view bytes as another type
// (reading a union member other than the one last written is not). Smaller Vecs go value by value.
template <int N, typename T>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  Vec<T, N> r;
  if constexpr (sizeof(r) == 16) {
    const uint4 bits = *reinterpret_cast<const uint4*>(p);  // p must be 16-byte aligned
    memcpy(&r, &bits, sizeof(r));
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) r.v[k] = p[k];
  }
  return r;
}

template <int N, typename T>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& r) {
  if constexpr (sizeof(r) == 16) {
    uint4 bits;
    memcpy(&bits, &r, sizeof(r));
    *reinterpret_cast<uint4*>(p) = bits;  // one 16-byte store; p must be 16-byte aligned
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = r.v[k];
  }
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kKappa = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

// gelu_tanh(h) = 0.5 h (1 + tanh(u)), u = sqrt(2/pi) (h + 0.044715 h^3). Since 0.5 (1 + tanh u)
// = sigmoid(2u), this is h * sigmoid(2u): one expf and one division, and no 1 + (-1) cancellation.
__device__ __forceinline__ float gelu_tanh(float h) {
  const float u = kSqrt2OverPi * (h + kKappa * h * h * h);
  return h / (1.0f + expf(-2.0f * u));
}

// d/dh [h s] with s = sigmoid(2u): s + h * 2 s (1 - s) * du/dh.
__device__ __forceinline__ float gelu_tanh_grad(float h) {
  const float h2 = h * h;
  const float u = kSqrt2OverPi * (h + kKappa * h2 * h);
  const float s = 1.0f / (1.0f + expf(-2.0f * u));
  return s + 2.0f * h * s * (1.0f - s) * kSqrt2OverPi * (1.0f + 3.0f * kKappa * h2);
}

// gelu(h) = h * Phi(h), Phi the normal CDF = 0.5 (1 + erf(h / sqrt 2)); gelu' = Phi(h) + h phi(h).
__device__ __forceinline__ float gelu_erf(float h) { return 0.5f * h * (1.0f + erff(h * kInvSqrt2)); }
__device__ __forceinline__ float gelu_erf_grad(float h) {
  return 0.5f * (1.0f + erff(h * kInvSqrt2)) + h * kInvSqrt2Pi * expf(-0.5f * h * h);
}

template <bool TANH>
__device__ __forceinline__ float gelu(float h) { return TANH ? gelu_tanh(h) : gelu_erf(h); }
template <bool TANH>
__device__ __forceinline__ float gelu_grad(float h) { return TANH ? gelu_tanh_grad(h) : gelu_erf_grad(h); }

// ---------------------------------------------------------------------------------------------
// Kernels: forward.

// relu_add_bias_kernel1: thread i owns element i of the flat [rows, C] tensor; its bias is
// bias[i % C]. Moves 3 x sizeof(T) bytes per element (x, y in; out out): 3/7 of what eager's
// three kernels move. Bounded by memory, but 4-byte (or 2-byte) accesses leave bandwidth unused.
template <typename T>
__global__ void relu_add_bias_kernel1(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ bias,
                                      T* __restrict__ out, int64_t n, int64_t C) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = from_float<T>(fmaxf(to_float(x[i]), 0.0f) + to_float(y[i]) + to_float(bias[i % C]));
}

// The bias values of the V elements starting at flat index e: one 16-byte load when the V columns
// are whole and aligned (C % V == 0), else one by one, wrapping to column 0 at a row's end.
template <int V, typename T>
__device__ __forceinline__ void load_bias(const T* __restrict__ bias, int64_t e, int64_t C, bool bias_vec, float (&b)[V]) {
  int64_t col = e % C;
  if (bias_vec) {
    const Vec<T, V> bv = load_vec<V>(bias + col);
#pragma unroll
    for (int k = 0; k < V; ++k) b[k] = to_float(bv.v[k]);
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      b[k] = to_float(bias[col]);
      if (++col == C) col = 0;  // the vector runs into the next row
    }
  }
}

// relu_add_bias_kernel2: thread t of block b owns the 16-byte vectors b*1024 + t + {0,256,512,768}
// (consecutive threads, consecutive vectors: every warp access is 512 contiguous bytes).
// All 4 vectors of x and y are loaded before any is used, so 8 loads per thread are in flight.
// The last n % V elements (the tail) do not fill a vector: block 0 does them one by one.
// Moves 3 x sizeof(T) bytes per element; bounded by memory bandwidth.
template <typename T>
__global__ void relu_add_bias_kernel2(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ bias,
                                      T* __restrict__ out, int64_t n, int64_t C, bool bias_vec) {
  constexpr int V = kVec<T>;
  const int64_t nvec = n / V;  // whole vectors
  const int64_t first = blockIdx.x * (int64_t)(BLOCK * UNROLL) + threadIdx.x;
  Vec<T, V> xs[UNROLL], ys[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {  // issue every load first ...
    const int64_t v = first + u * BLOCK;
    if (v < nvec) {
      xs[u] = load_vec<V>(x + v * V);
      ys[u] = load_vec<V>(y + v * V);
    }
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {  // ... then compute and store
    const int64_t v = first + u * BLOCK;
    if (v < nvec) {
      float b[V];
      load_bias<V>(bias, v * V, C, bias_vec, b);  // bias is small: it stays in cache
      Vec<T, V> o;
#pragma unroll
      for (int k = 0; k < V; ++k) o.v[k] = from_float<T>(fmaxf(to_float(xs[u].v[k]), 0.0f) + to_float(ys[u].v[k]) + b[k]);
      store_vec<V>(out + v * V, o);
    }
  }
  const int64_t t = nvec * V + threadIdx.x;  // the tail: fewer than V elements
  if (blockIdx.x == 0 && t < n) out[t] = from_float<T>(fmaxf(to_float(x[t]), 0.0f) + to_float(y[t]) + to_float(bias[t % C]));
}

// bias_gelu_kernel3: relu_add_bias_kernel2's mapping and tail with one input: out = gelu(x + bias).
// Moves 2 x sizeof(T) bytes per element (eager: add, then gelu: 4). Bounded by memory if the
// GELU is cheap enough: expf/erff in float32, a few dozen instructions per element.
template <typename T, bool TANH>
__global__ void bias_gelu_kernel3(const T* __restrict__ x, const T* __restrict__ bias, T* __restrict__ out,
                                  int64_t n, int64_t C, bool bias_vec) {
  constexpr int V = kVec<T>;
  const int64_t nvec = n / V;
  const int64_t first = blockIdx.x * (int64_t)(BLOCK * UNROLL) + threadIdx.x;
  Vec<T, V> xs[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int64_t v = first + u * BLOCK;
    if (v < nvec) xs[u] = load_vec<V>(x + v * V);
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int64_t v = first + u * BLOCK;
    if (v < nvec) {
      float b[V];
      load_bias<V>(bias, v * V, C, bias_vec, b);
      Vec<T, V> o;
#pragma unroll
      for (int k = 0; k < V; ++k) o.v[k] = from_float<T>(gelu<TANH>(to_float(xs[u].v[k]) + b[k]));
      store_vec<V>(out + v * V, o);
    }
  }
  const int64_t t = nvec * V + threadIdx.x;
  if (blockIdx.x == 0 && t < n) out[t] = from_float<T>(gelu<TANH>(to_float(x[t]) + to_float(bias[t % C])));
}

// ---------------------------------------------------------------------------------------------
// Kernels: backward. The gradient of a broadcast bias is a sum over rows (a reduction), so the
// mapping changes: a thread owns V fixed columns and walks down the rows, summing in registers.

enum class Act { Relu, GeluTanh, GeluErf };

// bias_act_backward_kernel: block (bx, by) owns columns [bx*32*V, (bx+1)*32*V); thread (tx, ty)
// owns V of them and the rows ty + 8*by + 8*gridDim.y*k, two rows at a time. Each row of a warp
// is 32*V contiguous values (coalesced). Moves 3 x sizeof(T) bytes per element (grad, x in; dx
// out); the column sums cost one shared-memory combine and 32*V float atomics per block.
// Bounded by memory.
//   Relu:  dx = grad * (x > 0),         dbias += grad      (out = relu(x) + y + bias)
//   Gelu*: dx = grad * gelu'(x + bias), dbias += dx        (out = gelu(x + bias))
template <typename T, int V, Act ACT>
__global__ void bias_act_backward_kernel(const T* __restrict__ grad, const T* __restrict__ x, const T* __restrict__ bias,
                                         T* __restrict__ dx, float* __restrict__ dbias_sum, int64_t rows, int64_t C) {
  __shared__ float partial[TY][TX * V];  // each row of threads' column sums
  const int64_t col = (blockIdx.x * (int64_t)TX + threadIdx.x) * V;
  const bool active = col < C;  // the last block of columns may stick out past C
  float acc[V];
#pragma unroll
  for (int k = 0; k < V; ++k) acc[k] = 0.0f;
  if (active) {
    float b[V];
    if constexpr (ACT != Act::Relu) {
      const Vec<T, V> bv = load_vec<V>(bias + col);  // loaded once, used for every row
#pragma unroll
      for (int k = 0; k < V; ++k) b[k] = to_float(bv.v[k]);
    }
    const int64_t stride = (int64_t)gridDim.y * TY;
    for (int64_t r = blockIdx.y * (int64_t)TY + threadIdx.y; r < rows; r += ROWS_IN_FLIGHT * stride) {
      Vec<T, V> gv[ROWS_IN_FLIGHT], xv[ROWS_IN_FLIGHT];
#pragma unroll
      for (int j = 0; j < ROWS_IN_FLIGHT; ++j) {  // load both rows before computing either
        const int64_t rj = r + j * stride;
        if (rj < rows) {
          const int64_t e = (rj * (C / V) + col / V) * V;  // rj * C + col, see the store below
          gv[j] = load_vec<V>(grad + e);
          xv[j] = load_vec<V>(x + e);
        }
      }
#pragma unroll
      for (int j = 0; j < ROWS_IN_FLIGHT; ++j) {
        const int64_t rj = r + j * stride;
        if (rj >= rows) break;
        Vec<T, V> o;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float g = to_float(gv[j].v[k]), xk = to_float(xv[j].v[k]);
          if constexpr (ACT == Act::Relu) {
            o.v[k] = from_float<T>(xk > 0.0f ? g : 0.0f);
            acc[k] += g;
          } else {
            const float d = g * (ACT == Act::GeluTanh ? gelu_tanh_grad(xk + b[k]) : gelu_erf_grad(xk + b[k]));
            o.v[k] = from_float<T>(d);
            acc[k] += d;  // the float32 value, before rounding to T
          }
        }
        // The offset written as a whole number of vectors (C % V == 0 here): with dx + rj * C + col,
        // nvcc 13 split this store into four 4-byte stores (seen with cuobjdump -sass); as written
        // here it is one STG.E.128.
        store_vec<V>(dx + (rj * (C / V) + col / V) * V, o);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) partial[threadIdx.y][threadIdx.x * V + k] = acc[k];
  __syncthreads();  // every row of threads has written its sums (inactive threads wrote zeros: no early return)
  if (threadIdx.y == 0 && active) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float s = 0.0f;
      for (int j = 0; j < TY; ++j) s += partial[j][threadIdx.x * V + k];
      atomicAdd(&dbias_sum[col + k], s);  // other blocks (other rows) add into the same columns
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Launchers.


// The dtype every tensor of a call shares: float32 or bfloat16.
static void check_dtype(const at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16,
              "x must be float32 or bfloat16, got ", x.scalar_type());
}

// x: any shape with C = x.size(-1) columns; bias: [C]; every tensor on the device, contiguous, x's dtype.
static int64_t check_bias(const at::Tensor& x, const at::Tensor& bias) {
  CHECK_INPUT(bias);
  CHECK_SAME_DTYPE(x, bias);
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension (the columns), got a scalar");
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == x.size(-1), "bias must have shape [", std::to_string(x.size(-1)),
              "] (one value per column of x, whose shape is ", shape_str(x.sizes()), "), got ", shape_str(bias.sizes()));
  return x.size(-1);
}

static void check_like(const at::Tensor& x, const at::Tensor& t, const char* name) {
  CHECK_INPUT(t);
  TORCH_CHECK(t.scalar_type() == x.scalar_type(), name, " must have x's dtype ", x.scalar_type(), ", got ", t.scalar_type());
  TORCH_CHECK(t.sizes() == x.sizes(), name, " must have x's shape ", shape_str(x.sizes()), ", got ", shape_str(t.sizes()));
}

void relu_add_bias1(const at::Tensor& x, const at::Tensor& y, const at::Tensor& bias, at::Tensor& out) {
  CHECK_INPUT(x);
  check_dtype(x);
  check_like(x, y, "y");
  check_like(x, out, "out");
  const int64_t C = check_bias(x, bias), n = x.numel();
  if (n == 0) return;  // a grid of 0 blocks is an error
  const int64_t blocks = ceil_div(n, (int64_t)BLOCK);
  CHECK_GRID(blocks);
  auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch(x, [&](auto t) {
    using T = decltype(t);
    relu_add_bias_kernel1<T><<<blocks, BLOCK, 0, stream>>>(ptr<T>(x), ptr<T>(y), ptr<T>(bias), mut<T>(out), n, C);
    CHECK_LAUNCH();
  });
}

void relu_add_bias2(const at::Tensor& x, const at::Tensor& y, const at::Tensor& bias, at::Tensor& out) {
  CHECK_INPUT(x);
  check_dtype(x);
  check_like(x, y, "y");
  check_like(x, out, "out");
  const int64_t C = check_bias(x, bias), n = x.numel();
  if (n == 0) return;
  // 16-byte loads need 16-byte aligned addresses; a tensor sliced at an odd offset takes variant 1.
  if (!aligned16(x) || !aligned16(y) || !aligned16(out)) return relu_add_bias1(x, y, bias, out);
  auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch(x, [&](auto t) {
    using T = decltype(t);
    constexpr int V = kVec<T>;
    const bool bias_vec = C % V == 0 && aligned16(bias);
    const int64_t blocks = std::max<int64_t>(1, ceil_div(n / V, (int64_t)BLOCK * UNROLL));  // >= 1 for the tail
    CHECK_GRID(blocks);
    relu_add_bias_kernel2<T><<<blocks, BLOCK, 0, stream>>>(ptr<T>(x), ptr<T>(y), ptr<T>(bias), mut<T>(out), n, C, bias_vec);
    CHECK_LAUNCH();
  });
}

// A scalar fallback for misaligned tensors: the vector kernel with V = 1 would need its own
// template; a misaligned activation is rare enough that one element per thread serves.
template <typename T, bool TANH>
__global__ void bias_gelu_scalar_kernel(const T* __restrict__ x, const T* __restrict__ bias, T* __restrict__ out,
                                        int64_t n, int64_t C) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = from_float<T>(gelu<TANH>(to_float(x[i]) + to_float(bias[i % C])));
}

void bias_gelu3(const at::Tensor& x, const at::Tensor& bias, bool tanh, at::Tensor& out) {
  CHECK_INPUT(x);
  check_dtype(x);
  check_like(x, out, "out");
  const int64_t C = check_bias(x, bias), n = x.numel();
  if (n == 0) return;
  auto stream = c10::cuda::getCurrentCUDAStream();
  const bool vec = aligned16(x) && aligned16(out);
  dispatch(x, [&](auto t) {
    using T = decltype(t);
    constexpr int V = kVec<T>;
    const bool bias_vec = C % V == 0 && aligned16(bias);
    const int64_t blocks = vec ? std::max<int64_t>(1, ceil_div(n / V, (int64_t)BLOCK * UNROLL)) : ceil_div(n, (int64_t)BLOCK);
    CHECK_GRID(blocks);
    if (vec && tanh) bias_gelu_kernel3<T, true><<<blocks, BLOCK, 0, stream>>>(ptr<T>(x), ptr<T>(bias), mut<T>(out), n, C, bias_vec);
    else if (vec) bias_gelu_kernel3<T, false><<<blocks, BLOCK, 0, stream>>>(ptr<T>(x), ptr<T>(bias), mut<T>(out), n, C, bias_vec);
    else if (tanh) bias_gelu_scalar_kernel<T, true><<<blocks, BLOCK, 0, stream>>>(ptr<T>(x), ptr<T>(bias), mut<T>(out), n, C);
    else bias_gelu_scalar_kernel<T, false><<<blocks, BLOCK, 0, stream>>>(ptr<T>(x), ptr<T>(bias), mut<T>(out), n, C);
    CHECK_LAUNCH();
  });
}

// The backward launch: float32 column sums start at zero, atomics add into them, dbias gets them
// rounded to its dtype. Enough blocks down the rows to give every SM about 8 of them.
template <Act ACT>
static void bias_act_backward(const at::Tensor& grad, const at::Tensor& x, const at::Tensor* bias, at::Tensor& dx,
                              at::Tensor& dbias, int64_t C) {
  const int64_t rows = C == 0 ? 0 : x.numel() / C;
  at::Tensor sums = at::zeros({C}, x.options().dtype(at::kFloat));
  if (rows > 0) {
    int device = 0, sms = 0;
    C10_CUDA_CHECK(cudaGetDevice(&device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    auto stream = c10::cuda::getCurrentCUDAStream();
    dispatch(x, [&](auto t) {
      using T = decltype(t);
      constexpr int V = kVec<T>;
      // Whole, aligned 16-byte vectors in every row need C % V == 0; otherwise one value at a time.
      const bool vec = C % V == 0 && aligned16(grad) && aligned16(x) && aligned16(dx) && (!bias || aligned16(*bias));
      const int per_block = TX * (vec ? V : 1);
      const int64_t gx = ceil_div(C, (int64_t)per_block);
      const int64_t gy = std::min<int64_t>({ceil_div(rows, (int64_t)TY), std::max<int64_t>(1, 8 * sms / gx), 65535});
      CHECK_GRID(gx);
      const dim3 grid((unsigned)gx, (unsigned)gy), block(TX, TY);
      const T* b = bias ? ptr<T>(*bias) : nullptr;
      if (vec) bias_act_backward_kernel<T, V, ACT><<<grid, block, 0, stream>>>(ptr<T>(grad), ptr<T>(x), b, mut<T>(dx), sums.data_ptr<float>(), rows, C);
      else bias_act_backward_kernel<T, 1, ACT><<<grid, block, 0, stream>>>(ptr<T>(grad), ptr<T>(x), b, mut<T>(dx), sums.data_ptr<float>(), rows, C);
      CHECK_LAUNCH();
    });
  }
  dbias.copy_(sums);
}

void relu_add_bias_backward4(const at::Tensor& grad, const at::Tensor& x, at::Tensor& dx, at::Tensor& dbias) {
  CHECK_INPUT(x);
  check_dtype(x);
  check_like(x, grad, "grad");
  check_like(x, dx, "dx");
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension (the columns), got a scalar");
  const int64_t C = x.size(-1);
  CHECK_INPUT(dbias);
  CHECK_SAME_DTYPE(x, dbias);
  TORCH_CHECK(dbias.dim() == 1 && dbias.size(0) == C, "dbias must have shape [", std::to_string(C), "], got ",
              shape_str(dbias.sizes()));
  bias_act_backward<Act::Relu>(grad, x, nullptr, dx, dbias, C);
}

void bias_gelu_backward5(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& bias, bool tanh, at::Tensor& dx,
                         at::Tensor& dbias) {
  CHECK_INPUT(x);
  check_dtype(x);
  check_like(x, grad, "grad");
  check_like(x, dx, "dx");
  const int64_t C = check_bias(x, bias);
  CHECK_INPUT(dbias);
  CHECK_SAME_DTYPE(x, dbias);
  TORCH_CHECK(dbias.dim() == 1 && dbias.size(0) == C, "dbias must have shape [", std::to_string(C), "], got ",
              shape_str(dbias.sizes()));
  if (tanh) bias_act_backward<Act::GeluTanh>(grad, x, &bias, dx, dbias, C);
  else bias_act_backward<Act::GeluErf>(grad, x, &bias, dx, dbias, C);
}

// ---------------------------------------------------------------------------------------------
// Functional ops: the fast variants behind ops that allocate their outputs, like lesson 03's mul.
// register_fake and register_autograd (in the notebook) take only functional ops; with them,
// torch.compile traces a training step through these kernels without a graph break.

at::Tensor relu_add_bias(const at::Tensor& x, const at::Tensor& y, const at::Tensor& bias) {
  CHECK_INPUT(x);  // before empty_like: a strided x would give a strided out
  at::Tensor out = at::empty_like(x);
  relu_add_bias2(x, y, bias, out);
  return out;
}

std::tuple<at::Tensor, at::Tensor> relu_add_bias_backward(const at::Tensor& grad, const at::Tensor& x) {
  CHECK_INPUT(x);
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension (the columns), got a scalar");
  at::Tensor dx = at::empty_like(x), dbias = at::empty({x.size(-1)}, x.options());
  relu_add_bias_backward4(grad, x, dx, dbias);
  return {dx, dbias};
}

at::Tensor bias_gelu(const at::Tensor& x, const at::Tensor& bias, bool tanh) {
  CHECK_INPUT(x);
  at::Tensor out = at::empty_like(x);
  bias_gelu3(x, bias, tanh, out);
  return out;
}

std::tuple<at::Tensor, at::Tensor> bias_gelu_backward(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& bias,
                                                      bool tanh) {
  CHECK_INPUT(x);
  CHECK_INPUT(bias);
  at::Tensor dx = at::empty_like(x), dbias = at::empty_like(bias);
  bias_gelu_backward5(grad, x, bias, tanh, dx, dbias);
  return {dx, dbias};
}

// ---------------------------------------------------------------------------------------------
// Registration.
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("relu_add_bias1(Tensor x, Tensor y, Tensor bias, Tensor(a!) out) -> ()");
  m.def("relu_add_bias2(Tensor x, Tensor y, Tensor bias, Tensor(a!) out) -> ()");
  m.def("bias_gelu3(Tensor x, Tensor bias, bool tanh, Tensor(a!) out) -> ()");
  m.def("relu_add_bias_backward4(Tensor grad, Tensor x, Tensor(a!) dx, Tensor(b!) dbias) -> ()");
  m.def("bias_gelu_backward5(Tensor grad, Tensor x, Tensor bias, bool tanh, Tensor(a!) dx, Tensor(b!) dbias) -> ()");
  m.def("relu_add_bias(Tensor x, Tensor y, Tensor bias) -> Tensor");
  m.def("relu_add_bias_backward(Tensor grad, Tensor x) -> (Tensor, Tensor)");
  m.def("bias_gelu(Tensor x, Tensor bias, bool tanh) -> Tensor");
  m.def("bias_gelu_backward(Tensor grad, Tensor x, Tensor bias, bool tanh) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("relu_add_bias1", &relu_add_bias1);
  m.impl("relu_add_bias2", &relu_add_bias2);
  m.impl("bias_gelu3", &bias_gelu3);
  m.impl("relu_add_bias_backward4", &relu_add_bias_backward4);
  m.impl("bias_gelu_backward5", &bias_gelu_backward5);
  m.impl("relu_add_bias", &relu_add_bias);
  m.impl("relu_add_bias_backward", &relu_add_bias_backward);
  m.impl("bias_gelu", &bias_gelu);
  m.impl("bias_gelu_backward", &bias_gelu_backward);
}
