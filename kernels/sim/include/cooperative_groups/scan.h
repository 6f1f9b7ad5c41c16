// cooperative_groups/scan.h for the simulator: inclusive_scan and exclusive_scan over a
// thread_block_tile (of one warp or several) or a coalesced_group, with cg::plus by default or any
// associative operator. Member of rank r gets op over the values of ranks 0..r (inclusive) or 0..r-1
// (exclusive; rank 0 gets a value-initialised T, as CUDA's implementation gives it).
// Not simulated: inclusive_scan_update / exclusive_scan_update (they take a cuda::atomic).
#pragma once
#include "reduce.h"

namespace cooperative_groups {
namespace details {
// A warp-level group: doubling steps of shuffles up, as a warp scans (op(mine, earlier)).
template <class Group, class V, class Op>
CUDASIM_INTERNAL inline V warp_inclusive_scan(const Group& group, V v, Op& op, const char* file, int line) {
  const unsigned n = group.size(), rank = group.thread_rank();
  for (unsigned offset = 1; offset < n; offset *= 2) {
    V other = group.shfl_up(v, offset, file, line);
    if (offset <= rank) v = op(v, other);
  }
  return v;
}

template <bool Inclusive, class Group, class T, class Op>
inline plain<T> scan(const Group& group, T&& value, Op&& op, const char* file, int line) {
  using V = plain<T>;
  if constexpr (is_multi_warp<Group>) {
    constexpr unsigned n = Group::num_threads();
    V all[n];
    const unsigned k = group.gather(static_cast<V>(value), all, file, line);
    const unsigned rank = group.thread_rank();
    if (rank >= k) return V{};  // not reached: a running thread's value is always there
    // each warp's scan, then the totals of the warps before it
    V prefix{};
    const unsigned warp = rank / 32;
    for (unsigned w = 0; w < warp; ++w) {
      V total = all[w * 32];
      for (unsigned i = w * 32 + 1; i < w * 32 + 32 && i < k; ++i) total = op(all[i], total);
      prefix = w == 0 ? total : op(total, prefix);
    }
    const unsigned first = warp * 32, upto = Inclusive ? rank : rank - 1;
    if (!Inclusive && rank == first) return prefix;  // rank 0 gets V{}
    V in_warp = all[first];
    for (unsigned i = first + 1; i <= upto; ++i) in_warp = op(all[i], in_warp);
    return warp == 0 ? in_warp : op(in_warp, prefix);
  } else {
    static_assert(std::is_base_of_v<warp_group, Group>,
                  "cg::inclusive_scan and cg::exclusive_scan take a thread_block_tile or a coalesced_group (as in CUDA)");
    V v = warp_inclusive_scan(group, static_cast<V>(value), op, file, line);
    if constexpr (Inclusive) {
      return v;
    } else {
      V before = group.shfl_up(v, 1, file, line);
      return group.thread_rank() == 0 ? V{} : before;
    }
  }
}
}  // namespace details

template <class Group, class T, class Op>
details::plain<T> inclusive_scan(const Group& group, T&& value, Op&& op, const char* file = __builtin_FILE(),
                                 int line = __builtin_LINE()) {
  return details::scan<true>(group, std::forward<T>(value), op, file, line);
}
template <class Group, class T>
details::plain<T> inclusive_scan(const Group& group, T&& value, const char* file = __builtin_FILE(),
                                 int line = __builtin_LINE()) {
  return details::scan<true>(group, std::forward<T>(value), plus<details::plain<T>>(), file, line);
}
template <class Group, class T, class Op>
details::plain<T> exclusive_scan(const Group& group, T&& value, Op&& op, const char* file = __builtin_FILE(),
                                 int line = __builtin_LINE()) {
  return details::scan<false>(group, std::forward<T>(value), op, file, line);
}
template <class Group, class T>
details::plain<T> exclusive_scan(const Group& group, T&& value, const char* file = __builtin_FILE(),
                                 int line = __builtin_LINE()) {
  return details::scan<false>(group, std::forward<T>(value), plus<details::plain<T>>(), file, line);
}

}  // namespace cooperative_groups
