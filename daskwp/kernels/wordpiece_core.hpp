// daskwp — the fused normalize + pre-tokenize + WordPiece core (host and device).
//
// One pass over the UTF-8 bytes of a document (the E2E WordPiece of Song et al. 2021):
//   1. literal special tokens ([CLS], [SEP], ..., a tokenizer.json's added tokens, those
//      registered with add_special_tokens) are matched in the RAW bytes, leftmost-longest and
//      case-sensitively, as HuggingFace's added vocabulary does, through a byte trie of
//      their own (the cost at a position does not grow with their number);
//   2. every code point is normalized through the per-code-point table (NormView), which
//      already encodes clean_text / handle_chinese_chars / strip_accents / lowercase;
//   3. the normalized characters are split into words (whitespace drops, punctuation is a
//      word of its own) without materializing them;
//   4. each word's bytes are fed straight into the LinMaxMatch trie: failure links and
//      failure pops give greedy longest-match-first WordPiece in linear time.
//
// The code allocates nothing and uses no library calls, so it compiles unchanged for the
// CPU extension (cpu_batch.cpp) and the CUDA kernels (wordpiece.cu). The CPU loop's word
// memo, host only, builds on it in word_memo.hpp.
#pragma once

#include "model.hpp"

namespace daskwp {

constexpr uint32_t kReplacementChar = 0xFFFDu;

// Decodes one code point at s[i] (i < end). Invalid input decodes to U+FFFD, one per
// maximal ill-formed subpart (the Unicode / WHATWG rule Python's errors="replace" uses).
DWP_HD DWP_FORCEINLINE uint32_t decode_utf8(const uint8_t* s, int64_t i, int64_t end,
                                            int32_t* len) {
  const uint32_t b0 = s[i];
  if (b0 < 0x80u) {
    *len = 1;
    return b0;
  }
  int32_t need;
  uint32_t lo = 0x80u, hi = 0xBFu, cp;
  if (b0 < 0xC2u) {
    *len = 1;
    return kReplacementChar;
  } else if (b0 < 0xE0u) {
    need = 1;
    cp = b0 & 0x1Fu;
  } else if (b0 < 0xF0u) {
    need = 2;
    cp = b0 & 0x0Fu;
    if (b0 == 0xE0u) lo = 0xA0u;
    if (b0 == 0xEDu) hi = 0x9Fu;  // no surrogates
  } else if (b0 < 0xF5u) {
    need = 3;
    cp = b0 & 0x07u;
    if (b0 == 0xF0u) lo = 0x90u;
    if (b0 == 0xF4u) hi = 0x8Fu;
  } else {
    *len = 1;
    return kReplacementChar;
  }
  int32_t k = 1;
  for (int32_t j = 0; j < need; ++j, ++k) {
    if (i + k >= end) {
      *len = k;
      return kReplacementChar;
    }
    const uint32_t c = s[i + k];
    if (c < lo || c > hi) {
      *len = k;
      return kReplacementChar;
    }
    lo = 0x80u;
    hi = 0xBFu;
    cp = (cp << 6) | (c & 0x3Fu);
  }
  *len = k;
  return cp;
}

DWP_HD DWP_FORCEINLINE int32_t popcount64(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return __popcll(x);
#elif defined(__GNUC__)
  return __builtin_popcountll(x);
#else
  int32_t n = 0;
  for (; x; x &= x - 1) ++n;
  return n;
#endif
}

// Child of `node` along byte c, or -1. Nodes with up to 4 children keep their labels inline;
// larger ones a 256-bit bitmap whose rank is the child's position.
DWP_HD DWP_FORCEINLINE int32_t trie_child(const VocabView& v, int32_t node, uint8_t c) {
  const HotNode& hn = v.hot[node];
  const uint32_t lo = hn.link, hi = hn.labels;
  const uint32_t kind = lo >> 28;
  const int32_t first = (int32_t)(lo & kHotChildMask);
  if (kind != kHotBitmap) {
    uint32_t labels = hi;
    for (uint32_t k = 0; k < kind; ++k, labels >>= 8)
      if ((labels & 0xFFu) == c) return first + (int32_t)k;
    return -1;
  }
  const uint64_t* bm = v.bitmaps + (size_t)hi * kBitmapWords;
  const uint32_t w = c >> 6;
  const uint64_t bit = (uint64_t)1 << (c & 63u);
  const uint64_t word = bm[w];
  if (!(word & bit)) return -1;
  return first + popcount64(word & (bit - 1)) + (int32_t)((bm[4] >> (8 * w)) & 0xFFu);
}

// Receives tokens. With out == nullptr (or cap 0) it only counts, which is the "count"
// pass of count-scan-write. Writes past `cap` are dropped, never performed: a word that
// later fails rolls `n` back, so the final count is exact and fits the region.
struct TokenSink {
  int32_t* out;
  int64_t cap;
  int64_t n;
  DWP_HD DWP_FORCEINLINE void push(int32_t t) {
    if (n < cap) out[n] = t;
    ++n;
  }
};

// What a batch shares: the two blob views, the parameters, and the byte table of the
// fast path. Build once per batch (or per GPU thread block) with init_context.
constexpr uint8_t kFeedSpace = 0xFEu;

struct CoreContext {
  VocabView v;
  NormView nm;
  TokenizeParams p;
  // feed[c] < 0x80: byte c continues the current word as byte feed[c] (ASCII letters and
  // digits after lowercasing, and no special token starts with it); kFeedSpace: plain ASCII
  // whitespace that only ends the word; 0xFF: general path.
  uint8_t feed[256];
};

DWP_HD inline void fill_feed_table(CoreContext& ctx) {
  for (int c = 0; c < 256; ++c) {
    const bool plain = c < 0x80 && !ctx.v.special_first[c];
    const uint8_t kind = c < 0x80 ? ctx.nm.ascii_kind[c] : kAsciiSlow;
    ctx.feed[c] = plain && kind == kAsciiFeed    ? ctx.nm.ascii_byte[c]
                  : plain && kind == kAsciiSpace ? kFeedSpace
                                                 : (uint8_t)0xFFu;
  }
}

DWP_HD inline void init_context(CoreContext& ctx, const uint8_t* vocab_blob,
                                const uint8_t* norm_blob, const TokenizeParams& p) {
  ctx.v = make_vocab_view(vocab_blob);
  ctx.nm = make_norm_view(norm_blob);
  ctx.p = p;
  fill_feed_table(ctx);
}

// ---------------------------------------------------------------------------------------
// Offsets and word ids (docs/design.md §2.9), carried through the same single pass.
//
// Every normalized character descends from one input code point (HF's alignments: a
// character a normalizer step inserts shares the alignment of the one it came from, a
// removed one has none), so a token's span in the ORIGINAL document is
// [begin of the code point of its first character, end of the code point of its last).
// The walk emits tokens late (failure pops), so the state keeps the span's characters not
// yet covered by an emitted token as a small queue of records: a *run* of characters that
// map one to one onto contiguous original units (w normalized bytes per unit: 1 in bytes,
// the character's width in chars), or an *atomic* code point (its outputs, whatever their
// number, all map to its whole span). A pop of B normalized bytes (pops_bytes in the blob)
// takes B bytes off the queue's front. The queue holds at most the characters of the
// current trie node's string plus one, i.e. of the longest vocabulary token: kOffRing
// records; past that (tokens longer than kOffRing - 1 characters, which no BERT vocabulary
// has) the two oldest records merge into one atomic record (spans then cover their union).
// Units: "bytes" are positions in the UTF-8 input; "chars" positions in the input decoded
// with one U+FFFD per maximal ill-formed subpart (Python's errors="replace").
// ---------------------------------------------------------------------------------------
constexpr int32_t kOffRing = 64;  // a power of two
constexpr int32_t kOffOpen = 1 << 30;

struct OffRec {
  int64_t ob, oe;  // original span, in units
  int32_t nb;      // normalized bytes
  int32_t w;       // run: normalized bytes per unit; 0: atomic
};

template <bool kOff>
struct OffState {};

template <>
struct OffState<true> {
  const int32_t* pops_bytes;  // vocab_pops_bytes
  int64_t* offs;   // 2 per token: begin, end
  int32_t* wids;   // 1 per token: word index within the document
  bool chars;      // unit: characters (else bytes)
  int64_t bytes_minus_units;  // bytes minus characters consumed so far (chars)
  int32_t word;    // index of the current (next) word
  int32_t head, count, fo;  // the queue: front index, size, bytes consumed of the front
  int32_t open_at, open_base;
  int64_t word_ob, word_oe;  // span of the current word (word_ob < 0: none yet)
  int64_t cur_ob, cur_oe;    // span of the code point being output
  bool cur_single;           // it outputs exactly one character
  OffRec rec[kOffRing];
  int64_t pend_ob[32], pend_oe[32];  // spans of the waiting marks, in arrival order
  uint8_t pend_single[32];
};

// The E2E tokenizer state for one byte range. Use: construct, run(bytes, len), read sink.n.
// kOff: also the offsets and word ids of every token (set_offsets before run).
template <bool kOff = false>
struct WordPieceE2E {
  VocabView v;
  NormView nm;
  const uint8_t* feed;
  int64_t max_chars;
  int32_t suffix_root;
  int32_t unk_id;
  TokenSink sink;
  // Current word.
  int32_t node;
  int64_t word_start;
  int64_t nchars;
  bool active;
  bool failed;
  // Combining marks waiting for NFD's canonical reordering (accent stripping only).
  static constexpr int32_t kMaxPending = 32;
  int32_t n_pending;
  uint32_t pending_cp[kMaxPending];
  uint8_t pending_ccc[kMaxPending];
  OffState<kOff> os;

  DWP_HD WordPieceE2E(const CoreContext& ctx, int32_t* out, int64_t cap)
      : v(ctx.v), nm(ctx.nm), feed(ctx.feed), max_chars(ctx.p.max_input_chars_per_word) {
    suffix_root = v.h->suffix_root;
    unk_id = v.h->unk_id;
    if constexpr (kOff) os.pops_bytes = vocab_pops_bytes(v);
    reset(out, cap);
  }

  // Ready for the next document (one E2E can serve a whole range of documents).
  DWP_HD DWP_FORCEINLINE void reset(int32_t* out, int64_t cap) {
    sink.out = out;
    sink.cap = out ? cap : 0;
    sink.n = 0;
    node = 0;
    word_start = 0;
    nchars = 0;
    active = false;
    failed = false;
    n_pending = 0;
    if constexpr (kOff) {
      os.offs = nullptr;
      os.wids = nullptr;
      os.bytes_minus_units = 0;
      os.word = 0;
      os.head = os.count = os.fo = 0;
      os.word_ob = -1;
      os.word_oe = 0;
      os.cur_ob = os.cur_oe = 0;
      os.cur_single = true;
    }
  }

  // Where the offsets (2 per token) and word ids go (with out, after reset); chars: the
  // unit. Null arrays: not written (the counts are still kept).
  DWP_HD void set_offsets(int64_t* offs, int32_t* wids, bool chars) {
    if constexpr (kOff) {
      os.offs = offs;
      os.wids = wids;
      os.chars = chars;
    }
  }

  // -- offsets helpers (kOff only) --------------------------------------------------------
  DWP_HD DWP_FORCEINLINE int64_t unit_at(int64_t i) const {
    if constexpr (kOff) return os.chars ? i - os.bytes_minus_units : i;
    return i;
  }
  // The span of the code point s[i, i + l) becomes the current one (l > 1: chars count it).
  DWP_HD DWP_FORCEINLINE void cur_code_point(int64_t i, int32_t l) {
    if constexpr (kOff) {
      if (os.chars) {
        os.cur_ob = i - os.bytes_minus_units;
        os.bytes_minus_units += l - 1;
        os.cur_oe = os.cur_ob + 1;
      } else {
        os.cur_ob = i;
        os.cur_oe = i + l;
      }
      os.cur_single = true;
    }
  }
  DWP_HD DWP_FORCEINLINE void emit(int32_t t, int64_t b, int64_t e) {
    if constexpr (kOff) {
      if (sink.n < sink.cap) {
        sink.out[sink.n] = t;
        if (os.offs) {
          os.offs[2 * sink.n] = b;
          os.offs[2 * sink.n + 1] = e;
        }
        if (os.wids) os.wids[sink.n] = os.word;
      }
      ++sink.n;
    } else {
      sink.push(t);
    }
  }
  DWP_HD DWP_FORCEINLINE OffRec& rec_at(int32_t k) {
    return os.rec[(os.head + k) & (kOffRing - 1)];
  }
  DWP_HD DWP_NOINLINE void rec_overflow() {
    // Merge the two oldest records into one atomic record (documented bound).
    OffRec& a = rec_at(0);
    OffRec& b = rec_at(1);
    b.ob = a.w ? a.ob + os.fo / a.w : a.ob;
    b.nb += a.nb - os.fo;
    b.w = 0;
    os.head = (os.head + 1) & (kOffRing - 1);
    --os.count;
    os.fo = 0;
  }
  // Appends a record for nb normalized bytes of the current code point.
  DWP_HD DWP_FORCEINLINE void push_rec(int32_t nb) {
    const int64_t ob = os.cur_ob, oe = os.cur_oe;
    bool run;
    int32_t w;
    if (os.chars) {
      run = os.cur_single && oe - ob == 1;
      w = nb;
    } else {
      run = os.cur_single && oe - ob == nb;
      w = 1;
    }
    if (os.count) {
      OffRec& bk = rec_at(os.count - 1);
      if (run && bk.w == w && bk.oe == ob) {
        bk.oe = oe;
        bk.nb += nb;
        return;
      }
      if (!run && bk.w == 0 && bk.ob == ob && bk.oe == oe) {
        bk.nb += nb;
        return;
      }
    }
    if (os.count == kOffRing) rec_overflow();
    OffRec& r = rec_at(os.count++);
    r.ob = ob;
    r.oe = oe;
    r.nb = nb;
    r.w = run ? w : 0;
  }
  // One normalized character of nb bytes of the current code point joins the word (after
  // begin_char, before its bytes are walked).
  DWP_HD DWP_FORCEINLINE void note_char(int32_t nb) {
    if constexpr (kOff) {
      if (os.word_ob < 0) os.word_ob = os.cur_ob;
      os.word_oe = os.cur_oe;
      if (!failed) push_rec(nb);
    }
  }
  // The span of the next B normalized bytes of the queue, which are taken off it.
  DWP_HD void consume(int32_t B, int64_t* b, int64_t* e) {
    if (!os.count) {
      *b = *e = os.word_oe;
      return;
    }
    OffRec* r = &rec_at(0);
    *b = r->w ? r->ob + os.fo / r->w : r->ob;
    for (;;) {
      const int32_t avail = r->nb - os.fo;
      if (B < avail) {
        os.fo += B;
        *e = r->w ? r->ob + os.fo / r->w : r->oe;
        return;
      }
      B -= avail;
      *e = r->oe;
      os.head = (os.head + 1) & (kOffRing - 1);
      os.fo = 0;
      if (--os.count == 0 || B == 0) return;
      r = &rec_at(0);
    }
  }
  DWP_HD void consume_all(int64_t* b, int64_t* e) {
    if (!os.count) {
      *b = *e = os.word_oe;
      return;
    }
    const OffRec& r = rec_at(0);
    *b = r.w ? r.ob + os.fo / r.w : r.ob;
    *e = rec_at(os.count - 1).oe;
    os.head = os.count = os.fo = 0;
  }

  // Follows the failure link of the current node, emitting its failure pops; false when
  // the node has none (the word cannot be tokenized).
  DWP_HD DWP_FORCEINLINE bool follow_failure() {
    const int32_t fail = v.hot[node].fail;
    if (fail < 0) return false;
    const TrieNode& nd = v.nodes[node];
    if constexpr (kOff) {
      for (int32_t k = 0; k < nd.pops_len; ++k) {
        int64_t b, e;
        consume(os.pops_bytes[nd.pops_off + k], &b, &e);
        emit(v.pops[nd.pops_off + k], b, e);
      }
    } else {
      for (int32_t k = 0; k < nd.pops_len; ++k) sink.push(v.pops[nd.pops_off + k]);
    }
    node = fail;
    return true;
  }

  // One byte of the current word through the LinMaxMatch automaton.
  DWP_HD DWP_FORCEINLINE void step(uint8_t c) {
    for (;;) {
      const int32_t nx = trie_child(v, node, c);
      if (nx >= 0) {
        node = nx;
        return;
      }
      if (!follow_failure()) {
        failed = true;
        return;
      }
    }
  }

  // Opens a word at the trie root; its tokens start at the sink's current end.
  DWP_HD DWP_FORCEINLINE void start_word() {
    active = true;
    failed = false;
    node = 0;
    nchars = 0;
    word_start = sink.n;
    if constexpr (kOff) {
      os.head = os.count = os.fo = 0;
      os.word_ob = -1;
    }
  }

  DWP_HD DWP_FORCEINLINE void begin_char() {
    if (!active) start_word();
    if (++nchars > max_chars) failed = true;
  }

  // Appends one normalized character (its UTF-8 bytes) to the current word.
  DWP_HD DWP_FORCEINLINE void feed_char(const uint8_t* b, int32_t len) {
    begin_char();
    note_char(len);
    if (failed) return;
    for (int32_t k = 0; k < len && !failed; ++k) step(b[k]);
  }

  DWP_HD DWP_HOST_FORCEINLINE void end_word() {
    if (!active) return;
    active = false;
    if (!failed && node != suffix_root && v.hot[node].token >= 0) {
      // the whole rest of the word is one token
      if constexpr (kOff) {
        int64_t b, e;
        consume_all(&b, &e);
        emit(v.hot[node].token, b, e);
        ++os.word;
      } else {
        sink.push(v.hot[node].token);
      }
      return;
    }
    if (!failed) {
      while (node != suffix_root) {
        if (!follow_failure()) {
          failed = true;
          break;
        }
      }
    }
    if (failed) {
      sink.n = word_start;
      if constexpr (kOff) {
        emit(unk_id, os.word_ob, os.word_oe);  // [UNK] spans the whole word
      } else {
        sink.push(unk_id);
      }
    }
    if constexpr (kOff) {
      os.head = os.count = os.fo = 0;
      ++os.word;
    }
  }

  // One normalized output character with its pre-tokenizer class.
  DWP_HD DWP_FORCEINLINE void put_char(uint32_t cls, const uint8_t* b, int32_t len) {
    if (cls == kClassOther) {
      feed_char(b, len);
    } else if (cls == kClassSpace) {
      end_word();
    } else {  // punctuation: a word of its own
      end_word();
      feed_char(b, len);
      end_word();
    }
  }

  // Emits the waiting combining marks in canonical order.
  DWP_HD DWP_NOINLINE void flush_pending() {
    const int32_t n = n_pending;
    n_pending = 0;
    int64_t save_ob = 0, save_oe = 0;
    bool save_single = true;
    if constexpr (kOff) {
      save_ob = os.cur_ob;
      save_oe = os.cur_oe;
      save_single = os.cur_single;
    }
    for (int32_t k = 0; k < n; ++k) {
      uint8_t b[4];
      const uint32_t cp = pending_cp[k];
      int32_t l;
      if (cp < 0x800u) {
        b[0] = (uint8_t)(0xC0u | (cp >> 6)); b[1] = (uint8_t)(0x80u | (cp & 0x3Fu)); l = 2;
      } else if (cp < 0x10000u) {
        b[0] = (uint8_t)(0xE0u | (cp >> 12)); b[1] = (uint8_t)(0x80u | ((cp >> 6) & 0x3Fu));
        b[2] = (uint8_t)(0x80u | (cp & 0x3Fu)); l = 3;
      } else {
        b[0] = (uint8_t)(0xF0u | (cp >> 18)); b[1] = (uint8_t)(0x80u | ((cp >> 12) & 0x3Fu));
        b[2] = (uint8_t)(0x80u | ((cp >> 6) & 0x3Fu)); b[3] = (uint8_t)(0x80u | (cp & 0x3Fu));
        l = 4;
      }
      if constexpr (kOff) {
        // HF's NFD aligns positionally: the k-th mark out takes the k-th mark in's span.
        os.cur_ob = os.pend_ob[k];
        os.cur_oe = os.pend_oe[k];
        os.cur_single = os.pend_single[k] != 0;
      }
      put_char(norm_entry(nm, cp) & kClassMask, b, l);
    }
    if constexpr (kOff) {
      os.cur_ob = save_ob;
      os.cur_oe = save_oe;
      os.cur_single = save_single;
    }
  }

  // Queues a surviving combining mark: stable insertion by combining class.
  DWP_HD DWP_NOINLINE void add_pending(uint32_t cp) {
    int32_t lo = 0, hi = (int32_t)nm.h->n_ccc;
    while (lo < hi) {
      const int32_t mid = (lo + hi) >> 1;
      if (nm.ccc_cps[mid] < cp) lo = mid + 1; else hi = mid;
    }
    const uint8_t ccc = nm.ccc_vals[lo];
    if (n_pending == kMaxPending) flush_pending();  // documented bound on a run of marks
    if constexpr (kOff) {
      os.pend_ob[n_pending] = os.cur_ob;
      os.pend_oe[n_pending] = os.cur_oe;
      os.pend_single[n_pending] = os.cur_single ? 1 : 0;
    }
    int32_t at = n_pending;
    while (at > 0 && pending_ccc[at - 1] > ccc) {
      pending_cp[at] = pending_cp[at - 1];
      pending_ccc[at] = pending_ccc[at - 1];
      --at;
    }
    pending_cp[at] = cp;
    pending_ccc[at] = ccc;
    ++n_pending;
  }

  // One output character of the normalizer: a waiting mark, or a starter (flushes marks).
  DWP_HD DWP_FORCEINLINE void put_output(uint32_t cp, uint32_t entry, const uint8_t* b,
                                         int32_t len) {
    if (entry & kMarkPending) {
      add_pending(cp);
      return;
    }
    if (n_pending) flush_pending();
    put_char(entry & kClassMask, b, len);
  }

  // A code point of the input with its normalization entry; `raw` holds its bytes, or is
  // null for U+FFFD replacing invalid input. (kOff: its span is the current one.)
  DWP_HD DWP_DEVICE_NOINLINE void put_code_point(uint32_t cp, uint32_t entry, const uint8_t* raw,
                             int32_t raw_len) {
    if (entry & kRemove) return;  // removed before NFD: does not end a run of marks
    if (entry & kToSpace) {
      if (n_pending) flush_pending();
      end_word();
      return;
    }
    const bool isolate = (entry & kIsolate) != 0;
    if (isolate) {
      if (n_pending) flush_pending();
      end_word();
    }
    if (entry & kMapped) {
      const uint32_t m = entry >> kMapShift;
      const int64_t b = nm.map_offsets[m], e = nm.map_offsets[m + 1];
      if (b == e && !(entry & kNonStarterGone) && n_pending) flush_pending();
      if constexpr (kOff) {
        if (b < e) {
          int32_t l0;
          decode_utf8(nm.map_utf8, b, e, &l0);
          os.cur_single = b + l0 == e;
        }
      }
      for (int64_t i = b; i < e;) {
        int32_t l;
        const uint32_t ocp = decode_utf8(nm.map_utf8, i, e, &l);
        put_output(ocp, norm_entry(nm, ocp), nm.map_utf8 + i, l);
        i += l;
      }
    } else if (raw) {
      put_output(cp, entry, raw, raw_len);
    } else {
      const uint8_t fffd[3] = {0xEFu, 0xBFu, 0xBDu};
      put_output(cp, entry, fffd, 3);
    }
    if (isolate) {
      if (n_pending) flush_pending();
      end_word();
    }
  }

  // Tries the literal special tokens at s[i]: the longest one there, found by walking the
  // special-token trie (one step per byte of the longest prefix s[i..] shares with some
  // special token, whatever their number). On a match emits it and returns its length.
  DWP_HD DWP_NOINLINE int64_t match_special(const uint8_t* s, int64_t i, int64_t len) {
    const SpecialNode* sn = v.special_nodes;
    const uint8_t* labels = v.special_labels;
    int32_t node = 0, best_id = -1;
    int64_t best_len = 0;
    for (int64_t j = i; j < len; ++j) {
      const uint8_t c = s[j];
      int32_t lo = sn[node].first_child, hi = lo + sn[node].n_child;
      while (lo < hi) {
        const int32_t mid = (lo + hi) >> 1;
        if (labels[mid] < c) lo = mid + 1; else hi = mid;
      }
      if (lo == sn[node].first_child + sn[node].n_child || labels[lo] != c) break;
      node = lo;
      if (sn[node].id >= 0) {
        best_id = sn[node].id;
        best_len = j + 1 - i;
      }
    }
    if (best_len) {
      if (n_pending) flush_pending();
      end_word();
      if constexpr (kOff) {
        const int64_t b = unit_at(i);
        if (os.chars) {
          int64_t cont = 0;
          for (int64_t j = i; j < i + best_len; ++j) cont += (s[j] & 0xC0u) == 0x80u;
          os.bytes_minus_units += cont;
        }
        emit(best_id, b, unit_at(i + best_len));
        ++os.word;
      } else {
        sink.push(best_id);
      }
    }
    return best_len;
  }

  // One step of the general path at s[i]: a run of plain word bytes, or one code point
  // (or special token). Returns the index after what it consumed.
  DWP_HD DWP_FORCEINLINE int64_t general_step(const uint8_t* s, int64_t i, int64_t len) {
    uint8_t c = s[i];
    uint8_t f = feed[c];
    if (f < 0x80u) {
      // Fast path: a run of ASCII bytes that continue the current word. Characters are
      // counted per run; a word over the limit is [UNK] however far the walk got.
      if (n_pending) flush_pending();
      if (!active) start_word();
      const int64_t run_start = i;
      if constexpr (kOff) open_run(run_start);
      for (;;) {
        if (!failed) step(f);
        if (++i == len) break;
        f = feed[s[i]];
        if (f >= 0x80u) break;
      }
      if constexpr (kOff) close_run(run_start, i);
      nchars += i - run_start;
      if (nchars > max_chars) failed = true;
      return i;
    }
    if (f == kFeedSpace) {
      if (n_pending) flush_pending();
      end_word();
      return i + 1;
    }
    if (v.special_first[c]) {
      const int64_t l = match_special(s, i, len);
      if (l) return i + l;
    }
    if (c < 0x80u) {
      const uint8_t kind = nm.ascii_kind[c];
      if (n_pending && kind != kAsciiRemove) flush_pending();
      if constexpr (kOff) cur_code_point(i, 1);
      switch (kind) {
        case kAsciiFeed:  // only when a special token starts with this byte (no match)
          begin_char();
          note_char(1);
          if (!failed) step(nm.ascii_byte[c]);
          break;
        case kAsciiSpace:
          end_word();
          break;
        case kAsciiPunct:
          end_word();
          begin_char();
          note_char(1);
          if (!failed) step(nm.ascii_byte[c]);
          end_word();
          break;
        case kAsciiRemove:
          break;
        default:
          put_code_point(c, norm_entry(nm, c), s + i, 1);
      }
      return i + 1;
    }
    int32_t l;
    const uint32_t cp = decode_utf8(s, i, len, &l);
    const uint32_t entry = norm_entry(nm, cp);
    if constexpr (kOff) cur_code_point(i, l);
    if ((entry & 0xFFu) == 0 && !n_pending && cp != kReplacementChar) {
      // A plain letter of a word (no mapping, no class, not a mark): straight to the trie.
      begin_char();
      note_char(l);
      for (int32_t k = 0; k < l && !failed; ++k) step(s[i + k]);
      return i + l;
    }
    const bool invalid = cp == kReplacementChar && !(l == 3 && s[i] == 0xEFu);
    put_code_point(cp, entry, invalid ? nullptr : s + i, l);
    return i + l;
  }

  // The fast path's run of ASCII word bytes from s[run_start] (kOff): one run record,
  // open (its size unknown) while the run is walked, closed by close_run.
  DWP_HD DWP_FORCEINLINE void open_run(int64_t run_start) {
    if constexpr (kOff) {
      const int64_t ob = unit_at(run_start);
      if (os.word_ob < 0) os.word_ob = ob;
      os.open_at = -1;
      if (failed) return;
      if (os.count) {
        OffRec& bk = rec_at(os.count - 1);
        if (bk.w == 1 && bk.oe == ob) {
          os.open_at = os.count - 1;
          os.open_base = bk.nb;
          bk.nb = kOffOpen;
          return;
        }
      }
      if (os.count == kOffRing) rec_overflow();
      OffRec& r = rec_at(os.count);
      r.ob = ob;
      r.oe = ob;
      r.nb = kOffOpen;
      r.w = 1;
      os.open_at = os.count++;
      os.open_base = 0;
    }
  }
  DWP_HD DWP_FORCEINLINE void close_run(int64_t run_start, int64_t i) {
    if constexpr (kOff) {
      const int64_t n = i - run_start;
      os.word_oe = unit_at(i);
      if (os.open_at < 0) return;
      // The open record is the queue's back (pops take from the front, and never all of
      // it: kOffOpen bytes).
      OffRec& r = rec_at(os.count - 1);
      r.nb = os.open_base + (int32_t)n;
      r.oe = os.word_oe;
      if (os.count == 1 && os.fo >= r.nb) os.head = os.count = os.fo = 0;
    }
  }

  DWP_HD DWP_FORCEINLINE int64_t finish() {
    if (n_pending) flush_pending();
    end_word();
    return sink.n;
  }


  // Tokenizes s[0, len). Returns the number of tokens (written when they fit the sink).
  DWP_HD int64_t run(const uint8_t* s, int64_t len) {
    int64_t i = 0;
    while (i < len) i = general_step(s, i, len);
    return finish();
  }
};

// Tokenizes one document; returns its token count. Writes at most `cap` ids to `out`
// (nothing when out is null).
DWP_HD inline int64_t tokenize_document(const CoreContext& ctx, const uint8_t* s, int64_t len,
                                        int32_t* out, int64_t cap) {
  WordPieceE2E<> t(ctx, out, cap);
  return t.run(s, len);
}

// tokenize_document with offsets (2 per token, in characters when `chars`, else bytes,
// relative to s) and word ids (relative to the document: the first word is 0); either may
// be null. *n_words / *n_units (optional) receive the number of words and of units of
// s[0, len) (the next chunk's bases).
DWP_HD inline int64_t tokenize_document_offsets(const CoreContext& ctx, const uint8_t* s,
                                                int64_t len, int32_t* out, int64_t* offs,
                                                int32_t* wids, int64_t cap, bool chars,
                                                int64_t* n_words, int64_t* n_units) {
  WordPieceE2E<true> t(ctx, out, cap);
  t.set_offsets(out ? offs : nullptr, out ? wids : nullptr, chars);
  const int64_t n = t.run(s, len);
  if (n_words) *n_words = t.os.word;
  if (n_units) *n_units = chars ? len - t.os.bytes_minus_units : len;
  return n;
}

}  // namespace daskwp
