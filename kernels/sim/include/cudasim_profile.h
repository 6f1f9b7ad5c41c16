// cudasim_profile.h: the simulator's memory-access profiler (kernels.profile), part of an instrumented
// build (cudasim_instrument.h holds the hooks that call it).
//
// A hook keeps an access only while a kernel thread runs (g.cur) and only in memory a kernel
// owns: the shared-memory arena ("shared"), or anything that is not the thread's own stack
// (locals) or the simulator's state ("global"). Each kept access goes into its thread's log with
// its call site (the return address of the hook); a barrier puts a mark in the log. An atomic is
// one access with the kAtomic flag, at the learner's call of it.
//
// When a block is over, the logs of each warp are grouped into requests: the accesses that its
// lanes made at one call site, the k-th time each lane got there since the last barrier (lanes
// run one after the other here, so a warp's instruction is rebuilt from this count). A request
// is summed into its site's totals: requests, distinct 32-byte sectors (global), the largest
// number of distinct 4-byte words wanted from one of the 32 banks (shared), active lanes.
// Python reads the totals through cudasim_profile_rows and maps each call site to file:line with
// the debug information (addr2line), keeping the learner's own files.
//
// Everything here is compiled without instrumentation (CUDASIM_UNINSTRUMENTED) and never calls
// instrumented code while a hook runs (`busy` covers the rare calls into the standard library).
#pragma once

#include <dlfcn.h>

#if defined(CUDASIM_PREBUILT_RUNTIME) && !defined(__clang__)
#define CUDASIM_PROF_FN CUDASIM_RT  // gcc: noinline conflicts with gnu_inline (cudasim.h)
#else
#define CUDASIM_PROF_FN __attribute__((noinline)) CUDASIM_RT
#endif
#define CUDASIM_PROF_INLINE __attribute__((CUDASIM_UNINSTRUMENTED, always_inline)) inline

namespace cudasim {
namespace prof {

enum : unsigned { kWrite = 1, kShared = 2, kMark = 4, kAtomic = 8 };  // kernels/sim's profile module reads them

struct Event {
  uintptr_t pc;    // the return address of the hook: the instruction after the access's call
  uintptr_t addr;
  unsigned size;
  unsigned flags;  // kWrite, kShared; kMark: a barrier (pc and addr unused)
};

struct Log {
  Event* data = nullptr;
  size_t n = 0, cap = 0;
};

// Totals of one call site in one kernel.
struct Site {
  const char* kernel;
  uintptr_t pc;
  unsigned flags;
  unsigned long long requests = 0, sectors = 0, ways = 0, lanes = 0;
};

// What cudasim_profile_rows hands to Python (kernels/profile.py mirrors it with ctypes).
struct Row {
  const char* kernel;
  unsigned long long pc_offset;  // from the library's load address: what addr2line reads
  unsigned long long flags;
  unsigned long long requests, sectors, ways, lanes;
};

struct State {
  bool on = false;
  bool busy = false;
  unsigned long long gen = 0;  // the block whose logs are being filled (g.block_gen), 0: none
  const char* kernel = "";
  int nthreads = 0;
  uintptr_t threads_lo = 0, threads_hi = 0;  // g.threads' storage: the simulator's own
  uintptr_t image_lo = 0, image_hi = 0;      // this library's writable data: its static variables
  std::vector<Log> logs;     // per thread: accesses to the heap (tensors) and the shared arena
  std::vector<Log> statics;  // per thread: accesses to static data (`__device__` variables, and the
                             // simulator's bookkeeping, which only some lanes touch: kept apart
                             // so that it cannot make converged lanes look diverged)
  std::vector<Site> sites;
};

inline State P;

CUDASIM_PROF_INLINE void push(Log& log, const Event& e) {
  if (log.n == log.cap) {
    size_t cap = log.cap ? log.cap * 2 : 256;
    void* p = std::realloc(log.data, cap * sizeof(Event));
    if (!p) std::abort();
    log.data = static_cast<Event*>(p);
    log.cap = cap;
  }
  log.data[log.n++] = e;
}

// One warp's request: the distinct 32-byte sectors its lanes touched (global memory). Lanes
// usually share a few sectors, so a short list searched from its end beats sorting.
CUDASIM_PROF_FN unsigned sectors_of(const Event* const* lanes, int count) {
  uintptr_t s[64];
  unsigned n = 0;
  for (int i = 0; i < count; ++i) {
    uintptr_t lo = lanes[i]->addr >> 5, hi = (lanes[i]->addr + lanes[i]->size - 1) >> 5;
    for (uintptr_t x = lo; x <= hi; ++x) {
      unsigned k = n;
      while (k > 0 && s[k - 1] != x) --k;
      if (k == 0 && n < 64) s[n++] = x;
    }
  }
  return n;
}

// The bank ways of a request (shared memory): the most distinct 4-byte words wanted from one of
// the 32 banks (word w is in bank w % 32); lanes reading the same word share it (a broadcast).
CUDASIM_PROF_FN unsigned bank_ways_of(const Event* const* lanes, int count) {
  uintptr_t words[32][32];  // per bank, its distinct words (at most 32 are kept: 32 ways is the most)
  unsigned per_bank[32] = {};
  unsigned most = 0;
  for (int i = 0; i < count; ++i) {
    uintptr_t lo = lanes[i]->addr >> 2, hi = (lanes[i]->addr + lanes[i]->size - 1) >> 2;
    for (uintptr_t x = lo; x <= hi; ++x) {
      unsigned b = x & 31, k = 0;
      while (k < per_bank[b] && words[b][k] != x) ++k;
      if (k == per_bank[b] && k < 32) {
        words[b][per_bank[b]++] = x;
        most = std::max(most, per_bank[b]);
      }
    }
  }
  return most;
}

CUDASIM_PROF_FN void add_request(const Event* const* lanes, int count) {
  const Event& e = *lanes[0];
  Site* site = nullptr;
  for (auto it = P.sites.rbegin(); it != P.sites.rend(); ++it)  // few sites; recent ones first
    if (it->pc == e.pc && it->flags == e.flags && it->kernel == P.kernel) { site = &*it; break; }
  if (!site) {
    P.sites.push_back(Site{P.kernel, e.pc, e.flags});
    site = &P.sites.back();
  }
  site->requests += 1;
  site->lanes += static_cast<unsigned>(count);
  if (e.flags & kShared) site->ways += bank_ways_of(lanes, count);
  else site->sectors += sectors_of(lanes, count);
}

// Group one warp's logs into requests. Converged lanes (the usual case) have logs with the same
// call sites in the same order, so the k-th entries of all lanes form a request; otherwise each
// entry is keyed by (barrier count, call site, kind, how many times this lane was there before).
CUDASIM_PROF_FN void flush_warp(const Log* logs, int count) {
  const Log& l0 = logs[0];
  bool converged = true;
  for (int i = 1; i < count && converged; ++i) {
    const Log& l = logs[i];
    converged = l.n == l0.n;
    for (size_t k = 0; k < l.n && converged; ++k)
      converged = l.data[k].pc == l0.data[k].pc && l.data[k].flags == l0.data[k].flags;
  }
  const Event* lanes[32];
  if (converged) {
    for (size_t k = 0; k < l0.n; ++k) {
      if (l0.data[k].flags & kMark) continue;
      for (int i = 0; i < count; ++i) lanes[i] = &logs[i].data[k];
      add_request(lanes, count);
    }
    return;
  }
  struct Key {
    unsigned long long epoch, pc, flags, occurrence;
    bool operator<(const Key& o) const {
      return std::tie(epoch, pc, flags, occurrence) < std::tie(o.epoch, o.pc, o.flags, o.occurrence);
    }
  };
  std::vector<std::pair<Key, const Event*>> all;
  for (int i = 0; i < count; ++i) {
    const Log& l = logs[i];
    std::vector<std::pair<std::pair<uintptr_t, unsigned>, unsigned long long>> seen;  // (pc, flags) -> times
    unsigned long long epoch = 0;
    for (size_t k = 0; k < l.n; ++k) {
      const Event& e = l.data[k];
      if (e.flags & kMark) { ++epoch; seen.clear(); continue; }
      unsigned long long occ = 0;
      for (auto& s : seen)
        if (s.first.first == e.pc && s.first.second == e.flags) { occ = ++s.second; goto found; }
      seen.push_back({{e.pc, e.flags}, 0});
    found:
      all.push_back({Key{epoch, e.pc, e.flags, occ}, &e});
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < all.size();) {
    int n = 0;
    size_t j = i;
    for (; j < all.size() && !(all[i].first < all[j].first); ++j)
      if (n < 32) lanes[n++] = all[j].second;
    add_request(lanes, n);
    i = j;
  }
}

// The block whose logs are held is over (or profiling stops): fold its requests into the sites.
CUDASIM_PROF_FN void flush_block() {
  if (!P.gen) return;
  for (int w = 0; w * 32 < P.nthreads; ++w) {
    flush_warp(&P.logs[w * 32], std::min(32, P.nthreads - w * 32));
    flush_warp(&P.statics[w * 32], std::min(32, P.nthreads - w * 32));
  }
  for (int i = 0; i < P.nthreads; ++i) P.logs[i].n = P.statics[i].n = 0;
  P.gen = 0;
}

CUDASIM_PROF_FN void start_block() {
  P.busy = true;
  flush_block();
  P.gen = g.block_gen;
  P.kernel = g.kernel;
  P.nthreads = g.nthreads;
  if (P.logs.size() < static_cast<size_t>(P.nthreads)) {
    P.logs.resize(P.nthreads);
    P.statics.resize(P.nthreads);
  }
  P.threads_lo = reinterpret_cast<uintptr_t>(g.threads.data());
  P.threads_hi = P.threads_lo + g.threads.size() * sizeof(Thread);
  P.busy = false;
}

// Every instrumented load and store comes here: keep it if a kernel thread made it in kernel memory.
CUDASIM_PROF_INLINE void note(const void* a, unsigned size, unsigned flags, void* ret) {
  if (!P.on || P.busy) return;
  Thread* t = g.cur;
  if (!t || !g.running) return;
  uintptr_t x = reinterpret_cast<uintptr_t>(a);
  if (x - reinterpret_cast<uintptr_t>(arena) < sizeof arena) {
    flags |= kShared;
  } else if (x - reinterpret_cast<uintptr_t>(t->stack) < kGuardBytes + t->stack_size ||
             x - reinterpret_cast<uintptr_t>(&g) < sizeof g) {
    return;  // the thread's locals; the simulator's state (threadIdx, blockIdx, ...)
  }
  if (g.block_gen != P.gen) start_block();
  if (x - P.threads_lo < P.threads_hi - P.threads_lo) return;  // the simulator's per-thread state
  Log& log = !(flags & kShared) && x - P.image_lo < P.image_hi - P.image_lo ? P.statics[t->linear] : P.logs[t->linear];
  push(log, Event{reinterpret_cast<uintptr_t>(ret), x, size, flags});
}

// The address range of this library's writable segments (its static variables), from its program
// headers (ELF) or load commands (Mach-O): cudasim_platform.h.
CUDASIM_PROF_FN void add_image_segment(uintptr_t lo, uintptr_t hi, bool, bool writable) {
  if (!writable) return;
  P.image_lo = P.image_lo ? std::min(P.image_lo, lo) : lo;
  P.image_hi = std::max(P.image_hi, hi);
}

CUDASIM_PROF_FN void find_image() { platform::image_segments(&P, add_image_segment); }

}  // namespace prof


// A thread has passed a __syncthreads (cudasim_instrument.h's passed_barrier).
CUDASIM_PROF_FN void profile_barrier(int thread) {
  if (!prof::P.on || prof::P.busy) return;
  if (g.block_gen != prof::P.gen) prof::start_block();
  prof::push(prof::P.logs[thread], prof::Event{0, 0, 0, prof::kMark});
  prof::push(prof::P.statics[thread], prof::Event{0, 0, 0, prof::kMark});
}

}  // namespace cudasim

#ifndef CUDASIM_PREBUILT_RUNTIME  // else they are in the runtime object (cudasim.h: CUDASIM_RT)
// ---------------------------------------------------------------------------------------------
// The control functions kernels/profile.py calls (ctypes), exported from the profiling build.
extern "C" __attribute__((visibility("default"), used, CUDASIM_UNINSTRUMENTED)) void cudasim_profile_start() {
  using namespace cudasim::prof;
  P.busy = true;
  P.sites.clear();
  P.gen = 0;
  for (auto& l : P.logs) l.n = 0;
  for (auto& l : P.statics) l.n = 0;
  if (!P.image_hi) find_image();
  P.busy = false;
  P.on = true;
}

extern "C" __attribute__((visibility("default"), used, CUDASIM_UNINSTRUMENTED)) void cudasim_profile_stop() {
  using namespace cudasim::prof;
  P.on = false;
  P.busy = true;
  flush_block();
  P.busy = false;
}

// Copies up to `cap` rows into `out`; returns how many sites there are.
extern "C" __attribute__((visibility("default"), used, CUDASIM_UNINSTRUMENTED)) size_t
cudasim_profile_rows(cudasim::prof::Row* out, size_t cap) {
  using namespace cudasim::prof;
  Dl_info info{};
  uintptr_t base = dladdr(reinterpret_cast<void*>(&cudasim_profile_start), &info) && info.dli_fbase
                       ? reinterpret_cast<uintptr_t>(info.dli_fbase) : 0;
  for (size_t i = 0; i < P.sites.size() && i < cap; ++i) {
    const Site& s = P.sites[i];
    out[i] = Row{s.kernel, s.pc - base, s.flags, s.requests, s.sectors, s.ways, s.lanes};
  }
  return P.sites.size();
}
#endif
