// daskwp — the word memo of the CPU loop (host only: the GPU kernels have none).
//
// MemoWordPieceE2E is the E2E tokenizer of wordpiece_core.hpp with a per-thread memo
// (WordCache) of whitespace chunks ("world," — a word with its punctuation) and of whole
// words: between words its document loop serves chunks and words it has seen from the memo,
// skips plain spaces and emits lone ASCII punctuation from a table, and hands everything
// else to the shared general path. It only skips work: the ids are those of
// WordPieceE2E::run. Included by the CPU batch loop (cpu_batch.cpp) and the native test and
// benchmark drivers, never by the kernels.
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
#pragma once

#if defined(__CUDA_ARCH__) || defined(__CUDACC_RTC__)
#error "word_memo.hpp is host only; the kernels include wordpiece_core.hpp alone"
#endif

#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "wordpiece_core.hpp"

#if defined(__SSE2__) && !defined(__CUDACC__)
#include <emmintrin.h>
#include <xmmintrin.h>
#define DWP_SSE2 1
#endif
#if defined(__SSE4_1__) && !defined(__CUDACC__)
#include <smmintrin.h>
#define DWP_SSE41 1
#endif

namespace daskwp {

// 8 unaligned bytes, little-endian.
DWP_FORCEINLINE uint64_t load_u64(const uint8_t* p) {
  uint64_t x;
  __builtin_memcpy(&x, p, 8);
  return x;
}

// The short table: 2^bits entries of 32 bytes, two-way set-associative with both ways of a
// set in one 64-byte cache line, for strings of up to 16 bytes. The key is the bytes
// zero-padded to 16 (no memoized string holds a zero byte — chunks hold bytes > 0x20 only,
// and words with one skip the table — so the padding is unambiguous and all zeros is the
// empty entry). Up to 3 tokens as int32, 4-6 packed as 20-bit ids.
constexpr int32_t kWordCacheMaxBytes = 16;
constexpr int32_t kWordCacheMaxTokens = 3;     // as int32 in tokens[]
constexpr int32_t kWordCachePackedTokens = 6;  // packed in 15 bytes from pack[] on
constexpr uint32_t kWordCachePackMask = (1u << 20) - 1;
// n_tokens of a short entry whose tokens (more than a short entry holds, or ids too large
// to pack) are in the long table, under short_hash(key) | 1.
constexpr uint8_t kInLong = 0xFF;
// The long table: strings of 17-kLongMaxBytes bytes (or of more tokens than a short entry
// holds) in an arena; 16-byte slots, four ways to a 64-byte line.
constexpr int32_t kLongMaxBytes = 160;
constexpr int32_t kLongMaxTokens = 96;
// Default size of one memo: 2^19 short entries (16 MB), 2^15 mid entries (2 MB), 2^18 long
// slots (4 MB), a 6 MB arena (8 MB with the rounding to 2 MB): 30 MB. (One long slot per
// two short entries: with a slot per eight, multilingual and log text, whose words of more
// than 16 bytes all go to the long table, evicted a long entry for nearly every one it
// recorded: 3x the misses of a warm pass. 2^19 rather than 2^18 short entries: at 2^18,
// keys three to a two-way set evicted each other on every pass, 3% of a warm pass's
// lookups on the 1.1 MB Latin file, 0.8% at 2^19; the sets a corpus touches, not the
// table's size, are what the CPU caches hold.)
constexpr int32_t kWordCacheDefaultBits = 19;
constexpr int32_t kWordCacheMinBits = 10;

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

// Bytes the long table's arena keeps unused after its last record, which the offsets
// layout's loop-free emit of up to 8 tokens may read (put_long).
constexpr size_t kArenaSlack = 64;

struct alignas(32) WordCacheEntry {
  uint64_t key[2];  // the bytes, little-endian, zero-padded; {0, 0}: empty
  uint8_t n_tokens;
  uint8_t pack[3];
  int32_t tokens[kWordCacheMaxTokens];
};
constexpr size_t kWordCachePackAt = __builtin_offsetof(WordCacheEntry, pack);
static_assert(sizeof(WordCacheEntry) == 32 && kWordCachePackAt == 17 &&
                  __builtin_offsetof(WordCacheEntry, tokens) == 20,
              "the packed tokens use pack and tokens as 15 contiguous bytes");

// The mid table: whole chunks of 17-32 bytes (logs: 11% of their chunks, a quarter of their
// bytes; Cyrillic and Greek: 17% and a third), which the fast loop serves as it serves
// short ones, with no byte loop, hash loop or memcmp. An entry is one cache line, two ways
// to a set; the key is the bytes zero-padded to 32 (unambiguous, as for short keys). The
// ids: up to 15 as uint16 (the u16 layout) or 7 as int32 from byte 32, n_tokens in byte
// 63. It is a cache in front of the long table, which records these chunks too: a chunk
// of more tokens has n_tokens kInLong and a reference to its long record at byte 32
// (put_long_ref: gone once the arena was emptied since); one whose mid entry was evicted
// is still served from the long table (and re-enters the mid table). The offsets layout
// keeps references only (its records hold the spans).
constexpr int32_t kMidMinBytes = 17;
constexpr int32_t kMidMaxBytes = 32;
constexpr int32_t kMidTokensU16 = 15;
constexpr int32_t kMidTokens = 7;
constexpr int32_t kMidBitsLess = 4;  // 2^(bits - 4) mid entries: 2 MB beside 16 MB of short

struct alignas(64) MidEntry {
  uint64_t key[4];  // the bytes, little-endian, zero-padded; all 0: empty
  uint8_t ids[31];
  uint8_t n_tokens;
};
static_assert(sizeof(MidEntry) == 64, "one mid entry to a cache line");

struct LongSlot {
  uint64_t hash;  // 0: empty
  uint32_t off;   // arena offset of the record: int32 tokens[n_tokens], then the bytes
  uint16_t len;
  uint16_t n_tokens;
};
static_assert(sizeof(LongSlot) == 16, "four long slots to a cache line");

// 4-6 token ids below 2^20, 20 bits each, little-endian in the 15 bytes from pack on.
inline void memo_pack(WordCacheEntry& en, const int32_t* t, int32_t nt) {
  uint64_t lo = 0, hi = 0;  // bits 0-63, 64-119
  for (int32_t k = 0; k < nt; ++k) {
    const uint64_t v = (uint32_t)t[k];
    const int32_t at = 20 * k;
    if (at < 64) lo |= v << at;
    if (at + 20 > 64) hi |= at >= 64 ? v << (at - 64) : v >> (64 - at);
  }
  uint8_t* b = reinterpret_cast<uint8_t*>(&en) + kWordCachePackAt;
  __builtin_memcpy(b, &lo, 8);
  __builtin_memcpy(b + 8, &hi, 7);
}
inline void memo_unpack(const WordCacheEntry& en, int32_t* t) {
  const uint8_t* b = reinterpret_cast<const uint8_t*>(&en) + kWordCachePackAt;
  uint64_t lo, hi = 0;
  __builtin_memcpy(&lo, b, 8);
  __builtin_memcpy(&hi, b + 8, 7);
  t[0] = (int32_t)(lo & kWordCachePackMask);
  t[1] = (int32_t)((lo >> 20) & kWordCachePackMask);
  t[2] = (int32_t)((lo >> 40) & kWordCachePackMask);
  t[3] = (int32_t)(((lo >> 60) | (hi << 4)) & kWordCachePackMask);
  t[4] = (int32_t)((hi >> 16) & kWordCachePackMask);
  t[5] = (int32_t)((hi >> 36) & kWordCachePackMask);
}

// What a memo counts (read by the pool's statistics; plain fields: one thread at a time).
struct WordCacheStats {
  uint64_t hits = 0;         // chunks and words served from the short or long table
  uint64_t misses = 0;       // chunks and words walked and offered to the memo
  uint64_t long_resets = 0;  // times the long table's arena filled up and was emptied
};

// One memo: the per-context byte tables and the two tables, in one block of memory. Fill
// the byte tables and empty the tables with reset_word_cache for a CoreContext; after that
// any number of documents may share it, one thread at a time, for that context only.
struct WordCache {
  // The one token of a lone ASCII punctuation byte (a word of its own whatever surrounds
  // it), or -1 where the general path decides (special-token bytes, other kinds).
  int32_t punct_token[256];
  // 1 where the byte ends a word that the memo may hold: ASCII whitespace or punctuation.
  uint8_t word_end[256];
  // 1 where a chunk holding the byte is not memoized: the bytes special tokens start with,
  // unless special_probe (then none).
  uint8_t chunk_refuse[256];
  // The bytes chunk_refuse holds (refuse_bytes[0, n_refuse)), or n_refuse -1 when more
  // than 4: then chunk_slow scans a chunk a byte at a time, else 16 bytes at a time.
  int32_t n_refuse;
  uint8_t refuse_bytes[4];
  // The word bytes of the fast path are exactly ASCII letters and digits (every BERT
  // vocabulary with its default flags): word ends may be found 16 bytes at a time.
  bool alnum_feed;
  // Whitespace chunks may be looked up: every plain-whitespace byte is <= 0x20, so the
  // chunk scan (which stops at bytes <= 0x20) finds every chunk end.
  bool chunk_ok;
  // The feed table lets byte 0 into words (no clean_text): such words skip the short table.
  bool zero_in_words;
  // No special token holds a byte <= 0x20, so none that starts in a chunk reaches past it
  // (whose end is such a byte or the document's): chunks with bytes special tokens start
  // with are memoized too (what matches in them is a fact of their bytes alone).
  bool special_probe;
  // What the entries hold (reset_word_cache): 0 the ids only; kMemoOffsetsBytes /
  // kMemoOffsetsChars the ids with their spans in that unit and word ids (the offsets
  // layout below; such a memo serves MemoWordPieceE2ET<true> only, and the pool keys it
  // apart).
  int32_t offsets_unit;
  // The ids layout with every id below 2^16 (the vocabulary's id_limit): a short entry
  // holds 1-6 ids as uint16 in bytes 20-31 (then a hit is one 16-byte load and two
  // widenings, whatever the count), else 1-3 int32 or 4-6 packed in 20 bits.
  bool u16;
  int32_t bits;       // 2^bits short entries
  int32_t long_bits;  // 2^long_bits long slots
  int32_t mid_bits;   // 2^mid_bits mid entries
  uint64_t arena_cap, arena_used;
  uint64_t arena_epoch = 0;  // times the arena was emptied (mid entries' long references)
  // Whether the last window of ~64K lookups hit 8 times or more to a miss (note_window):
  // then record() moves entries pushed out of full sets to their second sets.
  bool displace = false;
  uint64_t window_hits = 0, window_misses = 0;  // the counts where the window began
  void note_window() {
    const uint64_t h = stats.hits - window_hits, m = stats.misses - window_misses;
    if (h + m < (uint64_t(1) << 16)) return;
    displace = h >= 8 * m;
    window_hits = stats.hits;
    window_misses = stats.misses;
  }
  WordCacheStats stats;
  WordCacheEntry* entries;
  MidEntry* mid;
  LongSlot* long_slots;
  uint8_t* arena;
  void* block;
  size_t block_bytes;
  void (*free_block)(void*);
  // A block of its own mapping (default allocation of 4 MB and more, Linux): the mapping,
  // and whether the tables are still the fresh mapping's zero pages (the first
  // clear_tables then writes nothing: a cold call does not fault and zero them twice).
  void* map_base = nullptr;
  size_t map_bytes = 0;
  bool zeroed = false;
  // The multi-threaded call that made it (0: none, or merged since): memos made by one
  // call hold the words of the chunks each thread got, and a later large call first merges
  // them (merge_memos).
  uint64_t fill_call = 0;

  // Bytes of the block for a memo of 2^bits short entries: the tables and an arena of
  // 12 bytes per short entry, rounded up to 2 MB (huge pages) from 4 MB on, the arena
  // taking the rounding.
  static size_t bytes_for(int32_t b) {
    const size_t entries = size_t(32) << b, mids = size_t(64) << (b - kMidBitsLess),
                 slots = size_t(16) << (b - 1), arena = size_t(12) << b,
                 total = entries + 64 + mids + slots + arena;
    const size_t huge = size_t(2) << 20;
    return total >= 2 * huge ? (total + huge - 1) / huge * huge : total;
  }

  // `alloc` / `dealloc`: where the block comes from (default: aligned_alloc / free); the
  // block must be 64-byte aligned.
  // A mapping of a memo that was freed, kept to make a later memo of the same size in
  // (release_mapping; `adopt` of the constructor).
  struct Mapping {
    void* base = nullptr;
    size_t bytes = 0;
  };

  // `adopt`: the mapping of an earlier memo of these bits (release_mapping), whose pages
  // are in memory already: the tables are cleared by writing them, not by fresh zero pages.
  explicit WordCache(int32_t b = kWordCacheDefaultBits, void* (*alloc)(size_t) = nullptr,
                     void (*dealloc)(void*) = nullptr, const Mapping* adopt = nullptr) {
    if (b < kWordCacheMinBits) b = kWordCacheMinBits;
    bits = b;
    long_bits = b - 1;
    mid_bits = b - kMidBitsLess;
    block_bytes = bytes_for(b);
    free_block = alloc ? dealloc : nullptr;
    if (alloc) {
      block = alloc(block_bytes);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    } else if (block_bytes >= (size_t(4) << 20)) {
      const size_t huge = size_t(2) << 20;
      map_bytes = block_bytes + huge;  // room to start the block on a 2 MB boundary
      const bool kept = adopt && adopt->base && adopt->bytes == map_bytes;
      void* m = kept ? adopt->base
                     : mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) throw std::bad_alloc();
      map_base = m;
      block = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(m) + huge - 1) &
                                      ~static_cast<uintptr_t>(huge - 1));
      // Huge pages keep the random lookups off the TLB's back (and fault in 2 MB at once).
      if (!kept) madvise(block, block_bytes, MADV_HUGEPAGE);
      zeroed = !kept;
#endif
    } else {
      const size_t align = block_bytes >= (size_t(4) << 20) ? (size_t(2) << 20) : 64;
      block = std::aligned_alloc(align, (block_bytes + align - 1) / align * align);
    }
    if (!block) throw std::bad_alloc();
    uint8_t* p = static_cast<uint8_t*>(block);
    entries = reinterpret_cast<WordCacheEntry*>(p);
    p += (size_t(32) << b) + 64;  // 64 bytes of slack: a hit may read 16 bytes past an entry
    mid = reinterpret_cast<MidEntry*>(p);
    p += size_t(64) << mid_bits;
    long_slots = reinterpret_cast<LongSlot*>(p);
    p += size_t(16) << long_bits;
    arena = p;
    // (kArenaSlack bytes after the last record: the fast loop's reads of up to 8 tokens)
    arena_cap = block_bytes - static_cast<size_t>(p - static_cast<uint8_t*>(block)) - kArenaSlack;
    arena_used = 0;
    alnum_feed = chunk_ok = zero_in_words = special_probe = u16 = false;
    offsets_unit = 0;
    std::memset(punct_token, 0xFF, sizeof(punct_token));
    std::memset(word_end, 0, sizeof(word_end));
    std::memset(chunk_refuse, 0, sizeof(chunk_refuse));
    n_refuse = 0;
  }
  ~WordCache() {
#if defined(__linux__)
    if (map_base) {
      munmap(map_base, map_bytes);
      return;
    }
#endif
    if (free_block) {
      free_block(block);
    } else {
      std::free(block);
    }
  }
  WordCache(const WordCache&) = delete;
  WordCache& operator=(const WordCache&) = delete;

  // Its own mapping, handed to the caller instead of unmapped when it is destroyed (none:
  // a block of another allocation, kept as it is).
  Mapping release_mapping() {
    Mapping m;
#if defined(__linux__)
    if (map_base) {
      m.base = map_base;
      m.bytes = map_bytes;
      map_base = nullptr;
      block = nullptr;  // (the destructor's std::free(nullptr) then frees nothing)
    }
#endif
    return m;
  }

  // The next clear_tables writes nothing: the caller overwrites every table before the
  // memo is used (copy_tables_from), so clearing an adopted mapping first would be wasted.
  void skip_next_clear() { zeroed = true; }

  // Makes this memo hold what `src` holds: its tables, its arena's records and epoch (the
  // entries' references stay valid: they are arena offsets). Both memos are of the same
  // size and had their byte tables filled for the same context and layout
  // (reset_word_cache); its statistics stay its own.
  void copy_tables_from(const WordCache& src) {
    std::memcpy(entries, src.entries, (size_t(32) << bits) + 64);
    std::memcpy(mid, src.mid, size_t(64) << mid_bits);
    std::memcpy(long_slots, src.long_slots, size_t(16) << long_bits);
    std::memcpy(arena, src.arena, static_cast<size_t>(src.arena_used));
    arena_used = src.arena_used;
    arena_epoch = src.arena_epoch;
    displace = src.displace;
    zeroed = false;
    window_hits = stats.hits;
    window_misses = stats.misses;
  }

  // Empties both tables (keeps the byte tables and the statistics).
  void clear_tables() {
    displace = false;
    window_hits = stats.hits;
    window_misses = stats.misses;
    if (zeroed) {  // the fresh mapping's zero pages: nothing to write
      zeroed = false;
      arena_used = 0;
      return;
    }
    std::memset(entries, 0, (size_t(32) << bits) + 64);
    std::memset(mid, 0, size_t(64) << mid_bits);
    clear_long();
  }
  void clear_long() {
    std::memset(long_slots, 0, size_t(16) << long_bits);
    arena_used = 0;
    ++arena_epoch;
  }
};

#if defined(DWP_SSE2)
// Bit k set where byte k of x is <= 0x20 (a chunk's end: plain whitespace or a control byte).
DWP_FORCEINLINE uint32_t chunk_end_mask(__m128i x) {
  return (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(x, _mm_set1_epi8(0x20)), x));
}
// Bytes of x before a chunk's end, at most 16 and at most room (>= 0: where the document,
// or the scan, ends), without a branch on either.
DWP_FORCEINLINE int64_t chunk_width(__m128i x, int64_t room) {
  return __builtin_ctz(chunk_end_mask(x) | (1u << 16) | (1u << (room < 16 ? room : 16)));
}
#endif

// 16 bytes of 0xFF then 16 of 0: the 16 bytes from kPrefixMask + 16 - w keep w bytes.
alignas(64) inline constexpr uint8_t kPrefixMask[32] = {
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

// Hash of the short key.
DWP_FORCEINLINE uint64_t short_hash(uint64_t k0, uint64_t k1) {
  return (k0 ^ (k1 * 0xFF51AFD7ED558CCDull)) * 0x9E3779B97F4A7C15ull;
}

// The short table's sets of a key: its own (where the fast loop looks) and its second
// choice, where an entry that a newer key pushes out of its own full set goes (one move,
// no chain: the second set's older way is dropped), so that keys three to a set stop
// evicting each other every pass (warm Latin at 2^19 entries: 1,548 misses per pass of
// the 1.1 MB file, nearly all such). A key can be in its second set only while its own
// is full (sets never empty but all at once), so a miss looks there only then.
DWP_FORCEINLINE WordCacheEntry* short_set(const WordCache& wc, uint64_t k0, uint64_t k1) {
  return wc.entries + ((short_hash(k0, k1) >> (64 - wc.bits)) & ~(uint64_t)1);
}
DWP_FORCEINLINE WordCacheEntry* short_alt_set(const WordCache& wc, uint64_t k0, uint64_t k1) {
  const uint64_t h = short_hash(k0, k1);
  const uint64_t a = (h ^ (h >> 29)) * 0xBF58476D1CE4E5B9ull;
  WordCacheEntry* own = short_set(wc, k0, k1);
  WordCacheEntry* alt = wc.entries + ((a >> (64 - wc.bits)) & ~(uint64_t)1);
  return alt == own ? wc.entries + (((a >> (64 - wc.bits)) ^ 2) & ~(uint64_t)1) : alt;
}
DWP_FORCEINLINE bool short_set_full(const WordCacheEntry* set) {
  return ((set[0].key[0] | set[0].key[1]) != 0) & ((set[1].key[0] | set[1].key[1]) != 0);
}
// Makes room in a key's own set for a newer entry at way 0: way 0 moves to way 1, and the
// entry way 1 held (when it is in its own set) to its second set, while the memo is warm
// (WordCache::displace): while it fills, most entries are new and the moves (a write to
// a random line each) would cost a cold pass ~5%.
inline void short_make_room(const WordCache& wc, WordCacheEntry* set) {
  const WordCacheEntry old = set[1];
  set[1] = set[0];
  if ((old.key[0] | old.key[1]) == 0 || !wc.displace ||
      short_set(wc, old.key[0], old.key[1]) != set)
    return;
  WordCacheEntry* alt = short_alt_set(wc, old.key[0], old.key[1]);
  alt[1] = alt[0];
  alt[0] = old;
}

// Fills the empty ways of the two-way set d (short or mid) with the inline entries of the
// other memo's same set `from` that d lacks and whose own set d is (`home(e)`: not ones
// moved to a second set). References into an arena (n_tokens kInLong) stay behind.
template <typename Entry, typename Home>
inline void fill_empty_ways(Entry* d, const Entry* from, Home home) {
  auto empty = [](const Entry& e) { return (e.key[0] | e.key[1]) == 0; };
  auto same = [](const Entry& p, const Entry& q) {
    return std::memcmp(p.key, q.key, sizeof(p.key)) == 0;
  };
  for (int w = 0; w < 2; ++w) {
    const Entry& e = from[w];
    if (empty(e) || e.n_tokens == kInLong || same(d[0], e) || same(d[1], e) || home(e) != d)
      continue;
    if (empty(d[0])) {
      d[0] = e;
    } else if (empty(d[1])) {
      d[1] = e;
    }
  }
}

// Hash of a long string (len >= 8), never 0.
DWP_FORCEINLINE uint64_t long_hash(const uint8_t* p, int64_t len) {
  uint64_t h = (uint64_t)len * 0x9E3779B97F4A7C15ull;
  int64_t k = 0;
  for (; k + 8 <= len; k += 8) h = (h ^ load_u64(p + k)) * 0xFF51AFD7ED558CCDull;
  if (k < len) h = (h ^ load_u64(p + len - 8)) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 31;
  return h | 1;
}

// The long table: the tokens of p[0, len), or null; *nt receives their count.
inline const int32_t* long_get(const WordCache& wc, uint64_t h, const uint8_t* p,
                               int64_t len, int32_t* nt) {
  const LongSlot* set = wc.long_slots + ((h >> (64 - wc.long_bits)) & ~(uint64_t)3);
  for (int k = 0; k < 4; ++k) {
    if (set[k].hash == h && set[k].len == len) {
      const uint8_t* rec = wc.arena + set[k].off;
      const int32_t n = set[k].n_tokens;
      if (std::memcmp(rec + 4 * n, p, (size_t)len) == 0) {
        *nt = n;
        return reinterpret_cast<const int32_t*>(rec);
      }
    }
  }
  return nullptr;
}

// Records p[0, len) -> t[0, nt) as the newest way of its long set; returns the record's
// arena offset, or -1 when it does not fit.
// `extra`: extra_len bytes more after the (padded) bytes (the offsets layout's metadata).
inline int64_t long_put(WordCache& wc, uint64_t h, const uint8_t* p, int64_t len,
                     const int32_t* t, int64_t nt, const uint8_t* extra = nullptr,
                     int64_t extra_len = 0) {
  if (len > kLongMaxBytes || nt > kLongMaxTokens || nt < 1) return -1;
  const uint64_t need =
      (uint64_t)(4 * nt + ((len + 3) & ~(int64_t)3) + ((extra_len + 3) & ~(int64_t)3));
  if (wc.arena_used + need > wc.arena_cap) {
    wc.clear_long();
    ++wc.stats.long_resets;
  }
  const uint64_t off = wc.arena_used;
  wc.arena_used += need;
  std::memcpy(wc.arena + off, t, (size_t)nt * 4);
  std::memcpy(wc.arena + off + 4 * nt, p, (size_t)len);
  if (extra_len)
    std::memcpy(wc.arena + off + 4 * nt + ((len + 3) & ~(int64_t)3), extra, (size_t)extra_len);
  LongSlot* set = wc.long_slots + ((h >> (64 - wc.long_bits)) & ~(uint64_t)3);
  set[3] = set[2];
  set[2] = set[1];
  set[1] = set[0];
  set[0] = LongSlot{h, (uint32_t)off, (uint16_t)len, (uint16_t)nt};
  return (int64_t)off;
}

// A reference to a long record, 14 bytes at p: its token count (uint16), arena offset
// (uint32) and the arena's epoch then (uint64). get_long_ref: the record's ids and count,
// or null once the arena was emptied since (the record is gone).
inline void put_long_ref(const WordCache& wc, uint8_t* p, int64_t off, int64_t nt) {
  const uint16_t c = (uint16_t)nt;
  const uint32_t o = (uint32_t)off;
  std::memcpy(p, &c, 2);
  std::memcpy(p + 2, &o, 4);
  std::memcpy(p + 6, &wc.arena_epoch, 8);
}
DWP_FORCEINLINE const int32_t* get_long_ref(const WordCache& wc, const uint8_t* p,
                                            int32_t* nt) {
  uint16_t c;
  uint32_t o;
  uint64_t epoch;
  __builtin_memcpy(&c, p, 2);
  __builtin_memcpy(&o, p + 2, 4);
  __builtin_memcpy(&epoch, p + 6, 8);
  *nt = c;
  return epoch == wc.arena_epoch ? reinterpret_cast<const int32_t*>(wc.arena + o) : nullptr;
}

// Hash of a mid key.
DWP_FORCEINLINE uint64_t mid_hash(uint64_t k0, uint64_t k1, uint64_t k2, uint64_t k3) {
  return short_hash(k0 ^ (k2 * 0xC2B2AE3D27D4EB4Full), k1 ^ (k3 * 0x165667B19E3779F9ull));
}

// The mid set (two entries, the newer first) of a key.
DWP_FORCEINLINE MidEntry* mid_set(const WordCache& wc, uint64_t h) {
  return wc.mid + ((h >> (64 - wc.mid_bits)) & ~(uint64_t)1);
}

// Records the whole chunk p[0, len) -> t[0, nt) (17-32 bytes) as the newer way of its mid
// set: inline with 1-15 ids of the u16 layout or 1-7 others, else as a reference to its
// long record (rec, in the arena; null: looked up here), when it has one.
inline void mid_put(WordCache& wc, const uint8_t* p, int64_t len, const int32_t* t,
                    int64_t nt, const int32_t* rec = nullptr) {
  if (len < kMidMinBytes || len > kMidMaxBytes || nt < 1) return;
  // (the offsets layout: always a reference, as its records hold the spans)
  const bool inline_ids = !wc.offsets_unit && nt <= (wc.u16 ? kMidTokensU16 : kMidTokens);
  if (!inline_ids && !rec) {
    if (wc.offsets_unit) return;
    int32_t got;
    rec = long_get(wc, long_hash(p, len), p, len, &got);
    if (!rec || got != nt) return;
  }
  uint64_t k[4] = {0, 0, 0, 0};
  std::memcpy(k, p, (size_t)len);
  MidEntry* set = mid_set(wc, mid_hash(k[0], k[1], k[2], k[3]));
  if (!(set[0].key[0] == k[0] && set[0].key[1] == k[1] && set[0].key[2] == k[2] &&
        set[0].key[3] == k[3]))
    set[1] = set[0];
  MidEntry& en = set[0];
  std::memcpy(en.key, k, sizeof(k));
  std::memset(en.ids, 0, sizeof(en.ids));
  if (!inline_ids) {
    put_long_ref(wc, en.ids, reinterpret_cast<const uint8_t*>(rec) - wc.arena, nt);
    en.n_tokens = kInLong;
    return;
  }
  if (wc.u16) {
    for (int64_t j = 0; j < nt; ++j) {
      const uint16_t u = (uint16_t)t[j];
      std::memcpy(en.ids + 2 * j, &u, 2);
    }
  } else {
    std::memcpy(en.ids, t, (size_t)nt * 4);
  }
  en.n_tokens = (uint8_t)nt;
}

// Two memos of one key and layout that the threads of one call filled, each with the
// words of the chunks its thread happened to get: after merge_memos each also holds the
// other's inline short and mid entries where its sets have room (what it already holds
// stays; arena references stay in their own memo, as do entries moved to a second set).
// One pass over both tables.
inline void merge_memos(WordCache& a, WordCache& b) {
  if (a.bits != b.bits || a.offsets_unit != b.offsets_unit) return;
  auto short_home = [](const WordCache& m) {
    return [&m](const WordCacheEntry& e) { return short_set(m, e.key[0], e.key[1]); };
  };
  auto mid_home = [](const WordCache& m) {
    return [&m](const MidEntry& e) {
      return mid_set(m, mid_hash(e.key[0], e.key[1], e.key[2], e.key[3]));
    };
  };
  const uint64_t sets = uint64_t(1) << (a.bits - 1);
  for (uint64_t s = 0; s < sets; ++s) {
    fill_empty_ways(a.entries + 2 * s, b.entries + 2 * s, short_home(a));
    fill_empty_ways(b.entries + 2 * s, a.entries + 2 * s, short_home(b));
  }
  if (a.offsets_unit) return;  // (its mid entries are all arena references)
  const uint64_t mid_sets = uint64_t(1) << (a.mid_bits - 1);
  for (uint64_t s = 0; s < mid_sets; ++s) {
    fill_empty_ways(a.mid + 2 * s, b.mid + 2 * s, mid_home(a));
    fill_empty_ways(b.mid + 2 * s, a.mid + 2 * s, mid_home(b));
  }
}

// The E2E tokenizer state for one byte range, with the memo. Use as WordPieceE2E:
// construct, reset(out, cap, cache) per document, run(bytes, len, readable), read sink.n.
// kOff: with offsets and word ids (set_offsets after reset, both arrays given), through a
// memo of the offsets layout in the same unit (else without a memo).
template <bool kOff = false>
struct MemoWordPieceE2ET : WordPieceE2E<kOff> {
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
    return -1;
  }

  // A short entry of the ids layout with n_tokens kInLong holds where its long record is:
  // the arena offset (uint32 at byte 20), the token count (uint16 at 18) and the arena's
  // epoch (uint64 at 24), so that a hit reads the record without the long table's lookup.
  DWP_FORCEINLINE static void set_long_ref(const WordCache& wc, WordCacheEntry& en,
                                           int64_t off, int64_t nt) {
    put_long_ref(wc, reinterpret_cast<uint8_t*>(&en) + 18, off, nt);
  }

  // -- the offsets layout (kOff) ------------------------------------------------------
  DWP_FORCEINLINE int64_t off_cdelta() const {
    if constexpr (kOff) return os.cdelta;
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
    if (len <= kWordCacheMaxBytes && nt <= kWordCacheMaxTokens && words <= 15) {
      // Inline: the spans tile [0, units) with inner ends 1-15, token 0 in word 0 and the
      // last one in word words - 1 (what put_inline reads back).
      const uint8_t* be = meta;
      const uint8_t* wd = meta + 2 * nt;
      bool fits = be[0] == 0 && be[2 * nt - 1] == units && wd[0] == 0 &&
                  wd[nt - 1] == words - 1 && units >= 1;
      for (int64_t k = 1; k < nt; ++k)
        fits = fits && be[2 * k] == be[2 * k - 1] && be[2 * k - 1] >= 1 &&
               be[2 * k - 1] <= 15 && wd[k] <= 15;
      if (fits) {
        if (WordCacheEntry* slot = short_slot(k0, k1, false)) {
          uint8_t* cb = reinterpret_cast<uint8_t*>(slot);
          const int64_t e0 = nt > 1 ? be[1] : units, e1 = nt > 2 ? be[3] : units;
          cb[16] = (uint8_t)nt;
          cb[17] = (uint8_t)units;
          cb[18] = (uint8_t)(words | ((nt > 1 ? wd[1] : 0) << 4));
          cb[19] = (uint8_t)((e0 - 1) | ((e1 - 1) << 4));
          for (int64_t k = 0; k < nt; ++k) slot->tokens[k] = t[k];
        }
        return -1;
      }
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

  // The spans (relative to u) and word ids (relative to w) of an inline entry's 3 token
  // slots (those past its n_tokens are junk), from its bytes eb.
  DWP_FORCEINLINE static void put_inline(const uint8_t* eb, int64_t* ob, int64_t* oe,
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
  static constexpr int64_t kInlineSlots = 4;
#else
  static constexpr int64_t kInlineSlots = kWordCacheMaxTokens;
#endif
  DWP_FORCEINLINE static void put_inline_hit(const WordCacheEntry* en, int32_t* out,
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
  DWP_FORCEINLINE static void put_long(const int32_t* rec, const uint8_t* meta, int32_t nt,
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
      os.cdelta = cd;
      os.word = wd;
      const int64_t got = emit_off(nullptr, rec, nt, len, n, i - cd, wd);
      cd = os.cdelta;
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
  // cap), spans from unit u, word ids from w; os.cdelta and os.word move past the string.
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
      os.cdelta += len - eb[17];
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
    os.cdelta += len - units;
    os.word += (int32_t)words;
    return nt;
  }

  // kOff's word memo miss: memo_miss's walk (its bytes are its normalized bytes, one to
  // one) with one run record of the word's byte positions relative to its start, so the
  // tokens' spans come out as relative byte positions, then turned into units (chars:
  // every byte of a plain letter's valid UTF-8 that is no continuation byte starts one).
  DWP_NOINLINE void memo_miss_off(const uint8_t* s, int64_t i, int64_t e, uint64_t k0,
                                  uint64_t k1) {
    const int64_t len = e - i, u0 = i - os.cdelta;  // len <= kLongMaxBytes
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
    os.cdelta += len - units;
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

  // The short key of s[i, e) (e - i <= 16), never reading past s[readable).
  DWP_FORCEINLINE static void short_key(const uint8_t* s, int64_t i, int64_t e,
                                        int64_t readable, uint64_t* k0, uint64_t* k1) {
    const int64_t w = e - i;
    uint64_t a = 0, b = 0;
    if (i + 16 <= readable) {
      a = load_u64(s + i);
      b = load_u64(s + i + 8);
      if (w < 8) {
        a &= ~(uint64_t)0 >> (64 - 8 * w);  // w >= 1
        b = 0;
      } else if (w < 16) {
        b &= w == 8 ? 0 : ~(uint64_t)0 >> (64 - 8 * (w - 8));
      }
    } else {
      for (int64_t k = 0; k < w && k < 8; ++k) a |= (uint64_t)s[i + k] << (8 * k);
      for (int64_t k = 8; k < w; ++k) b |= (uint64_t)s[i + k] << (8 * (k - 8));
    }
    *k0 = a;
    *k1 = b;
  }

  // out[n, n + nt) = t[0, nt) (only what is below cap when it does not fit) in whole
  // 16- and 8-byte moves, the last one overlapping: the branches follow nt / 4, not nt (a
  // token-by-token loop mispredicted its exit on most long records of logs).
  DWP_FORCEINLINE static void put_tokens(int32_t* out, int64_t n, int64_t cap,
                                         const int32_t* t, int64_t nt) {
    if (__builtin_expect(n + nt <= cap, 1)) {
      int32_t* o = out + n;
      if (nt >= 4) {
#if defined(DWP_SSE2)
        for (int64_t k = 0; k + 4 < nt; k += 4)
          _mm_storeu_si128(reinterpret_cast<__m128i*>(o + k),
                           _mm_loadu_si128(reinterpret_cast<const __m128i*>(t + k)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + nt - 4),
                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(t + nt - 4)));
#else
        __builtin_memcpy(o, t, (size_t)nt * 4);
#endif
      } else if (nt >= 2) {
        uint64_t a, b;
        __builtin_memcpy(&a, t, 8);
        __builtin_memcpy(&b, t + nt - 2, 8);
        __builtin_memcpy(o, &a, 8);
        __builtin_memcpy(o + nt - 2, &b, 8);
      } else if (nt == 1) {
        o[0] = t[0];
      }
      return;
    }
    for (int64_t k = 0; k < nt; ++k)
      if (n + k < cap) out[n + k] = t[k];
  }

  // The 1-6 ids of a short entry of the u16 layout at out[n, n + 6) (slots past its
  // n_tokens get junk; the caller has room for 6).
  DWP_FORCEINLINE static void put_u16(const WordCacheEntry* en, int32_t* out) {
#if defined(DWP_SSE41)
    const __m128i v =  // bytes 16-31: n_tokens, pack, then the 6 ids at 20-31
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint8_t*>(en) + 16));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_cvtepu16_epi32(_mm_srli_si128(v, 4)));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + 4),
                     _mm_cvtepu16_epi32(_mm_srli_si128(v, 12)));
#else
    uint16_t u[kWordCachePackedTokens];
    __builtin_memcpy(u, en->tokens, sizeof(u));
    for (int k = 0; k < kWordCachePackedTokens; ++k) out[k] = u[k];
#endif
  }

  // Writes the tokens of a short entry at out[n] (none at or past cap); returns their count.
  // u16: the entry has the u16 layout (WordCache::u16).
  DWP_FORCEINLINE static int64_t emit_entry(const WordCacheEntry* en, int32_t* out, int64_t n,
                                            int64_t cap, bool u16) {
    const int64_t nt = en->n_tokens;
    if (u16) {
      if (n + kWordCachePackedTokens <= cap) {
        put_u16(en, out + n);
      } else {
        int32_t t[kWordCachePackedTokens];
        put_u16(en, t);
        put_tokens(out, n, cap, t, nt);
      }
      return nt;
    }
    if (nt <= kWordCacheMaxTokens && n + kWordCacheMaxTokens <= cap) {
      __builtin_memcpy(out + n, en->tokens, sizeof(en->tokens));
      return nt;
    }
    int32_t t[kWordCachePackedTokens];
    if (nt > kWordCacheMaxTokens) {
      memo_unpack(*en, t);
    } else {
      for (int64_t k = 0; k < nt; ++k) t[k] = en->tokens[k];
    }
    put_tokens(out, n, cap, t, nt);
    return nt;
  }

  // The tokens of a short entry at out[n] (none at or past cap): their count, or -1 when
  // they were in the long table and are gone (its arena was emptied since): a miss.
  DWP_NOINLINE static int64_t emit_short(const WordCache& wc, const WordCacheEntry* en,
                                         int32_t* out, int64_t n, int64_t cap) {
    if (en->n_tokens != kInLong) return emit_entry(en, out, n, cap, wc.u16);
    int32_t nt;
    const int32_t* rec = get_long_ref(wc, reinterpret_cast<const uint8_t*>(en) + 18, &nt);
    if (!rec) return -1;  // the arena was emptied since: gone
    put_tokens(out, n, cap, rec, nt);
    return nt;
  }

  // The ids of a mid entry at out[n] (none at or past cap); returns their count, or -1 when
  // they were in the long table and are gone: a miss. With room for 16 (u16) or 8 slots
  // it writes that many (those past n_tokens get junk).
  DWP_FORCEINLINE static int64_t put_mid(const WordCache& wc, const MidEntry* en, int32_t* out,
                                         int64_t n, int64_t cap, bool u16) {
    const int64_t nt = en->n_tokens;
    if (__builtin_expect(nt == kInLong, 0)) return put_mid_long(wc, en, out, n, cap);
#if defined(DWP_SSE41)
    if (__builtin_expect(n + 16 <= cap, 1)) {
      const __m128i a = _mm_load_si128(reinterpret_cast<const __m128i*>(en->ids));
      const __m128i b = _mm_load_si128(reinterpret_cast<const __m128i*>(en->ids + 16));
      __m128i* o = reinterpret_cast<__m128i*>(out + n);
      if (u16) {
        _mm_storeu_si128(o, _mm_cvtepu16_epi32(a));
        _mm_storeu_si128(o + 1, _mm_cvtepu16_epi32(_mm_srli_si128(a, 8)));
        _mm_storeu_si128(o + 2, _mm_cvtepu16_epi32(b));
        _mm_storeu_si128(o + 3, _mm_cvtepu16_epi32(_mm_srli_si128(b, 8)));
      } else {
        _mm_storeu_si128(o, a);
        _mm_storeu_si128(o + 1, b);
      }
      return nt;
    }
#endif
    int32_t t[kMidTokensU16];
    for (int64_t j = 0; j < nt; ++j) {
      if (u16) {
        uint16_t u;
        __builtin_memcpy(&u, en->ids + 2 * j, 2);
        t[j] = u;
      } else {
        __builtin_memcpy(t + j, en->ids + 4 * j, 4);
      }
    }
    put_tokens(out, n, cap, t, nt);
    return nt;
  }

  DWP_NOINLINE static int64_t put_mid_long(const WordCache& wc, const MidEntry* en,
                                           int32_t* out, int64_t n, int64_t cap) {
    int32_t cnt;
    const int32_t* rec = get_long_ref(wc, en->ids, &cnt);
    if (!rec) return -1;
    put_tokens(out, n, cap, rec, cnt);
    return cnt;
  }

  // The short entry of the key, or null (both ways of a set share one cache line; the
  // newer one comes first).
  DWP_FORCEINLINE static const WordCacheEntry* short_get(const WordCache& wc, uint64_t k0,
                                                         uint64_t k1) {
    const WordCacheEntry* set = short_set(wc, k0, k1);
    if ((set[0].key[0] == k0) & (set[0].key[1] == k1)) return set;
    if ((set[1].key[0] == k0) & (set[1].key[1] == k1)) return set + 1;
    return short_get_second(wc, set, k0, k1);
  }
  // After a miss in the key's own set `own`: the key in its second set (short_alt_set), or
  // null; only a full own set sends keys there.
  DWP_FORCEINLINE static const WordCacheEntry* short_get_second(const WordCache& wc,
                                                                const WordCacheEntry* own,
                                                                uint64_t k0, uint64_t k1) {
    return short_set_full(own) ? short_get_in_second(wc, k0, k1) : nullptr;
  }
  DWP_NOINLINE static const WordCacheEntry* short_get_in_second(const WordCache& wc,
                                                                uint64_t k0, uint64_t k1) {
    const WordCacheEntry* set = short_alt_set(wc, k0, k1);
    if ((set[0].key[0] == k0) & (set[0].key[1] == k1)) return set;
    if ((set[1].key[0] == k0) & (set[1].key[1] == k1)) return set + 1;
    return nullptr;
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
    const int64_t cd0 = off_cdelta();
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
                  got = emit_off(en, nullptr, 0, wlen, n, i - os.cdelta, os.word);
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
                emit_off(nullptr, t, nt, wlen, n, i - os.cdelta, os.word);
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
              os.offs[2 * n] = i - os.cdelta;
              os.offs[2 * n + 1] = i - os.cdelta + 1;
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
      i = general_until_idle(s, i, len);
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
                                       (e - start) - (os.cdelta - cd0), os.word - word0);
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
    // kOff: os.cdelta and os.word as locals (synced around chunk_slow), and the arrays.
    int64_t cd = off_cdelta();
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
    // than a memory access, and the loop waited on its sets. core_bench with
    // DASKWP_CORE_BENCH_THRASH=64 (MB/s, best of two runs of 7, kAhead 16 -> 64): EWT
    // 326 -> 396, Latin 275 -> 307, ar+he 346 -> 414; in cache no slower, and 0.6% fewer
    // instructions (callgrind, warm EWT).
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
                os.cdelta = cd;
                os.word = wd;
                got = emit_off(en, nullptr, 0, w, n, i - cd, wd);
                cd = os.cdelta;
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
        os.cdelta = cd;
        os.word = wd;
      }
      i = chunk_slow(s, i, len, readable, missed, k0, k1);
      n = sink.n;
      if constexpr (kOff) {
        cd = os.cdelta;
        wd = os.word;
      }
    }
#if defined(DWP_SSE2)
    prefetch_at = s + ahead;
    prefetch_doc = pf_doc;
#endif
    sink.n = n;
    if constexpr (kOff) {
      os.cdelta = cd;
      os.word = wd;
    }
    wc.stats.hits += hits;
    wc.note_window();
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
