// daskwp — AddressSanitizer + UBSan driver of the JSON Lines reader (jsonl_reader.hpp),
// without Python. Built and run by tests/test_jsonl_reader.py.
//
//   jsonl_asan_driver BUFFERS     BUFFERS: records of a 4-byte little-endian length + bytes
//   jsonl_asan_driver selftest-overflow
//
// Each buffer is copied into a heap block of exactly its size (an over-read is reported)
// and read for the field "text", then for "text" and "pair", into output blocks of exactly
// the input's size + the reader's slack. Prints one character per buffer and field set:
// 'r' read, 'u' unsupported (left to Arrow).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "jsonl_reader.hpp"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  if (std::strcmp(argv[1], "selftest-overflow") == 0) {
    volatile char* p = static_cast<char*>(std::malloc(8));
    const char c = p[8];  // one byte past the block: AddressSanitizer must report it
    std::free(const_cast<char*>(p));
    return c == 42 ? 3 : 0;
  }
  std::ifstream f(argv[1], std::ios::binary);
  const std::vector<char> all((std::istreambuf_iterator<char>(f)), {});
  const std::vector<std::string> one{"text"}, two{"text", "pair"};
  std::string marks;
  size_t p = 0;
  while (p + 4 <= all.size()) {
    uint32_t n;
    std::memcpy(&n, &all[p], 4);
    p += 4;
    if (p + n > all.size()) return 4;
    auto* in = static_cast<uint8_t*>(std::malloc(n ? n : 1));
    std::memcpy(in, &all[p], n);
    p += n;
    for (const auto* names : {&one, &two}) {
      std::vector<daskwp::JsonlColumn> cols(names->size());
      for (auto& c : cols)
        c.out = static_cast<uint8_t*>(std::malloc(n + daskwp::JsonlReader::kSlack));
      daskwp::JsonlReader reader(in, n, *names, &cols);
      const daskwp::JsonlOutcome r = reader.run();
      for (auto& c : cols) {
        if (!r.unsupported && (c.written > n || c.offsets.size() != size_t(r.rows) + 1 ||
                               c.validity.size() != (size_t(r.rows) + 7) / 8))
          std::abort();
        std::free(c.out);
      }
      marks += r.unsupported ? 'u' : 'r';
    }
    std::free(in);
  }
  std::printf("%s\n", marks.c_str());
  return 0;
}
