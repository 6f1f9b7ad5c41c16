// cudasim_ptx/alu.h: PTX's integer and float arithmetic, comparisons, bit operations and
// conversions, per thread. Integer results are exact (wrapping as PTX defines); float results are
// IEEE single or double with round-to-nearest-even, which is what PTX's .rn forms compute; the
// .approx functions (ex2, lg2, rcp, sqrt, rsqrt, tanh, sin, cos) use the C library, within a few
// units in the last place of the GPU's approximations. Conversions to f16, bf16 and tf32 are bit
// exact, with the GPU's canonical NaN.
#pragma once
#include "core.h"

#include <cmath>

namespace cudasim {
namespace ptx {

template <class T>
using wide_t = std::conditional_t<std::is_signed_v<T>,
               std::conditional_t<sizeof(T) == 2, int32_t, int64_t>, std::conditional_t<sizeof(T) == 2, uint32_t, uint64_t>>;
template <class T>
using unsigned_t = std::make_unsigned_t<T>;

// flush a float subnormal to a zero of its sign (.ftz)
template <class T>
CUDASIM_INTERNAL inline T flush(bool ftz, T x) {
  if constexpr (std::is_same_v<T, float>) {
    if (ftz && std::fpclassify(x) == FP_SUBNORMAL) return std::signbit(x) ? -0.0f : 0.0f;
  }
  return x;
}
// A NaN result of float arithmetic is the canonical NaN (all mantissa bits set), as on NVIDIA GPUs.
template <class T>
CUDASIM_INTERNAL inline T canonical(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(x)) {
      using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
      U bits = sizeof(T) == 4 ? U(0x7FFFFFFFu) : U(0x7FFFFFFFFFFFFFFFull);
      std::memcpy(&x, &bits, sizeof x);
    }
  }
  return x;
}
template <class T>
CUDASIM_INTERNAL inline T fresult(bool ftz, bool sat, T x) {
  x = flush(ftz, x);
  if (sat) x = std::isnan(x) ? T(0) : std::min<T>(std::max<T>(x, T(0)), T(1));
  return canonical(x);
}
template <class T>
CUDASIM_INTERNAL inline T wrap_add(T a, T b) { return static_cast<T>(static_cast<unsigned_t<T>>(a) + static_cast<unsigned_t<T>>(b)); }
template <class T>
CUDASIM_INTERNAL inline T wrap_mul(T a, T b) { return static_cast<T>(static_cast<unsigned_t<T>>(a) * static_cast<unsigned_t<T>>(b)); }

template <class T>
CUDASIM_INTERNAL inline T alu_add(bool ftz, bool sat, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return fresult(ftz, sat, flush(ftz, a) + flush(ftz, b));
  else if constexpr (std::is_same_v<T, int32_t>) {
    if (sat) return static_cast<T>(std::clamp<long long>(1ll * a + b, INT32_MIN, INT32_MAX));
    return wrap_add(a, b);
  } else return wrap_add(a, b);
}
template <class T>
CUDASIM_INTERNAL inline T alu_sub(bool ftz, bool sat, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return fresult(ftz, sat, flush(ftz, a) - flush(ftz, b));
  else if constexpr (std::is_same_v<T, int32_t>) {
    if (sat) return static_cast<T>(std::clamp<long long>(1ll * a - b, INT32_MIN, INT32_MAX));
    return static_cast<T>(static_cast<uint32_t>(a) - static_cast<uint32_t>(b));
  } else return static_cast<T>(static_cast<unsigned_t<T>>(a) - static_cast<unsigned_t<T>>(b));
}
template <class T>
CUDASIM_INTERNAL inline T alu_mul(bool ftz, bool sat, T a, T b) { return fresult(ftz, sat, flush(ftz, a) * flush(ftz, b)); }
template <class T>
CUDASIM_INTERNAL inline T alu_mul_lo(bool, bool, T a, T b) { return wrap_mul(a, b); }
template <class T>
CUDASIM_INTERNAL inline T alu_mul_hi(bool, bool, T a, T b) {
  if constexpr (sizeof(T) == 8) {
    using W = std::conditional_t<std::is_signed_v<T>, __int128, unsigned __int128>;
    return static_cast<T>((static_cast<W>(a) * static_cast<W>(b)) >> 64);
  } else {
    using W = wide_t<T>;
    return static_cast<T>((static_cast<W>(a) * static_cast<W>(b)) >> (8 * sizeof(T)));
  }
}
template <class T>
CUDASIM_INTERNAL inline wide_t<T> alu_mul_wide(bool, bool, T a, T b) {
  static_assert(sizeof(T) <= 4, "mul.wide takes 16- or 32-bit operands");
  return static_cast<wide_t<T>>(static_cast<wide_t<T>>(a) * static_cast<wide_t<T>>(b));
}
template <class T>
CUDASIM_INTERNAL inline T alu_mad(bool ftz, bool sat, T a, T b, T c) {
  return fresult(ftz, sat, std::fma(flush(ftz, a), flush(ftz, b), flush(ftz, c)));
}
template <class T>
CUDASIM_INTERNAL inline T alu_fma(bool ftz, bool sat, T a, T b, T c) { return alu_mad(ftz, sat, a, b, c); }
template <class T>
CUDASIM_INTERNAL inline T alu_mad_lo(bool, bool, T a, T b, T c) { return wrap_add(wrap_mul(a, b), c); }
template <class T>
CUDASIM_INTERNAL inline T alu_mad_hi(bool f, bool s, T a, T b, T c) { return wrap_add(alu_mul_hi(f, s, a, b), c); }
template <class T, class W>
CUDASIM_INTERNAL inline wide_t<T> alu_mad_wide(bool f, bool s, T a, T b, W c) {
  return wrap_add(alu_mul_wide(f, s, a, b), static_cast<wide_t<T>>(c));
}
template <class T>
CUDASIM_INTERNAL inline T alu_div(bool ftz, bool sat, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return fresult(ftz, sat, flush(ftz, a) / flush(ftz, b));
  else return b == 0 ? static_cast<T>(-1) : static_cast<T>(a / b);  // PTX leaves x/0 unspecified
}
template <class T>
CUDASIM_INTERNAL inline T alu_rem(bool, bool, T a, T b) { return b == 0 ? a : static_cast<T>(a % b); }
// min and max: a NaN operand loses to a number; -0.0 counts as less than +0.0.
template <class T>
CUDASIM_INTERNAL inline T alu_min(bool ftz, bool, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    a = flush(ftz, a), b = flush(ftz, b);
    if (a == 0 && b == 0) return std::signbit(a) ? a : b;
    return canonical(std::fmin(a, b));
  } else {
    return std::min(a, b);
  }
}
template <class T>
CUDASIM_INTERNAL inline T alu_max(bool ftz, bool, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    a = flush(ftz, a), b = flush(ftz, b);
    if (a == 0 && b == 0) return std::signbit(a) ? b : a;
    return canonical(std::fmax(a, b));
  } else {
    return std::max(a, b);
  }
}
template <class T>
CUDASIM_INTERNAL inline T alu_neg(bool ftz, bool, T a) {
  if constexpr (std::is_floating_point_v<T>) return flush(ftz, -a);
  else return static_cast<T>(0 - static_cast<unsigned_t<T>>(a));
}
template <class T>
CUDASIM_INTERNAL inline T alu_abs(bool ftz, bool, T a) {
  if constexpr (std::is_floating_point_v<T>) return flush(ftz, std::fabs(a));
  else return a < 0 ? alu_neg(false, false, a) : a;
}
template <class T>
CUDASIM_INTERNAL inline T alu_and(bool, bool, T a, T b) { if constexpr (std::is_same_v<T, bool>) return a && b; else return a & b; }
template <class T>
CUDASIM_INTERNAL inline T alu_or(bool, bool, T a, T b) { if constexpr (std::is_same_v<T, bool>) return a || b; else return a | b; }
template <class T>
CUDASIM_INTERNAL inline T alu_xor(bool, bool, T a, T b) { if constexpr (std::is_same_v<T, bool>) return a != b; else return a ^ b; }
template <class T>
CUDASIM_INTERNAL inline T alu_not(bool, bool, T a) { if constexpr (std::is_same_v<T, bool>) return !a; else return static_cast<T>(~a); }
template <class T>
CUDASIM_INTERNAL inline T alu_shl(bool, bool, T a, uint32_t b) {
  return b >= 8 * sizeof(T) ? T(0) : static_cast<T>(a << b);
}
template <class T>
CUDASIM_INTERNAL inline T alu_shr(bool, bool, T a, uint32_t b) {
  if (b >= 8 * sizeof(T)) return std::is_signed_v<T> && a < 0 ? T(-1) : T(0);
  return static_cast<T>(a >> b);
}
template <class T>
CUDASIM_INTERNAL inline uint32_t alu_popc(bool, bool, T a) { return static_cast<uint32_t>(__builtin_popcountll(a)); }
template <class T>
CUDASIM_INTERNAL inline uint32_t alu_clz(bool, bool, T a) {
  return a == 0 ? 8 * sizeof(T) : static_cast<uint32_t>(__builtin_clzll(a) - (64 - 8 * sizeof(T)));
}
template <class T>
CUDASIM_INTERNAL inline T alu_brev(bool, bool, T a) {
  T r = 0;
  for (unsigned i = 0; i < 8 * sizeof(T); ++i) r |= static_cast<T>(((a >> i) & 1u)) << (8 * sizeof(T) - 1 - i);
  return r;
}
template <class T>
CUDASIM_INTERNAL inline T alu_rcp(bool ftz, bool, T a) { return fresult(ftz, false, T(1) / flush(ftz, a)); }
template <class T>
CUDASIM_INTERNAL inline T alu_sqrt(bool ftz, bool, T a) { return fresult(ftz, false, std::sqrt(flush(ftz, a))); }
template <class T>
CUDASIM_INTERNAL inline T alu_rsqrt(bool ftz, bool, T a) { return fresult(ftz, false, T(1) / std::sqrt(flush(ftz, a))); }
template <class T>
CUDASIM_INTERNAL inline T alu_ex2(bool ftz, bool, T a) { return fresult(ftz, false, std::exp2(flush(ftz, a))); }
template <class T>
CUDASIM_INTERNAL inline T alu_lg2(bool ftz, bool, T a) { return fresult(ftz, false, std::log2(flush(ftz, a))); }
template <class T>
CUDASIM_INTERNAL inline T alu_tanh(bool, bool, T a) { return canonical(std::tanh(a)); }
template <class T>
CUDASIM_INTERNAL inline T alu_sin(bool ftz, bool, T a) { return fresult(ftz, false, std::sin(flush(ftz, a))); }
template <class T>
CUDASIM_INTERNAL inline T alu_cos(bool ftz, bool, T a) { return fresult(ftz, false, std::cos(flush(ftz, a))); }

// setp's comparisons: the ordered ones are false when either operand is NaN, the u forms true.
#define CUDASIM_PTX_CMP(name, expr, unordered)                                     \
  template <class T>                                                              \
  CUDASIM_INTERNAL inline bool cmp_##name(T a, T b) {                              \
    if constexpr (std::is_floating_point_v<T>)                                    \
      if (std::isnan(a) || std::isnan(b)) return unordered;                       \
    return (expr);                                                                \
  }
CUDASIM_PTX_CMP(eq, a == b, false)
CUDASIM_PTX_CMP(ne, a != b, false)
CUDASIM_PTX_CMP(lt, a < b, false)
CUDASIM_PTX_CMP(le, a <= b, false)
CUDASIM_PTX_CMP(gt, a > b, false)
CUDASIM_PTX_CMP(ge, a >= b, false)
CUDASIM_PTX_CMP(lo, static_cast<unsigned_t<T>>(a) < static_cast<unsigned_t<T>>(b), false)
CUDASIM_PTX_CMP(ls, static_cast<unsigned_t<T>>(a) <= static_cast<unsigned_t<T>>(b), false)
CUDASIM_PTX_CMP(hi, static_cast<unsigned_t<T>>(a) > static_cast<unsigned_t<T>>(b), false)
CUDASIM_PTX_CMP(hs, static_cast<unsigned_t<T>>(a) >= static_cast<unsigned_t<T>>(b), false)
CUDASIM_PTX_CMP(equ, a == b, true)
CUDASIM_PTX_CMP(neu, a != b, true)
CUDASIM_PTX_CMP(ltu, a < b, true)
CUDASIM_PTX_CMP(leu, a <= b, true)
CUDASIM_PTX_CMP(gtu, a > b, true)
CUDASIM_PTX_CMP(geu, a >= b, true)
CUDASIM_PTX_CMP(num, true, false)
CUDASIM_PTX_CMP(nan, false, true)
#undef CUDASIM_PTX_CMP

// shf.{l,r}.{wrap,clamp}.b32: shift the 64-bit value {b:a} and keep 32 bits.
template <bool Left, bool Wrap>
CUDASIM_INTERNAL inline uint32_t shf(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t n = Wrap ? (c & 31) : std::min<uint32_t>(c, 32);
  uint64_t v = (static_cast<uint64_t>(b) << 32) | a;
  return Left ? static_cast<uint32_t>((v << n) >> 32) : static_cast<uint32_t>(v >> n);
}

// prmt.b32: pick 4 bytes of {b, a} by the selectors in c.
enum class PrmtMode { standard, f4e, b4e, rc8, ecl, ecr, rc16 };
CUDASIM_INTERNAL inline uint32_t prmt(PrmtMode mode, uint32_t a, uint32_t b, uint32_t c) {
  uint8_t bytes[8];
  for (int i = 0; i < 4; ++i) {
    bytes[i] = static_cast<uint8_t>(a >> (8 * i));
    bytes[i + 4] = static_cast<uint8_t>(b >> (8 * i));
  }
  unsigned sel[4];
  unsigned s = c & 3;
  switch (mode) {
    case PrmtMode::standard:
      for (int i = 0; i < 4; ++i) sel[i] = (c >> (4 * i)) & 15;
      break;
    case PrmtMode::f4e: for (int i = 0; i < 4; ++i) sel[i] = (s + i) & 7; break;
    case PrmtMode::b4e: for (int i = 0; i < 4; ++i) sel[i] = (s - i) & 7; break;
    case PrmtMode::rc8: for (int i = 0; i < 4; ++i) sel[i] = s; break;
    case PrmtMode::ecl: { static const unsigned t[4][4] = {{0, 1, 2, 3}, {1, 1, 2, 3}, {2, 2, 2, 3}, {3, 3, 3, 3}}; for (int i = 0; i < 4; ++i) sel[i] = t[s][i]; } break;
    case PrmtMode::ecr: { static const unsigned t[4][4] = {{0, 0, 0, 0}, {0, 1, 1, 1}, {0, 1, 2, 2}, {0, 1, 2, 3}}; for (int i = 0; i < 4; ++i) sel[i] = t[s][i]; } break;
    case PrmtMode::rc16: { unsigned h = (c & 1) * 2; sel[0] = h; sel[1] = h + 1; sel[2] = h; sel[3] = h + 1; } break;
  }
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) {
    uint8_t v = bytes[sel[i] & 7];
    if (mode == PrmtMode::standard && (sel[i] & 8)) v = (v & 0x80) ? 0xFF : 0x00;  // replicate the sign bit
    out |= static_cast<uint32_t>(v) << (8 * i);
  }
  return out;
}

// lop3.b32: any function of three inputs, given by its truth table.
CUDASIM_INTERNAL inline uint32_t lop3(uint32_t a, uint32_t b, uint32_t c, uint32_t lut) {
  uint32_t out = 0;
  for (int k = 0; k < 8; ++k) {
    if (!((lut >> k) & 1)) continue;
    uint32_t ma = (k & 4) ? a : ~a, mb = (k & 2) ? b : ~b, mc = (k & 1) ? c : ~c;
    out |= ma & mb & mc;
  }
  return out;
}

template <class T>
CUDASIM_INTERNAL inline T bfe(T a, uint32_t pos, uint32_t len) {
  constexpr uint32_t bits = 8 * sizeof(T);
  pos &= 0xFF;
  len &= 0xFF;
  using U = unsigned_t<T>;
  U ua = static_cast<U>(a);
  bool sbit = std::is_signed_v<T> ? (len == 0 ? false : ((ua >> std::min(pos + len - 1, bits - 1)) & 1u)) : false;
  U out = 0;
  for (uint32_t i = 0; i < bits; ++i) {
    bool bit = i < len ? (pos + i < bits ? (ua >> (pos + i)) & 1u : sbit) : sbit;
    out |= static_cast<U>(bit) << i;
  }
  return static_cast<T>(out);
}
template <class T>
CUDASIM_INTERNAL inline T bfi(T f, T b, uint32_t pos, uint32_t len) {
  constexpr uint32_t bits = 8 * sizeof(T);
  pos &= 0xFF;
  len &= 0xFF;
  T out = b;
  for (uint32_t i = 0; i < len && pos + i < bits; ++i) {
    T bit = (f >> i) & 1u;
    out = static_cast<T>((out & ~(T(1) << (pos + i))) | (bit << (pos + i)));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Conversions.
enum class Rnd { none, rn, rz, rm, rp, rna, rni, rzi, rmi, rpi, rs };
enum class Ty { f16, bf16, tf32, f32, f64, s8, u8, s16, u16, s32, u32, s64, u64, e4m3, e5m2 };

CUDASIM_INTERNAL inline uint16_t to_bf16_bits(float f, bool satfinite) {
  if (std::isnan(f)) return 0x7FFF;  // the GPU's canonical NaN
  if (satfinite && std::isinf(f)) return f > 0 ? 0x7F7F : 0xFF7F;
  uint16_t h = float_to_bf16_bits(f);
  if (satfinite && (h & 0x7F80) == 0x7F80) return (h & 0x8000) | 0x7F7F;
  return h;
}
CUDASIM_INTERNAL inline uint16_t to_f16_bits(float f, bool satfinite) {
  if (std::isnan(f)) return 0x7FFF;
  uint16_t h = float_to_half_bits(f);
  if (satfinite && (h & 0x7C00) == 0x7C00) return (h & 0x8000) | 0x7BFF;
  return h;
}
CUDASIM_INTERNAL inline float round_toward_zero_bits(float x, int keep_mantissa) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7F800000u) != 0x7F800000u) u &= ~((1u << (23 - keep_mantissa)) - 1u);
  std::memcpy(&x, &u, 4);
  return x;
}

// cvt.{rn,rz}{.relu}{.satfinite}.{bf16x2,f16x2}.f32 d, a, b: a goes to the upper half, b to the lower.
template <bool BF16>
CUDASIM_INTERNAL inline uint32_t cvt_x2(Rnd rnd, bool relu, bool satfinite, float a, float b) {
  auto one = [&](float x) -> uint32_t {
    if (relu && !std::isnan(x) && std::signbit(x)) x = 0.0f;  // -0 too: the H100 gives +0
    if (rnd == Rnd::rz) x = round_toward_zero_bits(x, BF16 ? 7 : 23);
    uint16_t h = BF16 ? to_bf16_bits(x, satfinite) : to_f16_bits(x, satfinite);
    if (relu && std::isnan(x)) h = 0x7FFF;
    return h;
  };
  if (rnd == Rnd::rz && !BF16) {  // f16 toward zero: through double to avoid double rounding
    auto z = [&](float x) -> uint32_t {
      if (relu && !std::isnan(x) && std::signbit(x)) x = 0.0f;  // -0 too: the H100 gives +0
      if (std::isnan(x)) return 0x7FFF;
      uint16_t h = float_to_half_bits(x);
      float back = half_bits_to_float(h);
      if (std::fabs(back) > std::fabs(x)) h = static_cast<uint16_t>(h - 1);  // rounded away: step back
      if (std::isinf(half_bits_to_float(h)) && !std::isinf(x)) h = (h & 0x8000) | 0x7BFF;
      return h;
    };
    return (z(a) << 16) | z(b);
  }
  return (one(a) << 16) | one(b);
}

// cvt.rna.tf32.f32 (and .rn, .rz): the result is a float's bits with the 13 low mantissa bits zero.
CUDASIM_INTERNAL inline uint32_t cvt_tf32(Rnd rnd, float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7F800000u) == 0x7F800000u) return u;  // infinities, and NaNs as they came (the H100 keeps 0x7fc00000)
  if (rnd == Rnd::rna) u += 0x1000u;
  else if (rnd == Rnd::rn) u += 0xFFFu + ((u >> 13) & 1u);
  return u & ~0x1FFFu;
}

template <Ty T> struct ty_of;
template <> struct ty_of<Ty::f16> { using t = uint16_t; };
template <> struct ty_of<Ty::bf16> { using t = uint16_t; };
template <> struct ty_of<Ty::f32> { using t = float; };
template <> struct ty_of<Ty::f64> { using t = double; };
template <> struct ty_of<Ty::s8> { using t = int8_t; };
template <> struct ty_of<Ty::u8> { using t = uint8_t; };
template <> struct ty_of<Ty::s16> { using t = int16_t; };
template <> struct ty_of<Ty::u16> { using t = uint16_t; };
template <> struct ty_of<Ty::s32> { using t = int32_t; };
template <> struct ty_of<Ty::u32> { using t = uint32_t; };
template <> struct ty_of<Ty::s64> { using t = int64_t; };
template <> struct ty_of<Ty::u64> { using t = uint64_t; };

template <Ty T>
constexpr bool is_float_ty = T == Ty::f16 || T == Ty::bf16 || T == Ty::f32 || T == Ty::f64;

template <Ty S>
CUDASIM_INTERNAL inline double cvt_in(typename ty_of<S>::t v) {
  if constexpr (S == Ty::f16) return half_bits_to_float(v);
  else if constexpr (S == Ty::bf16) return bf16_bits_to_float(v);
  else return static_cast<double>(v);
}

CUDASIM_INTERNAL inline double round_int(Rnd r, double x) {
  switch (r) {
    case Rnd::rzi: return std::trunc(x);
    case Rnd::rmi: return std::floor(x);
    case Rnd::rpi: return std::ceil(x);
    default: return std::nearbyint(x);  // rni (the FPU rounds to nearest even)
  }
}

// cvt between integer and float types. Float to integer saturates to the destination's range (NaN
// gives 0), as PTX defines it; integer to integer wraps unless .sat.
template <Ty D, Ty S>
CUDASIM_INTERNAL inline typename ty_of<D>::t cvt(Rnd rnd, bool ftz, bool relu, bool sat, typename ty_of<S>::t v) {
  using DT = typename ty_of<D>::t;
  using ST = typename ty_of<S>::t;
  if constexpr (!is_float_ty<S> && !is_float_ty<D>) {
    if (!sat) return static_cast<DT>(v);
    long double x = static_cast<long double>(v);
    return static_cast<DT>(std::clamp<long double>(x, std::numeric_limits<DT>::min(), std::numeric_limits<DT>::max()));
  } else if constexpr (is_float_ty<S> && !is_float_ty<D>) {
    double x = cvt_in<S>(v);
    if (std::isnan(x)) return sizeof(DT) == 8 ? static_cast<DT>(1ull << 63) : DT(0);  // as the intrinsics (H100)
    x = round_int(rnd, x);
    return static_cast<DT>(std::clamp<double>(x, static_cast<double>(std::numeric_limits<DT>::min()),
                                              static_cast<double>(std::numeric_limits<DT>::max())));
  } else {
    (void)rnd;
    if constexpr (D == Ty::f64) {
      double x = is_float_ty<S> ? cvt_in<S>(v) : static_cast<double>(static_cast<ST>(v));
      if (relu && !std::isnan(x) && std::signbit(x)) x = 0;
      if (sat) x = std::isnan(x) ? 0 : std::clamp(x, 0.0, 1.0);
      return x;
    } else {
      float f;
      if constexpr (S == Ty::f64) f = static_cast<float>(v);
      else if constexpr (S == Ty::f16) f = canonical(static_cast<float>(cvt_in<S>(v)));  // a NaN: 0x7fffffff (H100)
      else if constexpr (is_float_ty<S>) f = static_cast<float>(cvt_in<S>(v));  // exact
      else f = static_cast<float>(v);                                          // to nearest
      f = flush(ftz, f);
      if (relu && !std::isnan(f) && std::signbit(f)) f = 0.0f;
      if (sat) f = std::isnan(f) ? 0.0f : std::clamp(f, 0.0f, 1.0f);
      if constexpr (D == Ty::f16) return to_f16_bits(f, false);
      else if constexpr (D == Ty::bf16) return to_bf16_bits(f, false);
      else return flush(ftz, f);
    }
  }
}

}  // namespace ptx
}  // namespace cudasim
