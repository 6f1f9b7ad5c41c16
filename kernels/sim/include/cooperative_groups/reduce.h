// cooperative_groups/reduce.h for the simulator: cg::reduce over a tile or coalesced group, and
// the operators plus, less, greater, bit_and, bit_or, bit_xor.
#pragma once
#include "../cooperative_groups.h"

namespace cooperative_groups {

template <class T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T> struct less { T operator()(T a, T b) const { return b < a ? b : a; } };
template <class T> struct greater { T operator()(T a, T b) const { return a < b ? b : a; } };
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };

namespace details {
// op over n values the way a warp's shuffle tree combines them: pairs, then pairs of pairs, ...
template <class V, class Op>
CUDASIM_INTERNAL inline V tree_reduce(V* v, unsigned n, Op& op) {
  for (unsigned offset = 1; offset < n; offset *= 2)
    for (unsigned i = 0; i + offset < n; i += 2 * offset) v[i] = op(v[i], v[i + offset]);
  return v[0];
}
}  // namespace details

// Every member gets op applied over all members' values: a tree towards rank 0, then a broadcast.
// A tile of several warps reduces each warp's values, then the warps' results, as CUDA does.
template <class Group, class T, class Op>
details::plain<T> reduce(const Group& group, T&& value, Op&& op, const char* file = __builtin_FILE(),
                         int line = __builtin_LINE()) {
  using V = details::plain<T>;
  if constexpr (details::is_multi_warp<Group>) {
    constexpr unsigned n = Group::num_threads();
    V all[n];
    const unsigned k = group.gather(static_cast<V>(value), all, file, line);
    V warps[n / 32];
    unsigned w = 0;
    for (unsigned first = 0; first < k; first += 32, ++w) warps[w] = details::tree_reduce(all + first, std::min(32u, k - first), op);
    return details::tree_reduce(warps, w, op);
  } else {
    static_assert(std::is_base_of_v<warp_group, Group>,
                  "cg::reduce takes a thread_block_tile or a coalesced_group (as in CUDA)");
    V v = value;
    const unsigned n = group.size(), rank = group.thread_rank();
    for (unsigned offset = 1; offset < n; offset *= 2) {
      V other = group.shfl_down(v, offset, file, line);
      if (rank + offset < n) v = op(v, other);
    }
    return group.shfl(v, 0, file, line);
  }
}

}  // namespace cooperative_groups
