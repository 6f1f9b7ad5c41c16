// mma.h for the simulator: the WMMA API (nvcuda::wmma), a warp's matrix multiply-accumulate.
//
// Fragments have CUDA's shapes, element types and num_elements; load_matrix_sync,
// store_matrix_sync and mma_sync are warp-wide calls: all 32 lanes of the warp must make the same
// call with the same pointer, ldm and layout, and the call happens for the whole warp at once when
// the last lane arrives (cudasim::warp_collective). fill_fragment and x[i] are per lane, as on a GPU.
//
// Which element of the matrix each x[i] of a lane holds is not specified by CUDA (it differs
// between GPU generations). Here: a fragment of R x C elements (matrix_a: M x K, matrix_b: K x N,
// accumulator: M x N) gives lane l the D = R*C/32 elements l*D ... l*D + D - 1 of the matrix taken
// in row-major order, whatever the layout it was loaded with. Where CUDA's num_elements is larger
// than D (__half matrix_a/matrix_b fragments always have 16), x[i] holds element l*D + i % D: each
// element sits in several slots of its one lane, and mma_sync checks that they still agree.
//
// Arithmetic: products are exact in the accumulator's type and are added in order k = 0, 1, ...
// to C (float for __half, __nv_bfloat16 and tf32 inputs; a __half accumulator is rounded to half at
// the end of each mma_sync; int for 8-bit inputs, wrapping unless satf; double for double). A tf32
// operand is used as the tensor core reads it: its 13 low mantissa bits are ignored, so round with
// wmma::__float_to_tf32 first. A GPU may sum the products in another order, so results agree with
// it to rounding, not bit for bit.
// Not simulated: the sub-byte types (experimental::precision::u4, s4, b1) and bmma_sync.
#pragma once
#include "cudasim.h"

namespace nvcuda {
namespace wmma {

// cvt.rna.tf32.f32: keep 10 mantissa bits, rounding to nearest with ties away from zero; the
// result is a float whose 13 low mantissa bits are zero. NaN and infinity are kept.
CUDASIM_INTERNAL inline float __float_to_tf32(float in) {
  uint32_t bits;
  std::memcpy(&bits, &in, 4);
  if ((bits & 0x7F800000u) != 0x7F800000u) {
    bits += 0x1000u;  // half of the last kept bit: a tie rounds the magnitude up, away from zero
    bits &= ~0x1FFFu;
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
namespace precision {
struct tf32 {};
}  // namespace precision

enum layout_t { mem_row_major, mem_col_major };

template <typename T>
struct helper_traits {
  typedef T element_type;
  typedef T storage_element_type;
  typedef T fill_argument_type;
};
template <>
struct helper_traits<precision::tf32> {
  typedef precision::tf32 element_type;
  typedef float storage_element_type;
  typedef float fill_argument_type;
};

template <typename T, int size, int packed_size = size>
struct alignas(8) __frag_base {
  enum { num_elements = size };
  enum { num_storage_elements = packed_size };
  typedef T element_type;
  typedef typename helper_traits<T>::storage_element_type storage_element_type;
  storage_element_type x[num_storage_elements];
};

template <typename T, int size, int packed_size>
CUDASIM_INTERNAL inline void fill_fragment(__frag_base<T, size, packed_size>& f,
                          const typename helper_traits<T>::fill_argument_type& in) {
  for (int i = 0; i < packed_size; ++i) f.x[i] = in;
}

}  // namespace wmma
}  // namespace nvcuda

namespace cudasim {
namespace wmma {
using namespace ::nvcuda::wmma;

template <class A, class B>
inline constexpr bool same = std::is_same_v<A, B>;
template <int M, int N, int K>
inline constexpr bool k16_shape = (M == 16 && N == 16 && K == 16) || (M == 32 && N == 8 && K == 16) ||
                                  (M == 8 && N == 32 && K == 16);
// The shapes and types CUDA has (mma.h of CUDA 13, without the experimental sub-byte ones).
template <class T, int M, int N, int K>
inline constexpr bool multiplicand_ok =
    ((same<T, __half> || same<T, __nv_bfloat16> || same<T, signed char> || same<T, unsigned char>) &&
     k16_shape<M, N, K>) ||
    (same<T, precision::tf32> && M == 16 && N == 16 && K == 8) || (same<T, double> && M == 8 && N == 8 && K == 4);
template <class T, int M, int N, int K>
inline constexpr bool accumulator_ok =
    (same<T, float> && (k16_shape<M, N, K> || (M == 16 && N == 16 && K == 8))) ||
    ((same<T, __half> || same<T, int>) && k16_shape<M, N, K>) || (same<T, double> && M == 8 && N == 8 && K == 4);

template <class Use, int M, int N, int K>
inline constexpr int rows = same<Use, matrix_b> ? K : M;
template <class Use, int M, int N, int K>
inline constexpr int cols = same<Use, matrix_a> ? K : N;
// CUDA's num_elements: R*C/32, except 16 for every __half matrix_a/matrix_b fragment.
template <class Use, int M, int N, int K, class T>
inline constexpr int count = (same<T, __half> && !same<Use, accumulator>) ? 16 : rows<Use, M, N, K> * cols<Use, M, N, K> / 32;

}  // namespace wmma
}  // namespace cudasim

namespace nvcuda {
namespace wmma {

template <typename Use, int m, int n, int k, typename T, typename Layout = void>
class fragment : public __frag_base<T, ::cudasim::wmma::count<Use, m, n, k, T>> {
  static_assert(std::is_same_v<Use, matrix_a> || std::is_same_v<Use, matrix_b> || std::is_same_v<Use, accumulator>,
                "a wmma::fragment is a matrix_a, matrix_b or accumulator");
  static_assert(std::is_same_v<Use, accumulator> || std::is_same_v<Layout, row_major> ||
                    std::is_same_v<Layout, col_major>,
                "a matrix_a or matrix_b fragment takes a layout: wmma::row_major or wmma::col_major");
  static_assert(!std::is_same_v<Use, accumulator> || std::is_void_v<Layout>,
                "an accumulator fragment takes no layout (give mem_row_major or mem_col_major to "
                "load_matrix_sync and store_matrix_sync)");
  static_assert(std::is_same_v<Use, accumulator> || ::cudasim::wmma::multiplicand_ok<T, m, n, k>,
                "no such WMMA multiplicand: __half, __nv_bfloat16, signed char and unsigned char come in "
                "m16n16k16, m32n8k16 and m8n32k16; precision::tf32 in m16n16k8; double in m8n8k4");
  static_assert(!std::is_same_v<Use, accumulator> || ::cudasim::wmma::accumulator_ok<T, m, n, k>,
                "no such WMMA accumulator: float or __half (int for 8-bit inputs) in m16n16k16, m32n8k16 and "
                "m8n32k16; float in m16n16k8; double in m8n8k4");
};

}  // namespace wmma
}  // namespace nvcuda

namespace cudasim {
namespace wmma {

template <class Frag>
struct frag_traits;
template <class Use, int M, int N, int K, class T, class L>
struct frag_traits<fragment<Use, M, N, K, T, L>> {
  using use = Use;
  using type = T;
  using storage = typename helper_traits<T>::storage_element_type;
  static constexpr int m = M, n = N, k = K;
  static constexpr int R = rows<Use, M, N, K>, C = cols<Use, M, N, K>;
  static constexpr int D = R * C / 32;  // distinct elements per lane
  static constexpr int slots = count<Use, M, N, K, T>;
  static constexpr bool col = same<L, col_major>;
};

// The matrix element (row, column) that slot i of `lane` holds.
template <class Frag>
CUDASIM_INTERNAL inline void element_of(int lane, int i, int& r, int& c) {
  using F = frag_traits<Frag>;
  int e = lane * F::D + i % F::D;
  r = e / F::C;
  c = e % F::C;
}

CUDASIM_INTERNAL inline void blame(WarpJob* job) { g.cur = job->self; }

[[noreturn]] CUDASIM_INTERNAL inline void fail_at(WarpJob* job, const char* file, int line, const std::string& what) {
  blame(job);
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s at %s:%d: ", job->name, base_name(file).c_str(), line);
  fail(buf + what);
}

// A load or store: the warp's common pointer, leading dimension and layout, and each lane's fragment.
template <class Frag, class Ptr>
struct MemJob : WarpJob {
  Frag* frag;
  Ptr p;
  unsigned ldm;
  bool col;
  const char* file;
  int line;
};

// Every lane must pass the same pointer, ldm and layout; the pointer 256-bit aligned and ldm a
// multiple of 16 bytes, as CUDA requires.
template <class Job>
CUDASIM_INTERNAL inline void check_uniform(WarpJob* const* lanes, size_t elem_bytes) {
  auto* j0 = static_cast<Job*>(lanes[0]);
  for (int l = 1; l < 32; ++l) {
    auto* j = static_cast<Job*>(lanes[l]);
    if (j->p != j0->p || j->ldm != j0->ldm || j->col != j0->col) {
      char buf[300];
      std::snprintf(buf, sizeof buf,
                    "lane 0 passed (%p, ldm %u, %s) but lane %d passed (%p, ldm %u, %s); every lane of the warp "
                    "must pass the same pointer, ldm and layout",
                    static_cast<const void*>(j0->p), j0->ldm, j0->col ? "col-major" : "row-major", l,
                    static_cast<const void*>(j->p), j->ldm, j->col ? "col-major" : "row-major");
      fail_at(j, j->file, j->line, buf);
    }
  }
  if (reinterpret_cast<uintptr_t>(j0->p) % 32 != 0) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "the pointer %p is not 32-byte (256-bit) aligned, as CUDA requires",
                  static_cast<const void*>(j0->p));
    fail_at(j0, j0->file, j0->line, buf);
  }
  if (j0->ldm * elem_bytes % 16 != 0) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "ldm %u is not a multiple of 16 bytes (%zu elements of this type), as CUDA requires",
                  j0->ldm, 16 / elem_bytes);
    fail_at(j0, j0->file, j0->line, buf);
  }
}

// The warp's whole tile, reported to an instrumented build's hooks (a race or bounds check) as the
// access of the lane that runs the job: R rows (or, col-major, C columns) of contiguous elements.
template <class Frag, class Job>
CUDASIM_INTERNAL inline void note_tile(const Job* j, bool write) {
  using F = frag_traits<Frag>;
  const size_t bytes = sizeof(typename F::storage);
  const int lines = j->col ? F::C : F::R, run = j->col ? F::R : F::C;
  for (int k = 0; k < lines; ++k) {
    auto* at = const_cast<typename F::storage*>(j->p) + size_t(k) * j->ldm;
    if (write) note_write(at, run * bytes, j->file, j->line);
    else note_read(at, run * bytes, j->file, j->line);
  }
}

template <class Frag>
CUDASIM_INTERNAL inline void load_run(WarpJob* const* lanes) {
  using F = frag_traits<Frag>;
  using Job = MemJob<Frag, const typename F::storage*>;
  check_uniform<Job>(lanes, sizeof(typename F::storage));
  note_tile<Frag>(static_cast<Job*>(lanes[0]), false);
  for (int l = 0; l < 32; ++l) {
    auto* j = static_cast<Job*>(lanes[l]);
    for (int i = 0; i < F::slots; ++i) {
      int r, c;
      element_of<Frag>(l, i, r, c);
      j->frag->x[i] = j->col ? j->p[size_t(c) * j->ldm + r] : j->p[size_t(r) * j->ldm + c];
    }
  }
}

template <class Frag>
CUDASIM_INTERNAL inline void store_run(WarpJob* const* lanes) {
  using F = frag_traits<Frag>;
  using Job = MemJob<const Frag, typename F::storage*>;
  check_uniform<Job>(lanes, sizeof(typename F::storage));
  note_tile<Frag>(static_cast<Job*>(lanes[0]), true);
  for (int l = 0; l < 32; ++l) {
    auto* j = static_cast<Job*>(lanes[l]);
    for (int i = 0; i < F::D; ++i) {
      int r, c;
      element_of<Frag>(l, i, r, c);
      (j->col ? j->p[size_t(c) * j->ldm + r] : j->p[size_t(r) * j->ldm + c]) = j->frag->x[i];
    }
  }
}

// A fragment element as the tensor core reads it, in the type the products are summed in.
CUDASIM_INTERNAL inline float operand(const __half& v) { return half_bits_to_float(v.__x); }
CUDASIM_INTERNAL inline float operand(const __nv_bfloat16& v) { return bf16_bits_to_float(v.__x); }
CUDASIM_INTERNAL inline float tf32_operand(float v) {  // the tensor core reads 19 bits: sign, exponent, 10 of mantissa
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  if ((bits & 0x7F800000u) != 0x7F800000u) bits &= ~0x1FFFu;
  std::memcpy(&v, &bits, 4);
  return v;
}
CUDASIM_INTERNAL inline int operand(signed char v) { return v; }
CUDASIM_INTERNAL inline int operand(unsigned char v) { return v; }
CUDASIM_INTERNAL inline double operand(double v) { return v; }
CUDASIM_INTERNAL inline float accum(float v) { return v; }
CUDASIM_INTERNAL inline float accum(const __half& v) { return half_bits_to_float(v.__x); }
CUDASIM_INTERNAL inline int accum(int v) { return v; }
CUDASIM_INTERNAL inline double accum(double v) { return v; }
template <class T, class S>
CUDASIM_INTERNAL inline T result(S v, bool satf) {
  if constexpr (same<T, __half>) {
    return __half(__half_raw{float_to_half_bits(v)});
  } else if constexpr (same<T, int>) {
    if (satf) return static_cast<int>(std::clamp<long long>(v, INT_MIN, INT_MAX));
    return static_cast<int>(static_cast<uint32_t>(static_cast<unsigned long long>(v)));
  } else {
    return static_cast<T>(v);
  }
}

template <class Frag>
CUDASIM_INTERNAL inline auto operand_of(const Frag& f, int i) {
  if constexpr (same<typename frag_traits<Frag>::type, precision::tf32>) return tf32_operand(f.x[i]);
  else return operand(f.x[i]);
}

// The slots of a __half multiplicand that hold one element must agree (see the top of the file).
template <class Frag>
CUDASIM_INTERNAL inline void check_copies(WarpJob* job, const char* file, int line, const char* which, const Frag& f) {
  using F = frag_traits<Frag>;
  for (int i = F::D; i < F::slots; ++i) {
    if (std::memcmp(&f.x[i], &f.x[i % F::D], sizeof f.x[i]) == 0) continue;
    char buf[600];
    std::snprintf(buf, sizeof buf,
                  "the %s fragment of this lane holds two different values for one element (x[%d] and x[%d]). A "
                  "__half %s fragment keeps each element in several slots of x[] (CUDA leaves which ones "
                  "unspecified); change x[] only with the same operation on every slot, such as scaling",
                  which, i % F::D, i, which);
    fail_at(job, file, line, buf);
  }
}

// One lane's part of a load or store: fill in its job and wait for the warp.
template <class Frag, class Ptr>
CUDASIM_INTERNAL inline void memory_call(void (*run)(WarpJob* const*), const char* name, Frag* frag, Ptr p, unsigned ldm, bool col,
                        const char* file, int line) {
  MemJob<Frag, Ptr> job;
  job.run = run;
  job.name = name;
  job.frag = frag;
  job.p = p;
  job.ldm = ldm;
  job.col = col;
  job.file = file;
  job.line = line;
  warp_collective(job, file, line);
}

template <class FD, class FA, class FB, class FC>
struct MmaJob : WarpJob {
  FD* d;
  const FA* a;
  const FB* b;
  const FC* c;
  bool satf;
  const char* file;
  int line;
};

template <class FD, class FA, class FB, class FC>
CUDASIM_INTERNAL inline void mma_run(WarpJob* const* lanes) {
  using A = frag_traits<FA>;
  using B = frag_traits<FB>;
  using D = frag_traits<FD>;
  constexpr int M = A::m, N = A::n, K = A::k;
  using Prod = decltype(operand_of(std::declval<const FA&>(), 0));
  using Sum = std::conditional_t<same<Prod, int>, long long, Prod>;
  Prod a[M * K], b[K * N];
  Sum acc[M * N];
  for (int l = 0; l < 32; ++l) {
    auto* j = static_cast<MmaJob<FD, FA, FB, FC>*>(lanes[l]);
    check_copies(j, j->file, j->line, "matrix_a", *j->a);
    check_copies(j, j->file, j->line, "matrix_b", *j->b);
    int r, c;
    for (int i = 0; i < A::D; ++i) { element_of<FA>(l, i, r, c); a[r * K + c] = operand_of(*j->a, i); }
    for (int i = 0; i < B::D; ++i) { element_of<FB>(l, i, r, c); b[r * N + c] = operand_of(*j->b, i); }
    for (int i = 0; i < D::D; ++i) { element_of<FC>(l, i, r, c); acc[r * N + c] = accum(j->c->x[i]); }
  }
  // each element of D adds its K products in order k = 0, 1, ...; the loop over c innermost lets
  // the compiler vectorise across a row
  for (int r = 0; r < M; ++r)
    for (int kk = 0; kk < K; ++kk) {
      const Sum av = static_cast<Sum>(a[r * K + kk]);
      for (int c = 0; c < N; ++c) acc[r * N + c] += av * static_cast<Sum>(b[kk * N + c]);
    }
  bool satf = static_cast<MmaJob<FD, FA, FB, FC>*>(lanes[0])->satf;
  for (int l = 0; l < 32; ++l) {  // after every read: d may be the same fragment as c
    auto* j = static_cast<MmaJob<FD, FA, FB, FC>*>(lanes[l]);
    int r, c;
    for (int i = 0; i < D::D; ++i) {
      element_of<FD>(l, i, r, c);
      j->d->x[i] = result<typename D::type>(acc[r * N + c], satf);
    }
  }
}

}  // namespace wmma
}  // namespace cudasim

namespace nvcuda {
namespace wmma {

template <typename Use, int m, int n, int k, typename T, typename L>
CUDASIM_INTERNAL inline void load_matrix_sync(fragment<Use, m, n, k, T, L>& a,
                             const typename helper_traits<T>::storage_element_type* p, unsigned ldm,
                             const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  static_assert(!std::is_same_v<Use, accumulator>,
                "load_matrix_sync into an accumulator takes a layout: wmma::mem_row_major or wmma::mem_col_major");
  ::cudasim::wmma::memory_call(&::cudasim::wmma::load_run<fragment<Use, m, n, k, T, L>>, "wmma::load_matrix_sync",
                               &a, p, ldm, std::is_same_v<L, col_major>, file, line);
}

template <int m, int n, int k, typename T>
CUDASIM_INTERNAL inline void load_matrix_sync(fragment<accumulator, m, n, k, T>& a, const T* p, unsigned ldm, layout_t layout,
                             const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::cudasim::wmma::memory_call(&::cudasim::wmma::load_run<fragment<accumulator, m, n, k, T>>,
                               "wmma::load_matrix_sync", &a, p, ldm, layout == mem_col_major, file, line);
}

template <int m, int n, int k, typename T>
CUDASIM_INTERNAL inline void store_matrix_sync(T* p, const fragment<accumulator, m, n, k, T>& a, unsigned ldm, layout_t layout,
                              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::cudasim::wmma::memory_call(&::cudasim::wmma::store_run<fragment<accumulator, m, n, k, T>>,
                               "wmma::store_matrix_sync", &a, p, ldm, layout == mem_col_major, file, line);
}

template <int m, int n, int k, typename TD, typename TAB, typename LA, typename LB, typename TC>
CUDASIM_INTERNAL inline void mma_sync(fragment<accumulator, m, n, k, TD>& d, const fragment<matrix_a, m, n, k, TAB, LA>& a,
                     const fragment<matrix_b, m, n, k, TAB, LB>& b, const fragment<accumulator, m, n, k, TC>& c,
                     bool satf = false, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  constexpr bool half_in = std::is_same_v<TAB, __half>;
  constexpr bool int_in = std::is_same_v<TAB, signed char> || std::is_same_v<TAB, unsigned char>;
  constexpr bool float_in = std::is_same_v<TAB, __nv_bfloat16> || std::is_same_v<TAB, precision::tf32>;
  static_assert(!half_in || ((std::is_same_v<TC, float> || std::is_same_v<TC, __half>) &&
                             (std::is_same_v<TD, float> || std::is_same_v<TD, __half>)),
                "mma_sync with __half inputs takes float or __half accumulators");
  static_assert(!int_in || (std::is_same_v<TC, int> && std::is_same_v<TD, int>),
                "mma_sync with 8-bit integer inputs takes int accumulators");
  static_assert(!float_in || (std::is_same_v<TC, float> && std::is_same_v<TD, float>),
                "mma_sync with __nv_bfloat16 or tf32 inputs takes float accumulators");
  static_assert(!std::is_same_v<TAB, double> || (std::is_same_v<TC, double> && std::is_same_v<TD, double>),
                "mma_sync with double inputs takes double accumulators");
  using FD = fragment<accumulator, m, n, k, TD>;
  using FA = fragment<matrix_a, m, n, k, TAB, LA>;
  using FB = fragment<matrix_b, m, n, k, TAB, LB>;
  using FC = fragment<accumulator, m, n, k, TC>;
  ::cudasim::wmma::MmaJob<FD, FA, FB, FC> job;
  job.run = &::cudasim::wmma::mma_run<FD, FA, FB, FC>;
  job.name = "wmma::mma_sync";
  job.d = &d;
  job.a = &a;
  job.b = &b;
  job.c = &c;
  job.satf = satf;
  job.file = file;
  job.line = line;
  ::cudasim::warp_collective(job, file, line);
}

}  // namespace wmma
}  // namespace nvcuda
