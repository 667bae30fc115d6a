// daskwp — the read stage of a text partition in one native pass (daskwp/jobs/inputs/text.py):
// split bytes into lines on '\n', remove the newlines (in place or into another buffer) so
// that the bytes and the line offsets form an Arrow large_binary array, and count the bytes
// of each line outside well-formed UTF-8 sequences. Also the pooled buffer a partition is
// read into, and the newline count that counts a partition's documents.
//
// One pass over the bytes: 64-byte blocks where the CPU has AVX-512 VBMI2 (chosen at run
// time: the build targets x86-64-v2), else 16-byte blocks with SSSE3 (x86-64-v2) or 8-byte
// words elsewhere, the last few bytes one at a time. An all-ASCII block without a newline
// is copied as it is; a block with newlines is left-packed (the newlines dropped) with one
// compress (AVX-512) or one shuffle per 8-byte half (SSSE3); a block with bytes >= 0x80 is
// decoded by the scalar UTF-8 rule below, from its first such byte. (A 64 MB partition of
// the benchmarks' corpus, from memory: 14-15 ms with 16-byte blocks, 8-9 ms with 64-byte
// ones; the text is read faster than Python's readinto copies it.)
//
// In place (dst == src) every store lands at or before the bytes already loaded: the write
// position never passes the read position, and a block is loaded (and decoded, which may
// read up to 3 bytes past it) before anything is stored into it. The last byte is read
// before anything is written (a packed store may overwrite it with padding).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "host_pool.hpp"

// 64-byte blocks: an x86-64 GCC/Clang build, the AVX-512 functions compiled for that target
// only and called where the CPU has it (has_split64).
#if defined(__x86_64__) && defined(__GNUC__)
#define DASKWP_SPLIT64 1
#define DASKWP_SPLIT64_TARGET __attribute__((target("avx512f,avx512bw,avx512vbmi2")))
#else
#define DASKWP_SPLIT64 0
#endif

namespace {

bool has_split64() {
#if DASKWP_SPLIT64
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vbmi2");
  }();
  return has;
#else
  return false;
#endif
}

// The widths split_lines takes on this CPU, widest first.
std::vector<int> split_widths() {
  std::vector<int> out;
  if (has_split64()) out.push_back(64);
  out.insert(out.end(), {16, 8, 1});
  return out;
}

// The bytes of `s` that the tokenizer reads as U+FFFD, per line that holds any.
struct InvalidBytes {
  std::vector<int64_t> lines;   // ascending line numbers
  std::vector<int64_t> counts;  // their invalid bytes, > 0

  void add(int64_t line, int64_t bytes) {
    if (!lines.empty() && lines.back() == line) {
      counts.back() += bytes;
    } else {
      lines.push_back(line);
      counts.push_back(bytes);
    }
  }
};

struct Step {
  size_t length;  // bytes consumed
  size_t bad;     // of which outside a well-formed sequence (0 or length)
};

// The UTF-8 sequence starting at s[j] (s[j] >= 0x80), by the Unicode rule Python's
// errors="replace" follows: a well-formed sequence is consumed whole; otherwise the
// maximal ill-formed subsequence (a lead byte and the continuation bytes that may follow
// it, or one byte that cannot start a sequence) is one U+FFFD, and its bytes are invalid.
inline Step utf8_step(const uint8_t* s, size_t n, size_t j) {
  const uint8_t c = s[j];
  if (c < 0xC2 || c > 0xF4) return {1, 1};  // continuation, overlong lead C0/C1, F5..FF
  const size_t need = c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
  uint8_t lo = 0x80, hi = 0xBF;  // the second byte's range (no overlongs, surrogates, > U+10FFFF)
  if (c == 0xE0) lo = 0xA0;
  if (c == 0xED) hi = 0x9F;
  if (c == 0xF0) lo = 0x90;
  if (c == 0xF4) hi = 0x8F;
  if (j + 1 >= n || s[j + 1] < lo || s[j + 1] > hi) return {1, 1};
  for (size_t k = 2; k <= need; ++k)
    if (j + k >= n || (s[j + k] & 0xC0) != 0x80) return {k, k};
  return {need + 1, 0};
}

inline int ctz32(uint32_t x) { return __builtin_ctz(x); }
inline int popcount32(uint32_t x) { return __builtin_popcount(x); }

#if defined(__SSSE3__)
// For each 8-bit mask of bytes to drop: the shuffle that packs the other bytes of an 8-byte
// half to its front (0x80: a zero byte, never stored as a kept byte).
struct PackTable {
  alignas(16) uint8_t idx[256][16];
  PackTable() {
    for (int m = 0; m < 256; ++m) {
      int k = 0;
      for (int j = 0; j < 8; ++j)
        if (!(m & (1 << j))) idx[m][k++] = static_cast<uint8_t>(j);
      while (k < 16) idx[m][k++] = 0x80;
    }
  }
};
const PackTable kPack;
#endif

struct Splitter {
  const uint8_t* src;
  uint8_t* dst;
  size_t n;
  std::vector<int64_t>* offsets;
  InvalidBytes* invalid;
  size_t w = 0;        // bytes written to dst
  int64_t line = 0;    // lines ended so far (the current line's number)
  size_t vpos = 0;     // first byte the UTF-8 rule has not read yet

  void end_line() {
    offsets->push_back(static_cast<int64_t>(w));
    ++line;
  }

  // One byte at a time from j to end (the tail, and the bytes of a word with a newline or
  // a byte >= 0x80 on the portable path).
  void scalar(size_t j, size_t end) {
    for (; j < end; ++j) {
      const uint8_t c = src[j];
      if (c >= 0x80 && j >= vpos) {
        const Step st = utf8_step(src, n, j);
        if (st.bad) invalid->add(line, static_cast<int64_t>(st.bad));
        vpos = j + st.length;
      }
      if (c == '\n') {
        end_line();
      } else {
        dst[w++] = c;
      }
    }
  }

  // Portable: 8-byte words, a word of ASCII without a newline copied whole.
  size_t words(size_t p) {
    constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
    constexpr uint64_t kNl = kOnes * '\n';
    for (; p + 8 <= n; p += 8) {
      uint64_t x;
      std::memcpy(&x, src + p, 8);
      const uint64_t t = x ^ kNl;
      if (!(x & kHigh) && !((t - kOnes) & ~t & kHigh)) {
        std::memcpy(dst + w, &x, 8);  // from a register: safe when dst + w overlaps src + p
        w += 8;
      } else {
        scalar(p, p + 8);
      }
    }
    return p;
  }

  // The lines the newlines of a block (mask `nl`, at most 64 bytes) end, its kept bytes
  // about to be stored at dst + w; returns how many.
  int end_lines(uint64_t nl) {
    int dropped = 0;
    for (uint64_t m = nl; m; m &= m - 1) {
      offsets->push_back(static_cast<int64_t>(w + __builtin_ctzll(m) - dropped));
      ++dropped;
    }
    line += dropped;
    return dropped;
  }

  // The UTF-8 rule over the bytes >= 0x80 of the `block`-byte block at p (mask `high`, at
  // most 64 bytes), from vpos on; `nl` places each invalid byte in its line.
  void decode_block(size_t p, size_t block, uint64_t high, uint64_t nl) {
    size_t j = std::max(vpos, p);
    while (j < p + block) {
      const uint64_t rest = high & ~((uint64_t(1) << (j - p)) - 1u);
      if (!rest) break;
      j = p + static_cast<size_t>(__builtin_ctzll(rest));
      const Step st = utf8_step(src, n, j);
      if (st.bad) {
        const int64_t at =
            line + __builtin_popcountll(nl & ((uint64_t(1) << (j - p)) - 1u));
        invalid->add(at, static_cast<int64_t>(st.bad));
      }
      j += st.length;
    }
    vpos = std::max(vpos, j);
  }

#if defined(__SSSE3__)
  size_t blocks(size_t p) {
    const __m128i newline = _mm_set1_epi8('\n');
    for (; p + 16 <= n; p += 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + p));
      const uint32_t high = static_cast<uint32_t>(_mm_movemask_epi8(v));
      const uint32_t nl = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, newline)));
      if (high && vpos < p + 16) decode_block(p, 16, high, nl);
      if (!nl) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + w), v);
        w += 16;
        continue;
      }
      end_lines(nl);
      const uint32_t lo = nl & 0xFF, hi = nl >> 8;
      const __m128i a = _mm_shuffle_epi8(
          v, _mm_load_si128(reinterpret_cast<const __m128i*>(kPack.idx[lo])));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + w), a);
      w += 8 - popcount32(lo);
      const __m128i b = _mm_shuffle_epi8(
          _mm_srli_si128(v, 8), _mm_load_si128(reinterpret_cast<const __m128i*>(kPack.idx[hi])));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + w), b);
      w += 8 - popcount32(hi);
    }
    return p;
  }
#endif

#if DASKWP_SPLIT64
  // 64-byte blocks: a block with newlines is compressed (the newlines dropped) and stored
  // whole; its last 64 - kept bytes are garbage that the next store overwrites (in place
  // they land at or before p + 64, never past the bytes already loaded).
  DASKWP_SPLIT64_TARGET size_t blocks64(size_t p) {
    const __m512i newline = _mm512_set1_epi8('\n');
    for (; p + 64 <= n; p += 64) {
      const __m512i v = _mm512_loadu_si512(src + p);
      const uint64_t high = _mm512_movepi8_mask(v);
      const uint64_t nl = _mm512_cmpeq_epi8_mask(v, newline);
      if (high && vpos < p + 64) decode_block(p, 64, high, nl);
      if (!nl) {
        _mm512_storeu_si512(dst + w, v);
        w += 64;
        continue;
      }
      const int dropped = end_lines(nl);
      _mm512_storeu_si512(dst + w, _mm512_maskz_compress_epi8(~nl, v));
      w += 64 - dropped;
    }
    return p;
  }
#endif

  // width: 1 byte at a time, 8-byte words, 16-byte blocks (words without SSSE3), or 64-byte
  // blocks (AVX-512 VBMI2; split_widths() says whether this CPU has it).
  void run(int width) {
    // read before anything is written: in place, the last byte is overwritten
    const bool open_last_line = n && src[n - 1] != '\n';
    offsets->push_back(0);
    size_t p = 0;
#if DASKWP_SPLIT64
    if (width >= 64) p = blocks64(p);
#endif
#if defined(__SSSE3__)
    if (width >= 16) p = blocks(p);
#endif
    if (width >= 8) p = words(p);
    scalar(p, n);
    if (open_last_line) end_line();  // a last line without a newline
  }
};

// The '\n' bytes of s[0, n): per 16-byte block a byte-wise compare subtracted from byte
// counters (-1 per match), summed every 255 blocks before a counter can wrap.
int64_t count_newlines(const uint8_t* s, size_t n) {
  int64_t total = 0;
  size_t p = 0;
#if defined(__SSE2__)
  const __m128i newline = _mm_set1_epi8('\n');
  const __m128i zero = _mm_setzero_si128();
  while (p + 16 <= n) {
    const size_t blocks = std::min<size_t>((n - p) / 16, 255);
    __m128i acc = zero;
    for (size_t b = 0; b < blocks; ++b, p += 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + p));
      acc = _mm_sub_epi8(acc, _mm_cmpeq_epi8(v, newline));
    }
    const __m128i sums = _mm_sad_epu8(acc, zero);
    total += _mm_cvtsi128_si64(sums) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(sums, sums));
  }
#endif
  for (; p < n; ++p) total += s[p] == '\n';
  return total;
}

inline bool blank_byte(uint8_t c) { return c == ' ' || c == '\t' || c == '\r'; }

// Whether the line starting at s[i] holds a byte other than ' ', '\t' and '\r' before its
// '\n' (or s[n]): its leading blanks are skipped one at a time (rare in JSON Lines).
inline bool line_holds_nonblank(const uint8_t* s, size_t n, size_t i) {
  while (i < n && blank_byte(s[i])) ++i;
  return i < n && s[i] != '\n';
}

// The lines of s[0, n) (split on '\n'; a last line without one is a line too) that hold a
// byte other than ' ', '\t' and '\r': the documents of JSON Lines bytes, counted without
// copying or parsing them. A line is counted at its first non-blank byte, so bytes can be
// counted piece by piece: `open_counted` says (in) that the line open at s[0], continued
// from the piece before, is counted already, and (out) that the line left open at s[n]
// (no '\n' after it yet) is.
//
// Every line but the first starts after a '\n': per 16-byte block (SSE2) the newlines
// whose next byte is neither blank nor '\n' each start a counted line (a popcount), and
// only a newline followed by a blank or another newline has its line looked at byte by
// byte (line_holds_nonblank). (One memchr per line before: 0.11 CPU s per GB of JSON
// Lines, a third of a Megatron job's count pass; 0.04 now.)
int64_t count_nonblank_lines(const uint8_t* s, size_t n, bool& open_counted) {
  int64_t total = 0;
  // the first line: counted already, or counted here if it holds a non-blank byte
  const bool first = open_counted || line_holds_nonblank(s, n, 0);
  total += !open_counted && first;
  size_t p = 0;
#if defined(__SSE2__)
  const __m128i newline = _mm_set1_epi8('\n');
  const __m128i space = _mm_set1_epi8(' ');
  const __m128i tab = _mm_set1_epi8('\t');
  const __m128i cr = _mm_set1_epi8('\r');
  // a block s[p, p + 16) and the 16 bytes after each of its bytes, s[p + 1, p + 17): its
  // fast newlines subtracted from byte counters (summed every 255 blocks, before one can
  // wrap), and a branch only on a slow one (rare: no branch on whether a block holds a
  // newline, which most do not and some do, unpredictably)
  const __m128i zero = _mm_setzero_si128();
  while (p + 17 <= n) {
    const size_t blocks = std::min<size_t>((n - 1 - p) / 16, 255);
    __m128i acc = zero;
    for (size_t b = 0; b < blocks; ++b, p += 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + p));
      const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + p + 1));
      const __m128i nl = _mm_cmpeq_epi8(v, newline);
      const __m128i quiet = _mm_or_si128(
          _mm_or_si128(_mm_cmpeq_epi8(w, space), _mm_cmpeq_epi8(w, tab)),
          _mm_or_si128(_mm_cmpeq_epi8(w, cr), _mm_cmpeq_epi8(w, newline)));
      acc = _mm_sub_epi8(acc, _mm_andnot_si128(quiet, nl));
      const unsigned slow =
          static_cast<unsigned>(_mm_movemask_epi8(_mm_and_si128(nl, quiet)));
      if (__builtin_expect(slow != 0, 0)) {
        for (unsigned m = slow; m; m &= m - 1)
          total += line_holds_nonblank(s, n, p + static_cast<size_t>(__builtin_ctz(m)) + 1);
      }
    }
    const __m128i sums = _mm_sad_epu8(acc, zero);
    total += _mm_cvtsi128_si64(sums) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(sums, sums));
  }
#endif
  for (; p < n; ++p) {
    if (s[p] == '\n') total += line_holds_nonblank(s, n, p + 1);
  }
  // the line left open at s[n]: the first line when no newline ends it
  size_t open = n;
  while (open && s[open - 1] != '\n') --open;
  open_counted = open == 0 ? first : line_holds_nonblank(s, n, open);
  return total;
}

template <typename T>
nb::ndarray<nb::numpy, T, nb::ndim<1>> vector_to_numpy(std::vector<T>&& v) {
  auto* owned = new std::vector<T>(std::move(v));
  nb::capsule owner(owned, [](void* q) noexcept { delete static_cast<std::vector<T>*>(q); });
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(owned->data(), {owned->size()}, owner);
}

using U8Out = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

nb::tuple split_lines(U8 data, U8Out out, int width) {
  if (width == 0) width = split_widths().front();
  if (width != 1 && width != 8 && width != 16 && width != 64)
    throw std::invalid_argument("width must be 0 (the widest this CPU has), 64, 16, 8 or 1 "
                                "(bytes per step), got " + std::to_string(width));
  if (width == 64 && !has_split64())
    throw std::invalid_argument("width 64 needs AVX-512 VBMI2, which this CPU (or build) "
                                "lacks; it takes 16, 8 or 1");
  const size_t n = data.shape(0);
  if (out.shape(0) < n)
    throw std::invalid_argument("out holds " + std::to_string(out.shape(0)) +
                                " bytes, fewer than the " + std::to_string(n) +
                                " bytes of data");
  const uint8_t* src = data.data();
  uint8_t* dst = out.data();
  if (n && dst != src && dst < src + n && src < dst + n)
    throw std::invalid_argument("out overlaps data without being the same buffer (give the "
                                "data itself to split it in place)");
  std::vector<int64_t> offsets;
  InvalidBytes invalid;
  {
    nb::gil_scoped_release release;
    offsets.reserve(n / 64 + 16);
    Splitter s{src, dst, n, &offsets, &invalid};
    s.run(width);
  }
  return nb::make_tuple(vector_to_numpy(std::move(offsets)),
                        vector_to_numpy(std::move(invalid.lines)),
                        vector_to_numpy(std::move(invalid.counts)));
}

nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>> host_bytes(int64_t nbytes) {
  if (nbytes < 0)
    throw std::invalid_argument("nbytes must be >= 0, got " + std::to_string(nbytes));
  const size_t n = static_cast<size_t>(nbytes);
  void* raw = daskwp::host_alloc(n ? n : 1);
  nb::capsule owner(raw, [](void* q) noexcept { daskwp::host_free(q); });
  return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(static_cast<uint8_t*>(raw), {n}, owner);
}

// The values of a PLAIN-encoded Parquet BYTE_ARRAY page (each a 4-byte little-endian
// length, then its bytes: the Parquet format's "PLAIN" encoding) written to out[at:]
// without their lengths, as Arrow binary data: returns the int64 offsets of the `count`
// values in `out` (count + 1, the first `at`). The Parquet read of the accessor's text
// (daskwp/accessors/parquet_source.py) decodes its pages with this, straight into the
// block the partition's text is gathered in.
nb::ndarray<nb::numpy, int64_t, nb::ndim<1>> plain_byte_array_values(U8 page, int64_t count,
                                                                     U8Out out, int64_t at) {
  if (count < 0)
    throw std::invalid_argument("count must be >= 0, got " + std::to_string(count));
  const size_t n = page.shape(0), room = out.shape(0);
  if (at < 0 || static_cast<size_t>(at) > room)
    throw std::invalid_argument("at must be within out (0.." + std::to_string(room) +
                                "), got " + std::to_string(at));
  std::vector<int64_t> offsets(static_cast<size_t>(count) + 1);
  const uint8_t* src = page.data();
  uint8_t* dst = out.data();
  std::string error;
  {
    nb::gil_scoped_release release;
    size_t i = 0, o = static_cast<size_t>(at);
    offsets[0] = at;
    for (int64_t k = 0; k < count; ++k) {
      if (n - i < 4) {
        error = "the page ends inside the length of value " + std::to_string(k) + " of " +
                std::to_string(count) + " (" + std::to_string(n) + " bytes)";
        break;
      }
      uint32_t len;
      std::memcpy(&len, src + i, 4);   // little-endian (x86-64, aarch64)
      i += 4;
      if (len > n - i) {
        error = "value " + std::to_string(k) + " of " + std::to_string(count) + " holds " +
                std::to_string(len) + " bytes, past the end of the page (" +
                std::to_string(n) + " bytes)";
        break;
      }
      if (len > room - o) {
        error = "out holds " + std::to_string(room) + " bytes, too few for the values from " +
                std::to_string(at) + " (value " + std::to_string(k) + " ends at " +
                std::to_string(o + len) + ")";
        break;
      }
      std::memcpy(dst + o, src + i, len);
      i += len;
      o += len;
      offsets[static_cast<size_t>(k) + 1] = static_cast<int64_t>(o);
    }
  }
  if (!error.empty()) throw std::invalid_argument("malformed PLAIN page: " + error);
  return vector_to_numpy(std::move(offsets));
}

int64_t count_lines_binding(U8 data) {
  nb::gil_scoped_release release;
  return count_newlines(data.data(), data.shape(0));
}

nb::tuple count_nonblank_lines_binding(U8 data, bool open_counted) {
  int64_t n;
  {
    nb::gil_scoped_release release;
    n = count_nonblank_lines(data.data(), data.shape(0), open_counted);
  }
  return nb::make_tuple(n, open_counted);
}

}  // namespace

void bind_text_lines(nb::module_& m) {
  m.def("split_lines", &split_lines, nb::arg("data"), nb::arg("out"),
        nb::arg("width") = 0,
        "Split bytes into lines on b'\\n' (a last line without one is a line too) and write "
        "them to `out` without the newlines (`out` may be `data` itself: in place). Returns "
        "(offsets, invalid_lines, invalid_bytes): the int64 offsets of the lines in `out` "
        "(lines + 1), and the lines holding bytes outside well-formed UTF-8 sequences with "
        "how many (each maximal ill-formed subsequence's bytes, Python's errors='replace' "
        "rule). `width`: bytes per step, 0 (the widest this CPU has, the default), 64 (AVX-512 "
        "VBMI2, where split_widths() lists it), 16 (SSSE3 blocks; 8-byte words where the "
        "build has none), 8 or 1: every width gives the same result (the tests run each).");
  m.def("split_widths", &split_widths,
        "The widths split_lines takes on this CPU, widest first (64 where it has AVX-512 "
        "VBMI2; 16, 8 and 1 everywhere).");
  m.def("count_newlines", &count_lines_binding, nb::arg("data"),
        "The b'\\n' bytes of `data` (counting a text partition's documents).");
  m.def("count_nonblank_lines", &count_nonblank_lines_binding, nb::arg("data"),
        nb::arg("open_counted") = false,
        "(lines, open_counted): the lines of `data` (split on b'\\n'; a last line without "
        "one is a line too) holding a byte other than space, tab and CR (counting a JSON "
        "Lines partition's documents), each counted at its first such byte. For bytes read "
        "in pieces: `open_counted` of a piece is the one returned for the piece before (the "
        "line open at its end is counted already); the first piece's is False.");
  m.def("plain_byte_array_values", &plain_byte_array_values, nb::arg("page"),
        nb::arg("count"), nb::arg("out"), nb::arg("at") = 0,
        "Decode the `count` values of a PLAIN-encoded Parquet BYTE_ARRAY page (each a 4-byte "
        "little-endian length, then its bytes) into `out[at:]` without their lengths; returns "
        "their int64 offsets in `out` (count + 1, the first `at`). A value running past the "
        "page, or past `out`, raises ValueError.");
  m.def("host_bytes", &host_bytes, nb::arg("nbytes"),
        "A writable uint8 array of `nbytes` from the host memory pool (4 MB and more: "
        "pooled, already mapped when a freed block is reused), for reading a partition.");
}
