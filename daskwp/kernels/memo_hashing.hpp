// daskwp — the word memo's keys and hashes: where a string's entry lives (host only).
//
// A string of up to 16 bytes is its own key (the bytes zero-padded to 16, two uint64) and
// lives in one two-way set of the short table, short_hash's top bits, or after an eviction
// from a full set in its second-choice set; a whole chunk of 17-32 bytes is keyed the same
// way in the mid table (32 bytes, mid_hash); anything longer is found in the long table by
// long_hash, its length and a memcmp of the arena record's bytes. Short and mid entries
// may instead hold a reference to a long record (its arena offset and the arena's epoch,
// so that a reference from before the arena was emptied reads as a miss). This header
// holds those hashes and the get / put of each table, used by the loop (word_memo.hpp),
// the offsets layout (memo_offsets.hpp) and merging (memo_merge.hpp).
#pragma once

#include "memo_storage.hpp"

namespace daskwp {

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

// How many of t[0, nt) are the memo's unk_id (an entry's count byte; nt <= 15).
DWP_FORCEINLINE uint8_t count_unknown(const WordCache& wc, const int32_t* t, int64_t nt) {
  uint8_t u = 0;
  for (int64_t k = 0; k < nt; ++k) u += t[k] == wc.unk_id;
  return u;
}
// The most inline tokens of a short entry of the ids layout that has its count byte
// (pack[0]): its ids leave byte 17 free.
DWP_FORCEINLINE int64_t count_byte_max(const WordCache& wc) {
  return wc.u16 ? kWordCachePackedTokens : kWordCacheMaxTokens;
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
  en.ids[kMidUnknownAt] = count_unknown(wc, t, nt);
  en.n_tokens = (uint8_t)nt;
}

// A short entry of the ids layout with n_tokens kInLong holds where its long record is:
// the arena offset (uint32 at byte 20), the token count (uint16 at 18) and the arena's
// epoch (uint64 at 24), so that a hit reads the record without the long table's lookup.
DWP_FORCEINLINE void set_long_ref(const WordCache& wc, WordCacheEntry& en,
                                  int64_t off, int64_t nt) {
  put_long_ref(wc, reinterpret_cast<uint8_t*>(&en) + 18, off, nt);
}

// The short key of s[i, e) (e - i <= 16), never reading past s[readable).
DWP_FORCEINLINE void short_key(const uint8_t* s, int64_t i, int64_t e,
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

DWP_NOINLINE inline const WordCacheEntry* short_get_in_second(const WordCache& wc,
                                                              uint64_t k0, uint64_t k1) {
  const WordCacheEntry* set = short_alt_set(wc, k0, k1);
  if ((set[0].key[0] == k0) & (set[0].key[1] == k1)) return set;
  if ((set[1].key[0] == k0) & (set[1].key[1] == k1)) return set + 1;
  return nullptr;
}
// After a miss in the key's own set `own`: the key in its second set (short_alt_set), or
// null; only a full own set sends keys there.
DWP_FORCEINLINE const WordCacheEntry* short_get_second(const WordCache& wc,
                                                       const WordCacheEntry* own,
                                                       uint64_t k0, uint64_t k1) {
  return short_set_full(own) ? short_get_in_second(wc, k0, k1) : nullptr;
}
// The short entry of the key, or null (both ways of a set share one cache line; the
// newer one comes first).
DWP_FORCEINLINE const WordCacheEntry* short_get(const WordCache& wc, uint64_t k0,
                                                uint64_t k1) {
  const WordCacheEntry* set = short_set(wc, k0, k1);
  if ((set[0].key[0] == k0) & (set[0].key[1] == k1)) return set;
  if ((set[1].key[0] == k0) & (set[1].key[1] == k1)) return set + 1;
  return short_get_second(wc, set, k0, k1);
}

}  // namespace daskwp
