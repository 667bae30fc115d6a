// daskwp — the count-only CPU loop (``daskwp count``, ``.wordpiece.count()``): per document
// its number of tokens, and the [UNK] tokens of the batch, from the same normalize+WordPiece
// core and word memos as encode_batch (cpu_batch.cpp), run on the same plan of threads and
// chunks. No token array is made: a memo hit on an entry with its count byte (the
// u16 layout's short entries, int32 ones of up to 3 ids, inline mid entries: nearly every
// hit) adds its token count and its [UNK] count (word_memo.hpp, MemoCountE2E) and writes
// nothing; the other documents' ids go to a small buffer of their chunk (128 KB, in
// cache), where their [UNK] are counted before it is reused. encode_batch writes every id
// to its chunk's buffer (a token per ~3 bytes of text, 4 bytes each), counting the [UNK]
// the same way, and copies them into the output array.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "batch_range.hpp"
#include "cpu_batch.hpp"
#include "word_memo.hpp"
#include "wordpiece_core.hpp"

namespace daskwp {
namespace {

// A chunk's buffer of ids: documents' ids follow on from `size` until the next document
// might not fit in kCountTokens (batch_range.hpp), then their [UNK] are counted in one pass
// and it starts again. Grown (never shrunk) for a document longer than that.
struct Scratch {
  std::unique_ptr<int32_t[]> ids;
  int64_t cap = 0, size = 0, unknown = 0;
  int32_t unk;
  explicit Scratch(int32_t unk_id) : unk(unk_id) {}
  void flush() {
    unknown += count_equal_ids(ids.get(), size, unk);
    size = 0;
  }
  // Room for `want` more tokens after `size`.
  void room(int64_t want) {
    if (size + want <= cap) return;
    flush();
    if (want <= cap) return;
    cap = std::max<int64_t>(want, kCountTokens);
    ids.reset(new int32_t[static_cast<size_t>(cap)]);
  }
  int32_t* at() { return ids.get() + size; }
  int64_t left() const { return cap - size; }
};

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
    Scratch buf(ctx.v.h->unk_id);  // (128 KB, or the chunk's longest document's room)
    // documents' lengths; their [UNK] counted as the buffer fills, the rest here
    tokenize_range<Off, Scratch, MemoCountE2E>(ctx, offsets, data, validity, validity_offset,
                                               plan.cut[c], plan.cut[c + 1], plan.data_end,
                                               memo, buf, out.lengths.get());
    buf.flush();
    unknown[c] = buf.unknown;
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
