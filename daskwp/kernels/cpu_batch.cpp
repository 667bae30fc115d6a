// daskwp — CPU loop over a batch of documents (no Python: bind_encode.cpp is its binding).
//
// The batch arrives as Arrow-style buffers (offsets + UTF-8 bytes, optional validity
// bitmap); documents are split into contiguous, byte-balanced chunks handed out to the
// threads, and each thread runs the shared core (wordpiece_core.hpp) with its own word
// memo (word_memo.hpp). The caller releases the GIL.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cpu_batch.hpp"
#include "word_memo.hpp"
#include "wordpiece_core.hpp"

namespace daskwp {
namespace {

// A growable int32 buffer without zero-initialisation.
struct IdBuffer {
  HostArray<int32_t> data;
  int64_t size = 0, cap = 0;
  void reserve(int64_t want) {
    if (want <= cap) return;
    int64_t c = std::max<int64_t>(want, cap * 2 + 1024);
    HostArray<int32_t> d = host_array<int32_t>(static_cast<size_t>(c));
    if (size) std::memcpy(d.get(), data.get(), size * sizeof(int32_t));
    data.swap(d);
    cap = c;
  }
};

// The memo of whole words one thread keeps for a batch (2 MB; see WordCache). From the
// pool: huge pages keep its random lookups off the TLB's back, and a reused block is
// already mapped.
using WordCachePtr = std::unique_ptr<WordCache, FreeDelete>;
WordCachePtr make_word_cache(const CoreContext& ctx) {
  WordCachePtr cache(static_cast<WordCache*>(host_alloc_pooled(sizeof(WordCache))));
  reset_word_cache(ctx, cache.get());
  return cache;
}

template <typename Off>
void encode_range(const CoreContext& ctx, const Off* offsets, const uint8_t* data, const uint8_t* validity,
                  int64_t validity_offset, int64_t d0, int64_t d1, int64_t data_end,
                  WordCache* cache, IdBuffer& buf, int64_t* counts) {
  // Room for one token per input byte up front (the usual bound; a document that needs
  // more grows the buffer below), so the buffer is not regrown and copied as it fills.
  // Pages that stay untouched cost no memory.
  if (d1 > d0) buf.reserve(static_cast<int64_t>(offsets[d1] - offsets[d0]) + 64);
  MemoWordPieceE2E t(ctx, nullptr, 0);  // one tokenizer state for the range, reset per document
  for (int64_t d = d0; d < d1; ++d) {
    const int64_t b = static_cast<int64_t>(offsets[d]), e = static_cast<int64_t>(offsets[d + 1]);
    const int64_t vb = d + validity_offset;
    if ((validity && !((validity[vb >> 3] >> (vb & 7)) & 1)) || e <= b) {
      counts[d] = 0;
      continue;
    }
    const int64_t len = e - b;
    buf.reserve(buf.size + len + 64);
    t.reset(buf.data.get() + buf.size, buf.cap - buf.size, cache);
    int64_t got = t.run(data + b, len, data_end - b);
    if (got > buf.cap - buf.size) {  // rare: more tokens than the guess, run again
      buf.reserve(buf.size + got);
      t.reset(buf.data.get() + buf.size, buf.cap - buf.size, cache);
      got = t.run(data + b, len, data_end - b);
    }
    buf.size += got;
    counts[d] = got;
  }
}

}  // namespace

int resolve_threads(int requested) {
  if (requested > 0) return requested;
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? static_cast<int>(hc) : 1;
}

template <typename Off>
EncodedBatch encode_batch(const uint8_t* vocab_blob, const uint8_t* norm_blob,
                          const TokenizeParams& p, const Off* offsets, const uint8_t* data,
                          const uint8_t* validity, int64_t validity_offset, int64_t n_docs,
                          int num_threads) {
  CoreContext ctx;
  init_context(ctx, vocab_blob, norm_blob, p);
  EncodedBatch out;
  out.offsets = host_array<int64_t>(static_cast<size_t>(n_docs + 1));
  out.offsets[0] = 0;
  int64_t* counts = out.offsets.get() + 1;
  const int64_t total_bytes = n_docs ? static_cast<int64_t>(offsets[n_docs] - offsets[0]) : 0;
  int threads = resolve_threads(num_threads);
  // Small batches are not worth a thread each: ~1 MB per thread at least.
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, total_bytes >> 20)));
  threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(n_docs, 1)));

  // Byte-balanced contiguous document chunks: one per thread, or 8 per thread handed out as
  // threads come free, so that a thread slowed down by its core's other work does not hold
  // up the batch.
  const int chunks = threads == 1 ? 1 : 8 * threads;
  std::vector<int64_t> cut(chunks + 1, n_docs);
  cut[0] = 0;
  for (int c = 1; c < chunks; ++c) {
    const Off target = offsets[0] + static_cast<Off>(total_bytes * c / chunks);
    cut[c] = std::lower_bound(offsets, offsets + n_docs + 1, target) - offsets;
    cut[c] = std::max(cut[c], cut[c - 1]);
  }
  // Every document may read ahead up to the end of the batch's bytes (word_end's 16-byte
  // scan); the other threads only read them too.
  const int64_t data_end = n_docs ? static_cast<int64_t>(offsets[n_docs]) : 0;
  // The memo pays off from ~1 MB of text per thread.
  const bool memo = total_bytes / threads >= (int64_t(1) << 20);
  std::vector<IdBuffer> bufs(chunks);
  if (threads == 1) {
    WordCachePtr cache = memo ? make_word_cache(ctx) : WordCachePtr();
    encode_range(ctx, offsets, data, validity, validity_offset, 0, n_docs, data_end,
                 cache.get(), bufs[0], counts);
  } else {
    std::atomic<int> next{0};
    std::vector<std::thread> pool;
    std::vector<std::exception_ptr> errors(threads);
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        try {
          WordCachePtr cache = memo ? make_word_cache(ctx) : WordCachePtr();
          for (int c = next++; c < chunks; c = next++)
            encode_range(ctx, offsets, data, validity, validity_offset, cut[c], cut[c + 1],
                         data_end, cache.get(), bufs[c], counts);
        } catch (...) {
          errors[t] = std::current_exception();
          next = chunks;  // the others stop at their next chunk
        }
      });
    }
    for (auto& th : pool) th.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }
  int64_t total = 0;
  for (int c = 0; c < chunks; ++c) total += bufs[c].size;
  if (chunks == 1) {
    out.ids = std::move(bufs[0].data);
  } else {
    out.ids = host_array<int32_t>(static_cast<size_t>(std::max<int64_t>(total, 1)));
    int64_t at = 0;
    for (int c = 0; c < chunks; ++c) {
      if (bufs[c].size) std::memcpy(out.ids.get() + at, bufs[c].data.get(), bufs[c].size * 4);
      at += bufs[c].size;
    }
  }
  if (!out.ids) out.ids = host_array<int32_t>(1);
  out.n_ids = total;
  for (int64_t d = 0; d < n_docs; ++d) out.offsets[d + 1] += out.offsets[d];
  return out;
}

template EncodedBatch encode_batch<int32_t>(const uint8_t*, const uint8_t*,
                                            const TokenizeParams&, const int32_t*,
                                            const uint8_t*, const uint8_t*, int64_t, int64_t,
                                            int);
template EncodedBatch encode_batch<int64_t>(const uint8_t*, const uint8_t*,
                                            const TokenizeParams&, const int64_t*,
                                            const uint8_t*, const uint8_t*, int64_t, int64_t,
                                            int);

void check_vocab_blob(const uint8_t* p, size_t size) {
  if (size < sizeof(VocabHeader)) throw std::invalid_argument("vocabulary blob too small");
  const auto* h = reinterpret_cast<const VocabHeader*>(p);
  if (h->magic != kVocabMagic) throw std::invalid_argument("not a daskwp vocabulary blob");
  if (h->version != kBlobVersion)
    throw std::invalid_argument("vocabulary blob version " + std::to_string(h->version) +
                                ", this build reads version " + std::to_string(kBlobVersion));
  if (h->total_bytes > size) throw std::invalid_argument("vocabulary blob truncated");
  if (reinterpret_cast<uintptr_t>(p) % 8)
    throw std::invalid_argument("vocabulary blob not 8-byte aligned");
}

void check_norm_blob(const uint8_t* p, size_t size) {
  if (size < sizeof(NormHeader)) throw std::invalid_argument("normalization blob too small");
  const auto* h = reinterpret_cast<const NormHeader*>(p);
  if (h->magic != kNormMagic) throw std::invalid_argument("not a daskwp normalization blob");
  if (h->version != kBlobVersion)
    throw std::invalid_argument("normalization blob version " + std::to_string(h->version) +
                                ", this build reads version " + std::to_string(kBlobVersion));
  if (h->total_bytes > size) throw std::invalid_argument("normalization blob truncated");
  if (reinterpret_cast<uintptr_t>(p) % 8)
    throw std::invalid_argument("normalization blob not 8-byte aligned");
}

}  // namespace daskwp
