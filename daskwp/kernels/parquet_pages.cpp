// daskwp — Parquet data pages (format v1, uncompressed) of the part writer's integer columns
// (docs/design.md §3.3, "The part writer"): optional scalar columns (INT32/INT64, one
// definition level per value) and optional lists of integers (three-level LIST: repetition
// levels 0/1, definition levels 3 on a value, 1 on an empty list). Levels are RLE runs of the
// RLE/bit-packed hybrid; values PLAIN, BYTE_STREAM_SPLIT or DELTA_BINARY_PACKED. The page
// header and the footer are written by daskwp/frames/parquet_writer.py, which compresses
// the pages (lz4: lz4_block.hpp, a list page by the call that encodes it; zstd: Arrow's
// codec).
//
// One call per page, written into the caller's buffer (the writer reuses one); one pass over
// the values, no per-value allocation, the GIL released. Pages end on row boundaries.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "lz4_block.hpp"

#if defined(__SSSE3__)
#include <tmmintrin.h>
#endif

namespace {

namespace lz4 = daskwp::lz4;
using AnyInts = nb::ndarray<nb::ro, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// The encoders write through a raw pointer into memory the caller has sized from a bound
// (no std::string: its per-byte capacity checks, and a thread_local's address looked up
// again and again in this shared library, were a third of the list pages' CPU).

inline uint8_t* put_uleb(uint8_t* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}

// The bytes put_uleb writes for v.
inline size_t uleb_bytes(uint64_t v) {
  return v < 0x80 ? 1 : (64 - static_cast<size_t>(__builtin_clzll(v)) + 6) / 7;
}

uint64_t zigzag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}

// RLE runs of the hybrid encoding for levels of `width` bits (1 or 2: one byte per run
// value), adjacent equal runs merged, written from `p`. The section is prefixed by its
// 4-byte length (v1 pages). A run of c values takes 1 + uleb_bytes(2c) bytes; merging
// never adds any.
class LevelRuns {
 public:
  explicit LevelRuns(uint8_t* p) : start_(p), p_(p + 4) {}
  void add(uint8_t value, uint64_t n) {
    if (n == 0) return;
    if (count_ != 0 && value == value_) {
      count_ += n;
      return;
    }
    flush();
    value_ = value;
    count_ = n;
  }
  // Writes the last run and the length; returns the end of the section.
  uint8_t* finish() {
    flush();
    const uint32_t len = static_cast<uint32_t>(p_ - start_ - 4);
    std::memcpy(start_, &len, 4);
    return p_;
  }

 private:
  void flush() {
    if (count_ == 0) return;
    p_ = put_uleb(p_, count_ << 1);
    *p_++ = value_;
    count_ = 0;
  }
  uint8_t* start_;
  uint8_t* p_;
  uint8_t value_ = 0;
  uint64_t count_ = 0;
};

// The values of a column as the physical type's little-endian integers: int8/int16/int32
// widen to INT32, int64 stays INT64 (Parquet stores small integers as INT32 annotated).
struct Values {
  const void* data;
  int bits;      // of the source dtype: 8, 16, 32, 64
  size_t size;
  int phys() const { return bits == 64 ? 8 : 4; }
  int64_t at(size_t i) const {
    switch (bits) {
      case 8: return static_cast<const int8_t*>(data)[i];
      case 16: return static_cast<const int16_t*>(data)[i];
      case 32: return static_cast<const int32_t*>(data)[i];
      default: return static_cast<const int64_t*>(data)[i];
    }
  }
};

Values values_of(const AnyInts& a, const char* what) {
  const nb::dlpack::dtype t = a.dtype();
  if (t.code != static_cast<uint8_t>(nb::dlpack::dtype_code::Int) || t.lanes != 1 ||
      (t.bits != 8 && t.bits != 16 && t.bits != 32 && t.bits != 64))
    throw std::invalid_argument(std::string(what) +
                                ": a signed integer array (int8, int16, int32, int64) expected");
  return Values{a.data(), t.bits, a.shape(0)};
}

// Bit k set where byte k of `all_or` (the OR of a page's values) is zero: a
// BYTE_STREAM_SPLIT stream of zero bytes (the high bytes of ids under 2^16).
unsigned zero_streams(uint64_t all_or, int width) {
  unsigned mask = 0;
  for (int k = 0; k < width; ++k)
    if (((all_or >> (8 * k)) & 0xff) == 0) mask |= 1u << k;
  return mask;
}

// values [b, e) at `p` PLAIN (little-endian, physical width) or BYTE_STREAM_SPLIT (the
// k-th bytes of all values, then the (k+1)-th, ...): n * phys() bytes. Returns, for
// BYTE_STREAM_SPLIT, the streams of zero bytes (zero_streams: the compressor writes each
// as one match), else 0.
unsigned put_values(char* p, const Values& v, size_t b, size_t e, bool split) {
  const size_t n = e - b;
  const int w = v.phys();
  if (n == 0) return 0;
  if (!split) {
    if (v.bits == 32 || v.bits == 64) {
      std::memcpy(p, static_cast<const char*>(v.data) + b * (v.bits / 8), n * w);
    } else {
      for (size_t i = 0; i < n; ++i) {
        const int32_t x = static_cast<int32_t>(v.at(b + i));
        std::memcpy(p + i * 4, &x, 4);
      }
    }
    return 0;
  }
  if (w == 4) {
    uint32_t all_or = 0;
    uint8_t* s0 = reinterpret_cast<uint8_t*>(p);
    uint8_t *s1 = s0 + n, *s2 = s1 + n, *s3 = s2 + n;
    size_t i = 0;
    if (v.bits == 32) {
      const uint32_t* src = static_cast<const uint32_t*>(v.data) + b;
#if defined(__SSSE3__)
      // 16 values at a time: each 4-value vector's bytes grouped by position (pshufb), then
      // a 4x4 transpose of 32-bit lanes gives 16 bytes of each stream.
      // (the OR of the values gathered on the way, 4 lanes)
      const __m128i group = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
      __m128i vor = _mm_setzero_si128();
      for (; i + 16 <= n; i += 16) {
        const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
        const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 4));
        const __m128i r2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 8));
        const __m128i r3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 12));
        vor = _mm_or_si128(vor, _mm_or_si128(_mm_or_si128(r0, r1), _mm_or_si128(r2, r3)));
        const __m128i x0 = _mm_shuffle_epi8(r0, group);
        const __m128i x1 = _mm_shuffle_epi8(r1, group);
        const __m128i x2 = _mm_shuffle_epi8(r2, group);
        const __m128i x3 = _mm_shuffle_epi8(r3, group);
        const __m128i t0 = _mm_unpacklo_epi32(x0, x1), t1 = _mm_unpacklo_epi32(x2, x3);
        const __m128i t2 = _mm_unpackhi_epi32(x0, x1), t3 = _mm_unpackhi_epi32(x2, x3);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(s0 + i), _mm_unpacklo_epi64(t0, t1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(s1 + i), _mm_unpackhi_epi64(t0, t1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(s2 + i), _mm_unpacklo_epi64(t2, t3));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(s3 + i), _mm_unpackhi_epi64(t2, t3));
      }
      alignas(16) uint32_t lanes[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(lanes), vor);
      all_or = lanes[0] | lanes[1] | lanes[2] | lanes[3];
#endif
      for (; i < n; ++i) {
        const uint32_t x = src[i];
        all_or |= x;
        s0[i] = static_cast<uint8_t>(x);
        s1[i] = static_cast<uint8_t>(x >> 8);
        s2[i] = static_cast<uint8_t>(x >> 16);
        s3[i] = static_cast<uint8_t>(x >> 24);
      }
    } else {
      for (; i < n; ++i) {
        const uint32_t x = static_cast<uint32_t>(static_cast<int32_t>(v.at(b + i)));
        all_or |= x;
        s0[i] = static_cast<uint8_t>(x);
        s1[i] = static_cast<uint8_t>(x >> 8);
        s2[i] = static_cast<uint8_t>(x >> 16);
        s3[i] = static_cast<uint8_t>(x >> 24);
      }
    }
    return zero_streams(all_or, 4);
  }
  const uint64_t* src = static_cast<const uint64_t*>(v.data) + b;
  uint64_t all_or = 0;
  for (size_t i = 0; i < n; ++i) all_or |= src[i];
  for (int k = 0; k < 8; ++k) {
    uint8_t* s = reinterpret_cast<uint8_t*>(p) + static_cast<size_t>(k) * n;
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<uint8_t>(src[i] >> (8 * k));
  }
  return zero_streams(all_or, 8);
}

// 32 values of W <= 56 bits (a 64-bit accumulator holds < 8 pending bits + one value),
// least significant bit first, from `p`; returns the end (32 * W bits: a whole number of
// bytes, nothing pending). W a constant: the loop unrolls into fixed shifts and stores.
template <typename U, int W>
uint8_t* pack32_fixed(uint8_t* p, const U* v) {
  uint64_t acc = 0;
  int pending = 0;
#pragma GCC unroll 32
  for (int i = 0; i < 32; ++i) {
    acc |= static_cast<uint64_t>(v[i]) << pending;
    pending += W;
    while (pending >= 8) {
      *p++ = static_cast<uint8_t>(acc);
      acc >>= 8;
      pending -= 8;
    }
  }
  return p;
}

template <typename U, size_t... W>
constexpr std::array<uint8_t* (*)(uint8_t*, const U*), sizeof...(W)> pack32_table(
    std::index_sequence<W...>) {
  return {&pack32_fixed<U, static_cast<int>(W)>...};
}

// 32 values of `width` bits, least significant bit first, from `p`; returns the end.
template <typename U>
uint8_t* pack32(uint8_t* p, const U* v, int width) {
  static constexpr auto fixed = pack32_table<U>(std::make_index_sequence<57>());
  if (width <= 56) return fixed[width](p, v);
  std::memset(p, 0, 4 * static_cast<size_t>(width));
  size_t bit = 0;
  for (int i = 0; i < 32; ++i) {
    const uint64_t x = v[i];
    for (int b = 0; b < width;) {
      const int off = static_cast<int>(bit & 7);
      const int take = std::min(8 - off, width - b);
      p[bit >> 3] |= static_cast<uint8_t>(((x >> b) & ((1u << take) - 1)) << off);
      bit += static_cast<size_t>(take);
      b += take;
    }
  }
  return p + 4 * static_cast<size_t>(width);
}

// The most bytes put_delta<U> writes for n values: four header varints, then per block of
// 128 deltas its min delta, 4 widths and 4 miniblocks of at most 32 * 8 * sizeof(U) bits.
template <typename U>
constexpr size_t delta_bound(size_t n) {
  return 4 * 10 + (n / 128 + 1) * (10 + 4 + 128 * sizeof(U));
}

// DELTA_BINARY_PACKED of src[0, n) (T: the source dtype), from `p` (delta_bound<U>(n) bytes
// available); returns the end. Blocks of 128 deltas in 4 miniblocks of 32. Deltas wrap in
// the physical type's width (U: uint32_t for INT32, uint64_t for INT64).
template <typename U, typename T>
uint8_t* put_delta(uint8_t* p, const T* src, size_t n) {
  using S = std::make_signed_t<U>;
  constexpr int kBlock = 128, kMini = 32, kMinis = kBlock / kMini;
  p = put_uleb(p, kBlock);
  p = put_uleb(p, kMinis);
  p = put_uleb(p, n);
  p = put_uleb(p, zigzag(n ? static_cast<S>(static_cast<U>(src[0])) : 0));
  if (n < 2) return p;
  U block[kBlock];
  for (size_t i = 1; i < n;) {
    const size_t m = std::min<size_t>(kBlock, n - i);
    // three loops without a carried dependency, so that they vectorize
    const T* const cur = src + i;
    for (size_t j = 0; j < m; ++j)
      block[j] = static_cast<U>(static_cast<U>(cur[j]) - static_cast<U>(cur[j - 1]));
    S min_delta = static_cast<S>(block[0]);
    for (size_t j = 1; j < m; ++j) min_delta = std::min(min_delta, static_cast<S>(block[j]));
    for (size_t j = 0; j < m; ++j) block[j] = static_cast<U>(block[j] - static_cast<U>(min_delta));
    for (size_t j = m; j < kBlock; ++j) block[j] = 0;  // the last miniblock's padding
    p = put_uleb(p, zigzag(min_delta));
    int widths[kMinis] = {0, 0, 0, 0};
    for (int k = 0; k < kMinis; ++k) {
      U all = 0;
      for (int j = 0; j < kMini; ++j) all |= block[k * kMini + j];
      const int w = all ? 64 - __builtin_clzll(static_cast<uint64_t>(all)) : 0;  // bit length
      widths[k] = static_cast<size_t>(k * kMini) < m ? w : 0;
    }
    for (int k = 0; k < kMinis; ++k) *p++ = static_cast<uint8_t>(widths[k]);
    for (int k = 0; k < kMinis && static_cast<size_t>(k * kMini) < m; ++k)
      p = pack32(p, block + k * kMini, widths[k]);
    i += m;
  }
  return p;
}

template <typename U>
uint8_t* put_delta_of(uint8_t* p, const Values& v, size_t b, size_t e) {
  switch (v.bits) {
    case 8: return put_delta<U>(p, static_cast<const int8_t*>(v.data) + b, e - b);
    case 16: return put_delta<U>(p, static_cast<const int16_t*>(v.data) + b, e - b);
    case 32: return put_delta<U>(p, static_cast<const int32_t*>(v.data) + b, e - b);
    default: return put_delta<U>(p, static_cast<const int64_t*>(v.data) + b, e - b);
  }
}

using Bytes = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// Room for a page whose bound exceeds the caller's buffer (the page is encoded here to
// learn its size, and copied if it fits after all); capacity kept, one per writer thread.
uint8_t* scratch(size_t bytes) {
  thread_local std::string s;
  if (s.size() < bytes) s.resize(bytes);
  return reinterpret_cast<uint8_t*>(&s[0]);
}

// One page of an optional scalar column without nulls, values [first, first + page_values)
// (or to the end), DELTA_BINARY_PACKED, into `out`: (page bytes, number of values). The page
// is written only if it fits; a caller whose buffer is smaller than the returned size grows
// it and calls again.
nb::tuple scalar_page(AnyInts values, int64_t first, int64_t page_values, Bytes out) {
  const Values v = values_of(values, "values");
  if (page_values < 1) throw std::invalid_argument("page_values must be >= 1");
  if (first < 0 || static_cast<size_t>(first) > v.size)
    throw std::invalid_argument("first is outside values");
  const size_t b = static_cast<size_t>(first);
  const size_t e = std::min(v.size, b + static_cast<size_t>(page_values));
  size_t size;
  {
    nb::gil_scoped_release release;
    const size_t bound = 4 + 11 + (v.phys() == 8 ? delta_bound<uint64_t>(e - b)
                                                 : delta_bound<uint32_t>(e - b));
    const size_t cap = out.shape(0);
    uint8_t* const page = bound <= cap ? out.data() : scratch(bound);
    LevelRuns def(page);  // max definition level 1: one bit; every value present
    def.add(1, e - b);
    uint8_t* p = def.finish();
    p = v.phys() == 8 ? put_delta_of<uint64_t>(p, v, b, e) : put_delta_of<uint32_t>(p, v, b, e);
    size = static_cast<size_t>(p - page);
    if (page != out.data() && size <= cap) std::memcpy(out.data(), page, size);
  }
  return nb::make_tuple(static_cast<int64_t>(size), static_cast<int64_t>(e - b));
}

// One page of an optional list column without null lists or items, from row `first_row` of
// `offsets` (rows + 1, absolute positions in `values`), into `out`: (page bytes, number of
// level entries, the row after the page). The page closes after the row that brings its
// values to `page_bytes` (an empty column: one empty page). Written only if it fits (see
// scalar_page): the writer encodes each page into one buffer that it reuses, which stays in
// the cache for the compressor, where pages written into fresh memory cost about three
// times the CPU (benchmarks/results/writer_variants.md). The levels go straight into `out`
// where a bound of the page (each row's runs at their longest) fits it. With `packed`, the
// page is then compressed into it as one LZ4 block (lz4::compress_split_page for
// BYTE_STREAM_SPLIT values, told which streams are zero), while it is in the cache: a
// fourth item gives the block's size, -1 where `packed` is smaller than the page's worst
// case.
nb::tuple list_page(AnyInts values, I32 offsets, int64_t first_row, int64_t page_bytes,
                    bool split, Bytes out, std::optional<Bytes> packed) {
  const Values v = values_of(values, "values");
  if (offsets.shape(0) < 1) throw std::invalid_argument("offsets must not be empty");
  const size_t rows = offsets.shape(0) - 1;
  const int32_t* off = offsets.data();
  if (first_row < 0 || static_cast<size_t>(first_row) > rows ||
      (static_cast<size_t>(first_row) == rows && rows != 0))
    throw std::invalid_argument("first_row is outside the rows");
  if (page_bytes < 1) throw std::invalid_argument("page_bytes must be >= 1");
  const size_t r0 = static_cast<size_t>(first_row);
  const size_t w = static_cast<size_t>(v.phys());
  size_t r1 = r0, size = 0;
  int64_t entries = 0, compressed = -1;
  const char* error = nullptr;
  {
    nb::gil_scoped_release release;
    if (off[r0] < 0) error = "offsets point outside values";
    // the page's rows: up to the one that brings its values to page_bytes (at least one),
    // found by bisection; their offsets then checked in one pass
    if (!error && r0 < rows) {
      const size_t want = (static_cast<size_t>(page_bytes) + w - 1) / w;  // values
      const int64_t stop = static_cast<int64_t>(off[r0]) + static_cast<int64_t>(want);
      r1 = std::min(rows, static_cast<size_t>(
          std::lower_bound(off + r0 + 1, off + rows + 1, stop,
                           [](int32_t o, int64_t x) { return static_cast<int64_t>(o) < x; }) -
          off));
      bool sorted = true;
      for (size_t r = r0; r < r1; ++r) sorted &= off[r] <= off[r + 1];
      if (!sorted) error = "offsets are not non-decreasing";
    }
    if (!error && static_cast<size_t>(off[r1]) > v.size) error = "offsets point outside values";
    if (!error) {
      const size_t nv = static_cast<size_t>(off[r1] - off[r0]);
      const size_t cap = out.shape(0);
      // the levels' bound: per row a repetition run of 0 (2 bytes), one of 1 for the rest
      // of its values, a definition run of its values or of the empty list's one entry
      // (merging runs never adds bytes)
      const size_t level_bound = 8 + (r1 - r0) * (4 + 2 * uleb_bytes((nv + 1) << 1));
      uint8_t* const page = level_bound + nv * w <= cap ? out.data() : scratch(level_bound);
      uint8_t* p;
      {
        LevelRuns rep(page);  // max repetition level 1
        for (size_t r = r0; r < r1; ++r) {
          const uint64_t n = static_cast<uint64_t>(off[r + 1] - off[r]);
          rep.add(0, 1);
          if (n > 1) rep.add(1, n - 1);
          entries += static_cast<int64_t>(n ? n : 1);
        }
        p = rep.finish();
      }
      {
        LevelRuns def(p);  // max definition level 3 (list, repeated group, element)
        if (static_cast<size_t>(entries) == nv) {
          def.add(3, nv);  // no empty list: one run
        } else {
          for (size_t r = r0; r < r1; ++r) {
            const uint64_t n = static_cast<uint64_t>(off[r + 1] - off[r]);
            def.add(n ? 3 : 1, n ? n : 1);
          }
        }
        p = def.finish();
      }
      const size_t levels = static_cast<size_t>(p - page);
      size = levels + nv * w;
      if (size <= cap) {
        uint8_t* o = out.data();
        if (page != o) std::memcpy(o, page, levels);
        const unsigned zero = put_values(reinterpret_cast<char*>(o + levels), v,
                                             static_cast<size_t>(off[r0]),
                                             static_cast<size_t>(off[r1]), split);
        // the page compressed while it is in the cache, where the buffer holds its worst case
        if (packed && lz4::compress_bound(size) <= packed->shape(0)) {
          if (split && nv > 0) {
            thread_local std::vector<lz4::Match> found;
            if (found.size() < lz4::split_matches_bound(nv))
              found.resize(lz4::split_matches_bound(nv));
            compressed = static_cast<int64_t>(lz4::compress_split_page(
                o, size, levels, static_cast<int>(w), nv, zero, found.data(),
                packed->data()));
          } else {
            compressed = static_cast<int64_t>(lz4::compress_block(o, size, packed->data()));
          }
        }
      }
    }
  }
  if (error) throw std::invalid_argument(error);
  if (packed)
    return nb::make_tuple(static_cast<int64_t>(size), entries, static_cast<int64_t>(r1),
                          compressed);
  return nb::make_tuple(static_cast<int64_t>(size), entries, static_cast<int64_t>(r1));
}

// The part checksum (docs/design.md §4.2): a 128-bit hash of the bytes before a part's
// footer, fed as they are written. Four 64-bit lanes take the 8-byte words of each 32-byte
// block in turn (lane = rotl(lane + word * K2, 31) * K1: xxHash64's round); the last partial
// block is padded with zeros and the byte count mixed in, and the two 64-bit halves of the
// digest fold the four lanes in opposite orders through a multiply-xorshift avalanche. Every
// bit of every word reaches its lane's state through an odd multiply (a bijection), so any
// change of the content or length changes the digest except by chance (about 2^-64 for an
// accidental change). Not cryptographic: it detects damaged or foreign data pages on resume,
// like the SHA-256 it replaced, at a few percent of SHA-256's cost on the writer thread.
class PartHash {
 public:
  void update(nb::handle data) {
    Py_buffer view;
    if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_SIMPLE) != 0) throw nb::python_error();
    const uint8_t* p = static_cast<const uint8_t*>(view.buf);
    const size_t n = static_cast<size_t>(view.len);
    if (n >= (1u << 16)) {
      nb::gil_scoped_release release;
      consume(p, n);
    } else {
      consume(p, n);
    }
    PyBuffer_Release(&view);
  }

  std::string hexdigest() const {
    uint64_t v[4] = {lane_[0], lane_[1], lane_[2], lane_[3]};
    uint8_t last[32] = {0};
    std::memcpy(last, buf_, fill_);
    block(v, last);
    const uint64_t h1 = fold(v, 0, total_), h2 = fold(v, 1, total_ ^ kK3);
    static const char* hex = "0123456789abcdef";
    std::string out(32, '0');
    for (int i = 0; i < 16; ++i) {
      out[i] = hex[(h1 >> (60 - 4 * i)) & 15];
      out[16 + i] = hex[(h2 >> (60 - 4 * i)) & 15];
    }
    return out;
  }

 private:
  static constexpr uint64_t kK1 = 0x9E3779B185EBCA87ull, kK2 = 0xC2B2AE3D27D4EB4Full,
                            kK3 = 0x165667B19E3779F9ull, kK4 = 0x85EBCA77C2B2AE63ull;
  static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  static uint64_t round(uint64_t lane, uint64_t w) { return rotl(lane + w * kK2, 31) * kK1; }
  static void block(uint64_t* v, const uint8_t* p) {
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + 8 * k, 8);
      v[k] = round(v[k], w);
    }
  }
  static uint64_t fold(const uint64_t* v, int reverse, uint64_t seed) {
    uint64_t h = seed * kK1 + kK4;
    for (int k = 0; k < 4; ++k) h = (h ^ round(0, v[reverse ? 3 - k : k])) * kK1 + kK4;
    h ^= h >> 33;
    h *= kK2;
    h ^= h >> 29;
    h *= kK3;
    h ^= h >> 32;
    return h;
  }
  void consume(const uint8_t* p, size_t n) {
    total_ += n;
    if (fill_) {
      const size_t take = std::min<size_t>(32 - fill_, n);
      std::memcpy(buf_ + fill_, p, take);
      fill_ += take;
      p += take;
      n -= take;
      if (fill_ < 32) return;
      block(lane_, buf_);
      fill_ = 0;
    }
    for (; n >= 32; p += 32, n -= 32) block(lane_, p);
    std::memcpy(buf_, p, n);
    fill_ = n;
  }
  uint64_t lane_[4] = {kK1 + kK2, kK2, 0, 0 - kK1};
  uint8_t buf_[32] = {0};
  size_t fill_ = 0;
  uint64_t total_ = 0;
};

}  // namespace

void bind_parquet(nb::module_& m) {
  nb::class_<PartHash>(m, "PartHash",
                       "The part checksum's 128-bit hash (docs/design.md §4.2): update(bytes-like) "
                       "as the bytes are written, hexdigest() gives 32 hex digits.")
      .def(nb::init<>())
      .def("update", &PartHash::update, nb::arg("data"))
      .def("hexdigest", &PartHash::hexdigest);
  m.def("parquet_scalar_page", &scalar_page, nb::arg("values"), nb::arg("first"),
        nb::arg("page_values"), nb::arg("out"),
        "One uncompressed v1 data page of an optional integer column without nulls, values "
        "[first, first + page_values), DELTA_BINARY_PACKED, written into the uint8 array "
        "`out` if it fits: (page bytes, num_values).");
  m.def("parquet_list_page", &list_page, nb::arg("values"), nb::arg("offsets"),
        nb::arg("first_row"), nb::arg("page_bytes"), nb::arg("byte_stream_split"),
        nb::arg("out"), nb::arg("packed") = nb::none(),
        "One uncompressed v1 data page of an optional list<integer> column without nulls, "
        "from row first_row, BYTE_STREAM_SPLIT or PLAIN values, written into the uint8 "
        "array `out` if it fits: (page bytes, num_values, the row after the page). With "
        "the uint8 array `packed`, the page is also compressed into it as one LZ4 block "
        "(LZ4_RAW; BYTE_STREAM_SPLIT values: one stream searched, its matches reused in "
        "the others, lz4_block.hpp compress_split_page) and a fourth item gives the block's "
        "size, -1 where the page or its worst case (lz4_raw_bound) did not fit.");
}
