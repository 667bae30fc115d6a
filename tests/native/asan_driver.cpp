// daskwp — sanitizer driver for the native core (no Python, no nanobind).
//
// Built with -fsanitize=address,undefined by tests/test_sanitizers.py and
// tests/sanitize.sh, it links the vocabulary builder (vocab_builder.cpp) and the header-only
// core (wordpiece_core.hpp, word_memo.hpp, windows.hpp) directly, so AddressSanitizer and UBSan see every
// read of the text, the blobs and the output buffers without LD_PRELOAD trouble in Python.
//
// Every document is copied into a heap block of EXACTLY its length, every output buffer
// and every blob likewise, so a read or write one byte past the end is reported.
//
// Usage: asan_driver MANIFEST
// The manifest has one directive per line ("#" comments):
//   vocab PATH          a compiled vocabulary blob (Vocabulary.blob)
//   norm PATH           a compiled normalization blob (normalize.norm_blob)
//   vocabtxt PATH       a vocab.txt: split on "\n", right-trimmed, built here with
//                       build_vocab_blob (the builder runs under the sanitizers too)
//   corpus PATH         one document per line ("\n" only), and the whole file as one more
//   lines N PATH        the first N lines of a file, one document each
//   random N SEED       N random byte strings (biased towards UTF-8 edge cases), + 1 of 256 KB
//   ids PATH            write the ids of the FIRST vocab x FIRST norm pair over all corpus
//                       lines (int64 count, then int32 ids, per document) for comparison
//                       with the Python extension
//   maxchars N          max_input_chars_per_word (default 100)
//   selftest-overflow   read one byte past a document block and exit (AddressSanitizer
//                       must report a heap-buffer-overflow: proves the build is instrumented)
// Documents of every corpus and random source run through every (vocab, norm) pair:
//   count pass (no output) == write pass into an exact-size buffer == write pass with the
//   word memo == write passes into too-small buffers (the count is still exact, nothing
//   is written past the end, the written prefix is the same);
// then through windows.hpp (rows of several (max_length, stride) settings, exact-size rows).
// Exit status 0 and "OK ..." on success; 1 with a message on an inconsistency; the
// sanitizers abort with their own report on a memory error or undefined behaviour.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "vocab_builder.hpp"
#include "windows.hpp"
#include "word_memo.hpp"
#include "wordpiece_core.hpp"

namespace {

// A heap block of exactly n bytes (malloc alignment, 16), so overruns are caught.
struct Exact {
  uint8_t* p = nullptr;
  size_t n = 0;
  explicit Exact(size_t size) : p(static_cast<uint8_t*>(std::malloc(size ? size : 1))), n(size) {
    if (!p) throw std::bad_alloc();
  }
  Exact(const void* src, size_t size) : Exact(size) {
    if (size) std::memcpy(p, src, size);
  }
  ~Exact() { std::free(p); }
  Exact(const Exact&) = delete;
  Exact& operator=(const Exact&) = delete;
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

[[noreturn]] void fail(const std::string& msg) {
  std::fprintf(stderr, "asan_driver: FAIL: %s\n", msg.c_str());
  std::exit(1);
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    out.emplace_back(text, at, nl - at);
    at = nl + 1;
  }
  return out;
}

// Random documents biased towards the cases a UTF-8 decoder gets wrong.
std::string random_doc(std::mt19937_64& rng, size_t max_pieces) {
  static const char* const kPieces[] = {
      "\x80", "\xbf", "\xc0", "\xc1", "\xc2", "\xdf", "\xe0", "\xe0\xa0", "\xe0\x80", "\xed",
      "\xed\xa0\x80", "\xed\xbf\xbf", "\xed\x9f\xbf", "\xef\xbf\xbd", "\xef\xbf\xbf", "\xf0",
      "\xf0\x90", "\xf0\x90\x80", "\xf0\x8f\xbf\xbf", "\xf4\x8f\xbf\xbf", "\xf4\x90\x80\x80",
      "\xf5", "\xf8\x88\x80\x80\x80", "\xfe", "\xff", " ", "\t", "\n", "\r", "a", "e", "s",
      "hello", "world", "##", "[CLS]", "[SEP]", "[UNK]", "[CL", "[", "]", "\xe4\xb8\xad",
      "\xe6\x96\x87", "e\xcc\x81", "\xcc\x81", "\xcc\xa3\xcc\x81", "\xc3\xa9", "\xce\xa3",
      "\xd9\x85", "\xe0\xb8\x81", "\xe2\x80\x8b", "\xe2\x80\xa8", "\xc2\x85", "\xc2\xa0",
      "\xef\xbb\xbf", "\xf0\x9f\x98\x80", "\xf3\xa0\x80\x81", "\x00", "\x01", "\x7f", ".",
      ",", "-", "'", "0", "9", "A", "Z", "\xe1\xba\x9e", "\xc4\xb0", "\xef\xac\x81"};
  const size_t n_pieces = sizeof(kPieces) / sizeof(kPieces[0]);
  std::string s;
  const size_t n = rng() % (max_pieces + 1);
  for (size_t k = 0; k < n; ++k) {
    switch (rng() % 4) {
      case 0: {  // raw random bytes
        const size_t m = 1 + rng() % 6;
        for (size_t j = 0; j < m; ++j) s.push_back(static_cast<char>(rng() & 0xFF));
        break;
      }
      case 1:  // a run of one letter (long words, the 100-character limit)
        s.append(static_cast<size_t>(rng() % 130), static_cast<char>('a' + rng() % 3));
        break;
      default:
        s += kPieces[rng() % n_pieces];
    }
  }
  return s;
}

struct Pair {
  const uint8_t* vocab;
  const uint8_t* norm;
  std::string name;
};

uint64_t g_docs = 0, g_bytes = 0, g_tokens = 0, g_rows = 0;

// All the passes over one document; returns its ids (exact).
std::vector<int32_t> check_document(const daskwp::CoreContext& ctx, daskwp::WordCache* cache,
                                    const std::string& doc, const std::string& where) {
  Exact text(doc.data(), doc.size());
  const int64_t len = static_cast<int64_t>(doc.size());
  const int64_t n = daskwp::tokenize_document(ctx, text.p, len, nullptr, 0);
  if (n < 0) fail(where + ": negative token count");
  std::unique_ptr<int32_t[]> exact(new int32_t[n ? n : 1]);
  if (daskwp::tokenize_document(ctx, text.p, len, exact.get(), n) != n)
    fail(where + ": the write pass counts differently from the count pass");
  std::vector<int32_t> ids(exact.get(), exact.get() + n);
  // With the per-thread word memo, twice (the second run hits the memo).
  for (int rep = 0; rep < 2; ++rep) {
    std::unique_ptr<int32_t[]> cached(new int32_t[n ? n : 1]);
    if (daskwp::tokenize_document_with_memo(ctx, text.p, len, cached.get(), n, cache) != n ||
        std::memcmp(cached.get(), exact.get(), n * sizeof(int32_t)) != 0)
      fail(where + ": the word memo changes the result");
  }
  // The memo loop may read ahead up to `readable`: followed by letters (which would extend
  // its last word if they were used) the result must not change.
  {
    std::string padded = doc + "aaaaaaaaaaaaaaaaaaaaaaaa";
    Exact ahead(padded.data(), padded.size());
    std::unique_ptr<int32_t[]> cached(new int32_t[n ? n : 1]);
    if (daskwp::tokenize_document_with_memo(ctx, ahead.p, len, cached.get(), n, cache,
                                            static_cast<int64_t>(padded.size())) != n ||
        std::memcmp(cached.get(), exact.get(), n * sizeof(int32_t)) != 0)
      fail(where + ": bytes past the document's end change the result");
  }
  // Too-small output regions: the count stays exact, the prefix is the same.
  for (int64_t cap : {int64_t(0), int64_t(1), n / 2, n - 1}) {
    if (cap < 0 || cap >= n) continue;
    std::unique_ptr<int32_t[]> small(new int32_t[cap ? cap : 1]);
    for (daskwp::WordCache* c : {static_cast<daskwp::WordCache*>(nullptr), cache}) {
      const int64_t got = daskwp::tokenize_document_with_memo(
          ctx, text.p, len, cap ? small.get() : nullptr, cap, c);
      if (got != n) fail(where + ": a short output region changes the count");
      if (cap && std::memcmp(small.get(), exact.get(), cap * sizeof(int32_t)) != 0)
        fail(where + ": a short output region changes the written prefix");
    }
  }
  ++g_docs;
  g_bytes += doc.size();
  g_tokens += n;
  return ids;
}

// windows.hpp over one document's ids for a few settings.
void check_windows(const std::vector<int32_t>& ids, int64_t logid, const std::string& where) {
  static const int32_t kSettings[][3] = {{3, 0, 1}, {4, 1, 1}, {8, 5, 1}, {1, 0, 0},
                                         {5, 4, 0}, {16, 3, 1}, {128, 0, 1}};
  Exact tokens(ids.data(), ids.size() * sizeof(int32_t));
  for (const auto& s : kSettings) {
    for (int truncation = 0; truncation < 2; ++truncation) {
      const daskwp::WindowParams p =
          daskwp::make_window_params(s[0], s[1], truncation != 0, s[2] != 0, 101, 102, 0);
      if (!daskwp::window_params_valid(p)) fail("invalid window settings in the driver");
      const int64_t n = static_cast<int64_t>(ids.size());
      const int64_t rows = daskwp::window_count(n, p);
      const int64_t total = daskwp::window_tokens(n, p);
      int64_t real = 0, owned = 0;
      for (int64_t k = 0; k < rows; ++k) {
        const daskwp::WindowRow r = daskwp::window_row(n, k, p);
        // Exact-size row of its real width, then a padded one of max_length.
        for (int32_t width : {r.row_tokens, s[0]}) {
          Exact row_ids(width * sizeof(int32_t)), row_mask(width), meta(3 * sizeof(int64_t));
          daskwp::fill_window_row<uint8_t>(reinterpret_cast<const int32_t*>(tokens.p), n, k,
                                           logid, p, width,
                                           reinterpret_cast<int32_t*>(row_ids.p), row_mask.p,
                                           reinterpret_cast<int64_t*>(meta.p));
          const int64_t* m = reinterpret_cast<const int64_t*>(meta.p);
          if (m[0] != logid || m[1] < 0 || m[2] < m[1] - 1 || m[2] >= width)
            fail(where + ": bad window metadata");
        }
        if (r.row_tokens > s[0]) fail(where + ": a row wider than max_length");
        real += r.row_tokens;
        owned += r.stop - r.start + 1;
        ++g_rows;
      }
      if (real != total) fail(where + ": window_tokens disagrees with the rows");
      if (!truncation && owned != n) fail(where + ": owned slices do not cover the document");
    }
  }
}

std::vector<uint8_t> build_from_vocab_txt(const std::string& text) {
  daskwp::VocabBuildInput in;
  std::vector<std::string> lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string t = lines[i];
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t' || t.back() == '\r')) t.pop_back();
    in.tokens.push_back(t);
    in.ids.push_back(static_cast<int32_t>(i));
  }
  // Keep the last id of a duplicated token (as HF): drop earlier duplicates.
  {
    std::vector<std::string> toks;
    std::vector<int32_t> ids;
    std::vector<std::pair<std::string, size_t>> sorted;
    for (size_t i = 0; i < in.tokens.size(); ++i) sorted.emplace_back(in.tokens[i], i);
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<bool> keep(in.tokens.size(), false);
    for (size_t i = 0; i < sorted.size(); ++i)
      if (i + 1 == sorted.size() || sorted[i + 1].first != sorted[i].first)
        keep[sorted[i].second] = true;
    for (size_t i = 0; i < in.tokens.size(); ++i)
      if (keep[i]) {
        toks.push_back(in.tokens[i]);
        ids.push_back(in.ids[i]);
      }
    in.tokens.swap(toks);
    in.ids.swap(ids);
  }
  for (size_t i = 0; i < in.tokens.size(); ++i) {
    const std::string& t = in.tokens[i];
    if (t == "[UNK]") in.unk_id = in.ids[i];
    if (t == "[UNK]" || t == "[CLS]" || t == "[SEP]" || t == "[PAD]" || t == "[MASK]") {
      in.specials.push_back(t);
      in.special_ids.push_back(in.ids[i]);
    }
  }
  if (in.unk_id < 0) in.unk_id = 0;
  return daskwp::build_vocab_blob(in);
}

// Synthetic vocabularies with awkward tokens, built under the sanitizers.
std::vector<std::vector<uint8_t>> weird_vocabularies() {
  std::vector<std::vector<uint8_t>> out;
  auto build = [&](std::vector<std::string> toks, std::vector<std::string> specials) {
    daskwp::VocabBuildInput in;
    for (size_t i = 0; i < toks.size(); ++i) {
      in.tokens.push_back(toks[i]);
      in.ids.push_back(static_cast<int32_t>(i));
    }
    in.unk_id = 0;
    for (const auto& s : specials) {
      for (size_t i = 0; i < toks.size(); ++i)
        if (toks[i] == s) {
          in.specials.push_back(s);
          in.special_ids.push_back(static_cast<int32_t>(i));
        }
    }
    out.push_back(daskwp::build_vocab_blob(in));
  };
  // only the unknown token
  build({"[UNK]"}, {"[UNK]"});
  // the bare prefix, an empty token, invalid UTF-8 inside tokens, U+FFFD as a token
  build({"[UNK]", "", "##", "a", "##a", "\xff", "##\xff", "\xef\xbf\xbd", "##\xef\xbf\xbd",
         "\xed\xa0\x80", "b\xc3", "##\xa9"},
        {"[UNK]"});
  // very long tokens and their suffix chains (the failure pops grow)
  {
    std::vector<std::string> toks{"[UNK]", "[CLS]", "[SEP]", "a", "##a", "b", "##b"};
    for (int len = 2; len <= 300; len += 7) {
      toks.push_back(std::string(len, 'a'));
      toks.push_back("##" + std::string(len, 'a') + "b");
      toks.push_back(std::string(len, 'a') + "b" + std::string(len / 2, 'a'));
    }
    build(toks, {"[UNK]", "[CLS]", "[SEP]"});
  }
  // specials that are prefixes of each other and start with word bytes
  build({"[UNK]", "a", "##a", "ab", "abc", "[", "]", "[C", "[CLS]", "[CLS]]", "hello"},
        {"[UNK]", "ab", "abc", "[CLS]", "[CLS]]", "a"});
  // many children per node (bitmap nodes) incl. every byte value
  {
    std::vector<std::string> toks{"[UNK]"};
    for (int c = 1; c < 256; ++c) {
      toks.push_back(std::string(1, static_cast<char>(c)));
      toks.push_back("##" + std::string(1, static_cast<char>(c)));
      toks.push_back("x" + std::string(1, static_cast<char>(c)));
    }
    build(toks, {"[UNK]"});
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: asan_driver MANIFEST\n");
    return 2;
  }
  try {
    std::vector<std::string> vocab_paths, norm_paths, vocab_txts;
    std::vector<std::pair<int64_t, std::string>> corpora;  // (max lines or -1: all + whole)
    std::vector<std::pair<int64_t, uint64_t>> randoms;
    std::string ids_path;
    int32_t max_chars = 100;
    std::istringstream manifest(read_file(argv[1]));
    std::string line;
    while (std::getline(manifest, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ls(line);
      std::string key;
      ls >> key;
      std::string rest;
      std::getline(ls, rest);
      while (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (key == "vocab") vocab_paths.push_back(rest);
      else if (key == "norm") norm_paths.push_back(rest);
      else if (key == "vocabtxt") vocab_txts.push_back(rest);
      else if (key == "corpus") corpora.emplace_back(-1, rest);
      else if (key == "lines") {
        const size_t sp = rest.find(' ');
        if (sp == std::string::npos) fail("lines needs N and PATH");
        corpora.emplace_back(std::atoll(rest.substr(0, sp).c_str()), rest.substr(sp + 1));
      }
      else if (key == "ids") ids_path = rest;
      else if (key == "maxchars") max_chars = std::atoi(rest.c_str());
      else if (key == "selftest-overflow") {
        Exact block("abc", 3);
        volatile const uint8_t* q = block.p;
        std::printf("read past the end: %d\n", static_cast<int>(q[3]));
        return 0;
      }
      else if (key == "random") {
        std::istringstream rs(rest);
        int64_t n;
        uint64_t seed;
        rs >> n >> seed;
        randoms.emplace_back(n, seed);
      } else {
        fail("unknown manifest directive " + key);
      }
    }
    if (norm_paths.empty()) fail("the manifest names no norm blob");

    // Blobs in exact-size heap blocks.
    std::vector<std::unique_ptr<Exact>> blobs;
    std::vector<std::string> vocab_names;
    std::vector<const uint8_t*> vocabs, norms;
    for (const auto& p : vocab_paths) {
      const std::string b = read_file(p);
      blobs.emplace_back(new Exact(b.data(), b.size()));
      vocabs.push_back(blobs.back()->p);
      vocab_names.push_back(p);
    }
    for (const auto& p : vocab_txts) {
      const std::vector<uint8_t> b = build_from_vocab_txt(read_file(p));
      blobs.emplace_back(new Exact(b.data(), b.size()));
      vocabs.push_back(blobs.back()->p);
      vocab_names.push_back("built:" + p);
    }
    {
      int k = 0;
      for (const auto& b : weird_vocabularies()) {
        blobs.emplace_back(new Exact(b.data(), b.size()));
        vocabs.push_back(blobs.back()->p);
        vocab_names.push_back("weird" + std::to_string(k++));
      }
    }
    for (const auto& p : norm_paths) {
      const std::string b = read_file(p);
      blobs.emplace_back(new Exact(b.data(), b.size()));
      norms.push_back(blobs.back()->p);
    }

    // Documents.
    std::vector<std::string> corpus_docs, random_docs;
    for (const auto& c : corpora) {
      const std::string text = read_file(c.second);
      std::vector<std::string> lines = split_lines(text);
      if (c.first >= 0 && lines.size() > static_cast<size_t>(c.first)) lines.resize(c.first);
      for (auto& l : lines) corpus_docs.push_back(std::move(l));
      if (c.first < 0) corpus_docs.push_back(text);  // the whole file as one long document
    }
    for (const auto& r : randoms) {
      std::mt19937_64 rng(r.second);
      for (int64_t k = 0; k < r.first; ++k) random_docs.push_back(random_doc(rng, 40));
      std::string big;
      while (big.size() < (1u << 18)) big += random_doc(rng, 40);
      random_docs.push_back(big);
    }

    std::unique_ptr<daskwp::WordCache> cache(new daskwp::WordCache());
    std::FILE* ids_out = ids_path.empty() ? nullptr : std::fopen(ids_path.c_str(), "wb");
    if (!ids_path.empty() && !ids_out) fail("cannot write " + ids_path);
    for (size_t vi = 0; vi < vocabs.size(); ++vi) {
      const bool real_vocab = vi < vocab_paths.size() + vocab_txts.size();
      for (size_t ni = 0; ni < norms.size(); ++ni) {
        daskwp::CoreContext ctx;
        daskwp::init_context(ctx, vocabs[vi], norms[ni], daskwp::TokenizeParams{max_chars});
        daskwp::reset_word_cache(ctx, cache.get());
        const std::string where = vocab_names[vi] + " x norm" + std::to_string(ni);
        // Corpus lines with the real vocabularies; the random documents with all.
        if (real_vocab) {
          for (size_t d = 0; d < corpus_docs.size(); ++d) {
            std::vector<int32_t> ids =
                check_document(ctx, cache.get(), corpus_docs[d], where + " corpus doc " +
                                                                      std::to_string(d));
            if (ids_out && vi == 0 && ni == 0) {
              const int64_t n = static_cast<int64_t>(ids.size());
              std::fwrite(&n, sizeof(n), 1, ids_out);
              if (n) std::fwrite(ids.data(), sizeof(int32_t), ids.size(), ids_out);
            }
            if (vi == 0 && ni == 0 && d % 7 == 0) check_windows(ids, d, where);
          }
        }
        for (size_t d = 0; d < random_docs.size(); ++d) {
          std::vector<int32_t> ids = check_document(
              ctx, cache.get(), random_docs[d], where + " random doc " + std::to_string(d));
          if (ni == 0 && d % 5 == 0) check_windows(ids, d, where);
        }
      }
    }
    if (ids_out) std::fclose(ids_out);
    std::printf("OK documents=%llu bytes=%llu tokens=%llu window_rows=%llu vocabularies=%zu "
                "norms=%zu\n",
                static_cast<unsigned long long>(g_docs), static_cast<unsigned long long>(g_bytes),
                static_cast<unsigned long long>(g_tokens), static_cast<unsigned long long>(g_rows),
                vocabs.size(), norms.size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "asan_driver: error: %s\n", e.what());
    return 1;
  }
}
