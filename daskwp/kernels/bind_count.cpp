// daskwp — binding of the count-only CPU loop (count_batch.cpp): count32 / count64 check
// their inputs as encode32 / encode64 do, release the GIL for the batch and return the
// documents' lengths in tokens (NumPy, no copy) with the [UNK] total.
#include <cstdint>
#include <utility>

#include "bind_batch.hpp"

namespace {

template <typename OffArr, typename Off>
nb::tuple count_impl(U8 vocab_blob, U8 norm_blob, int32_t max_chars, OffArr offsets, U8 data,
                     nb::object validity_obj, int64_t validity_offset, int num_threads,
                     uint64_t cache_key) {
  const daskwp::BatchInput in = daskwp::check_batch_input(vocab_blob, norm_blob, offsets, data,
                                                          validity_obj, validity_offset);
  daskwp::TokenizeParams p{max_chars};
  daskwp::CountedBatch r;
  {
    nb::gil_scoped_release release;
    r = daskwp::count_batch<Off>(vocab_blob.data(), norm_blob.data(), p, offsets.data(),
                                 data.data(), in.validity, validity_offset, in.n_docs,
                                 num_threads, cache_key);
  }
  return nb::make_tuple(daskwp::to_numpy(std::move(r.lengths), static_cast<size_t>(in.n_docs)),
                        r.tokens, r.unknown);
}

}  // namespace

void bind_count(nb::module_& m) {
  m.def("count32", &count_impl<I32, int32_t>, nb::arg("vocab_blob"), nb::arg("norm_blob"),
        nb::arg("max_input_chars_per_word"), nb::arg("offsets"), nb::arg("data"),
        nb::arg("validity").none(), nb::arg("validity_offset"), nb::arg("num_threads"),
        nb::arg("cache_key") = 0,
        "Count the tokens of Arrow string buffers (int32 offsets) as encode32 tokenizes "
        "them, without the ids: returns (lengths (int64, tokens per document), tokens, "
        "unknown (tokens equal to the vocabulary blob's unk_id)). cache_key: as encode32.");
  m.def("count64", &count_impl<I64, int64_t>, nb::arg("vocab_blob"), nb::arg("norm_blob"),
        nb::arg("max_input_chars_per_word"), nb::arg("offsets"), nb::arg("data"),
        nb::arg("validity").none(), nb::arg("validity_offset"), nb::arg("num_threads"),
        nb::arg("cache_key") = 0,
        "count32 for Arrow large-string buffers (int64 offsets).");
}
