// daskwp — the word memo's offsets layout (host only).
//
// With return_offsets_mapping or return_word_ids the CPU loop uses memos whose entries
// hold, besides the ids, each token's span and word index relative to the string, so that
// a hit needs only the running unit (byte or character) and word positions, and no walk.
// Such a memo is made for one unit (offsets_unit, kMemoOffsetsBytes or kMemoOffsetsChars)
// and the pool keys it apart from the ids-only memos. This header states the layout of its
// inline short entries and long records and holds their readers: the fast loop's
// branch-free inline hit (put_inline_hit) and the loop-free copy of a long record's ids,
// spans and word ids (put_long). Recording such entries (store_off, record_off) and the
// loop's use of them are members of MemoWordPieceE2ET<true> in word_memo.hpp.
#pragma once

#include "memo_emit.hpp"

namespace daskwp {

// The offsets layout (a memo with offsets_unit set): the same tables and keys; besides its
// ids an entry holds each token's span relative to the string's start (in the memo's unit;
// in chars relative to the string's first character) and word index relative to the
// string's first word, and the string's length in units and its number of words, so that a
// hit needs only the running unit and word positions. A short entry holds inline up to 3
// tokens whose spans tile the string ([0, e0), [e0, e1), [e1, units); what a whole-word
// chunk such as `world,` gives):
//   byte 16 n_tokens (or kInLong), 17 units, 18 words | wd1 << 4 (token 1's word delta;
//   token 0's is 0, token 2's words - 1), 19 (e0 - 1) | (e1 - 1) << 4 (e0: token 0's end,
//   e1: token 1's; units for the tokens the entry does not have, so that a hit reads all
//   three spans without a test), 20-31 the ids.
// Anything else goes to the long table, whose record holds after the ids and the bytes
// (padded to 4) begin and end of each token interleaved (be[2 nt]: spans of two tokens
// widen to 4 int64 from 4 bytes), wd[nt], units, words as bytes, then 2 zero bytes (a hit
// may read the word deltas 4 at a time).
constexpr int32_t kMemoOffsetsBytes = 1;
constexpr int32_t kMemoOffsetsChars = 2;

// Whether nt tokens with the long record's metadata meta (be[2 nt], wd[nt]), units and
// words fit an inline short entry: at most 3 tokens whose spans tile [0, units) with inner
// ends 1-15, token 0 in word 0 and the last one in word words - 1 (words <= 15): what
// put_inline reads back.
DWP_FORCEINLINE bool fits_inline(const uint8_t* meta, int64_t nt, int64_t units,
                                 int64_t words) {
  if (nt > kWordCacheMaxTokens || words > 15) return false;
  const uint8_t* be = meta;
  const uint8_t* wd = meta + 2 * nt;
  bool fits = be[0] == 0 && be[2 * nt - 1] == units && wd[0] == 0 &&
              wd[nt - 1] == words - 1 && units >= 1;
  for (int64_t k = 1; k < nt; ++k)
    fits = fits && be[2 * k] == be[2 * k - 1] && be[2 * k - 1] >= 1 &&
           be[2 * k - 1] <= 15 && wd[k] <= 15;
  return fits;
}

// Writes the inline entry of t[0, nt) with that metadata (fits_inline) into slot, whose
// key is set: bytes 16-19 as above, the ids as int32 from byte 20.
DWP_FORCEINLINE void put_inline_entry(WordCacheEntry* slot, const int32_t* t, int64_t nt,
                                      const uint8_t* meta, int64_t units, int64_t words) {
  const uint8_t* be = meta;
  const uint8_t* wd = meta + 2 * nt;
  uint8_t* cb = reinterpret_cast<uint8_t*>(slot);
  const int64_t e0 = nt > 1 ? be[1] : units, e1 = nt > 2 ? be[3] : units;
  cb[16] = (uint8_t)nt;
  cb[17] = (uint8_t)units;
  cb[18] = (uint8_t)(words | ((nt > 1 ? wd[1] : 0) << 4));
  cb[19] = (uint8_t)((e0 - 1) | ((e1 - 1) << 4));
  for (int64_t k = 0; k < nt; ++k) slot->tokens[k] = t[k];
}

// The spans (relative to u) and word ids (relative to w) of an inline entry's 3 token
// slots (those past its n_tokens are junk), from its bytes eb.
DWP_FORCEINLINE void put_inline(const uint8_t* eb, int64_t* ob, int64_t* oe,
                                int32_t* ow, int64_t u, int32_t w) {
  const int64_t units = eb[17];
  const uint32_t wb = eb[18], sb = eb[19];
  const int64_t e0 = (int64_t)(sb & 15u) + 1, e1 = (int64_t)(sb >> 4) + 1;
  ob[0] = u;
  oe[0] = u + e0;
  ob[1] = u + e0;
  oe[1] = u + e1;
  ob[2] = u + e1;
  oe[2] = u + units;
  ow[0] = w;
  ow[1] = w + (int32_t)(wb >> 4);
  ow[2] = w + (int32_t)(wb & 15u) - 1;
}

// An inline entry's ids, spans (from unit u) and word ids (from w) at out / offs / wids
// for the fast loop, which needs kInlineSlots free slots there (the slots past n_tokens
// get junk, overwritten by the next emit).
// With SSE4.1 all in SSE registers from one 16-byte load of the entry's bytes 16-31
// (n_tokens, units, words | word 1 << 4, (end 0 - 1) | (end 1 - 1) << 4, the 3 ids): 4
// ids (the 4th junk), the 3 slots' spans and 4 word ids. Five 16-byte stores in place of
// twelve scalar ones, and the nibbles unpacked once for all of them. Through tok.encode (20 MB, one
// thread, two builds run in turn): offsets min 49.0-50.7 -> 48.3-48.5 ms on EWT, 52.2
// -> 50.3 on books; the time against the encode 1.48-1.52 -> 1.42-1.45. (Callgrind
// counts 1.9% more instructions: the stores, not the instructions, were the cost.)
#if defined(DWP_SSE41)
constexpr int64_t kInlineSlots = 4;
#else
constexpr int64_t kInlineSlots = kWordCacheMaxTokens;
#endif
DWP_FORCEINLINE void put_inline_hit(const WordCacheEntry* en, int32_t* out,
                                    int64_t* offs, int32_t* wids, int64_t u,
                                    int32_t w) {
#if defined(DWP_SSE41)
  const __m128i v =
      _mm_load_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint8_t*>(en) + 16));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_srli_si128(v, 4));
  const __m128i m = _mm_set1_epi8(15);
  // byte 2j: the low nibble of v's byte j, 2j + 1: its high one (j < 8)
  const __m128i nib =
      _mm_unpacklo_epi8(_mm_and_si128(v, m), _mm_and_si128(_mm_srli_epi16(v, 4), m));
  const int8_t z = -128;  // pshufb: a zero byte
  // int64 lanes: [0, end 0 - 1], [end 0 - 1, end 1 - 1], [end 1 - 1, 0] from nib, and
  // units (v's byte 1) in the last lane; + [u, u + 1], [u + 1, u + 1], [u + 1, u].
  const __m128i s01 = _mm_shuffle_epi8(
      nib, _mm_setr_epi8(z, z, z, z, z, z, z, z, 6, z, z, z, z, z, z, z));
  const __m128i s23 = _mm_shuffle_epi8(
      nib, _mm_setr_epi8(6, z, z, z, z, z, z, z, 7, z, z, z, z, z, z, z));
  const __m128i s45 = _mm_or_si128(
      _mm_shuffle_epi8(nib, _mm_setr_epi8(7, z, z, z, z, z, z, z, z, z, z, z, z, z, z, z)),
      _mm_shuffle_epi8(v, _mm_setr_epi8(z, z, z, z, z, z, z, z, 1, z, z, z, z, z, z, z)));
  const __m128i uu = _mm_set1_epi64x(u);
  __m128i* sp = reinterpret_cast<__m128i*>(offs);
  _mm_storeu_si128(sp + 0, _mm_add_epi64(s01, _mm_add_epi64(uu, _mm_set_epi64x(1, 0))));
  _mm_storeu_si128(sp + 1, _mm_add_epi64(s23, _mm_add_epi64(uu, _mm_set_epi64x(1, 1))));
  _mm_storeu_si128(sp + 2, _mm_add_epi64(s45, _mm_add_epi64(uu, _mm_set_epi64x(0, 1))));
  // int32 lanes: [0, word 1, words, 0] + [w, w, w - 1, w]
  const __m128i wv = _mm_shuffle_epi8(
      nib, _mm_setr_epi8(z, z, z, z, 5, z, z, z, 4, z, z, z, z, z, z, z));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(wids),
                   _mm_add_epi32(wv, _mm_add_epi32(_mm_set1_epi32(w), _mm_setr_epi32(0, 0, -1, 0))));
#else
  __builtin_memcpy(out, en->tokens, sizeof(en->tokens));
  int64_t ob[3], oe[3];
  put_inline(reinterpret_cast<const uint8_t*>(en), ob, oe, wids, u, w);
  for (int k = 0; k < 3; ++k) offs[2 * k] = ob[k], offs[2 * k + 1] = oe[k];
#endif
}

// The nt tokens of a long record (ids rec, metadata meta) at out / offs / wids, spans from
// unit u, word ids from w; `room` (>= nt + 4) slots are free there, and it writes up to 4
// past nt, or all 8 of a record of up to 8 tokens when there are 12: then without a loop
// (a loop's exit on a varying count mispredicts), reading what follows the record's
// ids and metadata in the arena (kArenaSlack bytes after its last record) for the slots
// the next emit overwrites.
DWP_FORCEINLINE void put_long(const int32_t* rec, const uint8_t* meta, int32_t nt,
                              int64_t room, int32_t* out, int64_t* offs,
                              int32_t* wids, int64_t u, int32_t w) {
  const uint8_t* wd = meta + 2 * nt;
#if defined(DWP_SSE41)
  if (nt <= 8 && room >= 12) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 4),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 4)));
    const __m128i uu = _mm_set1_epi64x(u);
    const __m128i be = _mm_loadu_si128(reinterpret_cast<const __m128i*>(meta));
    __m128i* sp = reinterpret_cast<__m128i*>(offs);
    _mm_storeu_si128(sp + 0, _mm_add_epi64(_mm_cvtepu8_epi64(be), uu));
    _mm_storeu_si128(sp + 1, _mm_add_epi64(_mm_cvtepu8_epi64(_mm_srli_si128(be, 2)), uu));
    _mm_storeu_si128(sp + 2, _mm_add_epi64(_mm_cvtepu8_epi64(_mm_srli_si128(be, 4)), uu));
    _mm_storeu_si128(sp + 3, _mm_add_epi64(_mm_cvtepu8_epi64(_mm_srli_si128(be, 6)), uu));
    _mm_storeu_si128(sp + 4, _mm_add_epi64(_mm_cvtepu8_epi64(_mm_srli_si128(be, 8)), uu));
    _mm_storeu_si128(sp + 5, _mm_add_epi64(_mm_cvtepu8_epi64(_mm_srli_si128(be, 10)), uu));
    _mm_storeu_si128(sp + 6, _mm_add_epi64(_mm_cvtepu8_epi64(_mm_srli_si128(be, 12)), uu));
    _mm_storeu_si128(sp + 7, _mm_add_epi64(_mm_cvtepu8_epi64(_mm_srli_si128(be, 14)), uu));
    const __m128i ww = _mm_set1_epi32(w);
    const __m128i wv = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(wd));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(wids),
                     _mm_add_epi32(_mm_cvtepu8_epi32(wv), ww));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(wids + 4),
                     _mm_add_epi32(_mm_cvtepu8_epi32(_mm_srli_si128(wv, 4)), ww));
    return;
  }
#endif
  put_tokens(out, 0, nt, rec, nt);
#if defined(DWP_SSE41)
  // Two tokens' spans (4 bytes of be) widen to 4 int64; four word deltas to 4 int32.
  const __m128i uu = _mm_set1_epi64x(u);
  for (int32_t k = 0; k < nt; k += 2) {
    uint32_t b4;
    __builtin_memcpy(&b4, meta + 2 * k, 4);  // (past be's end: wd's first bytes, unused)
    const __m128i x = _mm_cvtsi32_si128((int)b4);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(offs + 2 * k),
                     _mm_add_epi64(_mm_cvtepu8_epi64(x), uu));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(offs + 2 * k + 2),
                     _mm_add_epi64(_mm_cvtepu8_epi64(_mm_srli_epi32(x, 16)), uu));
  }
  const __m128i ww = _mm_set1_epi32(w);
  for (int32_t k = 0; k < nt; k += 4) {
    uint32_t w4;
    __builtin_memcpy(&w4, wd + k, 4);  // (past wd's end: units, words and the zero bytes)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(wids + k),
                     _mm_add_epi32(_mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)w4)), ww));
  }
#else
  for (int32_t k = 0; k < nt; ++k) {
    offs[2 * k] = u + meta[2 * k];
    offs[2 * k + 1] = u + meta[2 * k + 1];
    wids[k] = w + wd[k];
  }
#endif
}

}  // namespace daskwp
