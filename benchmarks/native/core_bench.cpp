// Standalone driver for profiling the core without Python (callgrind, perf):
//   python benchmarks/native/dump_blobs.py OUT_DIR VOCAB [--lowercase|--no-lowercase]
//   g++ -O3 -g -march=x86-64-v2 -std=c++17 -Idaskwp/kernels benchmarks/native/core_bench.cpp
//       daskwp/kernels/vocab_builder.cpp -o /tmp/core_bench
//   /tmp/core_bench OUT_DIR/vocab.blob OUT_DIR/norm.blob CORPUS.txt [repeats]
// Prints MB/s of one thread over the corpus lines (one document per line).
#include <chrono>
#include <cstdlib>
#include <memory>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "word_memo.hpp"

static std::vector<uint64_t> read_aligned(const char* path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<uint64_t> out((raw.size() + 7) / 8);
  std::copy(raw.begin(), raw.end(), reinterpret_cast<char*>(out.data()));
  return out;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: core_bench VOCAB_BLOB NORM_BLOB CORPUS [repeats]\n");
    return 2;
  }
  auto vb = read_aligned(argv[1]);
  auto nb = read_aligned(argv[2]);
  std::ifstream f(argv[3], std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const int repeats = argc > 4 ? std::atoi(argv[4]) : 5;
  std::vector<int64_t> starts{0};
  for (size_t i = 0; i < text.size(); ++i)
    if (text[i] == '\n') starts.push_back(static_cast<int64_t>(i) + 1);
  daskwp::CoreContext ctx;
  daskwp::init_context(ctx, reinterpret_cast<const uint8_t*>(vb.data()),
                       reinterpret_cast<const uint8_t*>(nb.data()), daskwp::TokenizeParams{100});
  std::vector<int32_t> out(text.size() + 1024);
  std::unique_ptr<daskwp::WordCache> cache(new daskwp::WordCache());
  const bool use_cache = std::getenv("DASKWP_NO_WORD_CACHE") == nullptr;
  double best = 1e30;
  int64_t tokens = 0;
  for (int r = 0; r < repeats; ++r) {
    daskwp::reset_word_cache(ctx, cache.get());
    auto t0 = std::chrono::steady_clock::now();
    int64_t at = 0;
    for (size_t d = 0; d + 1 < starts.size(); ++d) {
      const int64_t b = starts[d], e = starts[d + 1] - 1;
      at += daskwp::tokenize_document_with_memo(
          ctx, reinterpret_cast<const uint8_t*>(text.data()) + b, e - b, out.data() + at,
          out.size() - at, use_cache ? cache.get() : nullptr,
          static_cast<int64_t>(text.size()) - b);
    }
    tokens = at;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s < best) best = s;
  }
  std::printf("%.1f MB/s  (%zu bytes, %lld tokens, best of %d)\n", text.size() / best / 1e6,
              text.size(), static_cast<long long>(tokens), repeats);
  return 0;
}
