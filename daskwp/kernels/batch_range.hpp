// daskwp — the per-document loop of a chunk of a CPU batch, shared by encode_batch
// (cpu_batch.cpp: the ids kept) and count_batch (count_batch.cpp: only counted): documents
// d0 .. d1 through one memoized tokenizer state, each document's ids written after the
// buffer's `size`, counts[d] its number of tokens.
#pragma once

#include <cstdint>

#include "cpu_batch.hpp"
#include "word_memo.hpp"

namespace daskwp {

// Buf: `int32_t* at()` (where the next id goes), `int64_t left()` (room there) and
// `void room(int64_t want)` (at least `want` ids of room after `size`, which a buffer that
// only counts may empty first), `size` (advanced here by each document's tokens).
// Tok: the tokenizer state (MemoWordPieceE2ET<true> for offsets / word ids); `bind(t)`
// runs after each reset of it, to point its offsets state at the buffer's arrays.
struct NoBind {
  template <typename T>
  void operator()(T&) const {}
};

template <typename Off, typename Buf, typename Tok = MemoWordPieceE2E, typename Bind = NoBind>
void tokenize_range(const CoreContext& ctx, const Off* offsets, const uint8_t* data,
                    const uint8_t* validity, int64_t validity_offset, int64_t d0, int64_t d1,
                    int64_t data_end, WordCache* cache, Buf& buf, int64_t* counts,
                    Bind bind = {}) {
  Tok t(ctx, nullptr, 0);  // one tokenizer state for the range, reset per document
  t.set_batch(data, offsets, d1);  // where documents end, for the memo's prefetcher
  for (int64_t d = d0; d < d1; ++d) {
    const int64_t b = static_cast<int64_t>(offsets[d]);
    const int64_t len = document_bytes(offsets, validity, validity_offset, d);
    if (len == 0) {
      counts[d] = 0;
      continue;
    }
    buf.room(len + 64);  // the usual bound: a token per byte (the memo's copies included)
    t.set_doc(d);
    t.reset(buf.at(), buf.left(), cache);
    bind(t);
    int64_t got = t.run(data + b, len, data_end - b);
    if (got > buf.left()) {  // rare: more tokens than the guess, run again
      buf.room(got + 64);
      t.reset(buf.at(), buf.left(), cache);
      bind(t);
      got = t.run(data + b, len, data_end - b);
    }
    buf.size += got;
    counts[d] = got;
  }
}

}  // namespace daskwp
