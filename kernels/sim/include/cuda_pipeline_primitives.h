// cuda_pipeline_primitives.h for the simulator: asynchronous copies from global to shared memory
// (what nvcc compiles to cp.async on sm_80 and later).
//
//   __pipeline_memcpy_async(dst_shared, src_global, size_and_align, zfill = 0)
//   __pipeline_commit()
//   __pipeline_wait_prior(n)
//
// A copy moves 4, 8 or 16 bytes; the last `zfill` of them are written as zeros and not read (so
// zfill == size_and_align reads nothing: the edge of a tile). Both addresses must be aligned to
// the size, the destination must be shared memory and the source global memory; anything else is
// an error naming the line, where nvcc's debug build would trap.
//
// As on a GPU, the copy is NOT in shared memory when the call returns. Each thread's copies are
// queued; __pipeline_commit closes the open ones into a group; __pipeline_wait_prior(n) lands every
// group of the calling thread except its n youngest (n above 8 counts as 8, as in CUDA's header).
// Only then do the bytes arrive, and only the calling thread's: other threads see them after a
// barrier that follows their owners' waits. Until it lands, a destination holds poison (0xFF
// bytes, a NaN), so a kernel that forgets the wait, or the __syncthreads after it, or that
// overwrites a buffer other threads still read, computes with NaN instead of passing by luck.
// The source is read when the copy is issued. __syncthreads does not land copies (it does not on
// a GPU either); copies still queued when a thread exits are dropped (nothing could wait for them).
// Not simulated: __pipeline_arrive_on (copies completing on an mbarrier) and the C++ classes
// of <cuda/pipeline> and nvcuda::experimental.
#pragma once
#include "cudasim.h"

#include <vector>

namespace cudasim {

struct AsyncCopy {
  unsigned char* dst;
  unsigned char bytes[16];
  unsigned size;
  unsigned long long group;  // the group it joins when the thread next commits
  const char* file;          // where it was issued
  int line;
};

struct PipelineState {
  unsigned long long gen = 0;        // the block it belongs to (g.block_gen); older state is dropped
  unsigned long long committed = 0;  // groups committed so far; the open group has this number
  std::vector<AsyncCopy> queued;     // issued and not landed, oldest first
};

CUDASIM_RT_STATE std::vector<PipelineState> pipelines;

CUDASIM_INTERNAL inline PipelineState& my_pipeline(const char* what, const char* file, int line) {
  Thread* t = g.cur;
  if (!t) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "%s at %s:%d called outside a kernel", what, base_name(file).c_str(), line);
    fail(buf);
  }
  if (pipelines.size() < g.threads.size()) pipelines.resize(g.threads.size());
  PipelineState& p = pipelines[t->linear];
  if (p.gen != g.block_gen) {
    p.gen = g.block_gen;
    p.committed = 0;
    p.queued.clear();
  }
  return p;
}

// Is [p, p + n) inside the shared-memory arena (or does it touch it), or in the thread's stack (a local)?
CUDASIM_INTERNAL inline bool in_shared(const void* p, size_t n) {
  auto a = reinterpret_cast<uintptr_t>(p), lo = reinterpret_cast<uintptr_t>(arena);
  return a >= lo && a + n <= lo + sizeof arena;
}
CUDASIM_INTERNAL inline bool overlaps_shared(const void* p, size_t n) {
  auto a = reinterpret_cast<uintptr_t>(p), lo = reinterpret_cast<uintptr_t>(arena);
  return a < lo + sizeof arena && a + n > lo;
}
CUDASIM_INTERNAL inline bool in_my_stack(const void* p) {
  const Thread* t = g.cur;
  auto a = reinterpret_cast<uintptr_t>(p), lo = reinterpret_cast<uintptr_t>(t->stack);
  return t->stack && a >= lo && a < lo + kGuardBytes + t->stack_size;
}

[[noreturn]] CUDASIM_INTERNAL inline void pipeline_fail(const char* file, int line, const std::string& what) {
  fail("__pipeline_memcpy_async at " + base_name(file) + ":" + std::to_string(line) + ": " + what);
}

CUDASIM_INTERNAL inline void pipeline_memcpy_async_(const char* file, int line, void* dst, const void* src, size_t size,
                                   size_t zfill = 0) {
  SimScope scope;
  PipelineState& p = my_pipeline("__pipeline_memcpy_async", file, line);
  if (size != 4 && size != 8 && size != 16)
    pipeline_fail(file, line, "size_and_align must be 4, 8 or 16 bytes, got " + std::to_string(size));
  if (zfill > size)
    pipeline_fail(file, line, "zfill (the bytes written as zeros) must be at most size_and_align (" +
                                  std::to_string(size) + "), got " + std::to_string(zfill));
  if (!in_shared(dst, size))
    pipeline_fail(file, line, "the destination must be shared memory (a __shared__ array or extern __shared__)");
  if (overlaps_shared(src, size) || in_my_stack(src))
    pipeline_fail(file, line, "the source must be global memory (a tensor's data), not shared or local memory");
  char buf[200];
  if (reinterpret_cast<uintptr_t>(dst) % size != 0 || reinterpret_cast<uintptr_t>(src) % size != 0) {
    std::snprintf(buf, sizeof buf, "the destination and the source must be %zu-byte aligned (the copy's size), got "
                  "destination %% %zu = %zu and source %% %zu = %zu", size, size, reinterpret_cast<uintptr_t>(dst) % size,
                  size, reinterpret_cast<uintptr_t>(src) % size);
    pipeline_fail(file, line, buf);
  }
  AsyncCopy c{static_cast<unsigned char*>(dst), {}, static_cast<unsigned>(size), p.committed, file, line};
  if (size > zfill) note_read(src, size - zfill, file, line);
  if (size > zfill) std::memcpy(c.bytes, src, size - zfill);  // read now: a wild source faults at this line
  std::memset(c.bytes + (size - zfill), 0, zfill);
  std::memset(dst, kPoison, size);  // not there yet: reading it before the wait gets NaN
  p.queued.push_back(c);
}

CUDASIM_INTERNAL inline void pipeline_commit_(const char* file, int line) {
  SimScope scope;
  my_pipeline("__pipeline_commit", file, line).committed += 1;
}

CUDASIM_INTERNAL inline void pipeline_wait_prior_(size_t prior, const char* file, int line) {
  SimScope scope;
  PipelineState& p = my_pipeline("__pipeline_wait_prior", file, line);
  const unsigned long long keep = prior < 8 ? prior : 8;  // CUDA's header waits with 8 for anything larger
  const unsigned long long land_below = p.committed > keep ? p.committed - keep : 0;
  size_t kept = 0;
  for (AsyncCopy& c : p.queued) {
    if (c.group < land_below) {
      note_write(c.dst, c.size, c.file, c.line);  // the copy lands now, as the waiting thread's write
      std::memcpy(c.dst, c.bytes, c.size);
    }
    else p.queued[kept++] = c;
  }
  p.queued.resize(kept);
}

}  // namespace cudasim

#define __pipeline_memcpy_async(...) ::cudasim::pipeline_memcpy_async_(__FILE__, __LINE__, __VA_ARGS__)
#define __pipeline_commit() ::cudasim::pipeline_commit_(__FILE__, __LINE__)
#define __pipeline_wait_prior(n) ::cudasim::pipeline_wait_prior_((n), __FILE__, __LINE__)
