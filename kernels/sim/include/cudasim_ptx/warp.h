// cudasim_ptx/warp.h: warp-wide PTX that the simulator's warp operations already provide
// (shfl.sync, vote.sync, redux.sync, activemask, bar.warp.sync, elect.sync), named barriers
// (bar.sync/barrier.sync with an id and a thread count, bar.arrive), and the instructions that
// only check their operands (setmaxnreg, nanosleep).
#pragma once
#include "core.h"

namespace cudasim {
namespace ptx {

// shfl.sync.{up,down,bfly,idx}.b32 d[|p], a, b, c, membermask. c packs the segment mask (bits
// 8-12) and the clamp lane (bits 0-4); CUDA's __shfl*_sync(width) give c = ((32 - width) << 8) |
// clamp, with clamp 0 for up and 31 otherwise, and those are the forms the simulator runs.
enum class Shfl { up, down, bfly, idx };
CUDASIM_INTERNAL inline uint32_t shfl_sync(const Site& s, Shfl mode, uint32_t a, uint32_t b, uint32_t c, uint32_t mask,
                                           bool* p) {
  uint32_t seg = (c >> 8) & 0x1F, clamp = c & 0x1F;
  uint32_t width = 32 - seg;
  bool pow2 = width && !(width & (width - 1));
  uint32_t want_clamp = mode == Shfl::up ? 0 : 0x1F;
  if (!pow2 || (clamp & (width - 1)) != (want_clamp & (width - 1)))
    fail_at(s, "the c operand " + hex(c) + " is not one the simulator runs: it takes ((32 - width) << 8) | clamp "
            "with width a power of two and clamp 31 (0 for .up), as __shfl*_sync(..., width) compile to");
  WarpOp op = mode == Shfl::up ? WarpOp::ShflUp : mode == Shfl::down ? WarpOp::ShflDown
            : mode == Shfl::bfly ? WarpOp::ShflXor : WarpOp::ShflIdx;
  uint32_t lane = lane_of_cur(), base = lane & ~(width - 1), top = base + width - 1;
  uint32_t v = shfl_(op, mask, a, static_cast<int>(b), s.file, s.line, static_cast<int>(width));
  if (p) {
    long long j = mode == Shfl::up ? 1ll * lane - (b & 31) : mode == Shfl::down ? 1ll * lane + (b & 31)
                : mode == Shfl::bfly ? 1ll * (lane ^ (b & 31)) : 1ll * (base | (b & (width - 1)));
    *p = mode == Shfl::up ? j >= static_cast<long long>(base) : j <= static_cast<long long>(top);
  }
  return v;
}

enum class Vote { all, any, uni, ballot };
CUDASIM_INTERNAL inline uint32_t vote_sync(const Site& s, Vote mode, bool a, uint32_t mask) {
  switch (mode) {
    case Vote::ballot: return static_cast<uint32_t>(vote_(WarpOp::Ballot, mask, a, s.file, s.line));
    case Vote::all: return static_cast<uint32_t>(vote_(WarpOp::All, mask, a, s.file, s.line));
    case Vote::any: return static_cast<uint32_t>(vote_(WarpOp::Any, mask, a, s.file, s.line));
    default: {
      bool all = vote_(WarpOp::All, mask, a, s.file, s.line) != 0;
      bool any = vote_(WarpOp::Any, mask, a, s.file, s.line) != 0;
      return all || !any;
    }
  }
}

enum class Redux { add_, min_, max_, and_, or_, xor_ };
CUDASIM_INTERNAL inline uint32_t redux_sync(const Site& s, Redux op, bool is_signed, uint32_t a, uint32_t mask) {
  switch (op) {
    case Redux::add_: return reduce_any<uint32_t>(WarpOp::ReduceAdd, mask, a, s.file, s.line);
    case Redux::and_: return reduce_any<uint32_t>(WarpOp::ReduceAnd, mask, a, s.file, s.line);
    case Redux::or_: return reduce_any<uint32_t>(WarpOp::ReduceOr, mask, a, s.file, s.line);
    case Redux::xor_: return reduce_any<uint32_t>(WarpOp::ReduceXor, mask, a, s.file, s.line);
    case Redux::min_:
      return is_signed ? static_cast<uint32_t>(reduce_any<int>(WarpOp::ReduceMin, mask, static_cast<int>(a), s.file, s.line))
                       : reduce_any<uint32_t>(WarpOp::ReduceMin, mask, a, s.file, s.line);
    default:
      return is_signed ? static_cast<uint32_t>(reduce_any<int>(WarpOp::ReduceMax, mask, static_cast<int>(a), s.file, s.line))
                       : reduce_any<uint32_t>(WarpOp::ReduceMax, mask, a, s.file, s.line);
  }
}

CUDASIM_INTERNAL inline uint32_t activemask(const Site& s) { return static_cast<uint32_t>(activemask_(s.file, s.line)); }

CUDASIM_INTERNAL inline void bar_warp_sync(const Site& s, uint32_t mask) { SyncwarpAt{s.file, s.line}(mask); }

// elect.sync d|p, membermask: the lowest lane of the mask that takes part is the leader.
CUDASIM_INTERNAL inline uint32_t elect_sync(const Site& s, uint32_t mask, bool& leader) {
  uint32_t ballot = static_cast<uint32_t>(vote_(WarpOp::Ballot, mask, 1, s.file, s.line));
  uint32_t l = ballot ? static_cast<uint32_t>(__builtin_ctz(ballot)) : 0;
  leader = l == lane_of_cur();
  return l;
}

// Named barriers: bar.sync id, count / barrier.sync id, count (the threads count, a multiple of 32,
// meet at barrier id) and bar.arrive id, count (a producer marks its arrival and goes on). Barrier 0
// with no count (or the whole block) is __syncthreads.
//
// For the race check a named barrier of the whole block orders the block's accesses as __syncthreads does (also
// where some threads only arrive: that errs towards no report). One for a part of the block is a hand-off, as PTX
// defines it: every participant's accesses before its arrival come before the accesses of the threads that waited
// there (bar.sync) after their wait; a thread that only arrived (bar.arrive) waits for nothing, so its later
// accesses stay unordered, and so do those of the threads that take no part. The check follows it with the
// mbarriers' vector clocks (cudasim_check.h), the barrier's record standing for an mbarrier's address.
struct NamedBarrier {
  uint32_t expected = 0, arrived = 0;
  unsigned long long generation = 0;
  int line = 0;
  const char* file = nullptr;
};
CUDASIM_RT_STATE PerBlock<NamedBarrier> named_barriers;

CUDASIM_INTERNAL inline void named_barrier(const Site& s, bool arrive_only, uint32_t id, uint32_t count, bool has_count) {
  SimScope scope;
  if (id > 15) fail_at(s, "the barrier id must be 0 to 15, got " + std::to_string(id));
  const size_t slot = static_cast<size_t>(me(s).cta) * 16 + id;  // each block of a cluster has its own 16
  if (has_count && (count == 0 || count % 32 || count > static_cast<uint32_t>(g.cta_threads) + 31))
    fail_at(s, "the thread count must be a non-zero multiple of 32 up to the block's threads, got " +
               std::to_string(count));
  const uint32_t whole = (static_cast<uint32_t>(g.cta_threads) + 31) / 32 * 32;  // the block's threads, in warps
  if (!arrive_only && (!has_count || count >= static_cast<uint32_t>(g.cta_threads))) {
    if (id == 0) {
      barrier(BarKind::Plain, 0, s.file, s.line, -1000 - s.line);
      return;
    }
    count = whole;
  }
  NamedBarrier& b = named_barriers.at(slot);
  if (b.arrived == 0) b.expected = count;
  if (b.expected != count)
    fail_at(s, "barrier " + std::to_string(id) + " is in use with a count of " + std::to_string(b.expected) +
               " threads (first arrival at " + base_name(b.file) + ":" + std::to_string(b.line) + "), this one says " +
               std::to_string(count));
  if (b.arrived == 0) {
    b.file = s.file;
    b.line = s.line;
  }
  unsigned long long mine = b.generation;
  const bool part = count < whole;
  if (part) CUDASIM_EVENT(mbar_release(&b, me(s).linear));  // what this thread did so far, for the waiters
  b.arrived += 1;  // threads are counted one by one (a GPU counts whole warps: keep warps converged)
  moved_on();
  if (b.arrived >= b.expected) {
    b.arrived = 0;
    b.generation += 1;
    if (!part) {
      CUDASIM_EVENT(barrier_released());  // for the race check: orders the block's accesses, as __syncthreads
      return;
    }
    CUDASIM_EVENT(mbar_completed(&b, mine));
  } else {
    if (arrive_only) return;
    wait_until(s, [&] { return named_barriers.at(slot).generation != mine; }, [&] {
      return "deadlock: barrier " + std::to_string(id) + " waits for " + std::to_string(b.expected) + " threads and " +
             std::to_string(b.arrived) + " have arrived; no other thread can arrive";
    });
  }
  if (part && !arrive_only) CUDASIM_EVENT(mbar_acquire(&named_barriers.at(slot), static_cast<long long>(mine)));
}

CUDASIM_INTERNAL inline void nanosleep(uint32_t) { yield_thread(); }

// setmaxnreg only moves registers between warpgroups on a GPU; here it checks its operand.
CUDASIM_INTERNAL inline void setmaxnreg(const Site& s, uint32_t n) {
  if (n < 24 || n > 256 || n % 8)
    fail_at(s, "the register count must be a multiple of 8 from 24 to 256, got " + std::to_string(n));
}

}  // namespace ptx
}  // namespace cudasim
