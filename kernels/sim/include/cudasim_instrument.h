// cudasim_instrument.h: what an instrumented build adds (-DCUDASIM_INSTRUMENTED -fsanitize=thread,
// linked without the thread-sanitizer's runtime). The compiler calls __tsan_read4(addr),
// __tsan_write16(addr), ... before every load and store of the learner's code; this header supplies
// those hooks and the simulator's events (barriers, warp operations, atomics, blocks, launches), and
// hands them to whichever of two users is on:
//   - the access profiler (cudasim_profile.h, kernels.profile): sectors, bank ways, lanes per line;
//   - the race and bounds check (cudasim_check.h, the checker's race pass and make sanitize).
// With neither on, a hook returns at once: the build runs its kernels a few times slower than a plain
// build, so plain builds stay the ones that run everything else.
// Python drives it through the extern "C" functions at the end (kernels/sim's profile and check
// modules), on the instrumented twin of a file it has loaded.
#pragma once

#include <dlfcn.h>
#include <pthread.h>

#include "cudasim_profile.h"
#include "cudasim_check.h"
#include "cudasim_peers.h"

namespace cudasim {
namespace instr {

// Where an address lies: the block's shared memory, memory the learner's kernel may reach (global),
// or memory to leave alone: the thread's own locals and the simulator's state.
enum class Space { Skip, Shared, Global };
CUDASIM_INTERNAL inline Space space_of(uintptr_t x, const Thread* t) {
  if (x - reinterpret_cast<uintptr_t>(arena) < sizeof arena) return Space::Shared;
  if (x - reinterpret_cast<uintptr_t>(t->stack) < kGuardBytes + t->stack_size) return Space::Skip;
  if (x - reinterpret_cast<uintptr_t>(&g) < sizeof g) return Space::Skip;  // threadIdx, blockIdx, ...
  if (x - check::S.threads_lo < check::S.threads_bytes) return Space::Skip;  // the threads' own records (cg's)
  if (x - check::S.host_stack_lo < check::S.host_stack_bytes) return Space::Skip;  // the launching code's locals
  // the fields of the check's own state objects: an instrumented standard-library call on one of them (not inlined
  // into the uninstrumented simulator) would otherwise be checked as the kernel thread's access. Their containers'
  // heap storage is not covered here: the check's code that touches it runs with S.busy set
  if (x - reinterpret_cast<uintptr_t>(&check::S) < sizeof check::S) return Space::Skip;
  if (x - reinterpret_cast<uintptr_t>(&check::peer::L) < sizeof check::peer::L) return Space::Skip;
  return Space::Global;
}

// Whether the code running now runs on the thread's own stack: a kernel thread, not the scheduler
// (which sets g.cur while it writes a message about a thread).
CUDASIM_INTERNAL inline bool on_fiber(const Thread* t) {
  return reinterpret_cast<uintptr_t>(__builtin_frame_address(0)) - reinterpret_cast<uintptr_t>(t->stack) <
         kGuardBytes + t->stack_size;
}

// What an out-of-bounds global address is, for the message.
CUDASIM_RT std::string outside_what(uintptr_t a, size_t n) {
  for (const Thread& o : g.threads) {
    if (!o.stack || &o == g.cur) continue;
    if (a - reinterpret_cast<uintptr_t>(o.stack) < kGuardBytes + o.stack_size) {
      char buf[300];
      std::snprintf(buf, sizeof buf, "a local variable of thread (%u,%u,%u) (each thread's locals are its own; "
                    "share values through __shared__ memory)", o.idx.x, o.idx.y, o.idx.z);
      return buf;
    }
  }
  return "outside every tensor of the call and every allocation: " + check::nearest_region(a, n);
}

// The check's part of an access by the running thread; a finding stops the thread before the access.
CUDASIM_RT void check_access(uintptr_t a, size_t n, uint8_t flags, uintptr_t where,
                                          bool explicit_ = false) {
  const Thread* t = g.cur;
  if (!t || !g.running || n == 0 || check::S.busy) return;  // host code; the check's own work
  if (!on_fiber(t)) return;  // the scheduler, which names a thread in its messages
  if (t->in_sim && !explicit_) return;  // the simulator's work (SimScope), unless it reports an access
  if (g.peer_count) {  // peer memory: its own shadow, which every rank sees (cudasim_peers.h); a signal pad has none
    if (const PeerSegment* s = peer_segment(reinterpret_cast<const void*>(a))) {
      if (a - s->buf >= s->buf_bytes) return;
      check::S.busy = true;
      std::string* finding = nullptr;
      try {
        check::peer::access(*s, a, n, flags, where, check::S.acting >= 0 ? check::S.acting : t->linear);
      } catch (const std::exception& e) {
        finding = new std::string(e.what());
      }
      if (finding) {
        std::string what = std::move(*finding);
        delete finding;
        stop_thread(std::move(what));
      }
      check::S.busy = false;
      return;
    }
  }
  Space space = space_of(a, t);
  if (space == Space::Skip) return;
  check::S.busy = true;  // before any of the standard library's code, which is instrumented
  std::string* finding = nullptr;  // a pointer: a std::string's constructor is instrumented code
  try {
    if (space == Space::Shared) {
      check::check_shared_bounds(a, n, flags, where);
      if ((flags & check::kWrite) && !explicit_ && shared_write_watch) {
        check::Access me;
        me.flags = flags;
        me.where = where;
        auto line = [](const void* m) { return check::access_line(*static_cast<const check::Access*>(m)); };
        std::string broken = shared_write_watch(reinterpret_cast<const void*>(a), n, +line, &me);
        if (!broken.empty()) throw std::runtime_error(broken);
      }
    }
    else if (check::S.bounds && !check::known_region(a, n))
      check::report_out_of_bounds(a, n, flags, where, outside_what(a, n));
    check::shadow_access(a, n, flags, where, space == Space::Shared);
  } catch (const std::exception& e) {
    finding = new std::string(e.what());  // leave the handler before the fiber stops: the exception must end
  }
  if (finding) {  // still busy: the launch ends with this finding (launch_begin clears busy)
    std::string what = std::move(*finding);
    delete finding;
    stop_thread(std::move(what));
  }
  check::S.busy = false;
}

// An event where no kernel thread runs (a barrier released, a block or launch over): a finding raises.
template <class F>
CUDASIM_INTERNAL inline void settle(F&& f) {
  check::S.busy = true;
  std::string finding;
  try {
    f();
  } catch (const std::exception& e) {
    finding = e.what();
  }
  check::S.busy = false;
  if (!finding.empty()) fail(resolve_lines(finding));
}

CUDASIM_INTERNAL inline uintptr_t file_line(const char* file, int line) {
  return reinterpret_cast<uintptr_t>(file) | static_cast<uintptr_t>(static_cast<uint16_t>(line)) << 48;
}

// ---------------------------------------------------------------------------------------------
// The events of cudasim.h.
CUDASIM_RT void access(const void* p, size_t bytes, bool write, const char* file, int line) {
  if (prof::P.on) {
    prof::note(p, static_cast<unsigned>(bytes), write ? prof::kWrite : 0u, __builtin_return_address(0));
  } else if (check::S.on) {
    check_access(reinterpret_cast<uintptr_t>(p), bytes,
                 static_cast<uint8_t>((write ? check::kWrite : 0) | check::kHasFile), file_line(file, line), true);
  }
}

// A write that lands for `thread` (cudasim.h's note_write_for): checked as that thread's access.
CUDASIM_RT void access_for(const void* p, size_t bytes, bool write, const char* file, int line, int thread) {
  if (prof::P.on || !check::S.on) {
    access(p, bytes, write, file, line);
    return;
  }
  check::S.acting = thread;
  check_access(reinterpret_cast<uintptr_t>(p), bytes,
               static_cast<uint8_t>((write ? check::kWrite : 0) | check::kHasFile), file_line(file, line), true);
  check::S.acting = -1;
}

// An operation on a synchronisation object (an mbarrier's 8 bytes): checked as an atomic (so a plain store over it,
// or its initialisation unordered with its use, is a race), without the atomics' ordering (mbarriers have their own).
CUDASIM_RT void sync_object_access(const void* p, size_t bytes, void* pc) {
  if (prof::P.on) {
    prof::note(p, static_cast<unsigned>(bytes), prof::kAtomic, pc);
    return;
  }
  if (!check::S.on || !g.cur || !g.running) return;
  check_access(reinterpret_cast<uintptr_t>(p), bytes, check::kWrite | check::kAtomic, reinterpret_cast<uintptr_t>(pc),
               true);
}

// The mbarriers' hand-offs (cudasim_check.h, "mbarriers"): ptx::mbar_init, the arrivals (and copies landing), a phase
// completed, a wait that saw its phase complete.
template <class F>
CUDASIM_INTERNAL inline void with_clocks(F&& f) {
  if (!check::S.on || check::S.busy) return;
  check::S.busy = true;  // the standard library's containers below are instrumented code
  f();
  check::S.busy = false;
}

CUDASIM_RT void mbar_reset(const void* bar) {
  with_clocks([&]() CUDASIM_INTERNAL {
    check::clocks_on();  // the block uses mbarriers (a race report then says what they order)
    check::S.clocks.bars.erase(reinterpret_cast<uintptr_t>(bar));
  });
}

CUDASIM_RT void mbar_release(const void* bar, int thread) {
  with_clocks([&]() CUDASIM_INTERNAL { check::clocks_release(reinterpret_cast<uintptr_t>(bar), thread); });
}

CUDASIM_RT void mbar_completed(const void* bar, uint64_t phase) {
  with_clocks([&]() CUDASIM_INTERNAL { check::clocks_completed(reinterpret_cast<uintptr_t>(bar), phase); });
}

CUDASIM_RT void mbar_acquire(const void* bar, long long phase) {
  if (!g.cur) return;
  const int u = g.cur->linear;
  with_clocks([&]() CUDASIM_INTERNAL { check::clocks_acquire(reinterpret_cast<uintptr_t>(bar), phase, u); });
}

// A warpgroup's wgmma group completed at a wait of the running thread, which made its reads of shared memory (the
// operations of all four warps): every thread of the warpgroup knows those reads now (cudasim_check.h, "mbarriers").
CUDASIM_RT void group_completed(int first_thread, int threads) {
  if (!g.cur) return;
  const int reader = g.cur->linear;
  with_clocks([&]() CUDASIM_INTERNAL { check::clocks_share(reader, first_thread, threads); });
}

CUDASIM_RT void atomic_load_next() { check::peer::L.load = true; }

CUDASIM_RT void atomic_access(const void* p, size_t bytes, void* pc) {
  // set by atomic_load_next just before this atomic. Plain accesses, not std::exchange: a standard-library template
  // is instrumented code that is never inlined here, so its read and write of L.load went through the hooks as the
  // kernel thread's own accesses, and two blocks' atomics became a race on this simulator state (space_of now skips
  // check::S and peer::L too)
  const bool load = check::peer::L.load;
  check::peer::L.load = false;
  if (prof::P.on) {
    prof::note(p, static_cast<unsigned>(bytes), prof::kAtomic, pc);  // counted once, as a read
    return;
  }
  if (!check::S.on || !g.cur || !g.running) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  // a strong load (PTX ld.acquire, ld.relaxed) is an atomic read: it conflicts with plain writes, not with reads
  check_access(a, bytes, (load ? 0 : check::kWrite) | check::kAtomic, reinterpret_cast<uintptr_t>(pc), true);
  // the bookkeeping that lets an atomic order plain accesses (cudasim_check.h: through_atomics)
  check::S.busy = true;
  const int tid = g.cur->linear;
  const uint32_t index = check::S.seq[tid]++;
  auto& mine = check::S.atomics[check::thread_key(check::S.serial, static_cast<uint16_t>(tid))];
  bool found = false;
  for (auto& [addr, last] : mine)
    if (addr == a) last = index, found = true;
  if (!found && !(mine.size() == 1 && mine[0].first == check::kSaturated)) {
    if (mine.size() < 64) mine.emplace_back(a, index);
    else mine.assign(1, {check::kSaturated, 0});  // too many to follow: take it as ordering everything
  }
  check::S.block_atomics.insert(a);
  if (g.peer_count)
    if (const PeerSegment* s = peer_segment(p))
      if (a - s->pad < s->pad_bytes) check::peer::pad_atomic(*s, a, tid, !load);  // a signal: release and acquire
  check::S.busy = false;
}

// A range of atomic writes made for the running thread (cudasim.h's note_atomic): no ordering of plain accesses
// through them (a bulk reduction is relaxed), only the check that plain accesses of other threads are ordered
// with them.
CUDASIM_RT void atomic_range(const void* p, size_t bytes, const char* file, int line) {
  if (prof::P.on) {
    prof::note(p, static_cast<unsigned>(bytes), prof::kAtomic, __builtin_return_address(0));
    return;
  }
  if (!check::S.on || !g.cur || !g.running) return;
  check_access(reinterpret_cast<uintptr_t>(p), bytes, check::kWrite | check::kAtomic | check::kHasFile,
               file_line(file, line), true);
}

// __threadfence() (system false) and __threadfence_system(): the fences that order peer memory (cudasim_peers.h).
CUDASIM_RT void fence(bool system) {
  if (!check::S.on || !g.cur || !g.running || !g.peer_count) return;
  const int t = g.cur->linear;
  with_clocks([&]() CUDASIM_INTERNAL { check::peer::fence(t, system); });
}

CUDASIM_RT void launch_begin() {
  if (!check::S.on) return;
  check::S.busy = false;  // a thread stopped by a finding of the last launch left it set
  check::S.acting = -1;   // and so may a copy landing for another thread
  check::S.launch_first = check::S.serial + 1;
  check::S.blocks.clear();
  check::S.atomics.clear();
  check::S.pending.clear();
  // The launching thread's stack: a launch reads its arguments from there (a kernel named through a local
  // function pointer, `auto k = kernel<T>; k<<<...>>>`, is read through the launch's reference to it).
  uintptr_t here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0)), lo = here, hi = here + (8u << 20);
#if defined(__APPLE__)
  hi = reinterpret_cast<uintptr_t>(pthread_get_stackaddr_np(pthread_self()));
  lo = hi - pthread_get_stacksize_np(pthread_self());
#else
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* base = nullptr;
    size_t size = 0;
    if (pthread_attr_getstack(&attr, &base, &size) == 0 && base) {
      lo = reinterpret_cast<uintptr_t>(base);
      hi = lo + size;
    }
    pthread_attr_destroy(&attr);
  }
#endif
  check::S.host_stack_lo = lo;
  check::S.host_stack_bytes = hi - lo;
  if (g.peer_count) with_clocks([]() CUDASIM_INTERNAL { check::peer::launch_begin(); });
}

CUDASIM_RT void launch_end() {
  if (check::S.on) settle(check::settle_pending);
  if (check::S.on && g.peer_count) with_clocks([]() CUDASIM_INTERNAL { check::peer::launch_end(); });
}

CUDASIM_RT void block_begin() {
  if (!check::S.on) return;
  check::S.serial += 1;
  check::S.epoch = 0;
  std::fill(std::begin(check::S.wgen), std::end(check::S.wgen), 0u);
  std::memset(check::S.seq, 0, sizeof check::S.seq);
  check::S.blocks.push_back(g.block_idx);
  check::S.threads_lo = reinterpret_cast<uintptr_t>(g.threads.data());
  check::S.threads_bytes = g.threads.size() * sizeof(Thread);
  check::S.block_atomics.clear();
  check::S.shared_names.clear();
  check::clocks_block_begin(g.nthreads);
  if (g.peer_count) with_clocks([]() CUDASIM_INTERNAL { check::peer::block_begin(); });
}

CUDASIM_RT void block_end() {
  if (check::S.on) settle(check::settle_pending);  // before the next block poisons shared memory
  if (check::S.on && g.peer_count) with_clocks([]() CUDASIM_INTERNAL { check::peer::block_end(); });
}

CUDASIM_RT void barrier_released() {
  if (!check::S.on) return;
  settle(check::settle_pending);
  check::S.epoch += 1;
  if (g.peer_count) with_clocks([]() CUDASIM_INTERNAL { check::peer::barrier_released(); });
}

CUDASIM_RT void passed_barrier(int thread) {
  if (prof::P.on) profile_barrier(thread);
}

CUDASIM_RT void warp_synced(int warp) {
  if (!check::S.on) return;
  check::S.wgen[warp & 31] += 1;
  with_clocks([&]() CUDASIM_INTERNAL { check::clocks_warp_synced(warp & 31); });
}

CUDASIM_RT void shared_declared(size_t offset, size_t bytes, const char* name) {
  if (check::S.on) check::S.shared_names.push_back({offset, bytes, name});
}

CUDASIM_RT void device_alloc(const void* p, size_t bytes) {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(check::S.alloc_lock);
  check::S.allocs[lo] = {lo + bytes, "cudaMalloc'd memory (" + std::to_string(bytes) + " bytes)"};
}

CUDASIM_RT void device_free(const void* p) {
  std::lock_guard<std::mutex> lock(check::S.alloc_lock);
  check::S.allocs.erase(reinterpret_cast<uintptr_t>(p));
}

}  // namespace instr
}  // namespace cudasim

#ifndef CUDASIM_PREBUILT_RUNTIME  // else they are in the runtime object (cudasim.h: CUDASIM_RT)
// ---------------------------------------------------------------------------------------------
// The check's control functions (called from Python with ctypes, exported from an instrumented build).
#define CUDASIM_EXPORT extern "C" __attribute__((visibility("default"), used, CUDASIM_UNINSTRUMENTED))

// Start checking the launches that follow: races always, bounds against the regions registered next
// (none registered: global accesses are not bounds-checked). Returns 1 if the CPU allocations made
// from now on are seen (the op's own outputs), 0 if another allocator is in the way.
CUDASIM_EXPORT int cudasim_check_start() {
  using namespace cudasim;
  check::S.regions.clear();
  check::S.bounds = false;
  check::S.busy = false;  // a thread that overflowed its stack inside the check left it set
  for (auto& r : check::S.recent) r = {0, 0};
  if (!prof::P.image_hi) prof::find_image();  // this library's static data: `__device__` variables
  check::S.image_lo = prof::P.image_lo;
  check::S.image_hi = prof::P.image_hi;
  bool seen = check::install_tracker();
  check::S.tracking = seen;
  check::S.bounds = seen;  // the op's allocations are seen: global accesses elsewhere are out of bounds
  check::S.on = true;
  return seen ? 1 : 0;
}

// A region the kernels may use: [lo, lo + bytes), elements of elem_size bytes, named `label` in messages.
CUDASIM_EXPORT void cudasim_check_region(unsigned long long lo, unsigned long long bytes,
                                         unsigned long long elem_size, const char* label) {
  using namespace cudasim;
  check::S.regions.push_back({static_cast<uintptr_t>(lo), static_cast<uintptr_t>(lo + bytes),
                              elem_size ? static_cast<size_t>(elem_size) : 1, label ? label : "a tensor"});
  check::S.bounds = true;
}

CUDASIM_EXPORT void cudasim_check_stop() {
  using namespace cudasim;
  check::S.on = false;
  check::S.tracking = false;
  check::S.regions.clear();
  check::S.bounds = false;
  check::S.pending.clear();
  check::S.atomics.clear();
  check::drop_shadow();
  std::lock_guard<std::mutex> lock(check::S.alloc_lock);
  for (auto it = check::S.allocs.begin(); it != check::S.allocs.end();)  // keep cudaMalloc's
    it = it->second.second.rfind("cudaMalloc", 0) == 0 ? std::next(it) : check::S.allocs.erase(it);
}

// ---------------------------------------------------------------------------------------------
// The hooks that -fsanitize=thread calls (gcc and clang emit the same names).
#define CUDASIM_HOOK extern "C" __attribute__((CUDASIM_UNINSTRUMENTED))
#define CUDASIM_TSAN_ONE(name, size, write)                                                            \
  CUDASIM_HOOK void name(void* p) {                                                                    \
    if (cudasim::prof::P.on) {                                                                         \
      if (cudasim::g.cur && !cudasim::g.cur->in_sim && cudasim::instr::on_fiber(cudasim::g.cur))      \
        cudasim::prof::note(p, size, write ? cudasim::prof::kWrite : 0u, __builtin_return_address(0)); \
    } else if (cudasim::check::S.on)                                                                   \
      cudasim::instr::check_access(reinterpret_cast<uintptr_t>(p), size, write ? cudasim::check::kWrite : 0, \
                                   reinterpret_cast<uintptr_t>(__builtin_return_address(0)));          \
  }
#define CUDASIM_TSAN_ACCESS(size)                                  \
  CUDASIM_TSAN_ONE(__tsan_read##size, size, false)                 \
  CUDASIM_TSAN_ONE(__tsan_write##size, size, true)                 \
  CUDASIM_TSAN_ONE(__tsan_unaligned_read##size, size, false)       \
  CUDASIM_TSAN_ONE(__tsan_unaligned_write##size, size, true)       \
  CUDASIM_TSAN_ONE(__tsan_volatile_read##size, size, false)        \
  CUDASIM_TSAN_ONE(__tsan_volatile_write##size, size, true)
CUDASIM_TSAN_ACCESS(1)
CUDASIM_TSAN_ACCESS(2)
CUDASIM_TSAN_ACCESS(4)
CUDASIM_TSAN_ACCESS(8)
CUDASIM_TSAN_ACCESS(16)
#undef CUDASIM_TSAN_ACCESS
#undef CUDASIM_TSAN_ONE

// Ranges: copies of aggregates, and memcpy/memmove/memset called in the learner's code.
namespace cudasim {
namespace instr {
CUDASIM_RT void range(const void* p, size_t n, bool write, void* ret) {
  if (check::S.on)
    check_access(reinterpret_cast<uintptr_t>(p), n, write ? check::kWrite : 0, reinterpret_cast<uintptr_t>(ret));
}
}  // namespace instr
}  // namespace cudasim
CUDASIM_HOOK void __tsan_read_range(void* p, unsigned long n) {
  cudasim::instr::range(p, n, false, __builtin_return_address(0));
}
CUDASIM_HOOK void __tsan_write_range(void* p, unsigned long n) {
  cudasim::instr::range(p, n, true, __builtin_return_address(0));
}
CUDASIM_HOOK void* __tsan_memcpy(void* d, const void* s, size_t n) {
  cudasim::instr::range(s, n, false, __builtin_return_address(0));
  cudasim::instr::range(d, n, true, __builtin_return_address(0));
  return std::memcpy(d, s, n);
}
CUDASIM_HOOK void* __tsan_memmove(void* d, const void* s, size_t n) {
  cudasim::instr::range(s, n, false, __builtin_return_address(0));
  cudasim::instr::range(d, n, true, __builtin_return_address(0));
  return std::memmove(d, s, n);
}
CUDASIM_HOOK void* __tsan_memset(void* d, int c, size_t n) {
  cudasim::instr::range(d, n, true, __builtin_return_address(0));
  return std::memset(d, c, n);
}
CUDASIM_HOOK void __tsan_init() {}
CUDASIM_HOOK void __tsan_func_entry(void*) {}
CUDASIM_HOOK void __tsan_func_exit() {}
CUDASIM_HOOK void __tsan_vptr_update(void**, void*) {}
CUDASIM_HOOK void __tsan_vptr_read(void**) {}
CUDASIM_HOOK void __tsan_ignore_thread_begin() {}
CUDASIM_HOOK void __tsan_ignore_thread_end() {}
CUDASIM_HOOK void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
CUDASIM_HOOK void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

// The C++ atomics of host code (PyTorch's reference counts) take the memory order as an int;
// sequential consistency is always correct. They are not CUDA's atomics (those are cudasim.h's) and
// are not recorded.
#define CUDASIM_TSAN_RMW(bits, T, op)                                                   \
  CUDASIM_HOOK T __tsan_atomic##bits##_##op(volatile T* p, T v, int) {                  \
    return __atomic_##op(p, v, __ATOMIC_SEQ_CST);                                       \
  }
#define CUDASIM_TSAN_ATOMIC(bits, T)                                                                    \
  CUDASIM_HOOK T __tsan_atomic##bits##_load(const volatile T* p, int) {                                 \
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);                                                        \
  }                                                                                                     \
  CUDASIM_HOOK void __tsan_atomic##bits##_store(volatile T* p, T v, int) {                              \
    __atomic_store_n(p, v, __ATOMIC_SEQ_CST);                                                           \
  }                                                                                                     \
  CUDASIM_HOOK T __tsan_atomic##bits##_exchange(volatile T* p, T v, int) {                              \
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);                                                 \
  }                                                                                                     \
  CUDASIM_TSAN_RMW(bits, T, fetch_add) CUDASIM_TSAN_RMW(bits, T, fetch_sub)                             \
  CUDASIM_TSAN_RMW(bits, T, fetch_and) CUDASIM_TSAN_RMW(bits, T, fetch_or)                              \
  CUDASIM_TSAN_RMW(bits, T, fetch_xor) CUDASIM_TSAN_RMW(bits, T, fetch_nand)                            \
  CUDASIM_HOOK int __tsan_atomic##bits##_compare_exchange_strong(volatile T* p, T* expected, T v, int, int) { \
    return __atomic_compare_exchange_n(p, expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);      \
  }                                                                                                     \
  CUDASIM_HOOK int __tsan_atomic##bits##_compare_exchange_weak(volatile T* p, T* expected, T v, int, int) { \
    return __atomic_compare_exchange_n(p, expected, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);       \
  }                                                                                                     \
  CUDASIM_HOOK T __tsan_atomic##bits##_compare_exchange_val(volatile T* p, T expected, T v, int, int) { \
    __atomic_compare_exchange_n(p, &expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);            \
    return expected;                                                                                    \
  }
CUDASIM_TSAN_ATOMIC(8, unsigned char)
CUDASIM_TSAN_ATOMIC(16, unsigned short)
CUDASIM_TSAN_ATOMIC(32, unsigned int)
CUDASIM_TSAN_ATOMIC(64, unsigned long long)
#undef CUDASIM_TSAN_RMW
#undef CUDASIM_TSAN_ATOMIC
#endif
#undef CUDASIM_HOOK
#undef CUDASIM_EXPORT
