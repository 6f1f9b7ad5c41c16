// cudasim_ptx/wgmma.h: Hopper's warpgroup matrix multiply: wgmma.fence, wgmma.mma_async (m64nNk16 on
// f16 and bf16 inputs, f32 or f16 accumulators, A from registers or a shared-memory matrix
// descriptor, B from a descriptor, the scale and transpose immediates; m64nNk32 on the 8-bit floats
// e4m3 and e5m2, A and B from K-major descriptors), wgmma.commit_group and wgmma.wait_group.
//
// Asynchronous, as on the GPU. At wgmma.mma_async the accumulator registers receive poison (a NaN)
// and the operation waits in its warp's queue. A wgmma.wait_group that completes a group waits until
// all four warps of the warpgroup have committed it (the operation is the warpgroup's), then the
// group's operations of all four warps read shared memory and multiply; each warp's results reach the
// variables its accumulator operands name at that warp's own wait. So a thread that reads its
// accumulators before the wait gets NaN, one that writes them is an error, and a copy (TMA, cp.async,
// stmatrix, a PTX store) into shared memory that an operation still in flight reads is an error
// naming both lines (a stage released before the wgmma that reads it completed, or read before the
// copy into it landed). Consecutive operations on the same accumulators chain, as PTX allows. The
// matrix descriptors and their layouts (no swizzle, 32, 64, 128-byte swizzle; K-major or MN-major)
// are the PTX ISA's canonical layouts.
#pragma once
#include "async.h"

#include <unordered_map>
#include <unordered_set>

namespace cudasim {
namespace ptx {

// A 32-bit accumulator: the asm's register (which gets poison now) and the variable it names
// (which gets the result at the wait).
struct Acc {
  void* temp;
  void* home;
};
template <class T, class H>
CUDASIM_INTERNAL inline Acc acc(T& temp, H& home) {
  static_assert(sizeof(T) == 4 && sizeof(H) == 4, "wgmma accumulators are 32-bit registers (\"+f\" or \"+r\")");
  return Acc{&temp, &home};
}

struct Desc {
  uint64_t start, lbo, sbo;
  int base, layout, bits, width;
};
// `cta_base`: where the issuing block's shared memory starts in the window (a cluster's block of rank r: r *
// kCtaStride); a descriptor's start address is an offset in the block's own shared memory.
CUDASIM_INTERNAL inline Desc decode_desc(uint64_t d, uint64_t cta_base) {
  Desc x;
  x.start = cta_base + ((d & 0x3FFF) << 4);
  x.lbo = ((d >> 16) & 0x3FFF) << 4;
  x.sbo = ((d >> 32) & 0x3FFF) << 4;
  x.base = static_cast<int>((d >> 49) & 7);
  x.layout = static_cast<int>((d >> 62) & 3);
  static const int bits[] = {0, 3, 2, 1}, width[] = {16, 128, 64, 32};
  x.bits = bits[x.layout];
  x.width = width[x.layout];
  return x;
}

// The shared address of element (i along M or N, k along K) of an operand of `bytes` per element (2,
// or 1 for the 8-bit floats, which are K-major only): the canonical layouts, then the swizzle of the
// address. A core matrix is 8 rows of 16 bytes: 8 k of a 16-bit type, 16 k of an 8-bit one.
// The element size is a template argument: this runs once per element read, and a size known at compile time
// keeps the divisions shifts.
template <int BYTES>
CUDASIM_INTERNAL inline uint64_t desc_elem_of(const Desc& d, bool mn_major, int i, int k) {
  constexpr int per_core = 16 / BYTES;
  uint64_t off;
  if (!mn_major) {
    off = d.layout == 0 ? (i % 8) * 16 + (i / 8) * d.sbo + (k / per_core) * d.lbo + (k % per_core) * BYTES
                        : (i % 8) * d.width + (i / 8) * d.sbo + k * BYTES;
  } else if (d.layout == 0) {
    off = (i % 8) * 2 + (i / 8) * d.sbo + (k % 8) * 16 + (k / 8) * d.lbo;
  } else {
    int per_row = d.width / 2;
    off = (i % per_row) * 2 + (i / per_row) * d.lbo + (k % 8) * d.width + (k / 8) * d.sbo;
  }
  return swizzle(d.start + off, d.bits);
}

struct Range {
  uint64_t lo, hi;
};

// Bytes per element and the K of one instruction (16 for 16-bit inputs, 32 for 8-bit ones).
CUDASIM_INTERNAL inline int elem_bytes(Ty t) { return t == Ty::e4m3 || t == Ty::e5m2 ? 1 : 2; }

struct WgOp {
  Site site;
  int n = 0, nd = 0;
  Ty dt = Ty::f32, at = Ty::bf16, bt = Ty::bf16;
  bool a_regs = false, scale_d = true;
  int sa = 1, sb = 1, ta = 0, tb = 0;
  uint64_t adesc = 0, bdesc = 0;
  uint64_t cta_base = 0;             // the issuing block's shared memory (decode_desc)
  unsigned long long group = ~0ull;  // ~0 until committed
  std::vector<Acc> accs;             // 32 * nd, lane by lane
  std::vector<uint32_t> start;       // the accumulators' values at issue
  uint32_t a[32][4];
  std::vector<Range> reads;
};

// A result computed and not yet in its variable: the value and the group that made it.
struct WgValue {
  uint32_t value;
  unsigned long long group;
};

struct WgWarp {
  std::vector<WgOp> ops;  // issued and not yet computed, in issue order
  unsigned long long committed = 0;
  uint32_t fenced = 0;  // lanes that executed wgmma.fence since their last wait
  std::unordered_map<void*, WgValue> values;  // by the variable it goes to
};

struct WgState {
  unsigned long long gen = ~0ull;
  std::vector<WgWarp> warps;
};
CUDASIM_RT_STATE WgState wg_state;

CUDASIM_INTERNAL inline WgWarp& wg_warp(const Site& s, int warp) {
  if (wg_state.gen != g.block_gen) {
    wg_state.gen = g.block_gen;
    wg_state.warps.assign(static_cast<size_t>((g.nthreads + 31) / 32), WgWarp{});
  }
  (void)s;
  return wg_state.warps.at(static_cast<size_t>(warp));
}

// When a block ends, nothing of it may be in flight: its threads never waited for the results.
CUDASIM_INTERNAL inline void wgmma_block_end() {
  if (wg_state.gen != g.block_gen) return;
  for (auto& w : wg_state.warps)
    if (!w.ops.empty()) {
      const Site o = w.ops.front().site;  // a copy: the state goes now
      wg_state.warps.clear();
      fail_at(o, "the block ended with this wgmma.mma_async still in flight: every wgmma must be waited for "
              "(wgmma.wait_group) before its threads exit; its accumulators never received its results");
    }
}
#ifndef CUDASIM_PREBUILT_RUNTIME  // made by the runtime object where a build links it
inline const bool wgmma_block_end_registered = (block_end_checks.push_back(&wgmma_block_end), true);
#endif

CUDASIM_INTERNAL inline void check_async_readers(const Site& s, const unsigned char* p, uint64_t n, const char* what) {
  check_bulk_readers(s, p, n, what);  // a bulk store's source (async.h)
  if (wg_state.gen != g.block_gen || !in_arena(p)) return;
  uint64_t lo = window_offset(p), hi = lo + n;
  for (auto& w : wg_state.warps)
    for (auto& op : w.ops)
      for (const Range& r : op.reads)
        if (lo < r.hi && r.lo < hi)
          fail_at(s, std::string(what) + " writes shared memory [" + hex(lo) + ", " + hex(hi) + ") that the "
                  "wgmma.mma_async issued at " + at_line(op.site) + " still reads: that wgmma has not completed "
                  "(no wgmma.wait_group has covered it yet). Release a buffer only after the wgmma that reads it "
                  "is waited for, and read a buffer only after the copy into it has completed");
}

CUDASIM_INTERNAL inline void wgmma_fence(const Site& s) {
  SimScope scope;
  Thread& t = me(s);
  wg_warp(s, t.linear / 32).fenced |= 1u << (t.linear & 31);
}

struct WgJob : WarpJob {
  Site site;
  int n, nd;
  Ty dt, at, bt;
  bool a_regs, scale_d;
  int sa, sb, ta, tb;
  uint64_t adesc, bdesc;
  Acc* accs;
  const uint32_t* a;
};

template <int BYTES>
CUDASIM_INTERNAL inline void add_reads_of(const Site& s, WgOp& op, uint64_t desc, bool mn_major, int i0, int rows) {
  constexpr int bytes = BYTES;
  Desc d = decode_desc(desc, op.cta_base);
  if (d.base) fail_at(s, "a matrix descriptor with a non-zero base offset (bits 49-51) is not simulated");
  uint64_t lo = ~0ull, hi = 0;
  for (int i = i0; i < i0 + rows; ++i)
    for (int k = 0; k < 32 / bytes; ++k) {
      uint64_t a = desc_elem_of<BYTES>(d, mn_major, i, k);
      if (a + bytes > kWindow || !shared_in_use(a, bytes))
        fail_at(s, "the matrix descriptor " + hex(desc) + " (start " + hex(d.start) + ", leading byte offset " +
                std::to_string(d.lbo) + ", stride byte offset " + std::to_string(d.sbo) + ", layout " +
                std::to_string(d.layout) + ") reaches shared address " + hex(a) + " for element (" +
                std::to_string(i) + ", k=" + std::to_string(k) + "), outside the block's shared memory: " +
                shared_layout());
      lo = std::min(lo, a);
      hi = std::max(hi, a + bytes);
    }
  op.reads.push_back(Range{lo, hi});
}
CUDASIM_INTERNAL inline void add_reads(const Site& s, WgOp& op, uint64_t desc, bool mn_major, int i0, int rows,
                                      int bytes) {
  if (bytes == 1) add_reads_of<1>(s, op, desc, mn_major, i0, rows);
  else add_reads_of<2>(s, op, desc, mn_major, i0, rows);
}

CUDASIM_INTERNAL inline void wgmma_issue_run(WarpJob* const* lanes) {
  auto* j0 = static_cast<WgJob*>(lanes[0]);
  const Site& s = j0->site;
  int warp = j0->self->linear / 32;
  if ((j0->self->local / 128 + 1) * 128 > g.cta_threads)
    fail_at(s, "wgmma runs on a warpgroup of 4 warps (128 threads), but warp " + std::to_string(j0->self->local / 32) +
            "'s warpgroup is incomplete: the block has " + std::to_string(g.cta_threads) + " threads");
  WgWarp& w = wg_warp(s, warp);
  for (int l = 0; l < 32; ++l) {
    auto* j = static_cast<WgJob*>(lanes[l]);
    if (!(w.fenced >> l & 1u)) {
      blame(j);
      fail_at(s, "wgmma.mma_async without a wgmma.fence since this thread's last wgmma.wait_group (or since it "
              "started): PTX requires wgmma.fence before the first wgmma.mma_async and whenever the accumulator "
              "or A registers were touched by other instructions");
    }
    if (j->adesc != j0->adesc || j->bdesc != j0->bdesc || j->scale_d != j0->scale_d) {
      blame(j);
      fail_at(s, "lane " + std::to_string(l) + " passed other descriptors or scale-d than lane 0: they must be the "
              "same in the whole warpgroup");
    }
  }
  WgOp op;
  op.site = s;
  op.n = j0->n;
  op.nd = j0->nd;
  op.dt = j0->dt;
  op.at = j0->at;
  op.bt = j0->bt;
  op.a_regs = j0->a_regs;
  op.scale_d = j0->scale_d;
  op.sa = j0->sa;
  op.sb = j0->sb;
  op.ta = j0->ta;
  op.tb = j0->tb;
  op.adesc = j0->adesc;
  op.bdesc = j0->bdesc;
  op.cta_base = static_cast<uint64_t>(j0->self->cta) * kCtaStride;
  op.accs.resize(static_cast<size_t>(32 * op.nd));
  op.start.resize(op.accs.size());
  int wq = warp % 4;
  if (!op.a_regs) add_reads(s, op, op.adesc, op.ta != 0, 16 * wq, 16, elem_bytes(op.at));
  add_reads(s, op, op.bdesc, op.tb != 0, 0, op.n, elem_bytes(op.bt));
  for (int l = 0; l < 32; ++l) {
    auto* j = static_cast<WgJob*>(lanes[l]);
    std::memcpy(op.a[l], j->a, sizeof op.a[l]);
    for (int r = 0; r < op.nd; ++r) {
      Acc x = j->accs[r];
      op.accs[static_cast<size_t>(l * op.nd + r)] = x;
      std::memcpy(&op.start[static_cast<size_t>(l * op.nd + r)], x.temp, 4);
      std::memset(x.temp, 0xFF, 4);  // the register is the wgmma's until the wait
    }
  }
  w.ops.push_back(std::move(op));
}

CUDASIM_INTERNAL inline void wgmma_mma(const Site& s, int n, Ty dt, Ty at, Ty bt, bool a_regs, Acc* accs,
                                       const uint32_t* a, uint64_t adesc, uint64_t bdesc, bool scale_d, int sa, int sb,
                                       int ta, int tb) {
  SimScope scope;
  if (sa != 1 && sa != -1) fail_at(s, "imm-scale-a must be 1 or -1");
  if (sb != 1 && sb != -1) fail_at(s, "imm-scale-b must be 1 or -1");
  if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1)) fail_at(s, "imm-trans-a and imm-trans-b must be 0 or 1");
  WgJob job;
  job.run = &wgmma_issue_run;
  job.name = s.op;
  job.site = s;
  job.n = n;
  job.nd = dt == Ty::f32 ? n / 2 : n / 4;
  job.dt = dt;
  job.at = at;
  job.bt = bt;
  job.a_regs = a_regs;
  job.scale_d = scale_d;
  job.sa = sa;
  job.sb = sb;
  job.ta = ta;
  job.tb = tb;
  job.adesc = adesc;
  job.bdesc = bdesc;
  job.accs = accs;
  job.a = a;
  warp_collective(job, s.file, s.line);
}

struct WgSimpleJob : WarpJob {
  Site site;
  uint32_t n;
};

CUDASIM_INTERNAL inline void wgmma_commit_run(WarpJob* const* lanes) {
  auto* j0 = static_cast<WgSimpleJob*>(lanes[0]);
  WgWarp& w = wg_warp(j0->site, j0->self->linear / 32);
  for (WgOp& op : w.ops)
    if (op.group == ~0ull) op.group = w.committed;
  w.committed += 1;
}

CUDASIM_INTERNAL inline void wgmma_commit(const Site& s) {
  SimScope scope;
  WgSimpleJob job;
  job.run = &wgmma_commit_run;
  job.name = s.op;
  job.site = s;
  job.n = 0;
  warp_collective(job, s.file, s.line);
}

// The values of `count` rows (along M or N, from i0) x K of an operand of type t, read through descriptor d, as the
// tensor core reads them (bf16, f16 or an 8-bit float): element (i0 + r, k) goes to out[r * row_step + k * k_step].
// The type is decided once, outside the loops.
template <int BYTES, class Value>
CUDASIM_INTERNAL inline void gather_rows(float* out, const Desc& d, bool mn_major, int i0, int count, int K,
                                         int row_step, int k_step, Value value) {
  for (int r = 0; r < count; ++r)
    for (int k = 0; k < K; ++k)
      out[static_cast<size_t>(r * row_step + k * k_step)] = value(arena + desc_elem_of<BYTES>(d, mn_major, i0 + r, k));
}
CUDASIM_INTERNAL inline void gather_operand(float* out, Ty t, const Desc& d, bool mn_major, int i0, int count, int K,
                                            int row_step, int k_step) {
  auto bits16 = [](const unsigned char* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  };
  switch (t) {
    case Ty::e4m3:
      return gather_rows<1>(out, d, mn_major, i0, count, K, row_step, k_step,
                            [](const unsigned char* p) { return fp8_value(*p, true); });
    case Ty::e5m2:
      return gather_rows<1>(out, d, mn_major, i0, count, K, row_step, k_step,
                            [](const unsigned char* p) { return fp8_value(*p, false); });
    case Ty::bf16:
      return gather_rows<2>(out, d, mn_major, i0, count, K, row_step, k_step,
                            [&](const unsigned char* p) { return bf16_bits_to_float(bits16(p)); });
    default:
      return gather_rows<2>(out, d, mn_major, i0, count, K, row_step, k_step,
                            [&](const unsigned char* p) { return half_bits_to_float(bits16(p)); });
  }
}

CUDASIM_INTERNAL inline WgValue* value_of(WgWarp& w, void* home) {
  auto it = w.values.find(home);
  return it == w.values.end() ? nullptr : &it->second;
}

// Run one operation for its warp: D (16 rows of this warp x N) = A x B + (scale-d ? D : 0), with K 16 (16-bit
// inputs) or 32 (8-bit).
CUDASIM_INTERNAL inline void wgmma_execute(WgWarp& w, WgOp& op, int warp) {
  const int n = op.n, wq = warp % 4, K = 32 / elem_bytes(op.at);
  std::vector<float> a(static_cast<size_t>(16 * K)), b(static_cast<size_t>(K * n)), d(static_cast<size_t>(16 * n));
  if (op.a_regs) {
    for (int l = 0; l < 32; ++l)
      for (int r = 0; r < 4; ++r)
        for (int e = 0; e < 2; ++e) {
          RC x = a_elem<16, Ty::bf16>(l, r, e);
          a[static_cast<size_t>(x.r * K + x.c)] =
              op.at == Ty::bf16 ? operand_part<Ty::bf16>(op.a[l][r], e) : operand_part<Ty::f16>(op.a[l][r], e);
        }
  } else {
    Desc da = decode_desc(op.adesc, op.cta_base);
    gather_operand(a.data(), op.at, da, op.ta, 16 * wq, 16, K, K, 1);  // a[m * K + k]
  }
  Desc db = decode_desc(op.bdesc, op.cta_base);
  gather_operand(b.data(), op.bt, db, op.tb, 0, n, K, 1, n);  // b[k * n + c]
  for (const Range& r : op.reads) note_read(arena + r.lo, r.hi - r.lo, op.site.file, op.site.line);
  // gather D (16 x n) from the lanes: f32 register r of lane l is (row gid + 8 * ((r >> 1) & 1),
  // column 8 * (r >> 2) + 2 * tig + (r & 1)); an f16 register holds two such elements
  auto place = [&](int lane, int idx) { return ((lane >> 2) + 8 * ((idx >> 1) & 1)) * n + 8 * (idx >> 2) + 2 * (lane & 3) + (idx & 1); };
  const bool f32 = op.dt == Ty::f32;
  for (int l = 0; l < 32; ++l)
    for (int r = 0; r < op.nd; ++r) {
      const Acc& x = op.accs[static_cast<size_t>(l * op.nd + r)];
      const WgValue* known = value_of(w, x.home);
      uint32_t v = known ? known->value : op.start[static_cast<size_t>(l * op.nd + r)];
      if (f32) {
        float f;
        std::memcpy(&f, &v, 4);
        d[static_cast<size_t>(place(l, r))] = op.scale_d ? f : 0.0f;
      } else {
        for (int e = 0; e < 2; ++e)
          d[static_cast<size_t>(place(l, 2 * r + e))] = op.scale_d ? half_bits_to_float(static_cast<uint16_t>(v >> (16 * e))) : 0.0f;
      }
    }
  const float sab = static_cast<float>(op.sa * op.sb);
  for (int m = 0; m < 16; ++m)
    for (int k = 0; k < K; ++k) {
      const float av = a[static_cast<size_t>(m * K + k)] * sab;
      float* drow = &d[static_cast<size_t>(m * n)];
      const float* brow = &b[static_cast<size_t>(k * n)];
      for (int c = 0; c < n; ++c) drow[c] += av * brow[c];
    }
  for (int l = 0; l < 32; ++l)
    for (int r = 0; r < op.nd; ++r) {
      uint32_t v;
      if (f32) {
        std::memcpy(&v, &d[static_cast<size_t>(place(l, r))], 4);
      } else {
        v = to_f16_bits(d[static_cast<size_t>(place(l, 2 * r))], false) |
            (static_cast<uint32_t>(to_f16_bits(d[static_cast<size_t>(place(l, 2 * r + 1))], false)) << 16);
      }
      w.values[op.accs[static_cast<size_t>(l * op.nd + r)].home] = WgValue{v, op.group};
    }
}

// Compute the operations of warp `warp` in groups below `below`.
CUDASIM_INTERNAL inline void wgmma_complete(int warp, unsigned long long below) {
  WgWarp& w = wg_state.warps.at(static_cast<size_t>(warp));
  size_t done = 0;
  while (done < w.ops.size() && w.ops[done].group != ~0ull && w.ops[done].group < below)
    wgmma_execute(w, w.ops[done++], warp);
  w.ops.erase(w.ops.begin(), w.ops.begin() + static_cast<long>(done));
}

struct WgWaitJob : WarpJob {
  Site site;
  unsigned long long below;
  const void* stack_top;  // below every live frame of the lane: what lies under it has gone out of scope
};

// An address below the caller's frames (a function of its own, so that inlining cannot move it).
__attribute__((noinline)) CUDASIM_INTERNAL inline const void* below_callers() {
  return __builtin_frame_address(0);  // this function's own frame: the stack grows down, below every caller's
}

CUDASIM_INTERNAL inline void wgmma_wait_run(WarpJob* const* lanes) {
  auto* j0 = static_cast<WgWaitJob*>(lanes[0]);
  const Site& s = j0->site;
  const int warp = j0->self->linear / 32, first = warp / 4 * 4, last = std::min(first + 4, (g.nthreads + 31) / 32);
  const unsigned long long below = j0->below;
  for (int v = first; v < last; ++v) wgmma_complete(v, below);  // the warpgroup's operations
  // their reads (this thread's, for the race check) are over for the whole warpgroup, not only for this warp
  CUDASIM_EVENT(group_completed(first * 32, (last - first) * 32));
  WgWarp& w = wg_warp(s, warp);
  std::unordered_set<void*> pending;  // variables an operation still in flight writes again
  for (const WgOp& op : w.ops)
    for (const Acc& x : op.accs) pending.insert(x.home);
  auto still_used = [&](void* home) { return pending.count(home) != 0; };
  for (auto it = w.values.begin(); it != w.values.end();) {
    void* home = it->first;
    if (it->second.group >= below || still_used(home)) {
      ++it;
      continue;
    }
    // the lane whose stack holds the variable (accumulators are usually its locals)
    const uintptr_t h = reinterpret_cast<uintptr_t>(home);
    for (int l = 0; l < 32; ++l) {
      auto* lane_job = static_cast<WgWaitJob*>(lanes[l]);
      Thread* t = lane_job->self;
      const uintptr_t lo = reinterpret_cast<uintptr_t>(t->stack) + kGuardBytes;
      if (!t->stack || h < lo || h >= lo + t->stack_size) continue;
      g.cur = t;
      if (h < reinterpret_cast<uintptr_t>(lane_job->stack_top))
        fail_at(s, "the variable a wgmma accumulates into went out of scope before this wgmma.wait_group: keep "
                "the accumulators alive (for example in the kernel's own frame, passed by reference) until the wait");
    }
    uint32_t now;
    std::memcpy(&now, home, 4);
    if (now != 0xFFFFFFFFu)
      fail_at(s, "an accumulator register of a wgmma.mma_async was written before this wgmma.wait_group completed "
              "it: the registers belong to the wgmma until then (PTX leaves touching them undefined)");
    std::memcpy(home, &it->second.value, 4);
    it = w.values.erase(it);
  }
  w.fenced = 0;
}

CUDASIM_INTERNAL inline void wgmma_wait(const Site& s, uint32_t n) {
  SimScope scope;
  if (n > 7) fail_at(s, "the group count must be 0 to 7, got " + std::to_string(n));
  Thread& t = me(s);
  const int warp = t.linear / 32, first = warp / 4 * 4, last = std::min(first + 4, (g.nthreads + 31) / 32);
  const unsigned long long committed = wg_warp(s, warp).committed, below = committed > n ? committed - n : 0;
  // the other threads run first (what they do meanwhile happens while the wgmma is in flight), and
  // the warpgroup's other warps must have committed the groups this wait completes
  yield_thread();
  wait_until(s, [&] {
    for (int v = first; v < last; ++v)
      if (wg_warp(s, v).committed < below) return false;
    return true;
  }, [&] {
    int late = last - 1;
    for (int v = last - 1; v >= first; --v)
      if (wg_warp(s, v).committed < below) late = v;
    return "deadlock: this wait completes wgmma group " + std::to_string(below - 1) + " of the warpgroup, but warp " +
           std::to_string(late) + " has committed only " + std::to_string(wg_warp(s, late).committed) +
           " group(s) and cannot go on: all four warps of a warpgroup issue the same wgmma.mma_async and "
           "wgmma.commit_group";
  });
  WgWaitJob job;
  job.run = &wgmma_wait_run;
  job.name = s.op;
  job.site = s;
  job.below = below;
  job.stack_top = below_callers();
  warp_collective(job, s.file, s.line);
}

}  // namespace ptx
}  // namespace cudasim
