// daskwp — the word memo's storage (host only; its other headers build on this one).
//
// One memo (WordCache) is a single block of memory, allocated once and reused for many
// calls: a short table of 32-byte entries for strings of up to 16 bytes (two ways to a
// 64-byte set), a mid table of 64-byte entries for whole chunks of 17-32 bytes, a long
// table of 16-byte slots over an arena of records for anything longer or of more tokens,
// and the per-context byte tables the document loop reads (punctuation ids, word ends,
// refused bytes). This header holds the entry layouts and their sizes, the block's
// allocation (a mapping of its own, asking for huge pages from 4 MB on unless the option
// huge_pages is false (g_memo_huge_pages), which a pool may keep
// and hand to the next memo of the same size), and emptying and copying the tables. Where
// an entry lives is memo_hashing.hpp; what the loop does with it, word_memo.hpp.
#pragma once

#if defined(__CUDA_ARCH__) || defined(__CUDACC_RTC__)
#error "the word memo headers are host only; the kernels include wordpiece_core.hpp alone"
#endif

#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "host_pool.hpp"
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

// Bytes the long table's arena keeps unused after its last record, which the offsets
// layout's loop-free emit of up to 8 tokens may read (put_long).
constexpr size_t kArenaSlack = 64;

// The ids layout's count byte: pack[0] (byte 17) of an entry whose ids leave it free (the
// u16 layout's 1-6 ids, which start at byte 20, or 1-3 int32 ids) holds how many of them
// are the memo's unk_id, so that the count-only loop counts a hit without its ids
// (count_byte_ok; record writes it).
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

// ids[30], past the 15 uint16 or 7 int32 ids of an inline entry (n_tokens not kInLong):
// how many of them are the memo's unk_id (the count byte, as a short entry's; mid_put).
constexpr int32_t kMidUnknownAt = 30;
struct alignas(64) MidEntry {
  uint64_t key[4];  // the bytes, little-endian, zero-padded; all 0: empty
  uint8_t ids[31];
  uint8_t n_tokens;
};
static_assert(sizeof(MidEntry) == 64, "one mid entry to a cache line");
static_assert(2 * kMidTokensU16 <= kMidUnknownAt && 4 * kMidTokens <= kMidUnknownAt,
              "the count byte follows the inline ids");

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
  // layout of memo_offsets.hpp; such a memo serves MemoWordPieceE2ET<true> only, and the
  // pool keys it apart).
  int32_t offsets_unit;
  // The ids layout with every id below 2^16 (the vocabulary's id_limit): a short entry
  // holds 1-6 ids as uint16 in bytes 20-31 (then a hit is one 16-byte load and two
  // widenings, whatever the count), else 1-3 int32 or 4-6 packed in 20 bits.
  bool u16;
  // The vocabulary's [UNK] id, which the count bytes count (reset_word_cache).
  int32_t unk_id = -1;
  int32_t bits;       // 2^bits short entries
  int32_t long_bits;  // 2^long_bits long slots
  int32_t mid_bits;   // 2^mid_bits mid entries
  uint64_t arena_cap, arena_used;
  uint64_t arena_epoch = 0;  // times the arena was emptied (mid entries' long references)
  // Whether the last window of ~64K lookups hit 8 times or more to a miss
  // (recheck_displacement):
  // then record() moves entries pushed out of full sets to their second sets.
  bool displace = false;
  uint64_t window_hits = 0, window_misses = 0;  // the counts where the window began
  void recheck_displacement() {
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
  // Made for a thread a call has beyond its process's own (word_cache_set_lent): smaller,
  // never a copy's source, taken only by such threads.
  bool lent = false;

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
      // Huge pages keep the random lookups off the TLB's back (and fault in 2 MB at once;
      // the option huge_pages turns them off: g_memo_huge_pages, host_pool.hpp).
      if (!kept && g_memo_huge_pages.load(std::memory_order_relaxed))
        madvise(block, block_bytes, MADV_HUGEPAGE);
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

}  // namespace daskwp
