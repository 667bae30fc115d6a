// daskwp — the per-document loop of a chunk of a CPU batch, shared by encode_batch
// (cpu_batch.cpp: the ids kept) and count_batch (count_batch.cpp: only counted): documents
// d0 .. d1 through one memoized tokenizer state, each document's ids written after the
// buffer's `size`, counts[d] its number of tokens.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cpu_batch.hpp"
#include "word_memo.hpp"

namespace daskwp {

// Ids per count of [UNK] in a chunk's buffer (count_batch's Scratch, encode_batch's
// IdBuffer): the ids written since the last count are compared once at least this many
// have accumulated (they are still in L2: 128 KB), and the rest at the chunk's end. A pass
// per document cost more than the pass itself on documents of ~25 tokens; a pass over the
// batch's ids after the call (NumPy) read them back from memory.
constexpr int64_t kCountTokens = int64_t(1) << 15;

// How many of p[0, n) equal `id`.
inline int64_t count_equal_ids(const int32_t* p, int64_t n, int32_t id) {
  int64_t u = 0, k = 0;
#if defined(DWP_SSE2)
  // 4 ids a step: each lane of acc counts down by one per match (-1 from the compare);
  // blocks of at most 2^31 ids per lane total keep the int32 lanes from wrapping
  const __m128i key = _mm_set1_epi32(id);
  while (k + 4 <= n) {
    const int64_t stop = k + std::min<int64_t>((n - k) & ~int64_t(3), int64_t(1) << 30);
    __m128i acc = _mm_setzero_si128();
    for (; k < stop; k += 4)
      acc = _mm_add_epi32(acc, _mm_cmpeq_epi32(
                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k)), key));
    alignas(16) int32_t lanes[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(lanes), acc);
    u -= int64_t(lanes[0]) + lanes[1] + lanes[2] + lanes[3];
  }
#endif
  for (; k < n; ++k) u += p[k] == id;
  return u;
}

// Buf: `int32_t* at()` (where the next id goes), `int64_t left()` (room there) and
// `void room(int64_t want)` (at least `want` ids of room after `size`, which a buffer that
// only counts may empty first), `size` (advanced here by each document's tokens).
// Tok: the tokenizer state (MemoWordPieceE2ET<true> for offsets / word ids; MemoCountE2E
// for counts only, whose hits add to counts[d] and the buffer's `unknown` without ids in
// it); `bind(t)` runs after each reset of it, to point its offsets state at the buffer's
// arrays.
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
    if constexpr (Tok::kCountOnly) {  // its hits counted, not written
      counts[d] += t.hit_tokens;
      buf.unknown += t.hit_unknown;
    }
  }
}

}  // namespace daskwp
