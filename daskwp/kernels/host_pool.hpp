// daskwp — host memory for output arrays: the pool behind host_alloc / host_free
// (host_pool.cpp) and the owning array types built on it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace daskwp {

// Whether new word-memo mappings (memo_storage.hpp) ask the kernel for transparent huge
// pages (madvise MADV_HUGEPAGE): yes unless the option huge_pages (DASKWP_HUGE_PAGES) is
// false. Where THP is "madvise", a first touch of such a region faults in, zeroes (and may
// first compact memory for) 2 MB at once, which on VMs costs several times the system CPU
// of 4 KB pages. A memo is mapped once per thread and reused, and its random lookups run
// markedly faster on huge pages: it pays. Pooled output blocks are written in order and
// mapped afresh whenever the pool was released (a job's partitions): they never ask. The
// figures: benchmarks/results/thp.md.
inline std::atomic<bool> g_memo_huge_pages{true};

// Host output arrays (and the buffers behind them) come from host_alloc and go back with
// host_free, also from the NumPy capsules that own them once they reach Python. Blocks of
// 4 MB and more are 2 MB aligned (never madvised for huge pages: see g_memo_huge_pages;
// with THP "always" the system may still back them with huge pages), and pooled: a freed
// block is kept (up to the pool's limit, oldest dropped first) and handed out again for a
// request of about its size. Writing fresh memory costs first-touch page faults, which
// dominated padded windows output and the per-partition outputs of Dask workers (whose
// malloc returns large blocks to the system at once); a pooled block is already mapped.
void* host_alloc(size_t bytes);
void* host_alloc_pooled(size_t bytes);  // pooled whatever its size
void host_free(void* p) noexcept;

struct HostPoolInfo {
  size_t limit;   // most bytes of freed blocks kept for reuse
  size_t cached;  // bytes of freed blocks kept now
  size_t live;    // bytes of pooled blocks in use
};
HostPoolInfo host_pool_info();
void host_pool_set_limit(size_t bytes);  // also drops cached blocks above the new limit
size_t host_pool_release();              // frees every cached block; returns their bytes
// A mark of now: host_pool_trim_idle(mark) later frees the cached blocks that have not been
// handed out since (those freed before the mark and still cached); returns their bytes.
uint64_t host_pool_mark();
size_t host_pool_trim_idle(uint64_t mark);

struct FreeDelete {
  void operator()(void* p) const noexcept { host_free(p); }
};
template <typename T>
using HostArray = std::unique_ptr<T[], FreeDelete>;

template <typename T>
HostArray<T> host_array(size_t n) {
  return HostArray<T>(static_cast<T*>(host_alloc((n ? n : 1) * sizeof(T))));
}

}  // namespace daskwp
