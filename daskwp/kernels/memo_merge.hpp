// daskwp — merging two word memos (host only).
//
// The threads of one multi-threaded call each fill their own memo with the words of the
// chunks they happen to get, so the next call's threads would miss on each other's words.
// Before a large call the CPU loop's pool (cpu_batch.cpp, pool_merge) merges the idle memos
// that one call made: one pass over both memos' short and mid tables that fills each set's
// empty ways with the other memo's inline entries of that set. What a memo holds already
// stays; arena references, and entries moved to a second-choice set, stay in their own
// memo (docs/design.md, "Memo merge").
#pragma once

#include "memo_hashing.hpp"

namespace daskwp {

// Fills the empty ways of the two-way set d (short or mid) with the inline entries of the
// other memo's same set `from` that d lacks and whose own set d is (`home(e)`: not ones
// moved to a second set). References into an arena (n_tokens kInLong) stay behind.
template <typename Entry, typename Home>
inline void fill_empty_ways(Entry* d, const Entry* from, Home home) {
  auto empty = [](const Entry& e) { return (e.key[0] | e.key[1]) == 0; };
  auto same = [](const Entry& p, const Entry& q) {
    return std::memcmp(p.key, q.key, sizeof(p.key)) == 0;
  };
  for (int w = 0; w < 2; ++w) {
    const Entry& e = from[w];
    if (empty(e) || e.n_tokens == kInLong || same(d[0], e) || same(d[1], e) || home(e) != d)
      continue;
    if (empty(d[0])) {
      d[0] = e;
    } else if (empty(d[1])) {
      d[1] = e;
    }
  }
}

// Two memos of one key and layout that the threads of one call filled, each with the
// words of the chunks its thread happened to get: after merge_memos each also holds the
// other's inline short and mid entries where its sets have room (what it already holds
// stays; arena references stay in their own memo, as do entries moved to a second set).
// One pass over both tables.
inline void merge_memos(WordCache& a, WordCache& b) {
  if (a.bits != b.bits || a.offsets_unit != b.offsets_unit) return;
  auto short_home = [](const WordCache& m) {
    return [&m](const WordCacheEntry& e) { return short_set(m, e.key[0], e.key[1]); };
  };
  auto mid_home = [](const WordCache& m) {
    return [&m](const MidEntry& e) {
      return mid_set(m, mid_hash(e.key[0], e.key[1], e.key[2], e.key[3]));
    };
  };
  const uint64_t sets = uint64_t(1) << (a.bits - 1);
  for (uint64_t s = 0; s < sets; ++s) {
    fill_empty_ways(a.entries + 2 * s, b.entries + 2 * s, short_home(a));
    fill_empty_ways(b.entries + 2 * s, a.entries + 2 * s, short_home(b));
  }
  if (a.offsets_unit) return;  // (its mid entries are all arena references)
  const uint64_t mid_sets = uint64_t(1) << (a.mid_bits - 1);
  for (uint64_t s = 0; s < mid_sets; ++s) {
    fill_empty_ways(a.mid + 2 * s, b.mid + 2 * s, mid_home(a));
    fill_empty_ways(b.mid + 2 * s, a.mid + 2 * s, mid_home(b));
  }
}

}  // namespace daskwp
