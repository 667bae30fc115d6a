// daskwp — host-side batch entry points shared by the binding files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include "model.hpp"

namespace daskwp {

// Host output arrays (and the buffers behind them) come from host_alloc and go back with
// host_free, also from the NumPy capsules that own them once they reach Python. Blocks of
// 4 MB and more are 2 MB aligned, asked for transparent huge pages, and pooled: a freed
// block is kept (up to the pool's limit, oldest dropped first) and handed out again for a
// request of about its size. Writing fresh memory costs first-touch page faults, which
// dominated padded windows output and the per-partition outputs of Dask workers (whose
// malloc returns large blocks to the system at once); a pooled block is already mapped.
void* host_alloc(size_t bytes);
void* host_alloc_pooled(size_t bytes);  // pooled (and huge-page backed) whatever its size
void host_free(void* p) noexcept;

struct HostPoolInfo {
  size_t limit;   // most bytes of freed blocks kept for reuse
  size_t cached;  // bytes of freed blocks kept now
  size_t live;    // bytes of pooled blocks in use
};
HostPoolInfo host_pool_info();
void host_pool_set_limit(size_t bytes);  // also drops cached blocks above the new limit
size_t host_pool_release();              // frees every cached block; returns their bytes

struct FreeDelete {
  void operator()(void* p) const noexcept { host_free(p); }
};
template <typename T>
using HostArray = std::unique_ptr<T[], FreeDelete>;

template <typename T>
HostArray<T> host_array(size_t n) {
  return HostArray<T>(static_cast<T*>(host_alloc((n ? n : 1) * sizeof(T))));
}

struct EncodedBatch {
  HostArray<int32_t> ids;      // flat token ids
  HostArray<int64_t> offsets;  // n_docs + 1
  int64_t n_ids = 0;
};

// Number of worker threads for `requested` (<= 0: all hardware threads).
int resolve_threads(int requested);

// Tokenizes n_docs documents data[offsets[d], offsets[d+1]). A null validity bitmap means
// all valid; null documents are empty. Runs on `num_threads` threads (<= 0: all).
template <typename Off>
EncodedBatch encode_batch(const uint8_t* vocab_blob, const uint8_t* norm_blob,
                          const TokenizeParams& p, const Off* offsets, const uint8_t* data,
                          const uint8_t* validity, int64_t validity_offset, int64_t n_docs,
                          int num_threads);

void check_vocab_blob(const uint8_t* p, size_t size);
void check_norm_blob(const uint8_t* p, size_t size);

}  // namespace daskwp
