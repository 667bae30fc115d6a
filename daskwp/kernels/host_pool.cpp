// daskwp — the host memory pool behind host_alloc / host_free (see host_pool.hpp).
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <list>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

#include "host_pool.hpp"

namespace daskwp {
namespace {

constexpr size_t kHuge = size_t(2) << 20;
constexpr size_t kPooled = 2 * kHuge;  // requests from this size up are pooled

// An eighth of the physical memory, between 256 MB and 16 GB: enough for a Dask worker to
// reuse one partition's outputs. (The Python layer passes the option host_pool_mb,
// DASKWP_HOST_POOL_MB, through host_pool_set_limit when it is set.)
size_t initial_limit() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const size_t phys = pages > 0 && page > 0 ? size_t(pages) * size_t(page) : size_t(8) << 30;
  return std::min(std::max(phys / 8, size_t(256) << 20), size_t(16) << 30);
}

// A pooled block is a mapping of its own, 2 MB aligned (block_map), not malloc's: freed
// (trimmed, released) it goes back to the system at once. From malloc, a Dask worker's
// blocks of 4-32 MB came from the heap (tune_worker_malloc raises glibc's mmap threshold to
// 32 MB), where those freed stayed resident as holes between the heap's other objects,
// and the blocks of new sizes grew the heap's top: a worker's heap grew with the
// partitions it wrote, whatever the pool kept.
struct Block {
  void* p;
  size_t size;
};

void* block_map(size_t bytes) {
  const size_t span = bytes + kHuge;
  void* m = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  const uintptr_t base = reinterpret_cast<uintptr_t>(m);
  const uintptr_t start = (base + kHuge - 1) / kHuge * kHuge;
  if (start > base) munmap(m, start - base);
  const uintptr_t end = start + bytes;
  if (base + span > end) munmap(reinterpret_cast<void*>(end), base + span - end);
  return reinterpret_cast<void*>(start);
}

void block_unmap(void* p, size_t bytes) noexcept { munmap(p, bytes); }

struct Cached {
  void* p;
  size_t size;
  uint64_t freed_at;  // the pool's clock when it was freed (increasing along the list)
};

struct Pool {
  std::mutex mu;
  std::unordered_map<void*, size_t> live;  // pooled blocks handed out, with their size
  std::list<Cached> cached;                // freed blocks kept for reuse, oldest first
  size_t cached_bytes = 0;
  size_t live_bytes = 0;
  size_t limit = initial_limit();
  uint64_t clock = 0;  // ticks at every free and every mark (host_pool_mark)

  // Drops the oldest cached blocks until at most `keep` bytes stay; returns them to free
  // outside the lock.
  std::vector<Block> trim(size_t keep) {
    std::vector<Block> out;
    while (cached_bytes > keep) {
      out.push_back({cached.front().p, cached.front().size});
      cached_bytes -= cached.front().size;
      cached.pop_front();
    }
    return out;
  }

  // Drops the cached blocks freed before `mark`; returns them to free outside the lock.
  std::vector<Block> trim_before(uint64_t mark) {
    std::vector<Block> out;
    while (!cached.empty() && cached.front().freed_at < mark) {
      out.push_back({cached.front().p, cached.front().size});
      cached_bytes -= cached.front().size;
      cached.pop_front();
    }
    return out;
  }
};

void pool_prepare_fork();
void pool_after_fork();

// Never destroyed: NumPy arrays may free their blocks during interpreter shutdown. The lock
// is held across fork() (pthread_atfork), so a child never inherits it locked by a thread
// that does not exist there (a forked Dask worker or multiprocessing child would block on
// its first output array).
Pool& pool() {
  static Pool* p = [] {
    Pool* q = new Pool();
    pthread_atfork(pool_prepare_fork, pool_after_fork, pool_after_fork);
    return q;
  }();
  return *p;
}
void pool_prepare_fork() { pool().mu.lock(); }
void pool_after_fork() { pool().mu.unlock(); }

void free_all(const std::vector<Block>& blocks) {
  for (const Block& b : blocks) block_unmap(b.p, b.size);
}

}  // namespace

void* host_alloc(size_t bytes) {
  if (bytes < kPooled) {
    void* p = std::malloc(bytes ? bytes : 1);
    if (!p) throw std::bad_alloc();
    return p;
  }
  return host_alloc_pooled(bytes);
}

void* host_alloc_pooled(size_t bytes) {
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  Pool& P = pool();
  {
    // The smallest cached block that fits without wasting more than a quarter.
    std::lock_guard<std::mutex> lock(P.mu);
    auto best = P.cached.end();
    for (auto it = P.cached.begin(); it != P.cached.end(); ++it)
      if (it->size >= rounded && it->size <= rounded + rounded / 4 &&
          (best == P.cached.end() || it->size < best->size))
        best = it;
    if (best != P.cached.end()) {
      void* p = best->p;
      const size_t size = best->size;
      P.cached.erase(best);
      P.cached_bytes -= size;
      P.live.emplace(p, size);
      P.live_bytes += size;
      return p;
    }
  }
  void* p = block_map(rounded);
  if (!p) {  // the cached blocks may be what is in the way
    host_pool_release();
    p = block_map(rounded);
    if (!p) throw std::bad_alloc();
  }
  std::lock_guard<std::mutex> lock(P.mu);
  try {
    P.live.emplace(p, rounded);
  } catch (...) {
    block_unmap(p, rounded);
    throw;
  }
  P.live_bytes += rounded;
  return p;
}

void host_free(void* p) noexcept {
  if (!p) return;
  Pool& P = pool();
  std::vector<Block> drop;
  {
    std::lock_guard<std::mutex> lock(P.mu);
    auto it = P.live.find(p);
    if (it == P.live.end()) {  // a small block from malloc
      std::free(p);
      return;
    }
    const size_t size = it->second;
    P.live.erase(it);
    P.live_bytes -= size;
    try {
      if (size > P.limit) {
        drop.push_back({p, size});
      } else {
        P.cached.push_back(Cached{p, size, ++P.clock});
        P.cached_bytes += size;
        drop = P.trim(P.limit);
      }
    } catch (...) {  // no memory for the bookkeeping: just free it
      block_unmap(p, size);
      return;
    }
  }
  free_all(drop);
}

HostPoolInfo host_pool_info() {
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  return HostPoolInfo{P.limit, P.cached_bytes, P.live_bytes};
}

void host_pool_set_limit(size_t bytes) {
  Pool& P = pool();
  std::vector<Block> drop;
  {
    std::lock_guard<std::mutex> lock(P.mu);
    P.limit = bytes;
    drop = P.trim(bytes);
  }
  free_all(drop);
}

uint64_t host_pool_mark() {
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  return ++P.clock;
}

size_t host_pool_trim_idle(uint64_t mark) {
  Pool& P = pool();
  std::vector<Block> drop;
  size_t bytes;
  {
    std::lock_guard<std::mutex> lock(P.mu);
    bytes = P.cached_bytes;
    drop = P.trim_before(mark);
    bytes -= P.cached_bytes;
  }
  free_all(drop);
  return bytes;
}

size_t host_pool_release() {
  Pool& P = pool();
  std::vector<Block> drop;
  size_t bytes;
  {
    std::lock_guard<std::mutex> lock(P.mu);
    bytes = P.cached_bytes;
    drop = P.trim(0);
  }
  free_all(drop);
  return bytes;
}

}  // namespace daskwp
