// cudasim_round.h: rounding to the small floating-point formats of cuda_fp16.h, cuda_bf16.h and
// cuda_fp8.h (half, bfloat16, fp8 e4m3 and e5m2) in any of CUDA's four rounding modes, from a double
// or from a 64-bit integer, with the encodings' overflow rules. One implementation for every
// conversion that is not float -> half or float -> bfloat16 to nearest (those have fast paths that
// match PyTorch bit for bit).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace cudasim {

// CUDA's rounding modes, as the suffixes of its conversion functions say them.
enum class Round : unsigned char { Nearest, Zero, Down, Up };  // _rn, _rz, _rd, _ru

// A binary format: `mant` stored mantissa bits, `exp` exponent bits. IEEE-like formats keep the top
// exponent for infinity and NaN; fp8 e4m3 ("fn": finite) uses it for numbers too and has one NaN.
struct SmallFormat {
  int mant, exp;
  bool has_inf;
};
inline constexpr SmallFormat kHalfFormat{10, 5, true};
inline constexpr SmallFormat kBf16Format{7, 8, true};
inline constexpr SmallFormat kE4M3Format{3, 4, false};
inline constexpr SmallFormat kE5M2Format{2, 5, true};
inline constexpr SmallFormat kFloatFormat{23, 8, true};  // for integers to float in a rounding mode

// Where the discarded part of a magnitude lies, in units of the last kept bit.
enum class Rest : unsigned char { None, Below, Half, Above };

CUDASIM_INTERNAL inline uint32_t max_finite_bits(const SmallFormat& f) {
  uint32_t top = (1u << f.exp) - (f.has_inf ? 2u : 1u);
  uint32_t mant = (1u << f.mant) - (f.has_inf ? 1u : 2u);  // e4m3: all ones is NaN
  return top << f.mant | mant;
}
CUDASIM_INTERNAL inline uint32_t nan_bits(const SmallFormat& f) { return (1u << (f.mant + f.exp)) - 1u; }

// The encoding of (-1)^neg * r * 2^q, whose discarded part is `rest`, rounded in `mode`. With
// `satfinite` (fp8's __NV_SATFINITE) an overflow gives the largest finite value, else what the format
// does: infinity, or NaN for e4m3; rounding towards zero never overflows to infinity.
CUDASIM_INTERNAL inline uint32_t encode_rounded(bool neg, uint64_t r, int q, Rest rest, Round mode,
                                                const SmallFormat& f, bool satfinite = false) {
  const uint32_t sign = neg ? 1u << (f.mant + f.exp) : 0u;
  bool up = false;
  switch (mode) {
    case Round::Nearest: up = rest == Rest::Above || (rest == Rest::Half && (r & 1u)); break;
    case Round::Zero: break;
    case Round::Down: up = neg && rest != Rest::None; break;
    case Round::Up: up = !neg && rest != Rest::None; break;
  }
  r += up;
  const uint64_t one = 1ull << f.mant;
  if (r >= 2 * one) {  // a carry into the next binade
    r >>= 1;
    q += 1;
  }
  const int bias = (1 << (f.exp - 1)) - 1;
  if (r == 0) return sign;
  uint32_t bits;
  if (r < one) {
    bits = static_cast<uint32_t>(r);  // a subnormal: q is the smallest quantum
  } else {
    long long field = static_cast<long long>(q) + f.mant + bias;
    bits = field >= (1ll << f.exp) ? ~0u : static_cast<uint32_t>(field << f.mant | (r - one));
  }
  if (bits > max_finite_bits(f)) {
    bool to_max = satfinite || mode == Round::Zero || (mode == Round::Down && !neg) || (mode == Round::Up && neg);
    if (to_max) return sign | max_finite_bits(f);
    return sign | (f.has_inf ? ((1u << f.exp) - 1u) << f.mant : nan_bits(f));  // e4m3: a NaN of that sign
  }
  return sign | bits;
}

// A double rounded to the format. `tail` is what `x` lacks of the exact value (0 when x is exact;
// used by fused multiply-adds, whose exact result a double may not hold); only to nearest uses it.
CUDASIM_INTERNAL inline uint32_t round_double(double x, Round mode, const SmallFormat& f, bool satfinite = false,
                                              double tail = 0.0) {
  const bool neg = std::signbit(x);
  const uint32_t sign = neg ? 1u << (f.mant + f.exp) : 0u;
  if (std::isnan(x)) return nan_bits(f);
  if (std::isinf(x)) {  // exact in every mode; no infinity in e4m3
    if (satfinite) return sign | max_finite_bits(f);
    return sign | (f.has_inf ? ((1u << f.exp) - 1u) << f.mant : nan_bits(f));
  }
  const double a = std::fabs(x);
  if (a == 0.0) return sign;
  const int emin = 2 - (1 << (f.exp - 1));
  int e;
  std::frexp(a, &e);
  const int q = (e - 1 > emin ? e - 1 : emin) - f.mant;  // the value of the last kept bit is 2^q
  const double n = std::ldexp(a, -q);                     // exact: a power-of-two scaling
  const double whole = std::floor(n), frac = n - whole;
  const double t = neg ? -tail : tail;  // the tail in the direction of growing magnitude
  Rest rest = frac == 0.0 ? Rest::None : frac < 0.5 ? Rest::Below : frac > 0.5 ? Rest::Above : Rest::Half;
  if (rest == Rest::Half && t != 0.0) rest = t > 0 ? Rest::Above : Rest::Below;
  return encode_rounded(neg, static_cast<uint64_t>(whole), q, rest, mode, f, satfinite);
}

// A 64-bit integer (its magnitude and sign) rounded to the format, exactly.
CUDASIM_INTERNAL inline uint32_t round_integer(bool neg, unsigned long long u, Round mode, const SmallFormat& f,
                                               bool satfinite = false) {
  if (u == 0) return 0u;
  const int top = 63 - __builtin_clzll(u);
  const int q = top - f.mant;
  if (q <= 0) return encode_rounded(neg, u << -q, q, Rest::None, mode, f, satfinite);
  const unsigned long long low = u & ((1ull << q) - 1), half = 1ull << (q - 1);
  Rest rest = low == 0 ? Rest::None : low < half ? Rest::Below : low > half ? Rest::Above : Rest::Half;
  return encode_rounded(neg, u >> q, q, rest, mode, f, satfinite);
}

template <class I>
CUDASIM_INTERNAL inline uint32_t round_any_integer(I v, Round mode, const SmallFormat& f) {
  if constexpr (std::is_signed_v<I>) {
    bool neg = v < 0;
    unsigned long long u = neg ? 0ull - static_cast<unsigned long long>(static_cast<long long>(v))
                               : static_cast<unsigned long long>(v);
    return round_integer(neg, u, mode, f);
  } else {
    return round_integer(false, static_cast<unsigned long long>(v), mode, f);
  }
}

// A float value converted to an integer type in `mode`, as the GPU's cvt does: NaN gives 0 for types of
// 32 bits or fewer and 0x8000000000000000 for 64-bit ones (signed or not; the H100 agrees), values
// outside the type's range give its minimum or maximum.
template <class I>
CUDASIM_INTERNAL inline I to_integer(double v, Round mode) {
  if (std::isnan(v)) return sizeof(I) == 8 ? static_cast<I>(1ull << 63) : I(0);
  double r;
  switch (mode) {
    case Round::Nearest: r = std::nearbyint(v); break;  // the default rounding mode: ties to even
    case Round::Zero: r = std::trunc(v); break;
    case Round::Down: r = std::floor(v); break;
    default: r = std::ceil(v); break;
  }
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi_excl = 2.0 * static_cast<double>(std::numeric_limits<I>::max() / 2 + 1);  // 2^bits
  if (r <= lo) return std::numeric_limits<I>::min();
  if (r >= hi_excl) return std::numeric_limits<I>::max();
  return static_cast<I>(r);
}

}  // namespace cudasim
