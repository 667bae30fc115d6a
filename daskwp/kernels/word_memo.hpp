// daskwp — the word memo of the CPU loop (host only: the GPU kernels have none).
//
// MemoWordPieceE2E is the E2E tokenizer of wordpiece_core.hpp with a per-thread memo of
// whole words (WordCache): between words its document loop serves words it has seen from
// the memo, skips plain spaces and emits lone ASCII punctuation from a table, and hands
// everything else to the shared general path. It only skips work: the ids are those of
// WordPieceE2E::run. Included by the CPU batch loop (cpu_batch.cpp) and the native test and
// benchmark drivers, never by the kernels.
#pragma once

#if defined(__CUDA_ARCH__) || defined(__CUDACC_RTC__)
#error "word_memo.hpp is host only; the kernels include wordpiece_core.hpp alone"
#endif

#include "wordpiece_core.hpp"

#if defined(__SSE2__) && !defined(__CUDACC__)
#include <emmintrin.h>
#define DWP_SSE2 1
#endif

namespace daskwp {

// 8 unaligned bytes, little-endian.
DWP_FORCEINLINE uint64_t load_u64(const uint8_t* p) {
  uint64_t x;
  __builtin_memcpy(&x, p, 8);
  return x;
}

// An optional per-thread memo of whole words: words of ASCII letters and digits and
// of plain non-ASCII letters (see plain_letter). The key is the word's raw bytes,
// the value the tokens the trie produced for it under the same CoreContext. It only skips
// work: a hit emits exactly what the walk would, a miss walks and records. Two-way
// set-associative with both ways of a set in one 64-byte cache line: 2^kWordCacheBits
// entries of 32 bytes (2 MB) for words of up to 16 bytes and 3 tokens as int32, or 4-5
// tokens packed as 20-bit ids (multilingual vocabularies cut words finer); an entry with
// len 0 is empty. It also holds the per-context byte tables of the memo loop. Prepare
// with reset_word_cache for each CoreContext (after that, any number of documents may
// share it, one thread at a time).
constexpr int32_t kWordCacheBits = 16;
constexpr int32_t kWordCacheMaxBytes = 16;
constexpr int32_t kWordCacheMaxTokens = 3;     // as int32 in tokens[]
constexpr int32_t kWordCachePackedTokens = 5;  // packed in pad[] + tokens[] (14 bytes)
constexpr uint32_t kWordCachePackMask = (1u << 20) - 1;
struct alignas(32) WordCacheEntry {
  uint64_t key[2];  // the word's bytes, little-endian: bytes 0-7 and the last 8 (or 0)
  uint8_t len;
  uint8_t n_tokens;
  uint8_t pad[2];
  int32_t tokens[kWordCacheMaxTokens];
};

// 4-5 token ids below 2^20 packed little-endian, 20 bits each, into the 14 bytes from
// pad on (pad and tokens are contiguous: bytes 18-31 of the entry).
constexpr size_t kWordCachePackAt = __builtin_offsetof(WordCacheEntry, pad);
static_assert(__builtin_offsetof(WordCacheEntry, tokens) == kWordCachePackAt + 2 &&
                  sizeof(WordCacheEntry) == kWordCachePackAt + 14,
              "the packed tokens use pad and tokens as 14 contiguous bytes");
inline void memo_pack(WordCacheEntry& en, const int32_t* t, int32_t nt) {
  uint64_t lo = 0, hi = 0;
  for (int32_t k = 0; k < nt; ++k) {
    const uint64_t v = (uint32_t)t[k];
    const int32_t at = 20 * k;
    if (at < 64) lo |= v << at;
    if (at + 20 > 64) hi |= at >= 64 ? v << (at - 64) : v >> (64 - at);
  }
  uint8_t* b = reinterpret_cast<uint8_t*>(&en) + kWordCachePackAt;
  __builtin_memcpy(b, &lo, 8);
  __builtin_memcpy(b + 8, &hi, 6);
}
inline void memo_unpack(const WordCacheEntry& en, int32_t* t) {
  const uint8_t* b = reinterpret_cast<const uint8_t*>(&en) + kWordCachePackAt;
  uint64_t lo, hi = 0;
  __builtin_memcpy(&lo, b, 8);
  __builtin_memcpy(&hi, b + 8, 6);
  t[0] = (int32_t)(lo & kWordCachePackMask);
  t[1] = (int32_t)((lo >> 20) & kWordCachePackMask);
  t[2] = (int32_t)((lo >> 40) & kWordCachePackMask);
  t[3] = (int32_t)(((lo >> 60) | (hi << 4)) & kWordCachePackMask);
  t[4] = (int32_t)((hi >> 16) & kWordCachePackMask);
}

struct WordCache {
  // The one token of a lone ASCII punctuation byte (a word of its own whatever surrounds
  // it), or -1 where the general path decides (special-token bytes, other kinds).
  int32_t punct_token[256];
  // 1 where the byte ends a word that the memo may hold: ASCII whitespace or punctuation.
  uint8_t word_end[256];
  // The word bytes of the fast path are exactly ASCII letters and digits (every BERT
  // vocabulary with its default flags): word ends may be found 16 bytes at a time.
  bool alnum_feed;
  alignas(64) WordCacheEntry entries[1 << kWordCacheBits];
};

// The E2E tokenizer state for one byte range, with the memo. Use as WordPieceE2E:
// construct, reset(out, cap, cache) per document, run(bytes, len, readable), read sink.n.
struct MemoWordPieceE2E : WordPieceE2E {
  WordCache* cache;  // null: no memo (counting passes, one-off calls)
  bool alnum_feed;   // cache->alnum_feed, read once per document

  MemoWordPieceE2E(const CoreContext& ctx, int32_t* out, int64_t cap,
                   WordCache* word_cache = nullptr)
      : WordPieceE2E(ctx, out, cap), cache(out ? word_cache : nullptr),
        alnum_feed(cache && cache->alnum_feed) {}

  // Ready for the next document (one state can serve a whole range of documents).
  DWP_FORCEINLINE void reset(int32_t* out, int64_t cap, WordCache* word_cache) {
    WordPieceE2E::reset(out, cap);
    cache = out ? word_cache : nullptr;
    alnum_feed = cache && cache->alnum_feed;
  }

  // The general path from s[i] on, until no word is open and no mark waits.
  DWP_NOINLINE int64_t general_until_idle(const uint8_t* s, int64_t i, int64_t len) {
    do {
      i = general_step(s, i, len);
    } while (i < len && (active || n_pending));
    return i;
  }

  // A memo miss: walks the whole word s[i, e) and, when what it produced fits, records it
  // as the newer entry of its set (the older one is dropped).
  DWP_NOINLINE void memo_miss(const uint8_t* s, int64_t i, int64_t e, WordCacheEntry* set,
                              uint64_t k0, uint64_t k1) {
    start_word();
    // ASCII bytes as the feed table maps them, a plain letter's bytes as they are; the
    // characters are counted (non-continuation bytes) over the whole word.
    for (int64_t k = i; k < e; ++k) {
      nchars += (s[k] & 0xC0u) != 0x80u;
      if (!failed) step(s[k] < 0x80u ? feed[s[k]] : s[k]);
    }
    if (nchars > max_chars) failed = true;
    end_word();
    const int64_t produced = sink.n - word_start;
    if (produced > kWordCachePackedTokens || sink.n > sink.cap) return;
    const int32_t* t = sink.out + word_start;
    if (produced > kWordCacheMaxTokens)
      for (int64_t k = 0; k < produced; ++k)
        if ((uint32_t)t[k] > kWordCachePackMask) return;  // too large to pack
    set[1] = set[0];
    WordCacheEntry& en = set[0];
    en.key[0] = k0;
    en.key[1] = k1;
    en.len = (uint8_t)(e - i);
    en.n_tokens = (uint8_t)produced;
    if (produced > kWordCacheMaxTokens) {
      memo_pack(en, t, (int32_t)produced);
    } else {
      for (int64_t k = 0; k < produced; ++k) en.tokens[k] = t[k];
    }
  }

  // Byte length of the code point at s[i] (s[i] >= 0x80) when it is a plain letter of a
  // word (no normalization, no class, not a mark, no special token starts with its first
  // byte: the general path feeds its bytes straight to the trie), else 0.
  DWP_FORCEINLINE int32_t plain_letter(const uint8_t* s, int64_t i, int64_t len) const {
    if (v.special_first[s[i]]) return 0;
    int32_t l;
    const uint32_t cp = decode_utf8(s, i, len, &l);
    if (cp == kReplacementChar) return 0;
    return (norm_entry(nm, cp) & 0xFFu) == 0 ? l : 0;
  }

  // End of the run of word bytes starting at s[i] (feed[s[i]] < 0x80).
  DWP_FORCEINLINE int64_t word_end(const uint8_t* s, int64_t i, int64_t len) const {
    int64_t e = i + 1;
#if defined(DWP_SSE2)
    if (alnum_feed && i + 16 <= len) {
      // Letters and digits among 16 bytes: (b | 0x20) - 'a' <= 25, or b - '0' <= 9.
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      const __m128i a = _mm_sub_epi8(_mm_or_si128(x, _mm_set1_epi8(0x20)), _mm_set1_epi8('a'));
      const __m128i d = _mm_sub_epi8(x, _mm_set1_epi8('0'));
      const __m128i is_alpha = _mm_cmpeq_epi8(_mm_min_epu8(a, _mm_set1_epi8(25)), a);
      const __m128i is_digit = _mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(9)), d);
      const uint32_t stop = ~(uint32_t)_mm_movemask_epi8(_mm_or_si128(is_alpha, is_digit)) &
                            0xFFFFu;
      if (stop) return i + __builtin_ctz(stop);
      e = i + 16;
    }
#endif
    while (e < len && feed[s[e]] < 0x80u) ++e;
    return e;
  }

  // The document loop with the memo. Between words (no word open, no mark waiting) it
  // serves whole words from the memo, skips plain spaces and emits lone ASCII
  // punctuation from a table, all with the sink in registers; anything else goes through
  // the general path until it is between words again.
  int64_t run_memo(const uint8_t* s, int64_t len, int64_t readable) {
    WordCache& wc = *cache;
    int32_t* const out = sink.out;
    const int64_t cap = sink.cap;
    int64_t n = sink.n;
    int64_t i = 0;
    while (i < len) {
      const uint8_t c = s[i];
      const uint8_t f = feed[c];
      if (f < 0x80u || (c >= 0xC2u && plain_letter(s, i, len))) {
        int64_t e = f < 0x80u ? word_end(s, i, len) : i;
        // Plain non-ASCII letters continue the word (accented Latin, Cyrillic, Greek, ...).
        while (e < len && s[e] >= 0x80u) {
          const int32_t l = plain_letter(s, e, len);
          if (!l) break;
          e += l;
          if (e < len && feed[s[e]] < 0x80u) e = word_end(s, e, len);
        }
        const int64_t wlen = e - i;
        if (wlen <= kWordCacheMaxBytes && (e == len || wc.word_end[s[e]])) {
          // Key: the word's first 8 bytes (a short word masked) and its last 8 bytes when
          // it is longer (overlapping), never reading past the readable bytes.
          uint64_t k0 = 0, k1 = 0;
          if (i + 8 <= readable) {
            const int64_t w8 = wlen < 8 ? wlen : 8;
            k0 = load_u64(s + i) & (~(uint64_t)0 >> (64 - 8 * w8));
          } else {
            for (int32_t b = 0; b < wlen && b < 8; ++b) k0 |= (uint64_t)s[i + b] << (8 * b);
          }
          if (wlen > 8) k1 = load_u64(s + e - 8);
          const uint64_t h = ((k0 ^ (k1 * 0xFF51AFD7ED558CCDull) ^ (uint64_t)wlen) *
                              0x9E3779B97F4A7C15ull);
          // Both ways of a set share one cache line; the newer one comes first.
          WordCacheEntry* const set =
              wc.entries + ((h >> (64 - kWordCacheBits)) & ~(uint64_t)1);
          const bool m0 = (set[0].len == wlen) & (set[0].key[0] == k0) & (set[0].key[1] == k1);
          const bool m1 = (set[1].len == wlen) & (set[1].key[0] == k0) & (set[1].key[1] == k1);
          if (m0 | m1) {
            const WordCacheEntry* en = set + (m1 & !m0);
            const int64_t nt = en->n_tokens;
            if (nt <= kWordCacheMaxTokens && n + kWordCacheMaxTokens <= cap) {
              __builtin_memcpy(out + n, en->tokens, sizeof(en->tokens));
            } else {
              int32_t t[kWordCachePackedTokens];
              if (nt > kWordCacheMaxTokens) {
                memo_unpack(*en, t);
              } else {
                for (int64_t k = 0; k < nt; ++k) t[k] = en->tokens[k];
              }
              for (int64_t k = 0; k < nt; ++k)
                if (n + k < cap) out[n + k] = t[k];
            }
            n += nt;
            // A plain space after the word ends nothing more: step over it here.
            i = (e < len && feed[s[e]] == kFeedSpace) ? e + 1 : e;
            continue;
          }
          sink.n = n;
          memo_miss(s, i, e, set, k0, k1);
          n = sink.n;
          i = e;
          continue;
        }
      } else if (f == kFeedSpace) {
        ++i;
        continue;
      } else {
        const int32_t t = wc.punct_token[c];
        if (t >= 0) {
          if (n < cap) out[n] = t;
          ++n;
          ++i;
          continue;
        }
      }
      sink.n = n;
      i = general_until_idle(s, i, len);
      n = sink.n;
    }
    sink.n = n;
    return finish();
  }

  // Tokenizes s[0, len) as WordPieceE2E::run does, through the memo when there is one. The
  // memo loop may read (never use) bytes up to s[readable) when readable > len.
  int64_t run(const uint8_t* s, int64_t len, int64_t readable = 0) {
    if (cache) return run_memo(s, len, readable > len ? readable : len);
    // WordPieceE2E::run's loop, written out: calling it instead costs ~0.6% more
    // instructions on multilingual text without the memo (GCC lays out its blocks worse);
    // callgrind over benchmarks/native/core_bench.cpp shows it.
    int64_t i = 0;
    while (i < len) i = general_step(s, i, len);
    return finish();
  }
};

// tokenize_document with the memo (cache null: without). `readable` (>= len, else
// ignored): how many bytes from s on may be read, e.g. up to the end of the batch's data
// buffer.
inline int64_t tokenize_document_with_memo(const CoreContext& ctx, const uint8_t* s,
                                           int64_t len, int32_t* out, int64_t cap,
                                           WordCache* cache, int64_t readable = 0) {
  MemoWordPieceE2E t(ctx, out, cap, cache);
  return t.run(s, len, readable);
}

// Empties the memo and fills its byte tables for `ctx`.
inline void reset_word_cache(const CoreContext& ctx, WordCache* cache) {
  __builtin_memset(cache->entries, 0, sizeof(cache->entries));
  for (int c = 0; c < 256; ++c) {
    const uint8_t kind = c < 0x80 ? ctx.nm.ascii_kind[c] : kAsciiSlow;
    cache->word_end[c] = kind == kAsciiSpace || kind == kAsciiPunct;
    cache->punct_token[c] = -1;
    if (kind == kAsciiPunct && !ctx.v.special_first[c]) {
      // What the general path makes of the byte alone, where that is one token.
      const uint8_t b = (uint8_t)c;
      int32_t t[2];
      if (tokenize_document(ctx, &b, 1, t, 2) == 1) cache->punct_token[c] = t[0];
    }
  }
  cache->alnum_feed = true;
  for (int c = 0; c < 256; ++c) {
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
    if ((ctx.feed[c] < 0x80u) != alnum) cache->alnum_feed = false;
  }
}

}  // namespace daskwp
