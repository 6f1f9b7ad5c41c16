// half_types.cu: the 16- and 8-bit float APIs of cuda_fp16.h, cuda_bf16.h and cuda_fp8.h as public
// kernels use them, built as llm.c builds (-U__CUDA_NO_BFLOAT16_CONVERSIONS__ and friends: the
// implicit conversions and operators on); tests/test_sim_public.py compares every op with an exact
// reference in Python on the sim backend and, with a GPU, on cuda.
// build flags: -U__CUDA_NO_HALF_OPERATORS__ -U__CUDA_NO_HALF_CONVERSIONS__ -U__CUDA_NO_BFLOAT16_CONVERSIONS__ -U__CUDA_NO_HALF2_OPERATORS__
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
//
//   op            what it exercises
//   bf16_api      __halves2bfloat162, __nv_bfloat162's operator+, atomicAdd on __nv_bfloat162,
//                 __nv_bfloat16 from an int, __trap (not reached)
//   round_floats  float to half and bfloat16 in the four rounding modes (_rn, _rz, _rd, _ru)
//   round_ints    64-bit integers to half and bfloat16 in the four rounding modes
//   to_ints       half and bfloat16 to int, unsigned, short, long long, char and unsigned char
//   arith         __hadd ... __hfma, max/min (with their NaN and signed-zero rules), the _sat and _relu
//                 forms, comparisons, __hisinf, on half and bfloat16 values given as bits
//   fp8           float to fp8 e4m3 and e5m2, saturating and not, and back to float
//   bf162_sum     atomicAdd on __nv_bfloat162 from every thread of many blocks (with `atomic` false, a
//                 plain read-modify-write instead: a race, for the simulator's race check)
//   bf16_pack     bfloat16 values read in pairs through an int* over a __nv_bfloat16 array (type punning,
//                 as fast.cu packs them for stmatrix), the array refilled before each read
//   bf16_stores   __stwt, __stcg and __stcs of a float value through a __nv_bfloat16 pointer
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <cuda_fp8.h>

// ---------------------------------------------------------------------------------------------
// kernels

// The reproducer of the bfloat16 API gaps: p[2..3] += 2 * p[0..1] (atomically), p[4] = 0.
__global__ void bf16_api_kernel(__nv_bfloat16* p) {
  __nv_bfloat162 v = __halves2bfloat162(p[0], p[1]);
  v = v + v;
  atomicAdd(reinterpret_cast<__nv_bfloat162*>(p + 2), v);
  __nv_bfloat16 z = 0;
  if (p == nullptr) __trap();
  p[4] = z;
}

// One thread per value: its bits as half (_rn, _rz, _rd, _ru), then as bfloat16 (the same four).
__global__ void round_floats_kernel(const float* x, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  int* o = out + 8 * i;
  o[0] = __half_as_ushort(__float2half_rn(v));
  o[1] = __half_as_ushort(__float2half_rz(v));
  o[2] = __half_as_ushort(__float2half_rd(v));
  o[3] = __half_as_ushort(__float2half_ru(v));
  o[4] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
  o[5] = __bfloat16_as_ushort(__float2bfloat16_rz(v));
  o[6] = __bfloat16_as_ushort(__float2bfloat16_rd(v));
  o[7] = __bfloat16_as_ushort(__float2bfloat16_ru(v));
}

__global__ void round_ints_kernel(const long long* x, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  long long v = x[i];
  int* o = out + 8 * i;
  o[0] = __half_as_ushort(__ll2half_rn(v));
  o[1] = __half_as_ushort(__ll2half_rz(v));
  o[2] = __half_as_ushort(__ll2half_rd(v));
  o[3] = __half_as_ushort(__ll2half_ru(v));
  o[4] = __bfloat16_as_ushort(__ll2bfloat16_rn(v));
  o[5] = __bfloat16_as_ushort(__ll2bfloat16_rz(v));
  o[6] = __bfloat16_as_ushort(__ll2bfloat16_rd(v));
  o[7] = __bfloat16_as_ushort(__ll2bfloat16_ru(v));
}

// bits[i] as half (bf16 = 0) or bfloat16 (bf16 = 1), converted to integers: 10 columns.
__global__ void to_ints_kernel(const int* bits, long long* out, int n, int bf16) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned short b = static_cast<unsigned short>(bits[i]);
  long long* o = out + 10 * i;
  if (bf16) {
    __nv_bfloat16 h = __ushort_as_bfloat16(b);
    o[0] = __bfloat162int_rn(h), o[1] = __bfloat162int_rz(h), o[2] = __bfloat162int_rd(h), o[3] = __bfloat162int_ru(h);
    o[4] = __bfloat162uint_rn(h), o[5] = __bfloat162short_rn(h), o[6] = __bfloat162ll_rz(h);
    o[7] = __bfloat162uchar_rz(h), o[8] = __bfloat162char_rz(h), o[9] = static_cast<int>(h);
  } else {
    __half h = __ushort_as_half(b);
    o[0] = __half2int_rn(h), o[1] = __half2int_rz(h), o[2] = __half2int_rd(h), o[3] = __half2int_ru(h);
    o[4] = __half2uint_rn(h), o[5] = __half2short_rn(h), o[6] = __half2ll_rz(h);
    o[7] = __half2uchar_rz(h), o[8] = __half2char_rz(h), o[9] = static_cast<int>(h);
  }
}

__device__ int bits(__half v) { return __half_as_ushort(v); }
__device__ int bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }

// a, b, c as bits of T; 17 columns of results (bits, or 0/1, or __hisinf's -1/0/1).
template <typename T>
__device__ void arith_row(T a, T b, T c, int* o) {
  o[0] = bits(__hadd(a, b)), o[1] = bits(__hsub(a, b)), o[2] = bits(__hmul(a, b)), o[3] = bits(__hdiv(a, b));
  o[4] = bits(__hfma(a, b, c)), o[5] = bits(__hmax(a, b)), o[6] = bits(__hmin(a, b));
  o[7] = bits(__hmax_nan(a, b)), o[8] = bits(__hmin_nan(a, b)), o[9] = bits(__hadd_sat(a, b));
  o[10] = bits(__hfma_relu(a, b, c));
  o[11] = __heq(a, b), o[12] = __hneu(a, b), o[13] = __hlt(a, b), o[14] = __hgeu(a, b);
  o[15] = __hisnan(a), o[16] = __hisinf(a);
}

__global__ void arith_kernel(const int* a, const int* b, const int* c, int* out, int n, int bf16) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  auto u = [](int v) { return static_cast<unsigned short>(v); };
  if (bf16) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    arith_row(__ushort_as_bfloat16(u(a[i])), __ushort_as_bfloat16(u(b[i])), __ushort_as_bfloat16(u(c[i])), out + 17 * i);
#else
    __trap();  // bfloat16's __hfma, __hmax, __hmin exist from sm_80: arith() refuses an older GPU first
#endif
  } else {
    arith_row(__ushort_as_half(u(a[i])), __ushort_as_half(u(b[i])), __ushort_as_half(u(c[i])), out + 17 * i);
  }
}

// x[i] to fp8: e4m3 saturating, e4m3 not, e5m2 saturating, e5m2 not (bits), and the first and third back.
__global__ void fp8_kernel(const float* x, int* bits, float* back, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  bits[4 * i + 0] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  bits[4 * i + 1] = __nv_cvt_float_to_fp8(v, __NV_NOSAT, __NV_E4M3);
  bits[4 * i + 2] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E5M2);
  bits[4 * i + 3] = __nv_cvt_float_to_fp8(v, __NV_NOSAT, __NV_E5M2);
  back[2 * i + 0] = static_cast<float>(__nv_fp8_e4m3(v));
  back[2 * i + 1] = static_cast<float>(__nv_fp8_e5m2(v));
}

// Every thread adds (1, 2) to the pair it is given (i % pairs).
__global__ void bf162_sum_kernel(__nv_bfloat162* pairs, int n_pairs, bool atomic) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  const __nv_bfloat162 one_two = __floats2bfloat162_rn(1.0f, 2.0f);
  if (atomic)
    atomicAdd(pairs + i % n_pairs, one_two);
  else
    pairs[i % n_pairs] = pairs[i % n_pairs] + one_two;  // RACE-LINE
}

// One thread: out[2 * j] and out[2 * j + 1] are the first and last pair of x[8 * j .. 8 * j + 7] in bfloat16,
// read through an int* over the array that holds them.
__global__ void bf16_pack_kernel(const float* x, int* out) {
  __nv_bfloat16 h[8];
  int* p = (int*)h;
  for (int j = 0; j < 4; ++j) {
    for (int k = 0; k < 8; ++k) h[k] = (__nv_bfloat16)(x[8 * j + k]);
    out[2 * j] = p[0];
    out[2 * j + 1] = p[3];
  }
}

// out[3 * i .. 3 * i + 2] = x[i], x[i], 2 * x[i] in bfloat16: the value is a float, converted as CUDA's
// overloads of the stores convert it.
__global__ void bf16_stores_kernel(const float* x, __nv_bfloat16* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __stwt(&out[3 * i], x[i]);
  __stcg(&out[3 * i + 1], x[i]);
  __stcs(&out[3 * i + 2], 2.0f * x[i]);
}

// ---------------------------------------------------------------------------------------------
// launchers

at::Tensor bf16_api(at::Tensor p) {
  CHECK_INPUT(p);
  CHECK_DTYPE(p, at::kBFloat16);
  TORCH_CHECK(p.numel() == 6, "expected 6 values, got ", std::to_string(p.numel()));
  bf16_api_kernel<<<1, 1>>>(reinterpret_cast<__nv_bfloat16*>(p.data_ptr()));
  CHECK_LAUNCH();
  return p;
}

at::Tensor round_floats(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  const int n = static_cast<int>(x.numel());
  auto out = at::empty({n, 8}, x.options().dtype(at::kInt));
  if (n) round_floats_kernel<<<ceil_div(n, 128), 128>>>(x.data_ptr<float>(), out.data_ptr<int>(), n);
  CHECK_LAUNCH();
  return out;
}

at::Tensor round_ints(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kLong);
  const int n = static_cast<int>(x.numel());
  auto out = at::empty({n, 8}, x.options().dtype(at::kInt));
  if (n) round_ints_kernel<<<ceil_div(n, 128), 128>>>(reinterpret_cast<const long long*>(x.data_ptr<int64_t>()),
                                                    out.data_ptr<int>(), n);
  CHECK_LAUNCH();
  return out;
}

at::Tensor to_ints(const at::Tensor& bits, bool bf16) {
  CHECK_INPUT(bits);
  CHECK_DTYPE(bits, at::kInt);
  const int n = static_cast<int>(bits.numel());
  auto out = at::empty({n, 10}, bits.options().dtype(at::kLong));
  if (n) to_ints_kernel<<<ceil_div(n, 128), 128>>>(bits.data_ptr<int>(), reinterpret_cast<long long*>(out.data_ptr<int64_t>()),
                                                  n, bf16);
  CHECK_LAUNCH();
  return out;
}

at::Tensor arith(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, bool bf16) {
  CHECK_INPUT(a);
  CHECK_SAME_SHAPE(a, b);
  CHECK_SAME_SHAPE(a, c);
  if (bf16) check_capability("arith", 800, "bf16 arithmetic", "bfloat16");
  const int n = static_cast<int>(a.numel());
  auto out = at::empty({n, 17}, a.options());
  if (n) arith_kernel<<<ceil_div(n, 128), 128>>>(a.data_ptr<int>(), b.data_ptr<int>(), c.data_ptr<int>(),
                                                 out.data_ptr<int>(), n, bf16);
  CHECK_LAUNCH();
  return out;
}

std::vector<at::Tensor> fp8(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  const int n = static_cast<int>(x.numel());
  auto bits = at::empty({n, 4}, x.options().dtype(at::kInt));
  auto back = at::empty({n, 2}, x.options());
  if (n) fp8_kernel<<<ceil_div(n, 128), 128>>>(x.data_ptr<float>(), bits.data_ptr<int>(), back.data_ptr<float>(), n);
  CHECK_LAUNCH();
  return {bits, back};
}

at::Tensor bf162_sum(const at::Tensor& like, int64_t pairs, int64_t blocks, int64_t threads, bool atomic) {
  auto out = at::zeros({pairs, 2}, like.options().dtype(at::kBFloat16));
  bf162_sum_kernel<<<static_cast<int>(blocks), static_cast<int>(threads)>>>(
      reinterpret_cast<__nv_bfloat162*>(out.data_ptr()), static_cast<int>(pairs), atomic);
  CHECK_LAUNCH();
  return out;
}

at::Tensor bf16_pack(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  TORCH_CHECK(x.numel() == 32, "expected 32 values, got ", std::to_string(x.numel()));
  auto out = at::empty({8}, x.options().dtype(at::kInt));
  bf16_pack_kernel<<<1, 1>>>(x.data_ptr<float>(), out.data_ptr<int>());
  CHECK_LAUNCH();
  return out;
}

at::Tensor bf16_stores(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  const int n = static_cast<int>(x.numel());
  auto out = at::empty({n, 3}, x.options().dtype(at::kBFloat16));
  auto* o = reinterpret_cast<__nv_bfloat16*>(out.data_ptr());
  if (n) bf16_stores_kernel<<<ceil_div(n, 128), 128>>>(x.data_ptr<float>(), o, n);
  CHECK_LAUNCH();
  return out;
}

// ---------------------------------------------------------------------------------------------
// registration

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("bf16_api(Tensor(a!) p) -> Tensor(a!)");
  m.def("round_floats(Tensor x) -> Tensor");
  m.def("round_ints(Tensor x) -> Tensor");
  m.def("to_ints(Tensor bits, bool bf16) -> Tensor");
  m.def("arith(Tensor a, Tensor b, Tensor c, bool bf16) -> Tensor");
  m.def("fp8(Tensor x) -> Tensor[]");
  m.def("bf162_sum(Tensor like, int pairs, int blocks, int threads, bool atomic=True) -> Tensor");
  m.def("bf16_pack(Tensor x) -> Tensor");
  m.def("bf16_stores(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("bf16_api", &bf16_api);
  m.impl("round_floats", &round_floats);
  m.impl("round_ints", &round_ints);
  m.impl("to_ints", &to_ints);
  m.impl("arith", &arith);
  m.impl("fp8", &fp8);
  m.impl("bf162_sum", &bf162_sum);
  m.impl("bf16_pack", &bf16_pack);
  m.impl("bf16_stores", &bf16_stores);
}
