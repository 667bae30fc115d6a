// daskwp — the CPU batch loop (cpu_batch.cpp): a batch of Arrow-style strings through the
// shared core on several threads, and the checks of the blobs it reads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "host_pool.hpp"
#include "model.hpp"

namespace daskwp {

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
