// daskwp — LZ4 block compression: Parquet's LZ4_RAW codec (one bare LZ4 block per data
// page) for the part writer (docs/design.md §3.3, "The part writer"). Header-only, no
// allocation, no Python: the binding is lz4_block.cpp.
//
// The block format (the public LZ4 block format description): a block is a series of
// sequences, each a token byte (high nibble: literal count, low nibble: match length - 4;
// 15 in a nibble means "255-continued bytes follow"), the literals, a 2-byte little-endian
// offset back into the output (1..65535) and the match length's continuation bytes. The last
// sequence has literals only; the last 5 bytes of the input are literals, and the last match
// starts at least 12 bytes before the end (so a block under 13 bytes is all literals).
//
// What the compressor is built for: the writer's pages are RLE level runs followed by
// BYTE_STREAM_SPLIT values, i.e. for token ids one stream per byte position. The high byte
// streams are all zero or nearly constant (long matches at offset 1, extended 16 bytes per
// compare), the low byte stream is close to random (where a search finds nothing it steps
// further and further ahead, and a long literal run is copied with memcpy), and overlapping
// windows repeat whole runs of ids. Greedy parsing, one candidate per hash slot, as LZ4's
// fast mode, but a candidate is hashed and checked on 8 bytes, not 4 or 5: the many 4-7 byte
// matches of the high byte stream (a few token ids' high bytes) and the level runs each save
// a byte or three and cost a whole sequence (the search's branch misses, token, offset), so
// passing them by costs a few % of the block's size and saves a large part of the CPU
// (benchmarks/results/codec_bench.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace daskwp::lz4 {

constexpr size_t kMinMatch = 4;       // the format's shortest match
constexpr size_t kSearchBytes = 8;    // a match found by the search is at least this long
constexpr size_t kLastLiterals = 5;   // the last 5 input bytes are literals
constexpr size_t kLastMatchStart = 12;  // the last match starts >= 12 bytes before the end
constexpr size_t kMaxOffset = 65535;
constexpr int kHashBits = 12;         // 4096 slots of 32-bit positions: 16 KB, in L1
// A search that has missed 2^kSkipShift times in a row advances 2 bytes a probe, then 3
// after another 2^kSkipShift misses, ...: near-random bytes are skipped in few probes.
constexpr int kSkipShift = 5;

// The most bytes a block of n input bytes compresses to (LZ4's own bound): every literal
// run costs at most 1 byte per 255 plus its token, and every match saves at least a byte.
constexpr size_t compress_bound(size_t n) { return n + n / 255 + 16; }

namespace detail {

inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// The hash slot of the 8 bytes at p (a multiplicative hash's top bits).
inline uint32_t hash8(const uint8_t* p) {
  return static_cast<uint32_t>((load64(p) * 0x9E3779B185EBCA87ull) >> (64 - kHashBits));
}

inline bool same8(const uint8_t* a, const uint8_t* b) { return load64(a) == load64(b); }

// How many bytes at `a` equal those at `b` (b < a), reading `a` no further than `limit`.
inline size_t common_length(const uint8_t* a, const uint8_t* b, const uint8_t* limit) {
  const uint8_t* const start = a;
#if defined(__SSE2__)
  while (a + 16 <= limit) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
    const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
    const unsigned diff = 0xFFFFu ^ static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, y)));
    if (diff) return static_cast<size_t>(a - start) + static_cast<size_t>(__builtin_ctz(diff));
    a += 16;
    b += 16;
  }
#endif
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  while (a + 8 <= limit) {
    const uint64_t x = load64(a) ^ load64(b);
    if (x) return static_cast<size_t>(a - start) + static_cast<size_t>(__builtin_ctzll(x) >> 3);
    a += 8;
    b += 8;
  }
#endif
  while (a < limit && *a == *b) {
    ++a;
    ++b;
  }
  return static_cast<size_t>(a - start);
}

// The continuation bytes of a length field whose nibble is 15: `rest` = length - 15.
inline uint8_t* put_length(uint8_t* op, size_t rest) {
  if (rest >= 255) {  // (most lengths are shorter: no call)
    const size_t full = rest / 255;
    std::memset(op, 255, full);
    op += full;
    rest -= full * 255;
  }
  *op++ = static_cast<uint8_t>(rest);
  return op;
}

// One sequence: `nlit` literals from `lit`, then a match of `mlen` (>= 4) bytes `offset`
// back. `lit + 16` must be readable when nlit <= 16 (short runs are copied 16 bytes at a
// time; the caller checks), and the output has room (compress_bound).
inline uint8_t* put_sequence(uint8_t* op, const uint8_t* lit, size_t nlit, bool lit16,
                             size_t offset, size_t mlen) {
  uint8_t* token = op++;
  const size_t ml = mlen - kMinMatch;
  uint8_t t = static_cast<uint8_t>(ml < 15 ? ml : 15);
  if (nlit < 15) {
    t |= static_cast<uint8_t>(nlit << 4);
  } else {
    t |= 0xF0;
    op = put_length(op, nlit - 15);
  }
  if (lit16 && nlit <= 16) {
    std::memcpy(op, lit, 16);  // the bytes past nlit are overwritten next
  } else {
    std::memcpy(op, lit, nlit);
  }
  op += nlit;
  *op++ = static_cast<uint8_t>(offset);
  *op++ = static_cast<uint8_t>(offset >> 8);
  if (ml >= 15) op = put_length(op, ml - 15);
  *token = t;
  return op;
}

// The last sequence: literals only.
inline uint8_t* put_last(uint8_t* op, const uint8_t* lit, size_t nlit) {
  if (nlit < 15) {
    *op++ = static_cast<uint8_t>(nlit << 4);
  } else {
    *op++ = 0xF0;
    op = put_length(op, nlit - 15);
  }
  if (nlit) std::memcpy(op, lit, nlit);  // (an empty input's pointer may be null)
  return op + nlit;
}

}  // namespace detail

// The sequences of one block, written in input order: the literals up to each match, then
// the match; finish() writes the last literals. Every match is held to the end-of-block
// rules (one that ends within the last 5 bytes is cut; one that starts within the last 12,
// or is cut below 4 bytes, becomes literals), so a parse of part of the input need not know
// where the block ends.
class BlockWriter {
 public:
  BlockWriter(const uint8_t* src, size_t n, uint8_t* dst) : src_(src), n_(n), dst_(dst), op_(dst) {}
  // The first input byte not yet written (a match starts at or after it).
  size_t anchor() const { return anchor_; }
  // A match of `len` bytes at `pos` (>= anchor()) from `pos - offset` (1..65535 back).
  void match(size_t pos, size_t offset, size_t len) {
    if (pos + kLastMatchStart > n_) return;
    if (pos + len + kLastLiterals > n_) len = n_ - kLastLiterals - pos;
    if (len < kMinMatch) return;
    // short literal runs are copied 16 bytes at a time where 16 input bytes remain
    op_ = detail::put_sequence(op_, src_ + anchor_, pos - anchor_, anchor_ + 16 <= n_, offset,
                               len);
    anchor_ = pos + len;
  }
  // Writes the last literals; returns the block's size.
  size_t finish() {
    op_ = detail::put_last(op_, src_ + anchor_, n_ - anchor_);
    return static_cast<size_t>(op_ - dst_);
  }

 private:
  const uint8_t* src_;
  size_t n_;
  uint8_t* dst_;
  uint8_t* op_;
  size_t anchor_ = 0;
};

// A match found by search(): at `pos`, `offset` back, `len` bytes.
struct Match {
  uint32_t pos, offset, len;
};

// Greedy search of `src[begin, end)` (matches end by `end`, their sources at or after
// `begin`), each match found given to `out` and, where `found` is not null, recorded there
// (at most (end - begin) / kSearchBytes of them). Probes ip, ip + 1, ... stepping further
// after each 2^kSkipShift misses; a candidate is hashed and checked on 8 bytes.
inline size_t search(const uint8_t* src, size_t begin, size_t end, BlockWriter& out,
                     Match* found = nullptr) {
  using namespace detail;
  size_t matches = 0;
  if (end - begin <= kSearchBytes) return 0;
  uint32_t table[1u << kHashBits];
  // position `begin`: a candidate the checks reject or take
  for (uint32_t& slot : table) slot = static_cast<uint32_t>(begin);
  const size_t last_start = end - kSearchBytes;  // the last a match starts at
  size_t ip = begin + 1;
  for (;;) {
    size_t cand;
    {
      size_t probes = size_t{1} << kSkipShift;
      size_t step = 1;
      for (;;) {
        if (ip > last_start) return matches;
        const uint32_t h = hash8(src + ip);
        cand = table[h];
        table[h] = static_cast<uint32_t>(ip);
        if (ip - cand <= kMaxOffset && same8(src + cand, src + ip)) break;
        ip += step;
        step = probes++ >> kSkipShift;
      }
    }
    // the match may begin earlier: extend it backwards over the pending literals
    while (ip > out.anchor() && cand > begin && src[ip - 1] == src[cand - 1]) {
      --ip;
      --cand;
    }
    const size_t mlen = kSearchBytes + common_length(src + ip + kSearchBytes,
                                                     src + cand + kSearchBytes, src + end);
    out.match(ip, ip - cand, mlen);
    if (found != nullptr)
      found[matches] = Match{static_cast<uint32_t>(ip), static_cast<uint32_t>(ip - cand),
                             static_cast<uint32_t>(mlen)};
    ++matches;
    ip += mlen;
    if (ip > last_start) return matches;
    table[hash8(src + ip - 2)] = static_cast<uint32_t>(ip - 2);
  }
}

// `src[0, n)` as one LZ4 block into `dst`, which holds at least compress_bound(n) bytes;
// returns the block's size. Decodes with any LZ4 block decoder (Arrow's lz4_raw codec,
// the readers' LZ4_RAW).
inline size_t compress_block(const uint8_t* src, size_t n, uint8_t* dst) {
  static_assert(kLastLiterals + kSearchBytes > kLastMatchStart, "the end-of-block rules");
  BlockWriter out(src, n, dst);
  // a match found ends 5 bytes before the end (so it also starts more than 12 before it)
  if (n > kLastLiterals) search(src, 0, n - kLastLiterals, out);
  return out.finish();
}

// The most matches compress_split_page records for a page of `stream_bytes`-byte streams
// (the `found` array it is given).
constexpr size_t split_matches_bound(size_t stream_bytes) {
  return stream_bytes / kSearchBytes + 1;
}

// A BYTE_STREAM_SPLIT data page `src[0, n)` as one LZ4 block into `dst` (compress_bound(n)
// bytes): `head` bytes (the levels) then `width` streams of `count` bytes, the k-th bytes
// of the page's values; bit k of `zero` set where stream k holds zero bytes only (the
// encoder knows). `found`: room for split_matches_bound(count) matches. Returns the
// block's size; any LZ4 decoder gives back `src`.
//
// Where the values repeat (overlapping windows, repeated lines), every stream repeats at
// the same places and distance. So one stream is searched (the first that is not zero:
// the low bytes of token ids, the most random, whose matches are the ids' own), and in each
// other stream its matches are only checked, extended and written, without a search; a
// zero stream (the high bytes of ids under 2^16) is one match at offset 1. The head
// is searched on its own. On the list pages of a 64 MB partition's part against
// compress_block: 0.72x the CPU for 1.3% more bytes (the commit that made it says how).
inline size_t compress_split_page(const uint8_t* src, size_t n, size_t head, int width,
                                  size_t count, unsigned zero, Match* found,
                                  uint8_t* dst) {
  using namespace detail;
  BlockWriter out(src, n, dst);
  search(src, 0, head, out);
  size_t matches = 0;
  size_t searched = n;  // the searched stream's start (n: none yet)
  for (int k = 0; k < width; ++k) {
    const size_t base = head + static_cast<size_t>(k) * count;
    const size_t end = base + count;
    if (zero >> k & 1u) {
      if (count == 0) continue;
      // one match at offset 1: from the stream's first byte, or from the byte before it
      // where that is the same (the zero high bytes of two streams)
      const size_t from = base > 0 && src[base - 1] == src[base] ? base : base + 1;
      if (from >= out.anchor() && end > from) out.match(from, 1, end - from);
      continue;
    }
    if (searched == n) {
      matches = search(src, base, end, out, found);
      searched = base;
      continue;
    }
    for (size_t i = 0; i < matches; ++i) {
      // the searched stream's match at the same place of this stream: checked, extended
      // both ways, written where 8 bytes or more are the same
      const size_t offset = found[i].offset;
      size_t pos = base + (found[i].pos - searched);
      const size_t stop = pos + found[i].len;
      if (pos < out.anchor()) {
        if (stop <= out.anchor()) continue;
        pos = out.anchor();
      }
      if (pos - base < offset) continue;  // its source would lie before this stream
      size_t from = pos - offset;
      while (pos > out.anchor() && from > base && src[pos - 1] == src[from - 1]) {
        --pos;
        --from;
      }
      const size_t len = common_length(src + pos, src + from, src + end);
      if (len >= kSearchBytes) out.match(pos, offset, len);
    }
  }
  return out.finish();
}

}  // namespace daskwp::lz4
