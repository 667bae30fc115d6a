// daskwp — vocabulary builder: trie + LinMaxMatch failure links and pops.
//
// For a trie node v with string str(v), the failure pops F(v) are the tokens greedy
// longest-match-first pops from the front of str(v) when str(v) cannot be extended, and the
// failure link f(v) is the node of what is left (prefixed with "##"). Computed
// breadth-first from the parent u of v = child(u, c):
//   v is the root or the suffix root          -> f = none
//   str(v) is a token                          -> F = [token(v)], f = suffix root
//   otherwise: z = f(u), F = F(u); while z exists and has no child c: F += F(z), z = f(z);
//              f = child(z, c) when z exists, else none.
#include "vocab_builder.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "model.hpp"

namespace daskwp {
namespace {

struct BuildNode {
  std::vector<std::pair<uint8_t, int32_t>> kids;
  int32_t token = -1;
};

int32_t find_or_add(std::vector<BuildNode>& nodes, int32_t at, uint8_t c) {
  for (const auto& kv : nodes[at].kids)
    if (kv.first == c) return kv.second;
  const int32_t id = static_cast<int32_t>(nodes.size());
  nodes[at].kids.emplace_back(c, id);
  nodes.emplace_back();
  return id;
}

int32_t insert(std::vector<BuildNode>& nodes, const std::string& s) {
  int32_t at = 0;
  for (unsigned char c : s) at = find_or_add(nodes, at, c);
  return at;
}

size_t align8(size_t x) { return (x + 7) & ~size_t(7); }

}  // namespace

std::vector<uint8_t> build_vocab_blob(const VocabBuildInput& in) {
  if (in.tokens.size() != in.ids.size())
    throw std::invalid_argument("tokens and ids differ in length");
  if (in.unk_id < 0) throw std::invalid_argument("the unknown token has no id");
  if (in.continuing_subword_prefix.empty())
    throw std::invalid_argument("continuing_subword_prefix must not be empty");
  if (in.specials.size() != in.special_ids.size())
    throw std::invalid_argument("specials and special_ids differ in length");

  // 1. Build the trie with growable nodes.
  std::vector<BuildNode> b(1);
  b.reserve(in.tokens.size() * 4 + 16);
  const std::string& prefix = in.continuing_subword_prefix;
  for (size_t k = 0; k < in.tokens.size(); ++k) {
    const std::string& t = in.tokens[k];
    // The empty string and the bare prefix can never be produced by WordPiece (a piece
    // always covers at least one character), so they take no place in the trie.
    if (t.empty() || t == prefix) continue;
    const int32_t node = insert(b, t);
    b[node].token = in.ids[k];
  }
  const int32_t old_suffix_root = insert(b, prefix);

  // 2. Renumber breadth-first so that the children of a node are contiguous and sorted.
  const size_t n = b.size();
  std::vector<int32_t> order;  // new index -> old index
  order.reserve(n);
  std::vector<int32_t> new_of(n, -1);
  order.push_back(0);
  new_of[0] = 0;
  std::vector<int32_t> first_child(n, 0), n_child(n, 0);
  std::vector<uint8_t> labels(n, 0);
  for (size_t head = 0; head < order.size(); ++head) {
    BuildNode& node = b[order[head]];
    std::sort(node.kids.begin(), node.kids.end());
    first_child[head] = static_cast<int32_t>(order.size());
    n_child[head] = static_cast<int32_t>(node.kids.size());
    for (const auto& kv : node.kids) {
      new_of[kv.second] = static_cast<int32_t>(order.size());
      labels[order.size()] = kv.first;
      order.push_back(kv.second);
    }
  }
  const int32_t suffix_root = new_of[old_suffix_root];

  auto child = [&](int32_t u, uint8_t c) -> int32_t {
    int32_t lo = first_child[u], hi = first_child[u] + n_child[u];
    while (lo < hi) {
      const int32_t mid = (lo + hi) >> 1;
      if (labels[mid] == c) return mid;
      if (labels[mid] < c) lo = mid + 1; else hi = mid;
    }
    return -1;
  };

  // 3. Failure links and pops, breadth-first (parents before children).
  std::vector<int32_t> token(n), fail(n, -1), pops_off(n, 0), pops_len(n, 0);
  std::vector<int32_t> pool, pool_bytes;  // pops, and the word bytes each covers
  pool.reserve(n);
  // Depth of every node and whether it hangs under the suffix root (parents come first).
  std::vector<int32_t> depth(n, 0);
  std::vector<uint8_t> under(n, 0);
  for (int32_t u = 0; u < static_cast<int32_t>(n); ++u)
    for (int32_t v = first_child[u]; v < first_child[u] + n_child[u]; ++v) {
      depth[v] = depth[u] + 1;
      under[v] = under[u] || v == suffix_root;
    }
  const int32_t prefix_depth = depth[suffix_root];
  for (size_t i = 0; i < n; ++i) token[i] = b[order[i]].token;
  std::vector<int32_t> scratch, scratch_bytes;
  for (int32_t u = 0; u < static_cast<int32_t>(n); ++u) {
    for (int32_t v = first_child[u]; v < first_child[u] + n_child[u]; ++v) {
      const uint8_t c = labels[v];
      if (v == suffix_root) continue;  // f = none
      if (token[v] >= 0) {
        pops_off[v] = static_cast<int32_t>(pool.size());
        pops_len[v] = 1;
        pool.push_back(token[v]);
        pool_bytes.push_back(depth[v] - (under[v] ? prefix_depth : 0));
        fail[v] = suffix_root;
        continue;
      }
      if (u == 0 || u == suffix_root) continue;  // f(u) = none
      scratch.assign(pool.begin() + pops_off[u], pool.begin() + pops_off[u] + pops_len[u]);
      scratch_bytes.assign(pool_bytes.begin() + pops_off[u],
                           pool_bytes.begin() + pops_off[u] + pops_len[u]);
      int32_t z = fail[u];
      while (z >= 0 && child(z, c) < 0) {
        scratch.insert(scratch.end(), pool.begin() + pops_off[z],
                       pool.begin() + pops_off[z] + pops_len[z]);
        scratch_bytes.insert(scratch_bytes.end(), pool_bytes.begin() + pops_off[z],
                             pool_bytes.begin() + pops_off[z] + pops_len[z]);
        z = fail[z];
      }
      if (z < 0) continue;
      fail[v] = child(z, c);
      pops_off[v] = static_cast<int32_t>(pool.size());
      pops_len[v] = static_cast<int32_t>(scratch.size());
      pool.insert(pool.end(), scratch.begin(), scratch.end());
      pool_bytes.insert(pool_bytes.end(), scratch_bytes.begin(), scratch_bytes.end());
    }
  }
  if (pool.size() > 0x7fffffffu) throw std::invalid_argument("vocabulary too large");

  // 4. Special tokens: a flat list, longest first (ties in byte order, so the blob does not
  // depend on the input order), and a byte trie for the leftmost-longest match in the raw
  // text, breadth-first with sorted children like the vocabulary trie.
  std::vector<size_t> sp(in.specials.size());
  for (size_t k = 0; k < sp.size(); ++k) {
    if (in.specials[k].empty()) throw std::invalid_argument("empty special token");
    sp[k] = k;
  }
  std::sort(sp.begin(), sp.end(), [&](size_t a, size_t c) {
    const std::string &x = in.specials[a], &y = in.specials[c];
    return x.size() != y.size() ? x.size() > y.size() : x < y;
  });
  size_t special_bytes = 0, max_special = 0;
  for (const auto& s : in.specials) {
    special_bytes += s.size();
    max_special = std::max(max_special, s.size());
  }
  if (special_bytes > 0x7fffffffu) throw std::invalid_argument("special tokens too large");
  std::vector<BuildNode> st(1);
  st.reserve(special_bytes + 1);
  for (size_t k = 0; k < sp.size(); ++k) {
    const int32_t node = insert(st, in.specials[sp[k]]);
    if (st[node].token < 0) st[node].token = in.special_ids[sp[k]];  // the first of equals
  }
  std::vector<int32_t> st_order(1, 0), st_first(st.size(), 0), st_count(st.size(), 0);
  std::vector<uint8_t> st_labels(st.size(), 0);
  st_order.reserve(st.size());
  for (size_t head = 0; head < st_order.size(); ++head) {
    BuildNode& node = st[st_order[head]];
    std::sort(node.kids.begin(), node.kids.end());
    st_first[head] = static_cast<int32_t>(st_order.size());
    st_count[head] = static_cast<int32_t>(node.kids.size());
    for (const auto& kv : node.kids) {
      st_labels[st_order.size()] = kv.first;
      st_order.push_back(kv.second);
    }
  }
  const size_t n_st = st_order.size();

  // 5. Lay out the blob.
  VocabHeader h;
  std::memset(&h, 0, sizeof(h));
  h.magic = kVocabMagic;
  h.version = kBlobVersion;
  h.n_nodes = static_cast<uint32_t>(n);
  h.suffix_root = suffix_root;
  h.unk_id = in.unk_id;
  h.n_specials = static_cast<int32_t>(sp.size());
  h.n_pops = static_cast<uint32_t>(pool.size());
  h.max_special_bytes = static_cast<uint32_t>(max_special);
  // Every id the core emits is a token's, the unknown token's or a special token's (the
  // word memo stores ids in 16 bits below 2^16).
  int64_t max_id = in.unk_id;
  for (const int32_t id : in.ids) max_id = std::max<int64_t>(max_id, id);
  for (const int32_t id : in.special_ids) max_id = std::max<int64_t>(max_id, id);
  h.id_limit = static_cast<uint32_t>(std::min<int64_t>(max_id + 1, UINT32_MAX));
  size_t off = align8(sizeof(VocabHeader));
  h.off_nodes = off; off = align8(off + n * sizeof(TrieNode));
  h.off_labels = off; off = align8(off + n);
  h.off_pops = off; off = align8(off + pool.size() * 4);
  h.off_special_offsets = off; off = align8(off + (sp.size() + 1) * 4);
  h.off_special_ids = off; off = align8(off + sp.size() * 4);
  h.off_special_bytes = off; off = align8(off + special_bytes);
  h.off_special_first = off; off = align8(off + 256);
  int32_t n_bitmaps = 0;
  std::vector<int32_t> bitmap_of(n, -1);
  for (size_t i = 0; i < n; ++i)
    if (n_child[i] > 4) bitmap_of[i] = n_bitmaps++;
  h.off_bitmaps = off; off = align8(off + size_t(n_bitmaps) * kBitmapWords * 8);
  h.off_hot = off; off = align8(off + n * sizeof(HotNode));
  h.n_special_nodes = static_cast<uint32_t>(n_st);
  h.off_special_nodes = off; off = align8(off + n_st * sizeof(SpecialNode));
  h.off_special_labels = off; off = align8(off + n_st);
  h.off_pops_bytes = off; off = align8(off + pool.size() * 4);
  h.total_bytes = off;
  if (n > kHotChildMask) throw std::invalid_argument("vocabulary trie too large");

  std::vector<uint8_t> blob(off, 0);
  std::memcpy(blob.data(), &h, sizeof(h));
  auto* nodes = reinterpret_cast<TrieNode*>(blob.data() + h.off_nodes);
  auto* bitmaps = reinterpret_cast<uint64_t*>(blob.data() + h.off_bitmaps);
  auto* hot = reinterpret_cast<HotNode*>(blob.data() + h.off_hot);
  for (size_t i = 0; i < n; ++i) {
    uint32_t small = 0;
    if (n_child[i] <= 4) {
      for (int32_t k = 0; k < n_child[i]; ++k)
        small |= uint32_t(labels[first_child[i] + k]) << (8 * k);
    } else {
      uint64_t* bm = bitmaps + size_t(bitmap_of[i]) * kBitmapWords;
      for (int32_t k = 0; k < n_child[i]; ++k) {
        const uint8_t c = labels[first_child[i] + k];
        bm[c >> 6] |= uint64_t(1) << (c & 63);
      }
      uint64_t prefix = 0, below = 0;
      for (int w = 0; w < 4; ++w) {
        prefix |= below << (8 * w);
        below += static_cast<uint64_t>(__builtin_popcountll(bm[w]));
      }
      bm[4] = prefix;
    }
    nodes[i] = TrieNode{pops_off[i], pops_len[i]};
    const uint32_t kind = n_child[i] <= 4 ? uint32_t(n_child[i]) : kHotBitmap;
    const uint32_t high = n_child[i] <= 4 ? small : uint32_t(bitmap_of[i]);
    hot[i] = HotNode{(kind << 28) | uint32_t(first_child[i]), high, token[i], fail[i]};
  }
  std::memcpy(blob.data() + h.off_labels, labels.data(), n);
  if (!pool.empty()) {
    std::memcpy(blob.data() + h.off_pops, pool.data(), pool.size() * 4);
    std::memcpy(blob.data() + h.off_pops_bytes, pool_bytes.data(), pool.size() * 4);
  }
  auto* sp_off = reinterpret_cast<int32_t*>(blob.data() + h.off_special_offsets);
  auto* sp_ids = reinterpret_cast<int32_t*>(blob.data() + h.off_special_ids);
  uint8_t* sp_bytes = blob.data() + h.off_special_bytes;
  uint8_t* sp_first = blob.data() + h.off_special_first;
  int32_t pos = 0;
  for (size_t k = 0; k < sp.size(); ++k) {
    const std::string& s = in.specials[sp[k]];
    sp_off[k] = pos;
    sp_ids[k] = in.special_ids[sp[k]];
    std::memcpy(sp_bytes + pos, s.data(), s.size());
    pos += static_cast<int32_t>(s.size());
    sp_first[static_cast<uint8_t>(s[0])] = 1;
  }
  sp_off[sp.size()] = pos;
  auto* st_nodes = reinterpret_cast<SpecialNode*>(blob.data() + h.off_special_nodes);
  for (size_t i = 0; i < n_st; ++i)
    st_nodes[i] = SpecialNode{st_first[i], st_count[i], st[st_order[i]].token};
  std::memcpy(blob.data() + h.off_special_labels, st_labels.data(), n_st);
  return blob;
}

}  // namespace daskwp
