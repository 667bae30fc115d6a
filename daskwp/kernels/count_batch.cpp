// daskwp — the count-only CPU loop (``daskwp count``, ``.wordpiece.count()``): per document
// its number of tokens, and the [UNK] tokens of the batch, from the same normalize+WordPiece
// core and word memos as encode_batch (cpu_batch.cpp), run on the same plan of threads and
// chunks. No token array is made: each document's ids go to a small buffer of its thread,
// reused for the next document (in cache for documents of a few KB), where its [UNK] are
// counted. encode_batch wrote every id to its chunk's buffer (a token per ~3 bytes of text,
// 4 bytes each), copied them into the output array and the caller then compared them all
// with the [UNK] id and took the offsets' differences.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "cpu_batch.hpp"
#include "word_memo.hpp"
#include "wordpiece_core.hpp"

namespace daskwp {
namespace {

// A chunk's buffer for one document's ids at a time, grown (never shrunk) as documents need.
struct Scratch {
  std::unique_ptr<int32_t[]> ids;
  int64_t cap = 0;
  void reserve(int64_t want) {
    if (want <= cap) return;
    cap = std::max<int64_t>(want, 2 * cap + 1024);
    ids.reset(new int32_t[static_cast<size_t>(cap)]);
  }
};

// Documents d0 .. d1: lengths[d] = tokens of document d; returns the [UNK] among them.
template <typename Off>
int64_t count_range(const CoreContext& ctx, const Off* offsets, const uint8_t* data,
                    const uint8_t* validity, int64_t validity_offset, int64_t d0, int64_t d1,
                    int64_t data_end, WordCache* cache, Scratch& buf, int64_t* lengths) {
  const int32_t unk = ctx.v.h->unk_id;
  int64_t unknown = 0;
  MemoWordPieceE2E t(ctx, nullptr, 0);  // one tokenizer state for the range, reset per document
  t.set_batch(data, offsets, d1);  // where documents end, for the memo's prefetcher
  for (int64_t d = d0; d < d1; ++d) {
    const int64_t b = static_cast<int64_t>(offsets[d]);
    const int64_t len = document_bytes(offsets, validity, validity_offset, d);
    if (len == 0) {
      lengths[d] = 0;
      continue;
    }
    buf.reserve(len + 64);  // the usual bound: a token per byte (the memo's copies included)
    t.set_doc(d);
    t.reset(buf.ids.get(), buf.cap, cache);
    int64_t got = t.run(data + b, len, data_end - b);
    if (got > buf.cap) {  // rare: more tokens than the guess, run again
      buf.reserve(got + 64);
      t.reset(buf.ids.get(), buf.cap, cache);
      got = t.run(data + b, len, data_end - b);
    }
    const int32_t* ids = buf.ids.get();
    int64_t u = 0;
    for (int64_t k = 0; k < got; ++k) u += ids[k] == unk;
    unknown += u;
    lengths[d] = got;
  }
  return unknown;
}

}  // namespace

template <typename Off>
CountedBatch count_batch(const uint8_t* vocab_blob, const uint8_t* norm_blob,
                         const TokenizeParams& p, const Off* offsets, const uint8_t* data,
                         const uint8_t* validity, int64_t validity_offset, int64_t n_docs,
                         int num_threads, uint64_t cache_key) {
  CoreContext ctx;
  init_context(ctx, vocab_blob, norm_blob, p);
  CountedBatch out;
  out.lengths = host_array<int64_t>(static_cast<size_t>(std::max<int64_t>(n_docs, 1)));
  // the ids-only memos of encode_batch: a count and an encode of one corpus share them
  const BatchPlan plan = plan_batch(offsets, n_docs, num_threads, cache_key, 0);
  std::vector<int64_t> unknown(plan.chunks, 0);
  run_chunks(ctx, plan, [&](WordCache* memo, int c) {
    Scratch buf;  // (grown to the chunk's longest document; a few per thread and call)
    unknown[c] = count_range(ctx, offsets, data, validity, validity_offset, plan.cut[c],
                             plan.cut[c + 1], plan.data_end, memo, buf, out.lengths.get());
  });
  for (int64_t d = 0; d < n_docs; ++d) out.tokens += out.lengths[d];
  for (int64_t u : unknown) out.unknown += u;
  return out;
}

template CountedBatch count_batch<int32_t>(const uint8_t*, const uint8_t*,
                                           const TokenizeParams&, const int32_t*,
                                           const uint8_t*, const uint8_t*, int64_t, int64_t,
                                           int, uint64_t);
template CountedBatch count_batch<int64_t>(const uint8_t*, const uint8_t*,
                                           const TokenizeParams&, const int64_t*,
                                           const uint8_t*, const uint8_t*, int64_t, int64_t,
                                           int, uint64_t);

}  // namespace daskwp
