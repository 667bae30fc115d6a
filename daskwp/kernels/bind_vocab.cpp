// daskwp — binding of the vocabulary builder (vocab_builder.cpp) and the blob version.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "common.hpp"
#include "vocab_builder.hpp"

namespace {

nb::bytes build_vocab(nb::bytes tokens_utf8, I64 token_offsets, I32 ids, int32_t unk_id,
                      std::string prefix, std::vector<std::string> specials,
                      std::vector<int32_t> special_ids) {
  daskwp::VocabBuildInput in;
  const char* base = tokens_utf8.c_str();
  const size_t n = ids.shape(0);
  if (token_offsets.shape(0) != n + 1)
    throw std::invalid_argument("token_offsets must have len(ids) + 1 entries");
  in.tokens.reserve(n);
  for (size_t k = 0; k < n; ++k)
    in.tokens.emplace_back(base + token_offsets(k), token_offsets(k + 1) - token_offsets(k));
  in.ids.assign(ids.data(), ids.data() + n);
  in.unk_id = unk_id;
  in.continuing_subword_prefix = std::move(prefix);
  in.specials = std::move(specials);
  in.special_ids = std::move(special_ids);
  std::vector<uint8_t> blob;
  {
    nb::gil_scoped_release release;
    blob = daskwp::build_vocab_blob(in);
  }
  return nb::bytes(reinterpret_cast<const char*>(blob.data()), blob.size());
}

}  // namespace

void bind_vocab(nb::module_& m) {
  m.def("build_vocab", &build_vocab, nb::arg("tokens_utf8"), nb::arg("token_offsets"),
        nb::arg("ids"), nb::arg("unk_id"), nb::arg("continuing_subword_prefix"),
        nb::arg("specials"), nb::arg("special_ids"),
        "Compile a vocabulary into the flat trie blob (bytes).");
  m.attr("BLOB_VERSION") = daskwp::kBlobVersion;
}
