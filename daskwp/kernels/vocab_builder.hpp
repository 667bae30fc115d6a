// daskwp — builds the compiled vocabulary blob (host only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace daskwp {

struct VocabBuildInput {
  // Token strings (UTF-8) and their ids, one entry per distinct token.
  std::vector<std::string> tokens;
  std::vector<int32_t> ids;
  int32_t unk_id = -1;
  std::string continuing_subword_prefix = "##";
  // Literal special tokens matched in the raw text, with their ids.
  std::vector<std::string> specials;
  std::vector<int32_t> special_ids;
};

// Builds the trie, computes LinMaxMatch failure links and failure pops breadth-first, and
// lays everything out as one flat blob (see model.hpp). Throws std::invalid_argument on
// bad input.
std::vector<uint8_t> build_vocab_blob(const VocabBuildInput& in);

}  // namespace daskwp
