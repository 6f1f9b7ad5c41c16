// cudasim_trace.h: the mbarrier trace (kernels/sim/trace.py, `kernels.barrier_trace`): which warp waits on which
// mbarrier and for how long, who arrives, announces bytes, issues copies, and when each phase completes, in the
// first blocks of each launch, while Python has it on. Off by default: the scheduler and the mbarrier functions
// (cudasim_ptx/async.h) then test `tracing.block` and do nothing else.
//
// The clock is the step: one round of the block's run queue (run_block). In a round every thread that could run
// when the round began gets one turn, which lasts until the thread waits (a barrier, a warp operation), polls (a
// try_wait that fails yields) or ends; a thread that becomes ready during a round runs in the next one. Steps
// count scheduling decisions, not time: a wgmma that keeps a GPU's tensor cores busy for hundreds of cycles and
// an integer add both fit in one turn, and a waiting thread polls once a round. Steps start at 1 in each block.
//
// Events are per warp, not per thread: the lanes of one warp that make the same operation (a wait, an arrival, an
// expect_tx, a copy) on the same barrier, for the same phase, from the same asm statement are one event, with the
// mask of the lanes that took part. A wait names the phase it waited for (a parity wait whose phase had already
// completed: the last completed phase of that parity, -1 for the one before the first); it blocked when a lane's
// first poll found that phase incomplete, and ended when the last lane that blocked saw it complete. An event with
// a place in the source keeps the return addresses of its first lane's call (a backtrace, once per event; once per
// copy for copies, whose lines it tells apart); Python maps them to lines with addr2line, which names the line that
// called a helper wrapping the asm statement (the line of a barrier's mbarrier.init is its name).
#pragma once

#include <array>
#include <execinfo.h>
#include <map>
#include <tuple>

namespace cudasim {
namespace trace {

// What an event records; kernels/sim/trace.py reads the same numbers.
enum Kind : int { kInit = 0, kWait, kArrive, kExpectTx, kCopy, kLand, kComplete, kExit };
constexpr int kFrames = 12;                       // return addresses kept per site
constexpr size_t kMaxEvents = size_t(1) << 20;    // about 100 MB; beyond it events are dropped (and counted)

// One event, as cudasim_trace_events hands it to Python (trace.py mirrors it with ctypes).
struct Event {
  int kind;
  int block;                     // index into the recorded blocks
  int warp;                      // threadIdx (linear) / 32 of the lanes
  int site;                      // index into the sites, -1 for none (a copy landing, a phase completing, an exit)
  unsigned long long bar;        // the barrier's shared-memory address
  long long phase;               // the phase it belongs to (kInit: 0; a wait: the phase waited for)
  long long first;               // the step of the first lane
  long long from;                // a wait: the step its first lane blocked, -1 if none did
  long long end;                 // a wait: the step its last blocked lane went on, -1 if one never did; kLand,
                                 // kComplete: the step of the last; kExit: the step the warp's last thread ended
  unsigned lanes, blocked, ended;  // masks: lanes that took part; of a wait, those that blocked and those that went on
  unsigned parity;               // a wait: 1 for a parity wait, 0 for one on a state token
  unsigned long long count;      // kInit: arrivals a phase; kArrive: arrivals made; kCopy, kLand: copies
  unsigned long long bytes;      // kArrive (expect_tx), kExpectTx, kCopy, kLand: transaction bytes
  const char* file;              // the asm statement (the simulator's site): Python's fallback for the line
  int line;
  int stmt_line;
};

// Where an event's first lane was: the asm statement, the return addresses on its stack, and the launch (the
// learner's lines beyond it are the launcher's, not the kernel's).
struct Site {
  const char* file;
  int line, stmt_line, depth;
  unsigned long long pcs[kFrames];
  const char* launch_file;
  int launch_line;
};

struct Block {
  const char* kernel;
  unsigned long long launch;  // launches with the trace on, from 1
  unsigned x, y, z;
  int threads;
  long long steps;
};

struct Key {
  int kind, warp;
  unsigned long long bar;
  long long phase;
  const char* file;
  int line, site;
  bool operator<(const Key& o) const {
    return std::tie(kind, warp, bar, phase, file, line, site) <
           std::tie(o.kind, o.warp, o.bar, o.phase, o.file, o.line, o.site);
  }
};

struct State {
  unsigned long long launch = 0;
  unsigned in_launch = 0;     // blocks of this launch recorded so far
  bool open = false;          // a recorded block has not ended yet
  unsigned long long dropped = 0;
  std::vector<Block> blocks;
  std::vector<Event> events;
  std::vector<Site> sites;
  std::map<std::array<unsigned long long, kFrames + 1>, int> site_ids;
  std::map<Key, size_t> now;          // the running block's events, by what makes them one
  std::vector<long long> waiting;     // per thread: the wait event it is blocked in, or -1
};
CUDASIM_RT_STATE State T;

// The site of the calling thread's operation: a backtrace, its return addresses kept once.
CUDASIM_RT int site_here(const char* file, int line, int stmt_line) {
  void* pcs[kFrames + 1];
  const int n = backtrace(pcs, kFrames + 1);
  std::array<unsigned long long, kFrames + 1> key{};
  Site s{file, line, stmt_line, 0, {}, g.launch_file, g.launch_line};
  for (int i = 1; i < n; ++i) s.pcs[s.depth++] = reinterpret_cast<uintptr_t>(pcs[i]);  // [0] is this function
  for (int i = 0; i < s.depth; ++i) key[i] = s.pcs[i];
  key[kFrames] = static_cast<unsigned long long>(line);
  auto found = T.site_ids.find(key);
  if (found != T.site_ids.end()) return found->second;
  T.sites.push_back(s);
  const int id = static_cast<int>(T.sites.size()) - 1;
  T.site_ids.emplace(key, id);
  return id;
}

// The running block's event of this kind that the calling lane's warp makes on `bar` for `phase` at this asm
// statement: found, or made (nullptr once kMaxEvents are held). Copies are told apart by their site too: one lane
// often issues a phase's copies from several lines through one helper (a tile of A, then the boxes of B).
CUDASIM_RT Event* event(int kind, unsigned long long bar, long long phase, const char* file = nullptr, int line = 0,
                        int stmt_line = 0) {
  const int warp = g.cur ? g.cur->linear / 32 : -1;
  const int site = kind == kCopy && file ? site_here(file, line, stmt_line) : -1;
  const Key k{kind, warp, bar, phase, file, line, site};
  auto found = T.now.find(k);
  if (found != T.now.end()) return &T.events[found->second];
  if (T.events.size() >= kMaxEvents) {
    T.dropped += 1;
    return nullptr;
  }
  Event e{};
  e.kind = kind;
  e.block = static_cast<int>(T.blocks.size()) - 1;
  e.warp = warp;
  e.site = site >= 0 || !file ? site : site_here(file, line, stmt_line);
  e.bar = bar;
  e.phase = phase;
  e.first = tracing.step;
  e.from = e.end = -1;
  e.file = file;
  e.line = line;
  e.stmt_line = stmt_line;
  T.now.emplace(k, T.events.size());
  T.events.push_back(e);
  return &T.events.back();
}

CUDASIM_INTERNAL inline unsigned lane_bit() { return g.cur ? 1u << (g.cur->linear & 31) : 0u; }

// The scheduler's side (cudasim.h): a launch starts, a block starts or ends, a thread ends.
CUDASIM_RT void launch() {
  T.launch += 1;
  T.in_launch = 0;
}

CUDASIM_RT void block_end() {
  if (T.open) T.blocks.back().steps = tracing.step;
  T.open = false;
  T.now.clear();
  tracing.block = false;
}

CUDASIM_RT void block_begin() {
  block_end();  // one that ended with an error
  if (T.in_launch >= tracing.blocks) return;
  T.in_launch += 1;
  T.blocks.push_back(Block{g.kernel, T.launch, g.block_idx.x, g.block_idx.y, g.block_idx.z, g.nthreads, 0});
  T.waiting.assign(static_cast<size_t>(g.nthreads), -1);
  T.open = true;
  tracing.step = 0;
  tracing.block = true;
}

CUDASIM_RT void thread_done() {
  SimScope scope;
  if (Event* e = event(kExit, 0, 0)) {
    e->lanes |= lane_bit();
    e->end = tracing.step;
  }
}

// The mbarrier's side (cudasim_ptx/async.h).
CUDASIM_RT void on_init(unsigned long long bar, unsigned count, const char* file, int line, int stmt_line) {
  if (Event* e = event(kInit, bar, 0, file, line, stmt_line)) {
    e->lanes |= lane_bit();
    e->count = count;
  }
}

CUDASIM_RT void on_arrive(unsigned long long bar, long long phase, unsigned count, unsigned long long tx,
                          const char* file, int line, int stmt_line) {
  if (Event* e = event(kArrive, bar, phase, file, line, stmt_line)) {
    e->lanes |= lane_bit();
    e->count += count;
    e->bytes += tx;
  }
}

CUDASIM_RT void on_expect_tx(unsigned long long bar, long long phase, unsigned long long tx, const char* file, int line,
                             int stmt_line) {
  if (Event* e = event(kExpectTx, bar, phase, file, line, stmt_line)) {
    e->lanes |= lane_bit();
    e->bytes += tx;
  }
}

CUDASIM_RT void on_copy(unsigned long long bar, long long phase, unsigned long long bytes, const char* file, int line,
                        int stmt_line) {
  if (Event* e = event(kCopy, bar, phase, file, line, stmt_line)) {
    e->lanes |= lane_bit();
    e->count += 1;
    e->bytes += bytes;
  }
}

// A copy lands (at a poll of the thread running now) / a phase completes.
CUDASIM_RT void on_land(unsigned long long bar, long long phase, unsigned long long bytes) {
  if (Event* e = event(kLand, bar, phase)) {
    e->lanes |= lane_bit();
    e->count += 1;
    e->bytes += bytes;
    e->end = tracing.step;
  }
}

CUDASIM_RT void on_complete(unsigned long long bar, long long phase) {
  if (Event* e = event(kComplete, bar, phase)) {
    e->lanes |= lane_bit();
    e->end = tracing.step;
  }
}

// A poll of a wait for `phase` that found it complete (`done`) or not.
CUDASIM_RT void on_wait(unsigned long long bar, long long phase, bool parity, bool done, const char* file, int line,
                        int stmt_line) {
  if (!g.cur) return;
  const unsigned bit = lane_bit();
  long long& open = T.waiting[static_cast<size_t>(g.cur->linear)];
  if (open >= 0) {
    Event& e = T.events[static_cast<size_t>(open)];
    if (e.bar == bar && e.phase == phase && e.file == file && e.line == line) {  // the same wait, polling again
      if (done) {
        e.ended |= bit;
        e.end = tracing.step;
        open = -1;
      }
      return;
    }
    open = -1;  // a test_wait that the thread gave up on: that wait never ended
  }
  Event* e = event(kWait, bar, phase, file, line, stmt_line);
  if (!e) return;
  e->lanes |= bit;
  e->parity = parity;
  if (!done) {
    e->blocked |= bit;
    if (e->from < 0) e->from = tracing.step;
    open = static_cast<long long>(e - T.events.data());
  }
}

}  // namespace trace
}  // namespace cudasim

#ifndef CUDASIM_PREBUILT_RUNTIME  // else they are in the runtime object (cudasim.h: CUDASIM_RT)
// ---------------------------------------------------------------------------------------------
// The control functions kernels/sim/trace.py calls (ctypes), exported from every sim build.
#define CUDASIM_TRACE_EXPORT extern "C" __attribute__((visibility("default"), used, CUDASIM_UNINSTRUMENTED)) inline

// Record the first `blocks` blocks of every launch from now on (0: stop recording); what was recorded goes.
CUDASIM_TRACE_EXPORT void cudasim_trace_start(unsigned blocks) {
  using namespace cudasim::trace;
  T = State{};
  cudasim::tracing.blocks = blocks;
  cudasim::tracing.block = false;
}

// Stop recording; what was recorded stays until cudasim_trace_start.
CUDASIM_TRACE_EXPORT void cudasim_trace_stop() {
  cudasim::trace::block_end();
  cudasim::tracing.blocks = 0;
}

// Copy up to `cap` items into `out`; each returns how many there are.
CUDASIM_TRACE_EXPORT size_t cudasim_trace_blocks(cudasim::trace::Block* out, size_t cap) {
  const auto& v = cudasim::trace::T.blocks;
  for (size_t i = 0; i < v.size() && i < cap; ++i) out[i] = v[i];
  return v.size();
}
CUDASIM_TRACE_EXPORT size_t cudasim_trace_events(cudasim::trace::Event* out, size_t cap) {
  const auto& v = cudasim::trace::T.events;
  for (size_t i = 0; i < v.size() && i < cap; ++i) out[i] = v[i];
  return v.size();
}
CUDASIM_TRACE_EXPORT size_t cudasim_trace_sites(cudasim::trace::Site* out, size_t cap) {
  const auto& v = cudasim::trace::T.sites;
  for (size_t i = 0; i < v.size() && i < cap; ++i) out[i] = v[i];
  return v.size();
}
CUDASIM_TRACE_EXPORT unsigned long long cudasim_trace_dropped() { return cudasim::trace::T.dropped; }

// The library's load address: return addresses minus it are what addr2line reads.
CUDASIM_TRACE_EXPORT unsigned long long cudasim_trace_base() {
  Dl_info info{};
  return dladdr(reinterpret_cast<void*>(&cudasim_trace_start), &info) && info.dli_fbase
             ? reinterpret_cast<uintptr_t>(info.dli_fbase) : 0;
}
#undef CUDASIM_TRACE_EXPORT
#endif
