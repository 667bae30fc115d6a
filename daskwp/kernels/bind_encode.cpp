// daskwp — binding of the CPU batch loop (cpu_batch.cpp): encode32 / encode64 check their
// inputs, release the GIL for the batch and hand the outputs to NumPy without a copy; and
// the benchmarks' throughput ceiling.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "bind_batch.hpp"

namespace {

template <typename OffArr, typename Off>
nb::tuple encode_impl(U8 vocab_blob, U8 norm_blob, int32_t max_chars, OffArr offsets,
                      U8 data, nb::object validity_obj, int64_t validity_offset,
                      int num_threads, uint64_t cache_key, int32_t offsets_unit,
                      bool word_ids) {
  const daskwp::BatchInput in =
      daskwp::check_batch_input(vocab_blob, norm_blob, offsets, data, validity_obj,
                                validity_offset);
  const int64_t n_docs = in.n_docs;
  if (offsets_unit < 0 || offsets_unit > daskwp::kOffsetsChars)
    throw std::invalid_argument("offsets_unit must be 0 (none), 1 (bytes) or 2 (chars)");
  daskwp::EncodeExtras extras;
  extras.offsets = offsets_unit;
  extras.word_ids = word_ids;
  daskwp::TokenizeParams p{max_chars};
  daskwp::EncodedBatch r;
  {
    nb::gil_scoped_release release;
    r = daskwp::encode_batch<Off>(vocab_blob.data(), norm_blob.data(), p, offsets.data(),
                                  data.data(), in.validity, validity_offset, n_docs,
                                  num_threads, cache_key, extras);
  }
  const size_t n_ids = static_cast<size_t>(r.n_ids);
  if (!offsets_unit && !word_ids)
    return nb::make_tuple(
        daskwp::to_numpy(std::move(r.ids), n_ids),
        daskwp::to_numpy(std::move(r.offsets), static_cast<size_t>(n_docs + 1)), r.unknown);
  nb::object spans = nb::none(), words = nb::none();
  if (offsets_unit) {
    int64_t* raw = r.spans.release();
    nb::capsule owner(raw, [](void* q) noexcept { daskwp::host_free(q); });
    spans = nb::cast(nb::ndarray<nb::numpy, int64_t, nb::ndim<2>>(raw, {n_ids, 2}, owner));
  }
  if (word_ids) words = nb::cast(daskwp::to_numpy(std::move(r.words), n_ids));
  return nb::make_tuple(daskwp::to_numpy(std::move(r.ids), n_ids),
                        daskwp::to_numpy(std::move(r.offsets), static_cast<size_t>(n_docs + 1)),
                        spans, words, r.unknown);
}

// The throughput ceiling for benchmarks: one pass that reads every byte and writes it
// lowercased (OR 0x20 on ASCII letters) into a scratch buffer, 64 KB at a time.
uint64_t ceiling_pass(U8 data) {
  const uint8_t* p = data.data();
  const size_t n = data.shape(0);
  uint64_t sum = 0;
  nb::gil_scoped_release release;
  std::vector<uint8_t> scratch(1 << 16);
  for (size_t at = 0; at < n; at += scratch.size()) {
    const size_t m = std::min(scratch.size(), n - at);
    for (size_t k = 0; k < m; ++k) {
      const uint8_t c = p[at + k];
      scratch[k] = static_cast<uint8_t>(c | ((static_cast<unsigned>(c - 'A') < 26u) ? 0x20 : 0));
    }
    sum += scratch[m / 2] + m;
  }
  return sum;
}

}  // namespace

void bind_encode(nb::module_& m) {
  m.def("ceiling_pass", &ceiling_pass, nb::arg("data"),
        "Benchmark ceiling: lowercase every byte into a scratch buffer; returns a checksum.");
  m.def("helper_thread_cpu_seconds", &daskwp::helper_thread_cpu_seconds,
        "CPU seconds of the threads the kernel spawned for the calling thread's calls, "
        "a running total (add it to time.thread_time() for the thread's whole CPU).");
  m.def("encode32", &encode_impl<I32, int32_t>, nb::arg("vocab_blob"), nb::arg("norm_blob"),
        nb::arg("max_input_chars_per_word"), nb::arg("offsets"), nb::arg("data"),
        nb::arg("validity").none(), nb::arg("validity_offset"), nb::arg("num_threads"),
        nb::arg("cache_key") = 0, nb::arg("offsets_unit") = 0, nb::arg("word_ids") = false,
        "Tokenize Arrow string buffers (int32 offsets); returns (token_ids, offsets, unknown: "
        "how many ids are the vocabulary blob's unk_id, counted as they were written). "
        "cache_key != 0: word memos from the process-wide pool, kept for later calls with "
        "the same key (equal keys must mean equal blobs and max_input_chars_per_word). "
        "offsets_unit 1 (bytes) / 2 (chars) and / or word_ids: returns (token_ids, offsets, "
        "spans (tokens x 2 int64 or None), word ids (int32 or None), unknown), docs/design.md 2.9.");
  m.def("encode64", &encode_impl<I64, int64_t>, nb::arg("vocab_blob"), nb::arg("norm_blob"),
        nb::arg("max_input_chars_per_word"), nb::arg("offsets"), nb::arg("data"),
        nb::arg("validity").none(), nb::arg("validity_offset"), nb::arg("num_threads"),
        nb::arg("cache_key") = 0, nb::arg("offsets_unit") = 0, nb::arg("word_ids") = false,
        "Tokenize Arrow large-string buffers (int64 offsets); returns (token_ids, offsets, "
        "unknown). "
        "cache_key, offsets_unit, word_ids: as encode32.");
}
