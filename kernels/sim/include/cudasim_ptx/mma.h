// cudasim_ptx/mma.h: the warp-level tensor-core instructions: mma.sync.aligned (m16n8k4, m16n8k8,
// m16n8k16, m16n8k32), ldmatrix and stmatrix (.m8n8 .x1/.x2/.x4, .trans).
//
// Each is a warp-wide call (cudasim::warp_collective): all 32 lanes must execute it together, and
// the last lane to arrive does the warp's work at once. Which lane holds which element of A, B, C
// and D is the PTX ISA's fragment layout ("Matrix Fragments for mma.m16n8k*"), so code that builds
// fragments by hand, or with ldmatrix, gets the GPU's answer. Products are exact; they are added
// to C in float (int for 8-bit inputs) in the order k = 0, 1, ...: a GPU may add in another order,
// so float results agree with it to rounding, integer results bit for bit.
#pragma once
#include "alu.h"

namespace cudasim {
namespace ptx {

// ---------------------------------------------------------------------------------------------
// element <-> (register, part) maps; gid = lane / 4, tig = lane % 4
struct RC {
  int r, c;
};

// A (16 x K): register j, part e (the e-th element packed in the register, from the low bits)
template <int K, Ty A>
CUDASIM_INTERNAL inline RC a_elem(int lane, int j, int e) {
  int gid = lane >> 2, tig = lane & 3;
  if constexpr (A == Ty::tf32) {
    return K == 8 ? RC{gid + 8 * (j & 1), tig + 4 * (j >> 1)} : RC{gid + 8 * j, tig};
  } else if constexpr (A == Ty::f16 || A == Ty::bf16) {
    return K == 16 ? RC{gid + 8 * (j & 1), tig * 2 + e + 8 * (j >> 1)} : RC{gid + 8 * j, tig * 2 + e};
  } else {  // 8-bit
    return K == 32 ? RC{gid + 8 * (j & 1), tig * 4 + e + 16 * (j >> 1)} : RC{gid + 8 * j, tig * 4 + e};
  }
}
// B (K x 8): (k, n)
template <int K, Ty B>
CUDASIM_INTERNAL inline RC b_elem(int lane, int j, int e) {
  int gid = lane >> 2, tig = lane & 3;
  if constexpr (B == Ty::tf32) return RC{tig + 4 * j, gid};
  else if constexpr (B == Ty::f16 || B == Ty::bf16) return RC{tig * 2 + e + 8 * j, gid};
  else return RC{tig * 4 + e + 16 * j, gid};
}
// C and D (16 x 8): 32-bit elements one per register, 16-bit ones two per register
template <Ty T>
CUDASIM_INTERNAL inline RC cd_elem(int lane, int j, int e) {
  int gid = lane >> 2, tig = lane & 3;
  if constexpr (T == Ty::f16) return RC{gid + 8 * j, tig * 2 + e};
  else return RC{gid + 8 * (j >> 1), tig * 2 + (j & 1)};
}

template <Ty T>
constexpr int parts_per_reg = (T == Ty::f16 || T == Ty::bf16) ? 2 : (T == Ty::tf32 || T == Ty::f32 || T == Ty::s32) ? 1 : 4;

// The 8-bit floats (e4m3, e5m2) as the tensor core reads them.
CUDASIM_INTERNAL inline float fp8_value(uint8_t v, bool e4m3) {
  int sign = v >> 7;
  int exp = e4m3 ? (v >> 3) & 15 : (v >> 2) & 31;
  int man = e4m3 ? v & 7 : v & 3;
  int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  float r;
  if (e4m3 && exp == 15 && man == 7) r = NAN;
  else if (!e4m3 && exp == 31) r = man ? NAN : INFINITY;
  else if (exp == 0) r = std::ldexp(static_cast<float>(man), 1 - bias - mbits);
  else r = std::ldexp(static_cast<float>(man + (1 << mbits)), exp - bias - mbits);
  return sign ? -r : r;
}

// One element of a register as the tensor core reads it (in float, or int for 8-bit integers).
template <Ty T>
CUDASIM_INTERNAL inline auto operand_part(uint32_t reg, int e) {
  if constexpr (T == Ty::f16) return half_bits_to_float(static_cast<uint16_t>(reg >> (16 * e)));
  else if constexpr (T == Ty::bf16) return bf16_bits_to_float(static_cast<uint16_t>(reg >> (16 * e)));
  else if constexpr (T == Ty::tf32) {  // the tensor core ignores the 13 low mantissa bits
    uint32_t u = reg;
    if ((u & 0x7F800000u) != 0x7F800000u) u &= ~0x1FFFu;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  } else if constexpr (T == Ty::s8) return static_cast<int>(static_cast<int8_t>(reg >> (8 * e)));
  else if constexpr (T == Ty::u8) return static_cast<int>(static_cast<uint8_t>(reg >> (8 * e)));
  else return fp8_value(static_cast<uint8_t>(reg >> (8 * e)), T == Ty::e4m3);
}

template <class Job>
CUDASIM_INTERNAL inline void blame(const Job* j) { g.cur = j->self; }

// ---------------------------------------------------------------------------------------------
// mma.sync.aligned.m16n8kK.row.col.D.A.B.C
struct MmaJob : WarpJob {
  const uint32_t* a;
  const uint32_t* b;
  const uint32_t* c;
  uint32_t* d;
};

template <int K, Ty D, Ty A, Ty B, Ty C, bool Satf>
CUDASIM_INTERNAL inline void mma_run(WarpJob* const* lanes) {
  constexpr bool ints = A == Ty::s8 || A == Ty::u8;
  using V = std::conditional_t<ints, int, float>;
  using S = std::conditional_t<ints, long long, float>;
  constexpr int na = 16 * K / 32 / parts_per_reg<A>, nb = K * 8 / 32 / parts_per_reg<B>;
  constexpr int nc = C == Ty::f16 ? 2 : 4, nd = D == Ty::f16 ? 2 : 4;
  V a[16 * K], b[K * 8];
  S acc[16 * 8];
  for (int l = 0; l < 32; ++l) {
    auto* j = static_cast<MmaJob*>(lanes[l]);
    for (int r = 0; r < na; ++r)
      for (int e = 0; e < parts_per_reg<A>; ++e) {
        RC x = a_elem<K, A>(l, r, e);
        a[x.r * K + x.c] = operand_part<A>(j->a[r], e);
      }
    for (int r = 0; r < nb; ++r)
      for (int e = 0; e < parts_per_reg<B>; ++e) {
        RC x = b_elem<K, B>(l, r, e);
        b[x.r * 8 + x.c] = operand_part<B>(j->b[r], e);
      }
    for (int r = 0; r < nc; ++r)
      for (int e = 0; e < (C == Ty::f16 ? 2 : 1); ++e) {
        RC x = cd_elem<C>(l, r, e);
        if constexpr (C == Ty::f16) acc[x.r * 8 + x.c] = half_bits_to_float(static_cast<uint16_t>(j->c[r] >> (16 * e)));
        else if constexpr (C == Ty::s32) acc[x.r * 8 + x.c] = static_cast<int32_t>(j->c[r]);
        else {
          float f;
          std::memcpy(&f, &j->c[r], 4);
          acc[x.r * 8 + x.c] = f;
        }
      }
  }
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < K; ++k) {
      const S av = static_cast<S>(a[r * K + k]);
      for (int c = 0; c < 8; ++c) acc[r * 8 + c] += av * static_cast<S>(b[k * 8 + c]);
    }
  for (int l = 0; l < 32; ++l) {
    auto* j = static_cast<MmaJob*>(lanes[l]);
    for (int r = 0; r < nd; ++r) {
      uint32_t out = 0;
      for (int e = 0; e < (D == Ty::f16 ? 2 : 1); ++e) {
        RC x = cd_elem<D>(l, r, e);
        S v = acc[x.r * 8 + x.c];
        if constexpr (D == Ty::f16) out |= static_cast<uint32_t>(to_f16_bits(static_cast<float>(v), false)) << (16 * e);
        else if constexpr (D == Ty::s32) {
          long long w = static_cast<long long>(v);
          out = Satf ? static_cast<uint32_t>(static_cast<int32_t>(std::clamp<long long>(w, INT32_MIN, INT32_MAX)))
                     : static_cast<uint32_t>(static_cast<unsigned long long>(w));
        } else {
          float f = static_cast<float>(v);
          std::memcpy(&out, &f, 4);
        }
      }
      j->d[r] = out;
    }
  }
}

template <int K, Ty D, Ty A, Ty B, Ty C, bool Satf>
CUDASIM_INTERNAL inline void mma_sync(const Site& s, const uint32_t* a, const uint32_t* b, const uint32_t* c, uint32_t* d) {
  MmaJob job;
  job.run = &mma_run<K, D, A, B, C, Satf>;
  job.name = s.op;
  job.a = a;
  job.b = b;
  job.c = c;
  job.d = d;
  warp_collective(job, s.file, s.line);
}

// ---------------------------------------------------------------------------------------------
// ldmatrix / stmatrix .m8n8.xN{.trans}.b16: N 8x8 matrices of 16-bit elements; row r of matrix m
// is at the address lane 8m + r gives (16 bytes, 16-byte aligned). Lane l holds, of matrix m, in
// its register m, the elements (row l/4, columns 2(l%4) and 2(l%4)+1), or with .trans (rows
// 2(l%4) and 2(l%4)+1, column l/4), the first in the low half.
struct MatrixJob : WarpJob {
  Addr addr;
  uint32_t* regs;
  Site site;
};

template <int N, bool Trans, Space Sp, bool Store>
CUDASIM_INTERNAL inline void matrix_run(WarpJob* const* lanes) {
  uint16_t m[4][8][8];
  unsigned char* rows[4][8];
  for (int mat = 0; mat < N; ++mat)
    for (int r = 0; r < 8; ++r) {
      auto* j = static_cast<MatrixJob*>(lanes[mat * 8 + r]);
      blame(j);
      rows[mat][r] = resolve(j->site, Sp, j->addr, 16, 16, "row address");
      if constexpr (Store) {
        check_async_readers(j->site, rows[mat][r], 16, "stmatrix");
        note_write(rows[mat][r], 16, j->site.file, j->site.line);
      } else {
        note_read(rows[mat][r], 16, j->site.file, j->site.line);
        std::memcpy(m[mat][r], rows[mat][r], 16);
      }
    }
  for (int l = 0; l < 32; ++l) {
    auto* j = static_cast<MatrixJob*>(lanes[l]);
    int r0 = Trans ? 2 * (l & 3) : l >> 2, c0 = Trans ? l >> 2 : 2 * (l & 3);
    for (int mat = 0; mat < N; ++mat) {
      if constexpr (Store) {
        uint32_t v = j->regs[mat];
        m[mat][r0][c0] = static_cast<uint16_t>(v);
        m[mat][Trans ? r0 + 1 : r0][Trans ? c0 : c0 + 1] = static_cast<uint16_t>(v >> 16);
      } else {
        uint32_t lo = m[mat][r0][c0], hi = m[mat][Trans ? r0 + 1 : r0][Trans ? c0 : c0 + 1];
        j->regs[mat] = lo | (hi << 16);
      }
    }
  }
  if constexpr (Store)
    for (int mat = 0; mat < N; ++mat)
      for (int r = 0; r < 8; ++r) std::memcpy(rows[mat][r], m[mat][r], 16);
}

template <int N, bool Trans, Space Sp>
CUDASIM_INTERNAL inline void ldmatrix(const Site& s, Addr a, uint32_t* d) {
  MatrixJob job;
  job.run = &matrix_run<N, Trans, Sp, false>;
  job.name = s.op;
  job.addr = a;
  job.regs = d;
  job.site = s;
  warp_collective(job, s.file, s.line);
}

template <int N, bool Trans, Space Sp>
CUDASIM_INTERNAL inline void stmatrix(const Site& s, Addr a, const uint32_t* v) {
  MatrixJob job;
  job.run = &matrix_run<N, Trans, Sp, true>;
  job.name = s.op;
  job.addr = a;
  job.regs = const_cast<uint32_t*>(v);
  job.site = s;
  warp_collective(job, s.file, s.line);
}

}  // namespace ptx
}  // namespace cudasim
