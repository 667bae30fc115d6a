// Standalone driver for profiling the core without Python (callgrind, perf):
//   python benchmarks/native/dump_blobs.py OUT_DIR VOCAB [--lowercase|--no-lowercase]
//   g++ -O3 -g -march=x86-64-v2 -std=c++17 -Idaskwp/kernels benchmarks/native/core_bench.cpp
//       daskwp/kernels/vocab_builder.cpp -o /tmp/core_bench
//   /tmp/core_bench OUT_DIR/vocab.blob OUT_DIR/norm.blob CORPUS.txt [repeats]
// Prints MB/s of one thread over the corpus lines (one document per line), best of the
// repeats. Each repeat is one call of run_pass (noinline), so instructions per byte are
//   valgrind --tool=callgrind --toggle-collect=run_pass /tmp/core_bench ... 1
// (Ir of run_pass / corpus bytes). DASKWP_NO_WORD_CACHE=1: no memo at all; otherwise the
// memo is emptied before every repeat (cold: what one call of a fresh process does) unless
// DASKWP_CORE_BENCH_WARM=1, which fills it with one untimed, uncollected pass first and
// keeps it (warm: a process that tokenized the same corpus before).
// DASKWP_CORE_BENCH_OFFSETS=chars|bytes: the core with offsets and word ids, through a memo
// of the offsets layout in that unit (the CPU loop's path with return_offsets_mapping /
// return_word_ids, docs/design.md §2.9); it also prints an FNV-1a of the spans and word ids.
// DASKWP_CORE_BENCH_PACKED=1: the documents back to back without their newlines, as the
// CPU loop reads an Arrow string column.
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

struct Corpus {
  std::string text;
  std::vector<int64_t> starts;
  int64_t sep = 1;  // bytes between documents: the newline, or none when packed
};

// One pass over every line; returns the tokens written.
static std::vector<int64_t> g_spans;  // the offsets mode's outputs, sized in main
static std::vector<int32_t> g_words;

// DASKWP_CORE_BENCH_NO_ENDS=1 (with PACKED): the tokenizer is not told where the documents
// end (set_batch), as before the prefetcher knew them.
static bool no_ends() { return std::getenv("DASKWP_CORE_BENCH_NO_ENDS") != nullptr; }

static int offsets_mode() {
  const char* m = std::getenv("DASKWP_CORE_BENCH_OFFSETS");
  return !m ? 0 : std::strcmp(m, "chars") == 0 ? 2 : 1;
}

__attribute__((noinline)) int64_t run_pass(const daskwp::CoreContext& ctx, const Corpus& c,
                                           std::vector<int32_t>& out, daskwp::WordCache* cache) {
  if (const int mode = offsets_mode()) {  // as cpu_batch.cpp's encode_range_extras
    std::vector<int64_t>& spans = g_spans;
    std::vector<int32_t>& words = g_words;
    int64_t at = 0;
    const uint8_t* base = reinterpret_cast<const uint8_t*>(c.text.data());
    daskwp::MemoWordPieceE2ET<true> t(ctx, nullptr, 0);
    if (!c.sep && !no_ends()) t.set_batch(base, c.starts.data(), int64_t(c.starts.size()) - 1);
    for (size_t d = 0; d + 1 < c.starts.size(); ++d) {
      const int64_t b = c.starts[d], e = c.starts[d + 1] - c.sep;
      t.set_doc(int64_t(d));
      t.reset(out.data() + at, static_cast<int64_t>(out.size()) - at, cache);
      t.set_offsets(spans.data() + 2 * at, words.data() + at, mode == 2);
      at += t.run(base + b, e - b, static_cast<int64_t>(c.text.size()) - b);
    }
    return at;
  }
  // As cpu_batch.cpp's encode_range: one tokenizer state, reset per document.
  int64_t at = 0;
  const uint8_t* base = reinterpret_cast<const uint8_t*>(c.text.data());
  daskwp::MemoWordPieceE2E t(ctx, nullptr, 0);
  if (!c.sep && !no_ends()) t.set_batch(base, c.starts.data(), int64_t(c.starts.size()) - 1);
  for (size_t d = 0; d + 1 < c.starts.size(); ++d) {
    const int64_t b = c.starts[d], e = c.starts[d + 1] - c.sep;
    t.set_doc(int64_t(d));
    t.reset(out.data() + at, static_cast<int64_t>(out.size()) - at, cache);
    at += t.run(base + b, e - b, static_cast<int64_t>(c.text.size()) - b);
  }
  return at;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: core_bench VOCAB_BLOB NORM_BLOB CORPUS [repeats]\n");
    return 2;
  }
  auto vb = read_aligned(argv[1]);
  auto nb = read_aligned(argv[2]);
  Corpus c;
  {
    std::ifstream f(argv[3], std::ios::binary);
    c.text.assign((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  if (c.text.empty() || c.text.back() != '\n') c.text.push_back('\n');
  const int repeats = argc > 4 ? std::atoi(argv[4]) : 5;
  c.starts.push_back(0);
  for (size_t i = 0; i < c.text.size(); ++i)
    if (c.text[i] == '\n') c.starts.push_back(static_cast<int64_t>(i) + 1);
  if (std::getenv("DASKWP_CORE_BENCH_PACKED")) {
    // The documents back to back, without the newlines, as in an Arrow string column.
    std::string packed;
    packed.reserve(c.text.size());
    for (char ch : c.text)
      if (ch != '\n') packed.push_back(ch);
    for (size_t k = 0; k < c.starts.size(); ++k) c.starts[k] -= static_cast<int64_t>(k);
    c.text.swap(packed);
    c.sep = 0;
  }
  daskwp::CoreContext ctx;
  daskwp::init_context(ctx, reinterpret_cast<const uint8_t*>(vb.data()),
                       reinterpret_cast<const uint8_t*>(nb.data()), daskwp::TokenizeParams{100});
  std::vector<int32_t> out(c.text.size() + 1024);
  if (offsets_mode()) {
    g_spans.resize(2 * out.size());
    g_words.resize(out.size());
  }
  // DASKWP_CORE_BENCH_BITS: 2^bits short entries (default: the pool's default size).
  const char* bits_env = std::getenv("DASKWP_CORE_BENCH_BITS");
  std::unique_ptr<daskwp::WordCache> cache(new daskwp::WordCache(
      bits_env ? std::atoi(bits_env) : daskwp::kWordCacheDefaultBits));
  const bool use_cache = std::getenv("DASKWP_NO_WORD_CACHE") == nullptr;
  const bool warm = std::getenv("DASKWP_CORE_BENCH_WARM") != nullptr;
  const int unit = offsets_mode() == 2   ? daskwp::kMemoOffsetsChars
                   : offsets_mode() == 1 ? daskwp::kMemoOffsetsBytes
                                         : 0;
  daskwp::reset_word_cache(ctx, cache.get(), unit);
  if (warm && use_cache) {
    // The filling pass, outside run_pass so that callgrind's toggle skips it.
    const uint8_t* base = reinterpret_cast<const uint8_t*>(c.text.data());
    int64_t at = 0;
    for (size_t d = 0; d + 1 < c.starts.size(); ++d) {
      const int64_t b = c.starts[d], e = c.starts[d + 1] - c.sep;
      if (unit) {
        daskwp::MemoWordPieceE2ET<true> t(ctx, out.data() + at, out.size() - at, cache.get());
        t.set_offsets(g_spans.data() + 2 * at, g_words.data() + at, unit == 2);
        at += t.run(base + b, e - b, static_cast<int64_t>(c.text.size()) - b);
      } else {
        at += daskwp::tokenize_document_with_memo(ctx, base + b, e - b, out.data() + at,
                                                  out.size() - at, cache.get(),
                                                  static_cast<int64_t>(c.text.size()) - b);
      }
    }
  }
  const daskwp::WordCacheStats before = cache->stats;
  double best = 1e30;
  int64_t tokens = 0;
  // DASKWP_CORE_BENCH_THRASH=MB: writes that many MB before each pass, so that the memo is
  // not in the CPU caches (as after other work in a process).
  const char* thrash_env = std::getenv("DASKWP_CORE_BENCH_THRASH");
  std::vector<uint8_t> thrash(thrash_env ? static_cast<size_t>(std::atoi(thrash_env)) << 20 : 0);
  for (int r = 0; r < repeats; ++r) {
    if (!warm) daskwp::reset_word_cache(ctx, cache.get(), unit);
    for (size_t k = 0; k < thrash.size(); k += 64) thrash[k] = static_cast<uint8_t>(k + r);
    auto t0 = std::chrono::steady_clock::now();
    tokens = run_pass(ctx, c, out, use_cache ? cache.get() : nullptr);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s < best) best = s;
  }
  uint64_t sum = 1469598103934665603ull;  // FNV-1a of the ids: equal across modes
  for (int64_t k = 0; k < tokens; ++k) sum = (sum ^ (uint32_t)out[k]) * 1099511628211ull;
  if (unit) {
    uint64_t osum = 1469598103934665603ull;
    for (int64_t k = 0; k < tokens; ++k) {
      osum = (osum ^ (uint64_t)g_spans[2 * k]) * 1099511628211ull;
      osum = (osum ^ (uint64_t)g_spans[2 * k + 1]) * 1099511628211ull;
      osum = (osum ^ (uint32_t)g_words[k]) * 1099511628211ull;
    }
    std::printf("offsets %016llx\n", static_cast<unsigned long long>(osum));
  }
  std::printf("%.1f MB/s  (%zu bytes, %lld tokens, ids %016llx, best of %d, %s)\n",
              (c.text.size() - c.sep * (c.starts.size() - 1)) / best / 1e6, c.text.size(),
              static_cast<long long>(tokens), static_cast<unsigned long long>(sum), repeats,
              !use_cache ? "no memo" : warm ? "warm" : "cold");
  if (use_cache)
    std::printf("memo: %llu hits, %llu misses, %llu long resets over the timed passes\n",
                static_cast<unsigned long long>(cache->stats.hits - before.hits),
                static_cast<unsigned long long>(cache->stats.misses - before.misses),
                static_cast<unsigned long long>(cache->stats.long_resets - before.long_resets));
  return 0;
}
