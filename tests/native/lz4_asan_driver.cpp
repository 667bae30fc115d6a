// daskwp — sanitizer driver for the LZ4 block compressor (daskwp/kernels/lz4_block.hpp), no
// Python: built with -fsanitize=address,undefined by tests/test_lz4_block.py.
//
// Every input is copied into a heap block of EXACTLY its length and compressed into a heap
// block of exactly compress_bound(n) bytes, so a read past the input (the 8- and 16-byte
// loads near its end) or a write past the bound is reported. Each block is then decoded by a
// strict decoder here (offsets 1..65535 within the output, the last sequence literals only,
// at least 5 of them, the last match starting >= 12 bytes before the end) and compared. The
// same bytes are then compressed as a BYTE_STREAM_SPLIT page (compress_split_page: a head
// and 4 or 8 streams, its zero streams marked or not) and checked the same way.
//
// Usage: lz4_asan_driver N SEED      N buffers of lengths 0..70000 (every length 0..299
//                                    first), zero, constant, random, few-valued, BYTE_
//                                    STREAM_SPLIT-like and self-repeating contents
//        lz4_asan_driver selftest-overflow   reads one byte past a block (must be reported)
// Exit status 0 and "OK ..." on success; 1 with a message on a wrong block.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "lz4_block.hpp"

namespace {

bool decode(const uint8_t* s, size_t cn, size_t n, std::vector<uint8_t>& out, std::string& why) {
  out.clear();
  size_t i = 0, last_lit = 0;
  bool matched = false;
  size_t last_match_at = 0;
  auto more = [&](size_t& v) {
    for (;;) {
      if (i >= cn) return false;
      const uint8_t b = s[i++];
      v += b;
      if (b != 255) return true;
    }
  };
  for (;;) {
    if (i >= cn) { why = "truncated token"; return false; }
    const uint8_t t = s[i++];
    size_t lit = t >> 4;
    if (lit == 15 && !more(lit)) { why = "truncated literal length"; return false; }
    if (cn - i < lit) { why = "truncated literals"; return false; }
    out.insert(out.end(), s + i, s + i + lit);
    i += lit;
    last_lit = lit;
    if (i == cn) break;
    if (cn - i < 2) { why = "truncated offset"; return false; }
    const size_t off = s[i] | (static_cast<size_t>(s[i + 1]) << 8);
    i += 2;
    size_t ml = t & 15;
    if (ml == 15 && !more(ml)) { why = "truncated match length"; return false; }
    ml += 4;
    if (off == 0 || off > out.size()) { why = "offset outside the output"; return false; }
    matched = true;
    last_match_at = out.size();
    const size_t from = out.size() - off;
    for (size_t k = 0; k < ml; ++k) out.push_back(out[from + k]);
  }
  if (out.size() != n) { why = "decoded length differs"; return false; }
  if (matched && last_match_at + 12 > n) { why = "a match starts in the last 12 bytes"; return false; }
  if (n >= 5 && last_lit < 5) { why = "fewer than 5 literals at the end"; return false; }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "selftest-overflow") {
    uint8_t* p = static_cast<uint8_t*>(std::malloc(16));
    std::memset(p, 0, 16);
    volatile uint8_t x = p[16];
    std::printf("not instrumented %d\n", x);
    std::free(p);
    return 0;
  }
  if (argc != 3) {
    std::fprintf(stderr, "usage: lz4_asan_driver N SEED | selftest-overflow\n");
    return 2;
  }
  const long count = std::atol(argv[1]);
  std::mt19937_64 rng(std::strtoull(argv[2], nullptr, 10));
  size_t raw = 0, packed = 0;
  std::vector<uint8_t> back;
  for (long it = 0; it < count; ++it) {
    const size_t n = it < 300 ? static_cast<size_t>(it)
                              : (rng() % 4 == 0 ? rng() % 70001 : rng() % 2000);
    const int kind = static_cast<int>(rng() % 7);
    uint8_t* src = static_cast<uint8_t*>(std::malloc(n ? n : 1));
    const size_t q = n / 4;
    for (size_t k = 0; k < n; ++k) {
      switch (kind) {
        case 0: src[k] = 0; break;
        case 1: src[k] = static_cast<uint8_t>(rng()); break;
        case 2: src[k] = static_cast<uint8_t>(rng() % 3); break;
        case 3: src[k] = 0x5A; break;
        case 4:  // BYTE_STREAM_SPLIT-like: random low bytes, few-valued, then zero streams
          src[k] = k < q ? static_cast<uint8_t>(rng()) : k < 2 * q ? static_cast<uint8_t>(rng() % 8) : 0;
          break;
        case 5: src[k] = k < 97 ? static_cast<uint8_t>(rng()) : src[k - 97 + (rng() % 50 == 0)]; break;
        default: src[k] = static_cast<uint8_t>((k / 9) % 7); break;
      }
    }
    const size_t cap = daskwp::lz4::compress_bound(n);
    uint8_t* dst = static_cast<uint8_t*>(std::malloc(cap));
    const size_t c = daskwp::lz4::compress_block(src, n, dst);
    std::string why;
    if (c > cap || !decode(dst, c, n, back, why) || (n && std::memcmp(back.data(), src, n) != 0)) {
      std::printf("FAIL buffer %ld (n=%zu, kind %d): %s\n", it, n, kind,
                  c > cap ? "over the bound" : why.empty() ? "content differs" : why.c_str());
      return 1;
    }
    raw += n;
    packed += c;
    std::free(dst);
    // the same bytes as a BYTE_STREAM_SPLIT page (compress_split_page): a head, then 4 or
    // 8 streams; the zero streams marked (or none), in an exact-size block again
    const int width = rng() % 2 ? 4 : 8;
    const size_t head = n ? rng() % (n / 3 + 1) : 0;
    const size_t streams = (n - head) / static_cast<size_t>(width);
    const size_t pn = head + streams * static_cast<size_t>(width);
    uint8_t* page = static_cast<uint8_t*>(std::malloc(pn ? pn : 1));
    if (pn) std::memcpy(page, src, pn);
    unsigned zero = 0;
    for (int k = 0; k < width && rng() % 4; ++k) {
      bool all = true;
      for (size_t j = 0; j < streams && all; ++j) all = page[head + k * streams + j] == 0;
      if (all) zero |= 1u << k;
    }
    std::vector<daskwp::lz4::Match> found(daskwp::lz4::split_matches_bound(streams));
    const size_t pcap = daskwp::lz4::compress_bound(pn);
    uint8_t* pdst = static_cast<uint8_t*>(std::malloc(pcap));
    const size_t pc = daskwp::lz4::compress_split_page(page, pn, head, width, streams, zero,
                                                       found.data(), pdst);
    if (pc > pcap || !decode(pdst, pc, pn, back, why) ||
        (pn && std::memcmp(back.data(), page, pn) != 0)) {
      std::printf("FAIL split page %ld (n=%zu, head %zu, width %d, kind %d): %s\n", it, pn,
                  head, width, kind,
                  pc > pcap ? "over the bound" : why.empty() ? "content differs" : why.c_str());
      return 1;
    }
    std::free(page);
    std::free(pdst);
    std::free(src);
  }
  std::printf("OK %ld buffers, %zu -> %zu bytes\n", count, raw, packed);
  return 0;
}
