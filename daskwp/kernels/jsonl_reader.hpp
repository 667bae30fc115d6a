// daskwp — the text fields of JSON Lines in one pass (daskwp/jobs/inputs/json_format.py):
// for each line, the value of one or two named string fields, JSON escapes decoded to UTF-8
// into an output buffer, so that the bytes, the offsets and a validity bitmap form an Arrow
// large_string array per field. No Python here (jsonl_reader.cpp binds it).
//
// The reader stands in for Arrow's JSON reader (pyarrow.json with the fields as an explicit
// schema, other fields ignored) and must never give another answer. It therefore accepts
// only what it handles fully and reports anything else as unsupported, with the line and a
// reason; the caller then parses the whole buffer with Arrow (which reproduces Arrow's
// result or error exactly). Accepted:
//   * lines of one JSON object each (RFC 8259 grammar: no comments, no trailing commas, no
//     NaN/Infinity, numbers whose magnitude stays well inside a double), or `null` (Arrow: a
//     null row), surrounded by spaces, tabs and CRs; blank lines (only those) are no row;
//   * a named field holding a string or null; absent: null;
//   * other fields holding any JSON value (objects and arrays nested up to 63 deep);
//   * strings of well-formed UTF-8 without raw control bytes (< 0x20), escapes
//     \" \\ \/ \b \f \n \r \t \uXXXX (a high surrogate only followed by a low one);
//   * keys compared after decoding their escapes ("t\u0065xt" is "text").
// Unsupported (Arrow errors on, or may read otherwise): anything else, among it a named
// field given twice in a line, a named field holding a number, boolean, array or object,
// an object spanning lines or two objects on one line, invalid UTF-8 (Arrow's path puts
// the original bytes back), lone surrogates, invalid escapes, a byte-order mark, an empty
// buffer (Arrow: "Empty JSON file").
//
// Strings are scanned 16 bytes at a time (SSE2): a block without a quote, backslash,
// control byte or byte >= 0x80 is copied whole; bytes >= 0x80 are checked by the UTF-8
// rule (no overlongs, surrogates or code points above U+10FFFF: a whole block at once with
// SSSE3, check_block; else one sequence at a time) and copied as they are.
// The output needs 16 bytes of slack past the input's length (a block is stored whole
// before the write position moves on by its string bytes only); decoding never lengthens
// a string (an escape is at least as long as the bytes it stands for).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#if defined(__SSSE3__)
#include <tmmintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace daskwp {

struct JsonlColumn {
  uint8_t* out = nullptr;         // decoded bytes (capacity >= input bytes + 16)
  size_t written = 0;             // bytes written to out
  std::vector<int64_t> offsets;   // rows + 1
  std::vector<uint8_t> validity;  // Arrow bitmap (LSB first), (rows + 7) / 8 bytes
  int64_t nulls = 0;
};

struct JsonlOutcome {
  const char* unsupported = nullptr;  // null: every line read; else why not
  int64_t line = 0;                   // 0-based line where it was found
  int64_t rows = 0;
};

// Per lead byte of a UTF-8 sequence: its length (0: cannot lead) and the second byte's range.
struct Lead {
  uint8_t length, lo, hi;
};
struct LeadTable {
  Lead at[256];
  LeadTable() : at{} {
    for (int c = 0xC2; c <= 0xF4; ++c) {
      at[c] = {static_cast<uint8_t>(c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4), 0x80, 0xBF};
    }
    at[0xE0].lo = 0xA0;  // no overlong 3-byte forms
    at[0xED].hi = 0x9F;  // no surrogates
    at[0xF0].lo = 0x90;  // no overlong 4-byte forms
    at[0xF4].hi = 0x8F;  // nothing above U+10FFFF
  }
};
// Hex digit values (-1: not one); the byte each one-character escape stands for (0: none).
struct HexTable {
  int8_t at[256];
  HexTable() {
    for (int c = 0; c < 256; ++c)
      at[c] = static_cast<int8_t>(c >= '0' && c <= '9' ? c - '0'
                                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1);
  }
};
struct EscapeTable {
  uint8_t at[256];
  EscapeTable() : at{} {
    at['"'] = '"';
    at['\\'] = '\\';
    at['/'] = '/';
    at['b'] = '\b';
    at['f'] = '\f';
    at['n'] = '\n';
    at['r'] = '\r';
    at['t'] = '\t';
  }
};
inline const LeadTable kLead;
inline const HexTable kHex;
inline const EscapeTable kEscape;

class JsonlReader {
 public:
  static constexpr size_t kSlack = 16;
  static constexpr int kMaxDepth = 63;

  JsonlReader(const uint8_t* s, size_t n, const std::vector<std::string>& names,
              std::vector<JsonlColumn>* columns)
      : s_(s), n_(n), names_(names), cols_(*columns) {
    for (const std::string& name : names) {
      quoted_.push_back(plain_key(name) ? '"' + name + '"' : std::string());
      QuotedKey k;
      const std::string& q = quoted_.back();
      if (!q.empty() && q.size() <= 16) {
        std::memcpy(k.bytes, q.data(), q.size());
        k.mask = static_cast<uint32_t>((1ull << q.size()) - 1u);
      } else if (!q.empty()) {
        short_keys_ = false;
      }
      keys_.push_back(k);
    }
  }

  JsonlOutcome run() {
    JsonlOutcome r;
    if (n_ == 0) return fail(r, "an empty buffer");
    if (names_.size() == 2 && names_[0] == names_[1]) return fail(r, "the same field twice");
    for (auto& c : cols_) {
      c.offsets.assign(1, 0);
      // room for lines of 64 bytes on average: a vector that grows copies itself into
      // fresh pages (with n / 128, 97-byte lines: 370 page faults a 64 MB partition, 200
      // with n / 64, measured; a page of an unused reserve is never touched)
      c.offsets.reserve(n_ / 64 + 16);
      c.validity.clear();
      c.validity.reserve(n_ / 512 + 16);
    }
    while (p_ < n_) {
      skip_space();
      if (p_ == n_) break;
      if (s_[p_] == '\n') {  // blank line
        ++p_;
        ++line_;
        continue;
      }
      seen_ = 0;
      if (s_[p_] == '{') {
        if (!object()) return fail(r, reason_);
      } else if (!literal("null", 4)) {
        return fail(r, "a line that is not a JSON object");
      }
      skip_space();
      if (p_ < n_) {
        if (s_[p_] != '\n') return fail(r, "more than one JSON value on a line");
        ++p_;
      }
      end_row();
      ++line_;
    }
    r.rows = rows_;
    return r;
  }

 private:
  const uint8_t* s_;
  size_t n_;
  const std::vector<std::string>& names_;
  std::vector<JsonlColumn>& cols_;
  size_t p_ = 0;
  size_t vpos_ = 0;  // first byte the UTF-8 rule has not read yet
  int64_t line_ = 0;
  int64_t rows_ = 0;
  unsigned seen_ = 0;   // named fields given in this line (bit per field)
  unsigned valid_ = 0;  // ... of which strings
  const char* reason_ = "";
  std::string key_;
  // Per named field, the key as it stands in a line when written without escapes:
  // `"name"` (empty: a name with a quote, a backslash, a control byte or a byte >= 0x80,
  // read by the general path only).
  std::vector<std::string> quoted_;
  // The same of at most 16 bytes, for one 16-byte compare (mask: its bytes; 0: none).
  struct QuotedKey {
    uint8_t bytes[16] = {};
    uint32_t mask = 0;
  };
  std::vector<QuotedKey> keys_;
  bool short_keys_ = true;  // no plain key is longer than 16 bytes

  static bool plain_key(const std::string& name) {
    for (const char ch : name) {
      const auto c = static_cast<uint8_t>(ch);
      if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') return false;
    }
    return true;
  }

  // The named field whose key, unescaped, starts at s[p_] (its quote): p_ moved past the
  // closing quote, or -1 (p_ unmoved: the general path reads the key). The key string's
  // bytes are those of the name, plain ASCII: what string_body and field_of_key would
  // find, without their passes over it.
  int plain_field() {
#if defined(__SSE2__)
    if (n_ - p_ >= 16) {  // the usual case: a key of at most 16 bytes, 16 bytes readable
      const __m128i at = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s_ + p_));
      for (size_t i = 0; i < keys_.size(); ++i) {
        const QuotedKey& k = keys_[i];
        if (!k.mask) continue;
        const uint32_t eq = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(
            at, _mm_loadu_si128(reinterpret_cast<const __m128i*>(k.bytes)))));
        if ((eq & k.mask) == k.mask) {
          p_ += quoted_[i].size();
          return static_cast<int>(i);
        }
      }
      if (short_keys_) return -1;  // every plain key was compared
    }
#endif
    for (size_t i = 0; i < quoted_.size(); ++i) {
      const std::string& q = quoted_[i];
      if (!q.empty() && n_ - p_ >= q.size() && std::memcmp(s_ + p_, q.data(), q.size()) == 0) {
        p_ += q.size();
        return static_cast<int>(i);
      }
    }
    return -1;
  }

  JsonlOutcome& fail(JsonlOutcome& r, const char* why) {
    r.unsupported = why;
    r.line = line_;
    return r;
  }

  bool no(const char* why) {
    reason_ = why;
    return false;
  }

  void end_row() {
    for (size_t i = 0; i < cols_.size(); ++i) {
      JsonlColumn& c = cols_[i];
      c.offsets.push_back(static_cast<int64_t>(c.written));
      if ((rows_ & 7) == 0) c.validity.push_back(0);
      if (valid_ & (1u << i)) {
        c.validity.back() |= static_cast<uint8_t>(1u << (rows_ & 7));
      } else {
        ++c.nulls;
      }
    }
    valid_ = 0;
    ++rows_;
  }

  // Past spaces, tabs and CRs. One compare when none is there (the usual case, between
  // every two tokens of a line: the loop's three tests were 18% of the reader's
  // instructions); every byte above ' ' ends it. A single space before a byte above ' '
  // (json.dumps' ": " and ", ") takes one step.
  void skip_space() {
    size_t p = p_;
    if (__builtin_expect(p >= n_ || s_[p] > ' ', 1)) return;
    if (s_[p] == ' ' && ++p < n_ && s_[p] > ' ') {
      p_ = p;
      return;
    }
    while (p < n_ && (s_[p] == ' ' || s_[p] == '\t' || s_[p] == '\r')) ++p;
    p_ = p;
  }

  bool literal(const char* word, size_t len) {
    if (n_ - p_ < len || std::memcmp(s_ + p_, word, len) != 0) return false;
    p_ += len;
    return true;
  }

  // Well-formed UTF-8 at s[j] (s[j] >= 0x80): its length, or 0 (kLead: no overlongs,
  // surrogates or code points above U+10FFFF).
  size_t utf8_length(size_t j) const {
    const Lead l = kLead.at[s_[j]];
    if (!l.length || n_ - j < l.length) return 0;
    if (s_[j + 1] < l.lo || s_[j + 1] > l.hi) return 0;
    if (l.length > 2 && (s_[j + 2] & 0xC0) != 0x80) return 0;
    if (l.length > 3 && (s_[j + 3] & 0xC0) != 0x80) return 0;
    return l.length;
  }

  // The UTF-8 rule over the bytes >= 0x80 at p + (bits of `high`), from vpos on.
#if defined(__SSSE3__)
  // The 16 bytes at p (p >= 3; no quote, backslash or control byte among them) by the UTF-8
  // rule at once, with the 3 bytes before them (ASCII where the string starts or an escape
  // ends): the lookup method of Keiser and Lemire ("Validating UTF-8 in less than one
  // instruction per byte", 2021). Three table lookups (the high and low nibble of the byte
  // before, the high nibble of the byte) give the error classes each pair of bytes may be
  // in; their AND is an error unless it is exactly "a continuation byte where a 3- or
  // 4-byte sequence needs one". A sequence the block's end cuts is then read by the scalar
  // rule (it sets vpos past it).
  bool check_block(size_t p) {
    constexpr uint8_t kShort = 1 << 0, kLong = 1 << 1, kOver3 = 1 << 2, kLarge = 1 << 3,
                      kSurr = 1 << 4, kOver2 = 1 << 5, kLarge1000 = 1 << 6, kOver4 = 1 << 6,
                      kTwoConts = 1 << 7, kCarry = kShort | kLong | kTwoConts;
    const __m128i b1_high = _mm_setr_epi8(
        kLong, kLong, kLong, kLong, kLong, kLong, kLong, kLong,
        kTwoConts, kTwoConts, kTwoConts, kTwoConts,
        kShort | kOver2, kShort, kShort | kOver3 | kSurr,
        static_cast<char>(kShort | kLarge | kLarge1000 | kOver4));
    const __m128i b1_low = _mm_setr_epi8(
        static_cast<char>(kCarry | kOver3 | kOver2 | kOver4), static_cast<char>(kCarry | kOver2),
        static_cast<char>(kCarry), static_cast<char>(kCarry),
        static_cast<char>(kCarry | kLarge), static_cast<char>(kCarry | kLarge | kLarge1000),
        static_cast<char>(kCarry | kLarge | kLarge1000),
        static_cast<char>(kCarry | kLarge | kLarge1000),
        static_cast<char>(kCarry | kLarge | kLarge1000),
        static_cast<char>(kCarry | kLarge | kLarge1000),
        static_cast<char>(kCarry | kLarge | kLarge1000),
        static_cast<char>(kCarry | kLarge | kLarge1000),
        static_cast<char>(kCarry | kLarge | kLarge1000),
        static_cast<char>(kCarry | kLarge | kLarge1000 | kSurr),
        static_cast<char>(kCarry | kLarge | kLarge1000),
        static_cast<char>(kCarry | kLarge | kLarge1000));
    const __m128i b2_high = _mm_setr_epi8(
        kShort, kShort, kShort, kShort, kShort, kShort, kShort, kShort,
        static_cast<char>(kLong | kOver2 | kTwoConts | kOver3 | kLarge1000 | kOver4),
        static_cast<char>(kLong | kOver2 | kTwoConts | kOver3 | kLarge),
        static_cast<char>(kLong | kOver2 | kTwoConts | kSurr | kLarge),
        static_cast<char>(kLong | kOver2 | kTwoConts | kSurr | kLarge),
        kShort, kShort, kShort, kShort);
    const __m128i nibble = _mm_set1_epi8(0x0F);
    const __m128i in = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s_ + p));
    const __m128i prev1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s_ + p - 1));
    const __m128i prev2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s_ + p - 2));
    const __m128i prev3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s_ + p - 3));
    const __m128i cases = _mm_and_si128(
        _mm_and_si128(
            _mm_shuffle_epi8(b1_high, _mm_and_si128(_mm_srli_epi16(prev1, 4), nibble)),
            _mm_shuffle_epi8(b1_low, _mm_and_si128(prev1, nibble))),
        _mm_shuffle_epi8(b2_high, _mm_and_si128(_mm_srli_epi16(in, 4), nibble)));
    const __m128i must_continue = _mm_and_si128(
        _mm_or_si128(_mm_subs_epu8(prev2, _mm_set1_epi8(static_cast<char>(0xE0 - 0x80))),
                     _mm_subs_epu8(prev3, _mm_set1_epi8(static_cast<char>(0xF0 - 0x80)))),
        _mm_set1_epi8(static_cast<char>(0x80)));
    const __m128i error = _mm_xor_si128(must_continue, cases);
    if (_mm_movemask_epi8(_mm_cmpeq_epi8(error, _mm_setzero_si128())) != 0xFFFF)
      return no("invalid UTF-8");
    // a sequence cut by the block's end: its lead among the last 3 bytes
    size_t end = p + 16;
    for (size_t j = p + 13; j < p + 16; ++j) {
      const uint8_t c = s_[j];
      if (c >= 0xC0 && j + (c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2) > p + 16) {
        const size_t len = utf8_length(j);
        if (!len) return no("invalid UTF-8");
        end = j + len;
        break;
      }
    }
    if (end > vpos_) vpos_ = end;
    return true;
  }
#endif

  bool check_high(size_t p, uint32_t high) {
    size_t j = vpos_ > p ? vpos_ : p;
    while (j < p + 16) {
      const uint32_t rest = high & ~((1u << (j - p)) - 1u);
      if (!rest) break;
      j = p + static_cast<size_t>(__builtin_ctz(rest));
      const size_t len = utf8_length(j);
      if (!len) return no("invalid UTF-8");
      j += len;
    }
    if (j > vpos_) vpos_ = j;
    return true;
  }

  int hex4(size_t at) const {  // 4 hex digits at s[at], or -1
    if (at > n_ || n_ - at < 4) return -1;
    const int8_t* h = kHex.at;
    const int a = h[s_[at]], b = h[s_[at + 1]], c = h[s_[at + 2]], d = h[s_[at + 3]];
    if ((a | b | c | d) < 0) return -1;
    return a << 12 | b << 8 | c << 4 | d;
  }

  // An escape at s[p] == '\\', p moved past it: decoded to out + w when kStore.
  template <bool kStore>
  bool escape(size_t& p, uint8_t* out, size_t& w) {
    if (n_ - p < 2) return no("an unterminated string");
    const uint8_t e = s_[p + 1];
    if (e != 'u') {
      const uint8_t c = kEscape.at[e];
      if (!c) return no("an invalid escape");
      if (kStore) out[w++] = c;
      p += 2;
      return true;
    }
    int cp = hex4(p + 2);
    if (cp < 0) return no("an invalid \\u escape");
    p += 6;
    if (cp >= 0xD800 && cp <= 0xDFFF) {
      if (cp >= 0xDC00) return no("a lone surrogate escape");
      if (n_ - p < 6 || s_[p] != '\\' || s_[p + 1] != 'u') return no("a lone surrogate escape");
      const int lo = hex4(p + 2);
      if (lo < 0xDC00 || lo > 0xDFFF) return no("a lone surrogate escape");
      p += 6;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (kStore) {
      if (cp < 0x80) {
        out[w++] = static_cast<uint8_t>(cp);
      } else if (cp < 0x800) {
        out[w++] = static_cast<uint8_t>(0xC0 | (cp >> 6));
        out[w++] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        out[w++] = static_cast<uint8_t>(0xE0 | (cp >> 12));
        out[w++] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
        out[w++] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      } else {
        out[w++] = static_cast<uint8_t>(0xF0 | (cp >> 18));
        out[w++] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
        out[w++] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
        out[w++] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      }
    }
    return true;
  }

  // A string from just after its opening quote to just after its closing one; its decoded
  // bytes written to out + w when kStore. The positions live in locals (stores through
  // `out` may alias the members), written back before an escape and at the end.
  template <bool kStore>
  bool string_body(uint8_t* out, size_t& w_out) {
    const uint8_t* const s = s_;
    const size_t n = n_;
    size_t p = p_, w = w_out;
    for (;;) {
#if defined(__SSE2__)
      const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\');
      // A block of plain ASCII (no quote, backslash, control byte or byte >= 0x80: one
      // signed compare with 0x20 finds the last two at once) is copied with no more tests;
      // any other finds where the string's bytes stop and which bytes are >= 0x80 (the
      // UTF-8 rule). (Before, every block took both movemasks, the stop and the mask: a
      // third of a string's instructions.)
      const __m128i space = _mm_set1_epi8(0x20);
      while (p + 16 <= n) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + p));
        const uint32_t any = static_cast<uint32_t>(_mm_movemask_epi8(_mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
            _mm_cmplt_epi8(v, space))));
        if (!any) {
          if (kStore) {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(out + w), v);
            w += 16;
          }
          p += 16;
          continue;
        }
        const uint32_t all_high = static_cast<uint32_t>(_mm_movemask_epi8(v));
        const uint32_t special = any & ~all_high;  // quotes, backslashes, control bytes
        const uint32_t stop = special ? static_cast<uint32_t>(__builtin_ctz(special)) : 16;
        const uint32_t high = all_high & ((1u << stop) - 1u);
        if (high && vpos_ < p + stop) {
#if defined(__SSSE3__)
          if (!special && p >= 3) {
            if (!check_block(p)) return false;
          } else if (!check_high(p, high)) {
            return false;
          }
#else
          if (!check_high(p, high)) return false;
#endif
        }
        if (kStore) {
          _mm_storeu_si128(reinterpret_cast<__m128i*>(out + w), v);
          w += stop;
        }
        p += stop;
        if (special) break;
      }
#endif
      if (p >= n) return no("an unterminated string");
      const uint8_t c = s[p];
      if (c == '"') {
        p_ = p + 1;
        w_out = w;
        return true;
      }
      if (c == '\\') {  // escapes often follow each other (\uXXXX runs): no block between
        do {
          if (!escape<kStore>(p, out, w)) return false;
        } while (p < n && s[p] == '\\');
        continue;
      }
      if (c < 0x20) return no("a control byte in a string");
      if (c >= 0x80 && p >= vpos_) {
        const size_t len = utf8_length(p);
        if (!len) return no("invalid UTF-8");
        vpos_ = p + len;
      }
      if (kStore) out[w++] = c;
      ++p;
    }
  }

  bool number() {
    if (s_[p_] == '-') ++p_;
    long digits = 0;  // integer digits
    if (p_ < n_ && s_[p_] == '0') {
      ++p_;
      digits = 1;
    } else {
      while (p_ < n_ && s_[p_] >= '0' && s_[p_] <= '9') ++p_, ++digits;
      if (!digits) return no("an invalid value");
    }
    if (p_ < n_ && s_[p_] == '.') {
      ++p_;
      size_t f = 0;
      while (p_ < n_ && s_[p_] >= '0' && s_[p_] <= '9') ++p_, ++f;
      if (!f) return no("an invalid number");
    }
    long exp = 0;
    if (p_ < n_ && (s_[p_] == 'e' || s_[p_] == 'E')) {
      ++p_;
      bool neg = false;
      if (p_ < n_ && (s_[p_] == '+' || s_[p_] == '-')) neg = s_[p_++] == '-';
      size_t e = 0;
      while (p_ < n_ && s_[p_] >= '0' && s_[p_] <= '9') {
        if (exp < 100000) exp = exp * 10 + (s_[p_] - '0');
        ++p_, ++e;
      }
      if (!e) return no("an invalid number");
      if (neg) exp = -exp;
    }
    // Arrow refuses numbers beyond a double's range: leave any near it to Arrow
    if (digits + exp > 300 || exp < -300) return no("a number near a double's limits");
    return true;
  }

  // Any JSON value, checked and passed over; objects and arrays nested up to kMaxDepth.
  bool skip_value() {
    uint64_t arrays = 0;  // bit d: the container at depth d + 1 is an array
    int depth = 0;
    for (;;) {
      // a value
      skip_space();
      if (p_ >= n_) return no("a line that ends inside a value");
      switch (s_[p_]) {
        case '"': {
          size_t w = 0;
          ++p_;
          if (!string_body<false>(nullptr, w)) return false;
          break;
        }
        case '{':
        case '[': {  // a container opens: empty, or its first member / element follows
          const bool array = s_[p_] == '[';
          if (++depth > kMaxDepth) return no("values nested too deep");
          arrays = (arrays & ~(1ull << (depth - 1))) | (uint64_t{array} << (depth - 1));
          ++p_;
          skip_space();
          if (p_ < n_ && s_[p_] == (array ? ']' : '}')) {
            ++p_;
            --depth;
            break;
          }
          if (!array && !member_key()) return false;
          continue;
        }
        case 't':
          if (!literal("true", 4)) return no("an invalid value");
          break;
        case 'f':
          if (!literal("false", 5)) return no("an invalid value");
          break;
        case 'n':
          if (!literal("null", 4)) return no("an invalid value");
          break;
        default:
          if (s_[p_] != '-' && (s_[p_] < '0' || s_[p_] > '9')) return no("an invalid value");
          if (!number()) return false;
      }
      // after a value: close containers until a comma starts the next value
      for (;;) {
        if (depth == 0) return true;
        skip_space();
        if (p_ >= n_) return no("a line that ends inside a value");
        const bool array = arrays >> (depth - 1) & 1;
        const uint8_t c = s_[p_++];
        if (c == ',') {
          if (!array && !member_key()) return false;
          break;
        }
        if (c != (array ? ']' : '}')) return no("a missing comma or bracket");
        --depth;
      }
    }
  }

  // `"key" :` inside a skipped object, p at the key's quote (after spaces).
  bool member_key() {
    skip_space();
    if (p_ >= n_ || s_[p_] != '"') return no("a missing object key");
    ++p_;
    size_t w = 0;
    if (!string_body<false>(nullptr, w)) return false;
    skip_space();
    if (p_ >= n_ || s_[p_] != ':') return no("a missing colon");
    ++p_;
    return true;
  }

  // Which named field the key from `start` (after its quote) to p (after its closing quote)
  // is, or -1.
  int field_of_key(size_t start) {
    const uint8_t* raw = s_ + start;
    size_t len = p_ - 1 - start;
    if (std::memchr(raw, '\\', len)) {  // decode its escapes
      key_.resize(len + kSlack);
      uint8_t* out = reinterpret_cast<uint8_t*>(&key_[0]);
      size_t w = 0;
      const size_t end = p_;
      p_ = start;
      string_body<true>(out, w);  // succeeded once already
      p_ = end;
      raw = out;
      len = w;
    }
    for (size_t i = 0; i < names_.size(); ++i)
      if (names_[i].size() == len && std::memcmp(names_[i].data(), raw, len) == 0)
        return static_cast<int>(i);
    return -1;
  }

  // The line's object, p at its '{'.
  bool object() {
    ++p_;
    skip_space();
    if (p_ < n_ && s_[p_] == '}') {
      ++p_;
      return true;
    }
    for (;;) {  // p_ past the spaces before a key
      if (p_ >= n_ || s_[p_] != '"') return no("a missing object key");
      int field = plain_field();
      if (field < 0) {
        const size_t start = ++p_;
        size_t w = 0;
        if (!string_body<false>(nullptr, w)) return false;
        field = field_of_key(start);
      }
      skip_space();
      if (p_ >= n_ || s_[p_] != ':') return no("a missing colon");
      ++p_;
      if (field < 0) {
        if (!skip_value()) return false;
      } else {
        if (seen_ & (1u << field)) return no("a field given twice");
        seen_ |= 1u << field;
        skip_space();
        if (p_ < n_ && s_[p_] == '"') {
          JsonlColumn& c = cols_[field];
          ++p_;
          if (!string_body<true>(c.out, c.written)) return false;
          valid_ |= 1u << field;
        } else if (!literal("null", 4)) {
          return no("a field holding neither a string nor null");
        }
      }
      skip_space();
      if (p_ >= n_) return no("a line that ends inside an object");
      const uint8_t c = s_[p_++];
      if (c == '}') return true;
      if (c != ',') return no("a missing comma or brace");
      skip_space();
    }
  }
};

}  // namespace daskwp
