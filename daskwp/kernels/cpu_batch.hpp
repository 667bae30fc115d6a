// daskwp — host-side batch entry points shared by the binding files.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include "model.hpp"

namespace daskwp {

// Host output arrays live in malloc'd memory (freed with std::free, also by the NumPy
// capsules). Large ones are 2 MB aligned and asked for transparent huge pages: first-touch
// page faults otherwise dominate writing padded windows.
struct FreeDelete {
  void operator()(void* p) const noexcept { std::free(p); }
};
template <typename T>
using HostArray = std::unique_ptr<T[], FreeDelete>;

template <typename T>
HostArray<T> host_array(size_t n) {
  const size_t bytes = (n ? n : 1) * sizeof(T);
  constexpr size_t kHuge = size_t(2) << 20;
  void* p = nullptr;
  if (bytes >= 2 * kHuge) {
    const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
    p = std::aligned_alloc(kHuge, rounded);
#ifdef MADV_HUGEPAGE
    if (p) madvise(p, rounded, MADV_HUGEPAGE);
#endif
  } else {
    p = std::malloc(bytes);
  }
  if (!p) throw std::bad_alloc();
  return HostArray<T>(static_cast<T*>(p));
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
