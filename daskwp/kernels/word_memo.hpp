// daskwp — the word memo of the CPU loop (host only: the GPU kernels have none).
//
// MemoWordPieceE2E is the E2E tokenizer of wordpiece_core.hpp with a per-thread memo
// (WordCache) of whitespace chunks ("world," — a word with its punctuation) and of whole
// words: between words its document loop serves chunks and words it has seen from the memo,
// skips plain spaces and emits lone ASCII punctuation from a table, and hands everything
// else to the shared general path. It only skips work: the ids are those of
// WordPieceE2E::run. Included by the CPU batch loop (cpu_batch.cpp) and the native test and
// benchmark drivers, never by the kernels. This header is the document loop and what a
// miss does; the memo itself is memo_storage.hpp (tables), memo_hashing.hpp (keys and
// sets), memo_emit.hpp (writing hits), memo_offsets.hpp (entries with offsets) and
// memo_merge.hpp (merging two memos).
//
// Why a hit needs no check of its bytes: an entry is only ever recorded for a byte string
// whose tokens depend on nothing but its bytes, and the key is the exact bytes, so a hit is
// the same string in the same kind of context. A chunk starts where no word is open and no
// combining mark waits and ends at plain ASCII whitespace (which ends the word and flushes
// the marks) or the document's end, and no special token that matches in it can reach
// past it (they are matched in the raw bytes: so it holds no byte a special token starts
// with, unless no special token holds a byte <= 0x20, special_probe; the ones that match
// inside it are its own tokens, as any other piece): the general path's tokens of it
// depend on its bytes alone, whatever they are (a truncated UTF-8
// sequence cannot reach past the whitespace, which is no continuation byte). A word starts
// the same way, ends at ASCII whitespace or punctuation (which ends it) or the document's
// end, and holds only ASCII letters and digits after the feed table and plain non-ASCII
// letters (see plain_letter), which the trie walks as they are.
//
// One lookup, worked through (run_memo's fast loop; bert-base-uncased, whose ids are all
// below 2^16, so its memo has the u16 layout). The document is "Hello world, again" and
// the loop is at i = 6, the `w` of "world,":
//   1. The chunk. One 16-byte load of s[6, 22); chunk_width finds the first byte <= 0x20,
//      the space at 12: w = 6, e = 12. The byte at e is plain whitespace (feed kFeedSpace),
//      so the chunk is whole: "world," (a word with its punctuation). (A chunk of 16 bytes
//      that goes on is looked up in the mid table instead; one that ends at a control
//      byte goes to chunk_slow.)
//   2. The key. The 16 bytes ANDed with the 16 bytes from kPrefixMask + 16 - w: "world,"
//      zero-padded, k0 = 0x00002C646C726F77 (the bytes little-endian) and k1 = 0.
//   3. The set. short_hash(k0, k1) >> (64 - bits - 5) with its low 6 bits cleared is the
//      byte offset of the key's 64-byte set (two 32-byte ways) in the short table. The
//      prefetcher, ~64 chunks ahead, has fetched that line already.
//   4. The compare. Each way's 16 key bytes against the key: one SSE compare and movemask
//      per way (m0, m1). ((m0 + 1) | (m1 + 1)) >> 16 is nonzero only when a way matches in
//      all 16 bytes: one branch for "hit", none on which way (m0 != 0xFFFF picks it).
//   5. The hit. The entry holds n_tokens 2 and, as uint16 at bytes 20-23, 2088 ("world")
//      and 1010 (","). put_u16 widens bytes 20-31 to six int32 at out[n] (slots 2-5 get
//      junk that the next write overwrites); n += 2, and i = e + 1 skips the space. No
//      loop over the bytes or the ids, and no trie.
//   A miss goes to chunk_slow with the key (`missed`): it looks in the key's second-choice
//   set (only when its own set is full), then does the chunk piece by piece: "world" is a
//   word (short_key, short_get; on a miss memo_miss walks the trie, giving 2088, and
//   records it), "," lone punctuation (punct_token[','] = 1010). Then it records 2088, 1010
//   under "world," as the newer way of the key's set (record), so that the next "world,"
//   anywhere is step 5. A chunk of 17-32 bytes takes the same steps in the mid table.
#pragma once

#include "memo_merge.hpp"
#include "memo_offsets.hpp"

namespace daskwp {

// The E2E tokenizer state for one byte range, with the memo. Use as WordPieceE2E:
// construct, reset(out, cap, cache) per document, run(bytes, len, readable), read sink.n.
// kOff: with offsets and word ids (set_offsets after reset, both arrays given), through a
// memo of the offsets layout in the same unit (else without a memo).
// kCount: the count-only loop's state (count_batch.cpp): a hit on an inline short or mid
// entry with its count byte adds its token count to hit_tokens and its [UNK] to
// hit_unknown instead of writing its ids (which nobody reads); everything else writes its
// ids to the sink as without it. The document's tokens are then sink.n + hit_tokens.
template <bool kOff = false, bool kCount = false>
struct MemoWordPieceE2ET : WordPieceE2E<kOff> {
  static_assert(!(kOff && kCount), "the count-only loop has no offsets");
  static constexpr bool kCountOnly = kCount;
  using Base = WordPieceE2E<kOff>;
  using Base::active;
  using Base::end_word;
  using Base::failed;
  using Base::feed;
  using Base::finish;
  using Base::flush_pending;
  using Base::general_step;
  using Base::max_chars;
  using Base::n_pending;
  using Base::nchars;
  using Base::nm;
  using Base::os;
  using Base::sink;
  using Base::start_word;
  using Base::step;
  using Base::v;
  using Base::word_start;

  WordCache* cache;  // null: no memo (counting passes, one-off calls)
  // kCount: the tokens and the [UNK] among them of the document's hits that were counted,
  // not written (reset per document).
  int64_t hit_tokens = 0, hit_unknown = 0;
  bool alnum_feed;   // cache->alnum_feed, read once per document
  // Where run_memo's prefetcher stopped, kept across the documents of a range, and the
  // document it was in.
  const uint8_t* prefetch_at = nullptr;
  int64_t prefetch_doc = 0;
  // The batch's documents (set_batch; none: the prefetcher knows only the current one's
  // end), and the one run() is given (set_doc). In an Arrow string column documents abut:
  // without their ends the prefetcher took a document's last chunk and the next one's
  // first for one chunk, and both lookups waited on memory (docs/design.md §3.5).
  const uint8_t* batch_data = nullptr;
  const int32_t* batch_off32 = nullptr;
  const int64_t* batch_off64 = nullptr;
  int64_t batch_docs = 0;
  int64_t doc = 0;

  void set_batch(const uint8_t* data, const int32_t* offsets, int64_t n_docs) {
    batch_data = data, batch_off32 = offsets, batch_off64 = nullptr, batch_docs = n_docs;
  }
  void set_batch(const uint8_t* data, const int64_t* offsets, int64_t n_docs) {
    batch_data = data, batch_off32 = nullptr, batch_off64 = offsets, batch_docs = n_docs;
  }
  DWP_FORCEINLINE void set_doc(int64_t d) { doc = d; }

  // Where document d ends, relative to s (no batch, or past its documents: far away).
  static constexpr int64_t kFarEnd = int64_t(1) << 62;
  DWP_FORCEINLINE int64_t doc_end_from(const uint8_t* s, int64_t d) const {
    if (!batch_data || d >= batch_docs) return kFarEnd;
    const int64_t at = batch_off64 ? batch_off64[d + 1] : (int64_t)batch_off32[d + 1];
    return (batch_data + at) - s;
  }

  MemoWordPieceE2ET(const CoreContext& ctx, int32_t* out, int64_t cap,
                    WordCache* word_cache = nullptr)
      : Base(ctx, out, cap), cache(out ? word_cache : nullptr),
        alnum_feed(cache && cache->alnum_feed) {}

  // Ready for the next document (one state can serve a whole range of documents).
  DWP_FORCEINLINE void reset(int32_t* out, int64_t cap, WordCache* word_cache) {
    Base::reset(out, cap);
    hit_tokens = hit_unknown = 0;
    cache = out ? word_cache : nullptr;
    alnum_feed = cache && cache->alnum_feed;
  }

  // The general path from s[i] on, until no word is open and no mark waits.
  DWP_NOINLINE int64_t general_path_until_no_word_open(const uint8_t* s, int64_t i, int64_t len) {
    do {
      i = general_step(s, i, len);
    } while (i < len && (active || n_pending));
    return i;
  }

  // Records the tokens t[0, nt) of the string s[i, e) (validated by the caller) in the
  // short table (as the newer way of its set; the older one is dropped) or the long one.
  // Returns the arena offset of the long record it made, or -1.
  DWP_NOINLINE int64_t record(const uint8_t* s, int64_t i, int64_t e, uint64_t k0,
                              uint64_t k1, const int32_t* t, int64_t nt) {
    WordCache& wc = *cache;
    const int64_t len = e - i;
    bool fits_short = len <= kWordCacheMaxBytes && nt <= kWordCachePackedTokens;
    if (fits_short && nt > kWordCacheMaxTokens && !wc.u16)
      for (int64_t k = 0; k < nt; ++k)
        if ((uint32_t)t[k] > kWordCachePackMask) fits_short = false;  // too large to pack
    if (!fits_short && len > kWordCacheMaxBytes)
      return long_put(wc, long_hash(s + i, len), s + i, len, t, nt);
    // Up to 16 bytes the lookups go through the short table: the tokens of a string that
    // does not fit there go to the long table, and its short entry says so (kInLong) and
    // where its record is (set_long_ref).
    int64_t off = -1;
    if (!fits_short) {
      off = long_put(wc, short_hash(k0, k1) | 1, s + i, len, t, nt);
      if (off < 0) return -1;
    }
    WordCacheEntry* slot = short_slot(k0, k1, !fits_short);
    if (!slot) return -1;  // the newer way holds these tokens already
    WordCacheEntry& en = *slot;
    en.n_tokens = fits_short ? (uint8_t)nt : kInLong;
    if (!fits_short) {
      set_long_ref(wc, en, off, nt);
      return off;
    }
    if (wc.u16) {
      uint16_t u[kWordCachePackedTokens] = {};
      for (int64_t k = 0; k < nt; ++k) u[k] = (uint16_t)t[k];
      __builtin_memcpy(en.tokens, u, sizeof(u));
    } else if (nt > kWordCacheMaxTokens) {
      memo_pack(en, t, (int32_t)nt);
    } else {
      for (int64_t k = 0; k < nt; ++k) en.tokens[k] = t[k];
    }
    if (nt <= count_byte_max(wc)) en.pack[0] = count_unknown(wc, t, nt);
    return -1;
  }

  // -- the offsets layout (kOff) ------------------------------------------------------
  DWP_FORCEINLINE int64_t off_bytes_minus_units() const {
    if constexpr (kOff) return os.bytes_minus_units;
    return 0;
  }
  DWP_FORCEINLINE int32_t off_word() const {
    if constexpr (kOff) return os.word;
    return 0;
  }
  // The entry of the key to (re)write as the newer way of its set (the older one is
  // dropped), or null when it is the newer way already inline (in_long false; an in-long
  // entry is rewritten: its reference to the new record).
  DWP_FORCEINLINE WordCacheEntry* short_slot(uint64_t k0, uint64_t k1, bool in_long) {
    WordCache& wc = *cache;
    WordCacheEntry* set = short_set(wc, k0, k1);
    const bool in0 = set[0].key[0] == k0 && set[0].key[1] == k1;
    if (in0 && !in_long && set[0].n_tokens != kInLong) return nullptr;
    if (!in0) short_make_room(wc, set);
    set[0].key[0] = k0;
    set[0].key[1] = k1;
    return set;
  }

  // Records the tokens out[n0, n) of the string s[i, e) (validated by the caller) with
  // their spans and word ids, relative to the unit u0 and the word w0 where it starts;
  // `units` and `words`: its length in units and its number of words.
  // Returns the arena offset of the long record it made, or -1.
  DWP_NOINLINE int64_t record_off(const uint8_t* s, int64_t i, int64_t e, uint64_t k0,
                                  uint64_t k1, int64_t n0, int64_t n, int64_t u0, int32_t w0,
                                  int64_t units, int64_t words) {
    const int64_t nt = n - n0;
    if (nt < 1 || nt > kLongMaxTokens || (uint64_t)units > 255 || (uint64_t)words > 255)
      return -1;
    const int64_t* o = os.offs + 2 * n0;
    const int32_t* wi = os.wids + n0;
    uint8_t meta[3 * kLongMaxTokens + 4];
    for (int64_t k = 0; k < nt; ++k) {
      // (within the string by construction: checked all the same)
      const uint64_t b = (uint64_t)(o[2 * k] - u0), en = (uint64_t)(o[2 * k + 1] - u0),
                     wd = (uint64_t)(int64_t)(wi[k] - w0);
      if (b > (uint64_t)units || en > (uint64_t)units || wd >= (uint64_t)words) return -1;
      meta[2 * k] = (uint8_t)b;
      meta[2 * k + 1] = (uint8_t)en;
      meta[2 * nt + k] = (uint8_t)wd;
    }
    return store_off(s, i, e, k0, k1, sink.out + n0, nt, meta, units, words);
  }

  // Records t[0, nt) for s[i, e) with their metadata (the long record's: be[2 nt],
  // wd[nt]; units, words and the 2 zero bytes are added here; meta has room for them): inline in the short table when the
  // spans tile the string and the packed form reads back exactly, else in the long table.
  // Returns the arena offset of the long record it made, or -1.
  DWP_NOINLINE int64_t store_off(const uint8_t* s, int64_t i, int64_t e, uint64_t k0,
                                 uint64_t k1, const int32_t* t, int64_t nt, uint8_t* meta,
                                 int64_t units, int64_t words) {
    const int64_t len = e - i;
    meta[3 * nt] = (uint8_t)units;
    meta[3 * nt + 1] = (uint8_t)words;
    meta[3 * nt + 2] = meta[3 * nt + 3] = 0;
    if (len <= kWordCacheMaxBytes && fits_inline(meta, nt, units, words)) {
      if (WordCacheEntry* slot = short_slot(k0, k1, false))
        put_inline_entry(slot, t, nt, meta, units, words);
      return -1;
    }
    const uint64_t h =
        len <= kWordCacheMaxBytes ? short_hash(k0, k1) | 1 : long_hash(s + i, len);
    const int64_t off = long_put(*cache, h, s + i, len, t, nt, meta, 3 * nt + 4);
    if (off >= 0 && len <= kWordCacheMaxBytes)
      if (WordCacheEntry* en = short_slot(k0, k1, true)) {
        en->n_tokens = kInLong;
        set_long_ref(*cache, *en, off, nt);
      }
    return off;
  }


  // emit_off of the long record rec (nt tokens) of the len-byte string at byte i, inline
  // in the fast loop and on its locals: the record's ids, spans and word ids at out[n]
  // when they fit (else through emit_off, which stops at cap); cd and wd move past the
  // string. The offsets layout serves its mid-table hits and its short entries of more
  // than 3 tokens from long records, which the call to emit_off and the members' updates
  // around it made 63 instructions a hit (warm logs, callgrind: 52.5M -> 49.2M
  // instructions with this, 34.9M without offsets; benchmarks/native/callgrind_rows.sh).
  DWP_FORCEINLINE int64_t put_long_here(const int32_t* rec, int32_t nt, int64_t len, int64_t n,
                                        int64_t cap, int64_t* offs, int32_t* wids,
                                        int32_t* out, int64_t i, int64_t& cd, int32_t& wd) {
    if (__builtin_expect(n + nt + 4 > cap, 0)) {
      os.bytes_minus_units = cd;
      os.word = wd;
      const int64_t got = emit_off(nullptr, rec, nt, len, n, i - cd, wd);
      cd = os.bytes_minus_units;
      wd = os.word;
      return got;
    }
    const uint8_t* meta = reinterpret_cast<const uint8_t*>(rec) + 4 * nt + ((len + 3) & ~(int64_t)3);
    put_long(rec, meta, nt, cap - n, out + n, offs + 2 * n, wids + n, i - cd, wd);
    cd += len - meta[3 * nt];
    wd += (int32_t)meta[3 * nt + 1];
    return nt;
  }

  // The tokens of an entry of the offsets layout for a string of len bytes (a short entry
  // en, or the long record rec of nt tokens when en is null) at out[n] (none at or past
  // cap), spans from unit u, word ids from w; os.bytes_minus_units and os.word move past
  // the string.
  // Returns the tokens' count, or -1 when they were in the long table and are gone: a
  // miss.
  DWP_NOINLINE int64_t emit_off(const WordCacheEntry* en, const int32_t* rec, int32_t nt,
                                int64_t len, int64_t n, int64_t u, int32_t w) {
    int32_t* const out = sink.out;
    const int64_t cap = sink.cap;
    if (en && en->n_tokens != kInLong) {
      const uint8_t* eb = reinterpret_cast<const uint8_t*>(en);
      int64_t ob[3], oe[3];
      int32_t ow[3];
      put_inline(eb, ob, oe, ow, u, w);
      const int64_t m = en->n_tokens;
      for (int64_t k = 0; k < m; ++k)
        if (n + k < cap) {
          out[n + k] = en->tokens[k];
          os.offs[2 * (n + k)] = ob[k];
          os.offs[2 * (n + k) + 1] = oe[k];
          os.wids[n + k] = ow[k];
        }
      os.bytes_minus_units += len - eb[17];
      os.word += eb[18] & 15u;
      return m;
    }
    if (en) {  // its reference (set_long_ref), unless the arena was emptied since
      rec = get_long_ref(*cache, reinterpret_cast<const uint8_t*>(en) + 18, &nt);
      if (!rec) return -1;
    }
    const uint8_t* meta = reinterpret_cast<const uint8_t*>(rec) + 4 * nt + ((len + 3) & ~(int64_t)3);
    // (locals: the stores could alias the members, and the byte loads anything)
    int64_t* const offs = os.offs;
    int32_t* const wids = os.wids;
    const int64_t units = meta[3 * nt], words = meta[3 * nt + 1];
    if (n + nt + 4 <= cap) {
      put_long(rec, meta, nt, cap - n, out + n, offs + 2 * n, wids + n, u, w);
    } else {
      for (int32_t k = 0; k < nt; ++k)
        if (n + k < cap) {
          out[n + k] = rec[k];
          offs[2 * (n + k)] = u + meta[2 * k];
          offs[2 * (n + k) + 1] = u + meta[2 * k + 1];
          wids[n + k] = w + meta[2 * nt + k];
        }
    }
    os.bytes_minus_units += len - units;
    os.word += (int32_t)words;
    return nt;
  }

  // kOff's word memo miss: memo_miss's walk (its bytes are its normalized bytes, one to
  // one) with one run record of the word's byte positions relative to its start, so the
  // tokens' spans come out as relative byte positions, then turned into units (chars:
  // every byte of a plain letter's valid UTF-8 that is no continuation byte starts one).
  DWP_NOINLINE void memo_miss_off(const uint8_t* s, int64_t i, int64_t e, uint64_t k0,
                                  uint64_t k1) {
    const int64_t len = e - i, u0 = i - os.bytes_minus_units;  // len <= kLongMaxBytes
    start_word();
    const int64_t n0 = sink.n;
    OffRec& r = os.rec[0];
    r.ob = 0;
    r.oe = len;
    r.nb = (int32_t)len;
    r.w = 1;
    os.count = 1;
    os.word_ob = 0;
    os.word_oe = len;
    uint32_t high = 0;
    for (int64_t k = i; k < e; ++k) {
      const uint8_t c = s[k];
      high |= c;
      if (!failed) step(c < 0x80u ? feed[c] : c);
    }
    // chars (with non-ASCII letters): pre[k], the characters before byte k.
    uint8_t pre[kLongMaxBytes + 1];
    int64_t nc = len;
    const bool chars = os.chars && (high & 0x80u);
    if (high & 0x80u) {
      nc = 0;
      for (int64_t k = 0; k < len; ++k) {
        pre[k] = (uint8_t)nc;
        nc += (s[i + k] & 0xC0u) != 0x80u;
      }
      pre[len] = (uint8_t)nc;
    }
    nchars = nc;
    if (nchars > max_chars) failed = true;
    end_word();
    ++cache->stats.misses;
    const int64_t units = os.chars ? nc : len;
    os.bytes_minus_units += len - units;
    const int64_t n = sink.n;
    const int64_t nt = n - n0;
    if (n > sink.cap || nt > kLongMaxTokens) {  // not recorded: the written spans in units
      for (int64_t k = 2 * n0; k < 2 * (n < sink.cap ? n : sink.cap); ++k)
        os.offs[k] = u0 + (chars ? pre[os.offs[k]] : os.offs[k]);
      return;
    }
    // One word: every word delta is 0.
    uint8_t meta[3 * kLongMaxTokens + 4];
    int64_t* o = os.offs + 2 * n0;
    for (int64_t k = 0; k < nt; ++k) {
      const int64_t b = chars ? pre[o[2 * k]] : o[2 * k];
      const int64_t en = chars ? pre[o[2 * k + 1]] : o[2 * k + 1];
      o[2 * k] = u0 + b;
      o[2 * k + 1] = u0 + en;
      meta[2 * k] = (uint8_t)b;
      meta[2 * k + 1] = (uint8_t)en;
      meta[2 * nt + k] = 0;
    }
    store_off(s, i, e, k0, k1, sink.out + n0, nt, meta, units, 1);
  }

  // A word memo miss: walks the whole word s[i, e) and records what it produced when it
  // was written (fits the sink).
  DWP_NOINLINE void memo_miss(const uint8_t* s, int64_t i, int64_t e, uint64_t k0,
                              uint64_t k1) {
    start_word();
    // ASCII bytes as the feed table maps them, a plain letter's bytes as they are; the
    // characters are counted (non-continuation bytes) over the whole word.
    for (int64_t k = i; k < e; ++k) {
      nchars += (s[k] & 0xC0u) != 0x80u;
      if (!failed) step(s[k] < 0x80u ? feed[s[k]] : s[k]);
    }
    if (nchars > max_chars) failed = true;
    end_word();
    ++cache->stats.misses;
#ifdef DWP_DEBUG_MISS
    fprintf(stderr, "MISS %.*s\n", (int)(e - i), (const char*)s + i);
#endif
    if (sink.n <= sink.cap) record(s, i, e, k0, k1, sink.out + word_start, sink.n - word_start);
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


  // One chunk from s[i] the slow way (between words, s[i] not plain whitespace): the bytes
  // up to the next one <= 0x20. When it ends at plain whitespace or the document's end,
  // holds at most kLongMaxBytes bytes and no byte a special token starts with, it is
  // looked up (unless `missed`: the fast loop looked its short key (k0, k1) up already),
  // and on a miss done piece by piece (memo words, table punctuation, the general path
  // for anything else) and recorded. Else it is done piece by piece unrecorded; without
  // chunk lookups (chunk_ok false) one piece. Returns the index after what it consumed;
  // sink.n is the sink's end.
  DWP_NOINLINE int64_t chunk_slow(const uint8_t* s, int64_t i, int64_t len, int64_t readable,
                                  bool missed, uint64_t k0, uint64_t k1) {
    WordCache& wc = *cache;
    int32_t* const out = sink.out;
    const int64_t cap = sink.cap;
    int64_t n = sink.n;
    const int64_t start = i;
    // kOff: the units consumed before the chunk, in bytes minus units, and its first word.
    const int64_t cd0 = off_bytes_minus_units();
    const int32_t word0 = off_word();
    int64_t e = i;
    bool ok = false;
    if (wc.chunk_ok) {
      const int64_t lim = len - i <= kLongMaxBytes ? len : i + kLongMaxBytes + 1;
      uint8_t special = 0;
#if defined(DWP_SSE2)
      // 16 bytes at a time (logs and multilingual text: a third of their bytes are in
      // chunks of more than 16): the first byte <= 0x20 or lim ends it, and special notes
      // a refused byte before that end.
      if (wc.n_refuse >= 0) {
        while (e + 16 <= readable && e < lim) {
          const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + e));
          uint32_t refused = 0;
          for (int32_t k = 0; k < wc.n_refuse; ++k)
            refused |= (uint32_t)_mm_movemask_epi8(
                _mm_cmpeq_epi8(x, _mm_set1_epi8((char)wc.refuse_bytes[k])));
          const int64_t room = lim - e;
          const int32_t w = (int32_t)chunk_width(x, room);
          special |= (refused & ((1u << w) - 1u)) != 0;
          e += w;
          if (w < 16) break;
        }
      }
#endif
      while (e < lim && s[e] > 0x20u) special |= wc.chunk_refuse[s[e++]];
      ok = !special && e - i <= kLongMaxBytes && (e == len || feed[s[e]] == kFeedSpace);
    }
    if (ok) {
      const int64_t clen = e - i;
      if (clen <= kWordCacheMaxBytes) {
        if (!missed) short_key(s, i, e, readable, &k0, &k1);
        // (missed: the fast loop looked in the key's own set already)
        const WordCacheEntry* en = missed ? short_get_second(wc, short_set(wc, k0, k1), k0, k1)
                                          : short_get(wc, k0, k1);
        if (en) {
          int64_t got;
          if constexpr (kOff) {
            got = emit_off(en, nullptr, 0, clen, n, i - cd0, word0);
          } else {
            got = emit_short(wc, en, out, n, cap);
          }
          if (got >= 0) {
            sink.n = n + got;
            ++wc.stats.hits;
            return e + (e < len);
          }
        }
      } else {
        int32_t nt;
        if (const int32_t* t = long_get(wc, long_hash(s + i, clen), s + i, clen, &nt)) {
          if constexpr (kOff) {
            emit_off(nullptr, t, nt, clen, n, i - cd0, word0);
          } else {
            put_tokens(out, n, cap, t, nt);
          }
          if (clen <= kMidMaxBytes) mid_put(wc, s + i, clen, t, nt, t);  // (evicted there)
          sink.n = n + nt;
          ++wc.stats.hits;
          return e + (e < len);
        }
      }
      ++wc.stats.misses;
    }
    const int64_t n0 = n;
    do {
      const uint8_t c = s[i];
      const uint8_t f = feed[c];
      if (f == kFeedSpace) {
        ++i;
        continue;
      }
      if (f < 0x80u || (c >= 0xC2u && plain_letter(s, i, len))) {
        int64_t we = f < 0x80u ? word_end(s, i, len) : i;
        // Plain non-ASCII letters continue the word (accented Latin, Cyrillic, Greek, ...).
        while (we < len && s[we] >= 0x80u) {
          const int32_t l = plain_letter(s, we, len);
          if (!l) break;
          we += l;
          if (we < len && feed[s[we]] < 0x80u) we = word_end(s, we, len);
        }
        const int64_t wlen = we - i;
        // (A word with a zero byte would read as a shorter one in the zero-padded short
        // key: only where the feed table lets zero bytes into words, i.e. without
        // clean_text.)
        if ((we == len || wc.word_end[s[we]]) && wlen <= kLongMaxBytes &&
            !(wc.zero_in_words && wlen <= kWordCacheMaxBytes && std::memchr(s + i, 0, wlen))) {
          uint64_t w0 = 0, w1 = 0;
          if (wlen <= kWordCacheMaxBytes) {
            if (ok && missed && i == start && we == e) {
              w0 = k0;  // the whole chunk is this word: it missed already
              w1 = k1;
            } else {
              short_key(s, i, we, readable, &w0, &w1);
              if (const WordCacheEntry* en = short_get(wc, w0, w1)) {
                int64_t got;
                if constexpr (kOff) {
                  got = emit_off(en, nullptr, 0, wlen, n, i - os.bytes_minus_units, os.word);
                } else {
                  got = emit_short(wc, en, out, n, cap);
                }
                if (got >= 0) {
                  n += got;
                  ++wc.stats.hits;
                  i = we;
                  continue;
                }
              }
            }
          } else {
            int32_t nt;
            if (const int32_t* t = long_get(wc, long_hash(s + i, wlen), s + i, wlen, &nt)) {
              if constexpr (kOff) {
                emit_off(nullptr, t, nt, wlen, n, i - os.bytes_minus_units, os.word);
              } else {
                put_tokens(out, n, cap, t, nt);
              }
              n += nt;
              ++wc.stats.hits;
              i = we;
              continue;
            }
          }
          sink.n = n;
          if constexpr (kOff) {
            memo_miss_off(s, i, we, w0, w1);
          } else {
            memo_miss(s, i, we, w0, w1);
          }
          n = sink.n;
          i = we;
          continue;
        }
      } else {
        const int32_t t = wc.punct_token[c];
        if (t >= 0) {
          if (n < cap) {
            out[n] = t;
            if constexpr (kOff) {
              os.offs[2 * n] = i - os.bytes_minus_units;
              os.offs[2 * n + 1] = i - os.bytes_minus_units + 1;
              os.wids[n] = os.word;
            }
          }
          if constexpr (kOff) ++os.word;
          ++n;
          ++i;
          continue;
        }
      }
      sink.n = n;
      i = general_path_until_no_word_open(s, i, len);
      if (ok && i >= len) {  // the document's end closes the chunk's last word
        if (n_pending) flush_pending();
        end_word();
      }
      n = sink.n;
    } while (i < e);
    if (ok && n <= cap && n > n0) {
      sink.n = n;
      if constexpr (kOff) {
        const int64_t off = record_off(s, start, e, k0, k1, n0, n, start - cd0, word0,
                                       (e - start) - (os.bytes_minus_units - cd0), os.word - word0);
        if (off >= 0 && e - start >= kMidMinBytes)
          mid_put(wc, s + start, e - start, out + n0, n - n0,
                  reinterpret_cast<const int32_t*>(wc.arena + off));
      } else {
        const int64_t off = record(s, start, e, k0, k1, out + n0, n - n0);
        if (e - start >= kMidMinBytes)
          mid_put(wc, s + start, e - start, out + n0, n - n0,
                  off < 0 ? nullptr : reinterpret_cast<const int32_t*>(wc.arena + off));
      }
    }
    sink.n = n;
    return i;
  }

  // The document loop with the memo. Between words (no word open, no mark waiting) it
  // serves whole chunks of up to 16 bytes that end at plain whitespace from the short
  // table and skips plain whitespace, with the sink in registers; everything else (a miss,
  // a longer chunk, the end of the readable bytes, a full sink) goes to chunk_slow, which
  // returns between words.
  int64_t run_memo(const uint8_t* s, int64_t len, int64_t readable) {
    WordCache& wc = *cache;
    int64_t i = 0;
    if (!wc.chunk_ok) {
      while (i < len) i = chunk_slow(s, i, len, readable, false, 0, 0);
      return finish();
    }
    int32_t* const out = sink.out;
    const int64_t cap = sink.cap;
    int64_t n = sink.n;
    uint64_t hits = 0;
    // kCount: the hits' tokens and [UNK], counted not written, and the most tokens of a
    // short entry with its count byte.
    int64_t counted = 0, counted_unknown = 0;
    const int64_t count_max = count_byte_max(wc);
    // kOff: os.bytes_minus_units and os.word as locals (synced around chunk_slow), and the arrays.
    int64_t cd = off_bytes_minus_units();
    int32_t wd = off_word();
    int64_t* offs = nullptr;
    int32_t* wids = nullptr;
    if constexpr (kOff) {
      offs = os.offs;
      wids = os.wids;
    }
    // Locals: the compiler cannot keep members in registers across the int32 stores.
    const uint8_t* const fd = feed;
#if defined(DWP_SSE2)
    const WordCacheEntry* const entries = wc.entries;
    const int32_t shift = 64 - wc.bits - 5;  // the set's byte offset: 64 bytes a set
    const int64_t readable16 = readable - 16;
    const int64_t cap3 = cap - kWordCacheMaxTokens;
    const int64_t cap_inline = cap - kInlineSlots;  // (kOff)
    const int64_t cap6 = cap - kWordCachePackedTokens;
    const bool u16 = wc.u16;
    const MidEntry* const mids = wc.mid;
    const int32_t mid_shift = 64 - wc.mid_bits;
#endif
#if defined(DWP_SSE2)
    // The mid set of a chunk of 16 + w2 bytes (17-32) whose first 16 are x and the rest the
    // first w2 bytes of x2, and in *hi those bytes zero-padded (the key's second half).
    auto mid_key = [&](__m128i x, __m128i x2, int64_t w2, __m128i* hi) -> const MidEntry* {
      *hi = _mm_and_si128(
          x2, _mm_loadu_si128(reinterpret_cast<const __m128i*>(kPrefixMask + 16 - w2)));
      const uint64_t h = mid_hash((uint64_t)_mm_cvtsi128_si64(x),
                                  (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(x, x)),
                                  (uint64_t)_mm_cvtsi128_si64(*hi),
                                  (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(*hi, *hi)));
      return mids + ((h >> mid_shift) & ~(uint64_t)1);
    };
    // A prefetcher runs ahead of the loop, kAhead chunks or so: it finds the chunks as the
    // loop does and prefetches their sets, so that the lookups' cache misses overlap (the
    // table is much larger than L2). It only reads; when the loop gets past it (after
    // chunk_slow) it starts again kAhead chunks ahead.
    // It carries on into the documents that follow (their bytes are readable: a chunk
    // across a document boundary is only a useless prefetch).
    // 64 chunks rather than 16: when other work has evicted the memo from the CPU caches
    // (a short input between other tokenizers' calls), 16 chunks of ~10 ns each are less
    // than a memory access, and the loop waited on its sets. 64 was faster with the memo
    // evicted (core_bench's DASKWP_CORE_BENCH_THRASH) and no slower in cache; the figures
    // are in benchmarks/results/HISTORY.md ("Prefetcher 64 chunks ahead").
    constexpr int kAhead = 64;
    int64_t ahead = prefetch_at > s && prefetch_at - s <= readable16 ? prefetch_at - s : 0;
    // The document the prefetcher is in and where it ends (relative to s): a chunk ends
    // there, as the loop's chunks end at len.
    int64_t pf_doc = ahead ? prefetch_doc : doc;
    int64_t pf_end = doc_end_from(s, pf_doc);
    auto prefetch_one = [&]() {
      int64_t p = ahead;
      if (fd[s[p]] == kFeedSpace) ++p;  // (one space between chunks, mostly)
      if (p > readable16) {
        ahead = readable;
        return;
      }
      while (__builtin_expect(p >= pf_end, 0)) pf_end = doc_end_from(s, ++pf_doc);
      const int64_t room = pf_end - p;
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + p));
      const int64_t w = chunk_width(x, room);
      if (w == 16 && room > 16 && p + 16 <= readable16) {
        // A chunk of 17-32 bytes: its mid set (both ways, a line each), keyed as the loop
        // keys it; one of more than 32 bytes (the long table): nothing, and on past it.
        // (Before, such a chunk got the short sets of its first 16 bytes and of its tail,
        // two useless fetches, while its own lookup waited on memory: core_bench with
        // DASKWP_CORE_BENCH_THRASH=64, Cyrillic+Greek, a third of whose bytes are in mid
        // chunks, ran at 44% of its in-cache speed.)
        const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + p + 16));
        const int64_t room2 = room - 16;
        const int64_t w2 = chunk_width(x2, room2);
        if (w2 == 16) {
          ahead = p + 32;
          return;
        }
        if (w2 != 0) {
          __m128i hi;
          const MidEntry* set = mid_key(x, x2, w2, &hi);
          _mm_prefetch(reinterpret_cast<const char*>(set), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(set + 1), _MM_HINT_T0);
          ahead = p + 16 + w2 + (w2 < room2);  // and the space after it, not a document
          return;
        }
      }
      const __m128i key = _mm_and_si128(
          x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(kPrefixMask + 16 - w)));
      const uint64_t k0 = (uint64_t)_mm_cvtsi128_si64(key);
      const uint64_t k1 = (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(key, key));
      _mm_prefetch(reinterpret_cast<const char*>(entries) +
                       ((short_hash(k0, k1) >> shift) & ~(uint64_t)63),
                   _MM_HINT_T0);
      ahead = p + w + (w < 16 && w < room);
    };
#endif
    while (i < len) {
      if (fd[s[i]] == kFeedSpace) {
        ++i;
        continue;
      }
      bool missed = false;
      uint64_t k0 = 0, k1 = 0;
#if defined(DWP_SSE2)
      if (i <= readable16) {
        if (ahead <= i) {
          ahead = i;
          pf_doc = doc;
          pf_end = doc_end_from(s, doc);
          for (int k = 0; k < kAhead && ahead <= readable16; ++k) prefetch_one();
        } else if (ahead <= readable16) {
          prefetch_one();
        }
        // The chunk: bytes up to the next one <= 0x20 (or the document's end).
        const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
        // Without branches on the document's end, which comes every few chunks: the
        // width stops at len - i (chunk_width), and the byte after
        // the chunk read at e - 1 when the chunk ends the document (s[len] may be past the
        // readable bytes), folded into one test (as a || or |, GCC branches twice).
        const int64_t left = len - i;
        const int64_t w = chunk_width(x, left);
        const int64_t e = i + w;
        const uint32_t at_end = e == len;
        if ((((uint32_t)fd[s[e - at_end]] ^ kFeedSpace) & (at_end - 1u)) == 0) {
          const __m128i key = _mm_and_si128(
              x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(kPrefixMask + 16 - w)));
          k0 = (uint64_t)_mm_cvtsi128_si64(key);
          k1 = (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(key, key));
          const WordCacheEntry* set = reinterpret_cast<const WordCacheEntry*>(
              reinterpret_cast<const uint8_t*>(entries) +
              ((short_hash(k0, k1) >> shift) & ~(uint64_t)63));
          const uint32_t m0 = (uint32_t)_mm_movemask_epi8(
              _mm_cmpeq_epi8(_mm_load_si128(reinterpret_cast<const __m128i*>(set)), key));
          const uint32_t m1 = (uint32_t)_mm_movemask_epi8(
              _mm_cmpeq_epi8(_mm_load_si128(reinterpret_cast<const __m128i*>(set + 1)), key));
          // One test for "either way holds the key" (m + 1 reaches bit 16 only for a full
          // match): written as two, GCC branches on way 0 first, and which way holds a
          // key is a coin toss (a third of the warm loop's mispredictions).
          if ((((m0 + 1u) | (m1 + 1u)) >> 16) != 0) {
            const WordCacheEntry* en = set + (m0 != 0xFFFFu);
            const int64_t nt = en->n_tokens;
            if constexpr (kCount) {
              if (__builtin_expect(nt <= count_max, 1)) {  // (not kInLong, not packed)
                counted += nt;
                counted_unknown += en->pack[0];
                ++hits;
                i = e + 1;
                continue;
              }
            }
            int64_t got = nt;
            if constexpr (kOff) {
              if (__builtin_expect(nt <= kWordCacheMaxTokens && n <= cap_inline, 1)) {
                uint32_t mt;  // (n_tokens, units, words | word 1 << 4, the ends' nibbles)
                __builtin_memcpy(&mt, reinterpret_cast<const uint8_t*>(en) + 16, 4);
                put_inline_hit(en, out + n, offs + 2 * n, wids + n, i - cd, wd);
                cd += w - ((mt >> 8) & 0xFFu);
                wd += (mt >> 16) & 15u;
              } else if (nt == kInLong) {  // its reference to the long record
                int32_t cnt;
                const int32_t* rec =
                    get_long_ref(wc, reinterpret_cast<const uint8_t*>(en) + 18, &cnt);
                got = rec ? put_long_here(rec, cnt, w, n, cap, offs, wids, out, i, cd, wd) : -1;
              } else {
                os.bytes_minus_units = cd;
                os.word = wd;
                got = emit_off(en, nullptr, 0, w, n, i - cd, wd);
                cd = os.bytes_minus_units;
                wd = os.word;
              }
            } else if (u16) {
              // (n_tokens 1-6; kInLong is more)
              if (__builtin_expect(nt <= kWordCachePackedTokens && n <= cap6, 1)) {
                put_u16(en, out + n);
              } else {
                got = emit_short(wc, en, out, n, cap);
              }
            } else if (__builtin_expect(nt <= kWordCacheMaxTokens && n <= cap3, 1)) {
              __builtin_memcpy(out + n, en->tokens, sizeof(en->tokens));
            } else {
              got = emit_short(wc, en, out, n, cap);
            }
            if (got >= 0) {
              n += got;
              ++hits;
              i = e + 1;  // and the whitespace after it (past len at the document's end)
              continue;
            }
          }
          missed = true;
        } else if (w == 16 && i + 32 <= readable) {
          // A chunk of more than 16 bytes (s[i + 16] is not plain whitespace, and the
          // document goes on past it): 17-32 bytes that end at plain whitespace or the
          // document's end are looked up in the mid table, as above.
          const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
          const int64_t left2 = left - 16;
          const int64_t w2 = chunk_width(x2, left2);
          const int64_t e2 = e + w2;
          const uint32_t at_end2 = e2 == len;
          if (w2 != 0 &&
              (((uint32_t)fd[s[e2 - at_end2]] ^ kFeedSpace) & (at_end2 - 1u)) == 0) {
            __m128i hi;
            const MidEntry* set = mid_key(x, x2, w2, &hi);
            const __m128i* q = reinterpret_cast<const __m128i*>(set);
            const uint32_t m0 = (uint32_t)_mm_movemask_epi8(_mm_and_si128(
                _mm_cmpeq_epi8(_mm_load_si128(q), x), _mm_cmpeq_epi8(_mm_load_si128(q + 1), hi)));
            const uint32_t m1 = (uint32_t)_mm_movemask_epi8(_mm_and_si128(
                _mm_cmpeq_epi8(_mm_load_si128(q + 4), x), _mm_cmpeq_epi8(_mm_load_si128(q + 5), hi)));
            if ((((m0 + 1u) | (m1 + 1u)) >> 16) != 0) {
              const MidEntry* en = set + (m0 != 0xFFFFu);
              if constexpr (kCount) {
                if (__builtin_expect(en->n_tokens != kInLong, 1)) {
                  counted += en->n_tokens;
                  counted_unknown += en->ids[kMidUnknownAt];
                  ++hits;
                  i = e2 + 1;
                  continue;
                }
              }
              int64_t got;
              if constexpr (kOff) {  // a reference to the long record, with the spans
                got = -1;
                int32_t cnt;
                if (const int32_t* rec = get_long_ref(wc, en->ids, &cnt)) {
                  got = put_long_here(rec, cnt, e2 - i, n, cap, offs, wids, out, i, cd, wd);
                }
              } else {
                got = put_mid(wc, en, out, n, cap, u16);
              }
              if (got >= 0) {
                n += got;
                ++hits;
                i = e2 + 1;
                continue;
              }
            }
          }
        }
      }
#endif
      sink.n = n;
      if constexpr (kOff) {
        os.bytes_minus_units = cd;
        os.word = wd;
      }
      i = chunk_slow(s, i, len, readable, missed, k0, k1);
      n = sink.n;
      if constexpr (kOff) {
        cd = os.bytes_minus_units;
        wd = os.word;
      }
    }
#if defined(DWP_SSE2)
    prefetch_at = s + ahead;
    prefetch_doc = pf_doc;
#endif
    sink.n = n;
    if constexpr (kOff) {
      os.bytes_minus_units = cd;
      os.word = wd;
    }
    wc.stats.hits += hits;
    wc.recheck_displacement();
    if constexpr (kCount) {
      hit_tokens += counted;
      hit_unknown += counted_unknown;
    }
    return finish();
  }

  // Tokenizes s[0, len) as WordPieceE2E::run does, through the memo when there is one. The
  // memo loop may read (never use) bytes up to s[readable) when readable > len.
  // kOff: through the memo only with both arrays (set_offsets) and a memo of their unit.
  int64_t run(const uint8_t* s, int64_t len, int64_t readable = 0) {
    if constexpr (kOff) {
      if (cache && os.offs && os.wids &&
          cache->offsets_unit == (os.chars ? kMemoOffsetsChars : kMemoOffsetsBytes))
        return run_memo(s, len, readable > len ? readable : len);
    } else if (cache) {
      return run_memo(s, len, readable > len ? readable : len);
    }
    // WordPieceE2E::run's loop, written out: calling it instead costs ~0.6% more
    // instructions on multilingual text without the memo (GCC lays out its blocks worse);
    // callgrind over benchmarks/native/core_bench.cpp shows it.
    int64_t i = 0;
    while (i < len) i = general_step(s, i, len);
    return finish();
  }
};

using MemoWordPieceE2E = MemoWordPieceE2ET<false>;
using MemoCountE2E = MemoWordPieceE2ET<false, true>;

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
// offsets_unit: the layout of its entries (0: ids only; kMemoOffsetsBytes / Chars: with
// offsets and word ids in that unit, for MemoWordPieceE2ET<true>).
inline void reset_word_cache(const CoreContext& ctx, WordCache* cache, int32_t offsets_unit = 0) {
  cache->clear_tables();
  cache->offsets_unit = offsets_unit;
  cache->u16 = offsets_unit == 0 && ctx.v.h->id_limit != 0 && ctx.v.h->id_limit <= 65536u;
  cache->unk_id = ctx.v.h->unk_id;
  bool space_low = true;
  for (int c = 0; c < 256; ++c) {
    const uint8_t kind = c < 0x80 ? ctx.nm.ascii_kind[c] : kAsciiSlow;
    cache->word_end[c] = kind == kAsciiSpace || kind == kAsciiPunct;
    cache->punct_token[c] = -1;
    if (ctx.feed[c] == kFeedSpace && c > 0x20) space_low = false;
    if (kind == kAsciiPunct && !ctx.v.special_first[c]) {
      // What the general path makes of the byte alone, where that is one token.
      const uint8_t b = (uint8_t)c;
      int32_t t[2];
      if (tokenize_document(ctx, &b, 1, t, 2) == 1) cache->punct_token[c] = t[0];
    }
  }
  cache->chunk_ok = space_low;
  bool low_in_special = false;
  const int32_t n_sp = ctx.v.h->n_specials;
  for (int32_t k = ctx.v.special_offsets[0]; k < ctx.v.special_offsets[n_sp]; ++k)
    if (ctx.v.special_bytes[k] <= 0x20u) low_in_special = true;
  cache->special_probe = !low_in_special;
  cache->n_refuse = 0;
  for (int c = 0; c < 256; ++c) {
    cache->chunk_refuse[c] = cache->special_probe ? 0 : ctx.v.special_first[c];
    if (cache->chunk_refuse[c] && cache->n_refuse >= 0) {
      if (cache->n_refuse == 4) {
        cache->n_refuse = -1;
      } else {
        cache->refuse_bytes[cache->n_refuse++] = (uint8_t)c;
      }
    }
  }
  cache->zero_in_words = ctx.feed[0] < 0x80u;
  cache->alnum_feed = true;
  for (int c = 0; c < 256; ++c) {
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
    if ((ctx.feed[c] < 0x80u) != alnum) cache->alnum_feed = false;
  }
}

}  // namespace daskwp
