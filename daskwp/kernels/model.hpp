// daskwp — layout of the two compiled, immutable blobs the tokenizer reads.
//
// Both blobs are flat byte buffers built once on the host (vocab_builder.cpp for the
// vocabulary trie, daskwp/normalize.py for the normalization tables) and read by the same
// host+device code on the CPU and the GPU. Every section starts on an 8-byte boundary and
// is addressed by a byte offset stored in the header, so the blob can be copied, pickled,
// hashed and uploaded to a device as is.
#pragma once

#include "common.hpp"

namespace daskwp {

// ---------------------------------------------------------------------------------------
// Vocabulary blob: a byte trie over all tokens with LinMaxMatch failure links and failure
// pops (Song et al. 2021). Node 0 is the root; `suffix_root` is the node of the continuing
// subword prefix ("##"), from which suffix tokens hang. Children of a node are contiguous
// and sorted by edge byte, so a child is found by scanning/bisecting `labels`.
// ---------------------------------------------------------------------------------------
struct VocabHeader {
  uint32_t magic;        // kVocabMagic
  uint32_t version;      // kBlobVersion
  uint32_t n_nodes;
  int32_t suffix_root;   // node of the continuing-subword prefix
  int32_t unk_id;        // id of the unknown token
  int32_t n_specials;    // literal special tokens matched in the raw text
  uint32_t n_pops;       // length of the failure-pops pool
  uint32_t max_special_bytes;
  uint64_t off_nodes;            // TrieNode[n_nodes]
  uint64_t off_labels;           // uint8[n_nodes]: byte on the edge into the node
  uint64_t off_pops;             // int32[n_pops]
  uint64_t off_special_offsets;  // int32[n_specials + 1], sorted by length, longest first
  uint64_t off_special_ids;      // int32[n_specials]
  uint64_t off_special_bytes;    // uint8[...]
  uint64_t off_special_first;    // uint8[256]: 1 when some special token starts with the byte
  uint64_t off_bitmaps;          // uint64[kBitmapWords * n]: child bitmaps (> 4 children)
  uint64_t off_hot;              // HotNode[n_nodes]: child lookup data
  uint32_t n_special_nodes;      // nodes of the special-token trie (>= 1: the root)
  uint32_t id_limit;             // 1 + the largest id it emits (0: not recorded)
  uint64_t off_special_nodes;    // SpecialNode[n_special_nodes]: the special-token trie
  uint64_t off_special_labels;   // uint8[n_special_nodes]: byte on the edge into the node
  uint64_t off_pops_bytes;       // int32[n_pops]: bytes of the word each failure pop covers
  uint64_t total_bytes;
};

// The literal special tokens as a byte trie (node 0 the root; the children of a node are
// contiguous and sorted by their label), so that the longest special token at a position
// costs one step per byte of the longest prefix it shares with some special token: flat in
// the number of special tokens. `id` >= 0 where a special token ends.
struct SpecialNode {
  int32_t first_child;
  int32_t n_child;
  int32_t id;
};

// The per-byte walk touches only `hot[node]` (16 bytes a node, so the walk's working set
// stays in cache): `link` = first_child | (kind << 28), kind = n_child when <= 4 (the
// labels are then in `labels`, byte k = child k) or kHotBitmap (`labels` indexes the
// node's 256-bit child bitmap; the child is first_child + rank of the bit). `token` ends a
// word in one step (its failure pops are [token], its link the suffix root); `fail` is the
// failure link (-1 none). TrieNode holds the failure pops.
struct HotNode {
  uint32_t link;
  uint32_t labels;
  int32_t token;
  int32_t fail;
};
constexpr uint32_t kHotBitmap = 15u;
constexpr uint32_t kHotChildMask = 0x0FFFFFFFu;

// 32 bytes: two nodes per cache line.
// A child bitmap: 4 words of 64 bits, then the 4 prefix popcounts packed in bytes.
constexpr uint32_t kBitmapWords = 5u;

// The cold part of a node, read only when a failure link is taken: its failure pops.
struct TrieNode {
  int32_t pops_off;  // failure pops: pool[pops_off, pops_off + pops_len)
  int32_t pops_len;
};

struct VocabView {
  const VocabHeader* h;
  const TrieNode* nodes;
  const uint8_t* labels;
  const int32_t* pops;
  const int32_t* special_offsets;
  const int32_t* special_ids;
  const uint8_t* special_bytes;
  const uint8_t* special_first;
  const uint64_t* bitmaps;
  const HotNode* hot;
  const SpecialNode* special_nodes;
  const uint8_t* special_labels;
};

// The word bytes each failure pop covers, parallel to pops (read only with offsets, so it
// is not part of the view the walk copies).
DWP_HD inline const int32_t* vocab_pops_bytes(const VocabView& v) {
  return reinterpret_cast<const int32_t*>(reinterpret_cast<const uint8_t*>(v.h) +
                                          v.h->off_pops_bytes);
}

DWP_HD inline VocabView make_vocab_view(const uint8_t* blob) {
  VocabView v;
  v.h = reinterpret_cast<const VocabHeader*>(blob);
  v.nodes = reinterpret_cast<const TrieNode*>(blob + v.h->off_nodes);
  v.labels = blob + v.h->off_labels;
  v.pops = reinterpret_cast<const int32_t*>(blob + v.h->off_pops);
  v.special_offsets = reinterpret_cast<const int32_t*>(blob + v.h->off_special_offsets);
  v.special_ids = reinterpret_cast<const int32_t*>(blob + v.h->off_special_ids);
  v.special_bytes = blob + v.h->off_special_bytes;
  v.special_first = blob + v.h->off_special_first;
  v.bitmaps = reinterpret_cast<const uint64_t*>(blob + v.h->off_bitmaps);
  v.hot = reinterpret_cast<const HotNode*>(blob + v.h->off_hot);
  v.special_nodes = reinterpret_cast<const SpecialNode*>(blob + v.h->off_special_nodes);
  v.special_labels = blob + v.h->off_special_labels;
  return v;
}

// ---------------------------------------------------------------------------------------
// Normalization blob: one 32-bit entry per code point, stored as a two-level table
// (block_index[cp >> 8] selects a 256-entry block). The entry already reflects the
// tokenizer's flags (clean_text, handle_chinese_chars, strip_accents, lowercase):
//   bits 0-1  pre-tokenizer class of the code point as an OUTPUT character
//             (0 other, 1 whitespace, 2 punctuation)
//   bit 2     removed (clean_text: control, format, U+0000, U+FFFD ...)
//   bit 3     replaced by a space (clean_text whitespace)
//   bit 4     isolated as its own word (handle_chinese_chars)
//   bit 5     mapped: output is map_utf8[map_offsets[i], map_offsets[i+1]),
//             i = entry >> 8 (lowercase and/or accent stripping)
//   bit 6     (accent stripping only) as an OUTPUT character: a combining mark that
//             survives stripping (canonical combining class > 0); NFD's canonical
//             reordering may move it across code points, so it waits in a small buffer
//   bit 7     (accent stripping only) stripped to nothing but a non-starter: does not end
//             a run of combining marks
// ---------------------------------------------------------------------------------------
constexpr uint32_t kClassMask = 3u;
constexpr uint32_t kClassOther = 0u;
constexpr uint32_t kClassSpace = 1u;
constexpr uint32_t kClassPunct = 2u;
constexpr uint32_t kRemove = 4u;
constexpr uint32_t kToSpace = 8u;
constexpr uint32_t kIsolate = 16u;
constexpr uint32_t kMapped = 32u;
constexpr uint32_t kMarkPending = 64u;
constexpr uint32_t kNonStarterGone = 128u;
constexpr uint32_t kMapShift = 8u;

struct NormHeader {
  uint32_t magic;    // kNormMagic
  uint32_t version;  // kBlobVersion
  uint32_t n_blocks;
  uint32_t n_maps;
  uint32_t flags;    // bit0 clean_text, bit1 handle_chinese_chars, bit2 strip, bit3 lower
  uint32_t reserved;
  uint64_t off_ascii;        // uint8[256]: ASCII fast path, kind[128] then byte[128]
  uint64_t off_ccc_cps;      // uint32[n_ccc]: sorted code points with bit 6
  uint64_t off_ccc_vals;     // uint8[n_ccc]: their canonical combining classes
  uint32_t n_ccc;
  uint32_t reserved2;
  uint64_t off_block_index;  // uint16[0x1100]
  uint64_t off_blocks;       // uint32[n_blocks * 256]
  uint64_t off_map_offsets;  // int32[n_maps + 1]
  uint64_t off_map_utf8;     // uint8[...]
  uint64_t total_bytes;
};

// ASCII fast-path kinds (NormHeader::off_ascii): what one ASCII input byte does.
constexpr uint8_t kAsciiSlow = 0;    // take the general path
constexpr uint8_t kAsciiFeed = 1;    // append ascii_byte[c] to the current word
constexpr uint8_t kAsciiSpace = 2;   // ends the current word
constexpr uint8_t kAsciiPunct = 3;   // a one-character word ascii_byte[c]
constexpr uint8_t kAsciiRemove = 4;  // dropped (clean_text)

struct NormView {
  const NormHeader* h;
  const uint8_t* ascii_kind;
  const uint8_t* ascii_byte;
  const uint16_t* block_index;
  const uint32_t* blocks;
  const int32_t* map_offsets;
  const uint8_t* map_utf8;
  const uint32_t* ccc_cps;
  const uint8_t* ccc_vals;
};

DWP_HD inline NormView make_norm_view(const uint8_t* blob) {
  NormView n;
  n.h = reinterpret_cast<const NormHeader*>(blob);
  n.block_index = reinterpret_cast<const uint16_t*>(blob + n.h->off_block_index);
  n.blocks = reinterpret_cast<const uint32_t*>(blob + n.h->off_blocks);
  n.map_offsets = reinterpret_cast<const int32_t*>(blob + n.h->off_map_offsets);
  n.map_utf8 = blob + n.h->off_map_utf8;
  n.ascii_kind = blob + n.h->off_ascii;
  n.ascii_byte = blob + n.h->off_ascii + 128;
  n.ccc_cps = reinterpret_cast<const uint32_t*>(blob + n.h->off_ccc_cps);
  n.ccc_vals = blob + n.h->off_ccc_vals;
  return n;
}

DWP_HD DWP_FORCEINLINE uint32_t norm_entry(const NormView& n, uint32_t cp) {
  return n.blocks[(uint32_t)n.block_index[cp >> 8] * 256u + (cp & 255u)];
}

// Per-call parameters that are not part of either blob.
struct TokenizeParams {
  int32_t max_input_chars_per_word;  // a longer word (in normalized characters) is [UNK]
};

}  // namespace daskwp
