// wmma.cu: the WMMA API (nvcuda::wmma, tensor cores) on every backend. tests/test_sim_wmma.py
// runs each op on the sim backend and, with a GPU, on cuda, and compares it with PyTorch.
//
//   op            what it exercises
//   wmma_tile     one tile D = A B + C for every shape and input type, A and B stored row- or
//                 column-major, C loaded and D stored in either layout
//   wmma_matmul   D = A B for any M, N, K: tiles staged in shared memory and padded with zeros,
//                 one accumulator fragment per warp kept across a loop over K
//   wmma_axpby    D = alpha (s A) B + beta C: A scaled and D combined element by element in x[]
//   wmma_fill     fill_fragment, then store_matrix_sync with a leading dimension wider than the tile
//   wmma_counts   num_elements of the fragment types (host code)
//   to_tf32       wmma::__float_to_tf32 on every element
// needs compute capability: 8.0 for bf16, TF32 and double tensor cores
#include "helpers.cuh"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <type_traits>
#include <vector>

using namespace nvcuda;

// The type a fragment is loaded from: float for tf32, the element type for the others.
template <class T>
struct storage { using type = T; };
template <>
struct storage<wmma::precision::tf32> { using type = float; };

// CUDA's tf32 fragments are loaded from floats and must be rounded to tf32 by the program.
template <class Frag>
__device__ void round_to_tf32(Frag& f) {
  if constexpr (std::is_same_v<typename Frag::element_type, wmma::precision::tf32>)
    for (int i = 0; i < f.num_elements; ++i) f.x[i] = wmma::__float_to_tf32(f.x[i]);
}

// =============================================================================================
// wmma_tile: one warp, one M x N x K tile. The leading dimension of each operand is the length of
// a row as stored: K for a row-major A, M for a column-major one.
template <class T, class Acc, int M, int N, int K, class LA, class LB>
__global__ void tile_kernel(const typename storage<T>::type* a, const typename storage<T>::type* b, const Acc* c,
                            Acc* d, wmma::layout_t c_layout, wmma::layout_t d_layout, bool round_tf32) {
  wmma::fragment<wmma::matrix_a, M, N, K, T, LA> fa;
  wmma::fragment<wmma::matrix_b, M, N, K, T, LB> fb;
  wmma::fragment<wmma::accumulator, M, N, K, Acc> acc;
  wmma::load_matrix_sync(fa, a, std::is_same_v<LA, wmma::row_major> ? K : M);
  wmma::load_matrix_sync(fb, b, std::is_same_v<LB, wmma::row_major> ? N : K);
  if (round_tf32) {
    round_to_tf32(fa);
    round_to_tf32(fb);
  }
  wmma::load_matrix_sync(acc, c, c_layout == wmma::mem_row_major ? N : M, c_layout);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(d, acc, d_layout == wmma::mem_row_major ? N : M, d_layout);
}

template <class T, class Acc, int M, int N, int K>
void launch_tile(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, at::Tensor& d, bool a_col,
                 bool b_col, bool c_col, bool d_col, bool round_tf32) {
  using S = typename storage<T>::type;
  TORCH_CHECK(a.numel() == M * K && b.numel() == K * N && c.numel() == M * N,
              "a, b and c must hold M*K, K*N and M*N elements for the shape m", std::to_string(M), "n",
              std::to_string(N), "k", std::to_string(K));
  auto pa = static_cast<const S*>(a.data_ptr());
  auto pb = static_cast<const S*>(b.data_ptr());
  auto pc = static_cast<const Acc*>(c.data_ptr());
  auto pd = static_cast<Acc*>(d.data_ptr());
  auto cl = c_col ? wmma::mem_col_major : wmma::mem_row_major;
  auto dl = d_col ? wmma::mem_col_major : wmma::mem_row_major;
  using R = wmma::row_major;
  using C = wmma::col_major;
  if (!a_col && !b_col) tile_kernel<T, Acc, M, N, K, R, R><<<1, 32>>>(pa, pb, pc, pd, cl, dl, round_tf32);
  if (!a_col && b_col) tile_kernel<T, Acc, M, N, K, R, C><<<1, 32>>>(pa, pb, pc, pd, cl, dl, round_tf32);
  if (a_col && !b_col) tile_kernel<T, Acc, M, N, K, C, R><<<1, 32>>>(pa, pb, pc, pd, cl, dl, round_tf32);
  if (a_col && b_col) tile_kernel<T, Acc, M, N, K, C, C><<<1, 32>>>(pa, pb, pc, pd, cl, dl, round_tf32);
  CHECK_LAUNCH();
}

template <class T, class Acc>
void tile_shapes(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, at::Tensor& d, int64_t m,
                 int64_t n, int64_t k, bool a_col, bool b_col, bool c_col, bool d_col) {
  if (m == 16 && n == 16 && k == 16) return launch_tile<T, Acc, 16, 16, 16>(a, b, c, d, a_col, b_col, c_col, d_col, false);
  if (m == 32 && n == 8 && k == 16) return launch_tile<T, Acc, 32, 8, 16>(a, b, c, d, a_col, b_col, c_col, d_col, false);
  if (m == 8 && n == 32 && k == 16) return launch_tile<T, Acc, 8, 32, 16>(a, b, c, d, a_col, b_col, c_col, d_col, false);
  TORCH_CHECK(false, "the shape must be m16n16k16, m32n8k16 or m8n32k16, got m", std::to_string(m), "n",
              std::to_string(n), "k", std::to_string(k));
}

// d = a b + c for one tile. a, b: float16, bfloat16, int8 (m16n16k16, m32n8k16, m8n32k16), float32
// (as tf32, m16n16k8; rounded in the fragment unless round_tf32 is false) or float64 (m8n8k4);
// c: float32 (int32 for int8, float64 for float64). a_col: a holds A column by column (A^T's rows).
at::Tensor wmma_tile(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, int64_t m, int64_t n, int64_t k,
                     bool a_col, bool b_col, bool c_col, bool d_col, bool round_tf32) {
  CHECK_INPUT(a);
  CHECK_INPUT(b);
  CHECK_INPUT(c);
  CHECK_SAME_DTYPE(a, b);
  auto d = at::empty({m, n}, c.options());
  switch (a.scalar_type()) {
    case at::kHalf: CHECK_DTYPE(c, at::kFloat); tile_shapes<__half, float>(a, b, c, d, m, n, k, a_col, b_col, c_col, d_col); break;
    case at::kBFloat16: CHECK_DTYPE(c, at::kFloat); tile_shapes<__nv_bfloat16, float>(a, b, c, d, m, n, k, a_col, b_col, c_col, d_col); break;
    case at::kChar: CHECK_DTYPE(c, at::kInt); tile_shapes<signed char, int>(a, b, c, d, m, n, k, a_col, b_col, c_col, d_col); break;
    case at::kFloat:
      CHECK_DTYPE(c, at::kFloat);
      TORCH_CHECK(m == 16 && n == 16 && k == 8, "tf32 tiles are m16n16k8");
      launch_tile<wmma::precision::tf32, float, 16, 16, 8>(a, b, c, d, a_col, b_col, c_col, d_col, round_tf32);
      break;
    case at::kDouble:
      CHECK_DTYPE(c, at::kDouble);
      TORCH_CHECK(m == 8 && n == 8 && k == 4, "double tiles are m8n8k4");
      launch_tile<double, double, 8, 8, 4>(a, b, c, d, a_col, b_col, c_col, d_col, false);
      break;
    default: TORCH_CHECK(false, "a must be float16, bfloat16, int8, float32 or float64, got ", a.scalar_type());
  }
  return d;
}

// =============================================================================================
// wmma_matmul: a block of 4 warps owns a 32x32 tile of D = A B (row-major, any M, N, K). At each
// step of TK along K it stages a 32 x TK tile of A and a TK x 32 tile of B in shared memory, zero
// outside the matrices, so the fragments never read past an edge; each warp multiplies its 16x16
// quarter into an accumulator kept across the loop. D goes out through shared memory, in bounds.
constexpr int TILE = 32;

template <class T, int TK>
__global__ void matmul_kernel(const typename storage<T>::type* a, const typename storage<T>::type* b, float* d,
                              int M, int N, int K) {
  using S = typename storage<T>::type;
  __shared__ __align__(32) S as[TILE * TK];
  __shared__ __align__(32) S bs[TK * TILE];
  __shared__ __align__(32) float ds[TILE * TILE];
  const int warp = threadIdx.x / 32, wr = warp / 2, wc = warp % 2;
  const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
  wmma::fragment<wmma::accumulator, 16, 16, TK, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  for (int k0 = 0; k0 < K; k0 += TK) {
    for (int i = threadIdx.x; i < TILE * TK; i += blockDim.x) {
      int ar = row0 + i / TK, ac = k0 + i % TK;
      as[i] = (ar < M && ac < K) ? a[int64_t(ar) * K + ac] : S{};
      int br = k0 + i / TILE, bc = col0 + i % TILE;
      bs[i] = (br < K && bc < N) ? b[int64_t(br) * N + bc] : S{};
    }
    __syncthreads();  // the tiles are complete before any warp loads a fragment
    wmma::fragment<wmma::matrix_a, 16, 16, TK, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, TK, T, wmma::row_major> fb;
    wmma::load_matrix_sync(fa, as + wr * 16 * TK, TK);
    wmma::load_matrix_sync(fb, bs + wc * 16, TILE);
    round_to_tf32(fa);
    round_to_tf32(fb);
    wmma::mma_sync(acc, fa, fb, acc);
    __syncthreads();  // every warp has read the tiles before the next step overwrites them
  }
  wmma::store_matrix_sync(ds + wr * 16 * TILE + wc * 16, acc, TILE, wmma::mem_row_major);
  __syncthreads();  // all four quarters are in ds
  for (int i = threadIdx.x; i < TILE * TILE; i += blockDim.x) {
    int r = row0 + i / TILE, c = col0 + i % TILE;
    if (r < M && c < N) d[int64_t(r) * N + c] = ds[i];
  }
}

// d = a b in float32; a (M x K) and b (K x N) float16, bfloat16 or float32 (multiplied as tf32)
at::Tensor wmma_matmul(const at::Tensor& a, const at::Tensor& b) {
  CHECK_INPUT(a);
  CHECK_INPUT(b);
  CHECK_DIM(a, 2);
  CHECK_DIM(b, 2);
  CHECK_SAME_DTYPE(a, b);
  TORCH_CHECK(a.size(1) == b.size(0), "a is M x K and b K x N, got ", shape_str(a.sizes()), " and ",
              shape_str(b.sizes()));
  const int M = a.size(0), K = a.size(1), N = b.size(1);
  auto d = at::empty({M, N}, a.options().dtype(at::kFloat));
  if (M == 0 || N == 0) return d;
  if (K == 0) return d.zero_();
  dim3 grid(ceil_div(N, TILE), ceil_div(M, TILE));
  switch (a.scalar_type()) {
    case at::kHalf:
      matmul_kernel<__half, 16><<<grid, 128>>>(static_cast<const __half*>(a.data_ptr()),
                                               static_cast<const __half*>(b.data_ptr()), d.data_ptr<float>(), M, N, K);
      break;
    case at::kBFloat16:
      matmul_kernel<__nv_bfloat16, 16><<<grid, 128>>>(static_cast<const __nv_bfloat16*>(a.data_ptr()),
                                                      static_cast<const __nv_bfloat16*>(b.data_ptr()),
                                                      d.data_ptr<float>(), M, N, K);
      break;
    case at::kFloat:
      matmul_kernel<wmma::precision::tf32, 8><<<grid, 128>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                                             d.data_ptr<float>(), M, N, K);
      break;
    default: TORCH_CHECK(false, "a must be float16, bfloat16 or float32, got ", a.scalar_type());
  }
  CHECK_LAUNCH();
  return d;
}

// =============================================================================================
// wmma_axpby: D = alpha (s A) B + beta C for one 16x16x16 tile, element by element in x[] the way
// CUDA's own WMMA sample combines C: which element x[i] holds does not matter to such code.
__global__ void axpby_kernel(const __half* a, const __half* b, const float* c, float* d, float s, float alpha,
                             float beta) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc, fc;
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  for (int i = 0; i < fa.num_elements; ++i) fa.x[i] = __hmul(fa.x[i], __float2half(s));
  wmma::fill_fragment(acc, 0.0f);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
  for (int i = 0; i < fc.num_elements; ++i) fc.x[i] = alpha * acc.x[i] + beta * fc.x[i];
  wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
}

at::Tensor wmma_axpby(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, double s, double alpha,
                      double beta) {
  CHECK_INPUT(a);
  CHECK_INPUT(b);
  CHECK_INPUT(c);
  CHECK_DTYPE(a, at::kHalf);
  CHECK_DTYPE(b, at::kHalf);
  CHECK_DTYPE(c, at::kFloat);
  TORCH_CHECK(a.numel() == 256 && b.numel() == 256 && c.numel() == 256, "a, b and c must be 16 x 16");
  auto d = at::empty({16, 16}, c.options());
  axpby_kernel<<<1, 32>>>(static_cast<const __half*>(a.data_ptr()), static_cast<const __half*>(b.data_ptr()),
                          c.data_ptr<float>(), d.data_ptr<float>(), static_cast<float>(s), static_cast<float>(alpha),
                          static_cast<float>(beta));
  CHECK_LAUNCH();
  return d;
}

// =============================================================================================
// wmma_fill: a 16x16 accumulator filled with `value`, stored into out (16 x 24 floats) with
// ldm 24, so the last 8 columns (row-major) or rows (column-major) of out are never written.
__global__ void fill_kernel(float value, float* out, wmma::layout_t layout) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, value);
  wmma::store_matrix_sync(out, acc, 24, layout);
}

void wmma_fill(at::Tensor& out, double value, bool col) {
  CHECK_INPUT(out);
  CHECK_DTYPE(out, at::kFloat);
  TORCH_CHECK(out.numel() == 16 * 24, "out must hold 16 x 24 floats, got ", shape_str(out.sizes()));
  fill_kernel<<<1, 32>>>(static_cast<float>(value), out.data_ptr<float>(),
                         col ? wmma::mem_col_major : wmma::mem_row_major);
  CHECK_LAUNCH();
}

// =============================================================================================
// wmma_counts: num_elements per lane of the fragment types, in the order the test lists them
std::vector<int64_t> wmma_counts() {
  using namespace wmma;
  using tf32 = precision::tf32;
  return {
      fragment<matrix_a, 16, 16, 16, __half, row_major>::num_elements,
      fragment<matrix_b, 16, 16, 16, __half, col_major>::num_elements,
      fragment<accumulator, 16, 16, 16, float>::num_elements,
      fragment<accumulator, 16, 16, 16, __half>::num_elements,
      fragment<matrix_a, 32, 8, 16, __half, row_major>::num_elements,
      fragment<matrix_b, 32, 8, 16, __half, row_major>::num_elements,
      fragment<matrix_a, 8, 32, 16, __half, row_major>::num_elements,
      fragment<matrix_a, 16, 16, 16, __nv_bfloat16, row_major>::num_elements,
      fragment<matrix_a, 32, 8, 16, __nv_bfloat16, row_major>::num_elements,
      fragment<matrix_b, 32, 8, 16, __nv_bfloat16, row_major>::num_elements,
      fragment<matrix_a, 8, 32, 16, __nv_bfloat16, col_major>::num_elements,
      fragment<matrix_b, 8, 32, 16, __nv_bfloat16, col_major>::num_elements,
      fragment<matrix_a, 16, 16, 8, tf32, row_major>::num_elements,
      fragment<matrix_b, 16, 16, 8, tf32, col_major>::num_elements,
      fragment<accumulator, 16, 16, 8, float>::num_elements,
      fragment<matrix_a, 16, 16, 16, signed char, row_major>::num_elements,
      fragment<accumulator, 16, 16, 16, int>::num_elements,
      fragment<matrix_a, 8, 8, 4, double, row_major>::num_elements,
      fragment<accumulator, 8, 8, 4, double>::num_elements,
  };
}

// =============================================================================================
// to_tf32: wmma::__float_to_tf32 (cvt.rna.tf32.f32) on every element
__global__ void to_tf32_kernel(const float* x, float* out, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = wmma::__float_to_tf32(x[i]);
}

at::Tensor to_tf32(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  auto out = at::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return out;
  to_tf32_kernel<<<ceil_div(n, 256), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
  return out;
}

// =============================================================================================
// registration
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("wmma_tile(Tensor a, Tensor b, Tensor c, int m, int n, int k, bool a_col, bool b_col, bool c_col, "
        "bool d_col, bool round_tf32) -> Tensor");
  m.def("wmma_matmul(Tensor a, Tensor b) -> Tensor");
  m.def("wmma_axpby(Tensor a, Tensor b, Tensor c, float s, float alpha, float beta) -> Tensor");
  m.def("wmma_fill(Tensor(a!) out, float value, bool col) -> ()");
  m.def("wmma_counts() -> int[]", &wmma_counts);
  m.def("to_tf32(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("wmma_tile", &wmma_tile);
  m.impl("wmma_matmul", &wmma_matmul);
  m.impl("wmma_axpby", &wmma_axpby);
  m.impl("wmma_fill", &wmma_fill);
  m.impl("to_tf32", &to_tf32);
}
