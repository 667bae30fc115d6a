// daskwp — writing a memo hit's ids to the output (host only).
//
// A hit's ids are copied to the sink without a loop on their count where the sink has room:
// a short entry of the u16 layout widens its six uint16 slots in one SSE load and two
// stores, an int32 one copies its three slots, a mid entry its 16 or 8 slots, and a long
// record moves in whole 16- and 8-byte stores (the slots past the entry's count get junk
// that the next hit overwrites). Near the sink's end, and for entries that refer to a long
// record, the slower functions here write only what fits and report a record that is gone
// (its arena emptied since) as a miss. The offsets layout's writers are in
// memo_offsets.hpp.
#pragma once

#include "memo_hashing.hpp"

namespace daskwp {

// out[n, n + nt) = t[0, nt) (only what is below cap when it does not fit) in whole
// 16- and 8-byte moves, the last one overlapping: the branches follow nt / 4, not nt (a
// token-by-token loop mispredicted its exit on most long records of logs).
DWP_FORCEINLINE void put_tokens(int32_t* out, int64_t n, int64_t cap,
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
DWP_FORCEINLINE void put_u16(const WordCacheEntry* en, int32_t* out) {
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
DWP_FORCEINLINE int64_t emit_entry(const WordCacheEntry* en, int32_t* out, int64_t n,
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
DWP_NOINLINE inline int64_t emit_short(const WordCache& wc, const WordCacheEntry* en,
                                       int32_t* out, int64_t n, int64_t cap) {
  if (en->n_tokens != kInLong) return emit_entry(en, out, n, cap, wc.u16);
  int32_t nt;
  const int32_t* rec = get_long_ref(wc, reinterpret_cast<const uint8_t*>(en) + 18, &nt);
  if (!rec) return -1;  // the arena was emptied since: gone
  put_tokens(out, n, cap, rec, nt);
  return nt;
}

DWP_NOINLINE inline int64_t put_mid_long(const WordCache& wc, const MidEntry* en,
                                         int32_t* out, int64_t n, int64_t cap) {
  int32_t cnt;
  const int32_t* rec = get_long_ref(wc, en->ids, &cnt);
  if (!rec) return -1;
  put_tokens(out, n, cap, rec, cnt);
  return cnt;
}

// The ids of a mid entry at out[n] (none at or past cap); returns their count, or -1 when
// they were in the long table and are gone: a miss. With room for 16 (u16) or 8 slots
// it writes that many (those past n_tokens get junk).
DWP_FORCEINLINE int64_t put_mid(const WordCache& wc, const MidEntry* en, int32_t* out,
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

}  // namespace daskwp
