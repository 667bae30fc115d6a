// daskwp — binding of the host output-memory pool (host_pool.cpp).
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "cpu_batch.hpp"
#include "host_pool.hpp"

void bind_memory(nb::module_& m) {
  m.def("host_pool_info", [] {
    const daskwp::HostPoolInfo i = daskwp::host_pool_info();
    return nb::make_tuple(i.limit, i.cached, i.live);
  }, "(limit, cached, live) bytes of the host output-memory pool.");
  m.def("host_pool_set_limit", &daskwp::host_pool_set_limit, nb::arg("nbytes"),
        "Most bytes of freed output blocks the pool keeps for reuse (0: none).");
  m.def("host_pool_release", &daskwp::host_pool_release,
        "Free the pool's cached blocks; returns their bytes.");
  m.def("host_pool_mark", &daskwp::host_pool_mark,
        "A mark of now, for host_pool_trim_idle.");
  m.def("host_pool_trim_idle", &daskwp::host_pool_trim_idle, nb::arg("mark"),
        "Free the cached blocks not handed out since `mark` (host_pool_mark); returns their "
        "bytes.");
  m.def("set_huge_pages", [](bool on) { return daskwp::g_memo_huge_pages.exchange(on); },
        nb::arg("on"),
        "Whether new word-memo mappings ask for transparent huge pages (MADV_HUGEPAGE); "
        "returns the previous setting.");
  // The word-memo pool of the CPU loop (cpu_batch.cpp).
  m.def("word_cache_info", [] {
    const daskwp::WordCacheInfo i = daskwp::word_cache_info();
    nb::dict d;
    d["limit"] = i.limit;
    d["bytes"] = i.bytes;
    d["memos"] = i.memos;
    d["idle"] = i.idle;
    d["keys"] = i.keys;
    d["hits"] = i.hits;
    d["misses"] = i.misses;
    d["long_resets"] = i.long_resets;
    d["created"] = i.created;
    d["copied"] = i.copied;
    d["merged"] = i.merged;
    d["reused"] = i.reused;
    d["evictions"] = i.evictions;
    d["refused"] = i.refused;
    d["spare_bytes"] = i.spare_bytes;
    d["recycled"] = i.recycled;
    d["lent"] = i.lent;
    return d;
  }, "Statistics of the word-memo pool: limit, bytes, memos, idle, keys, hits, misses, "
     "long_resets, created, copied, merged, reused, evictions, refused, spare_bytes, "
     "recycled, lent.");
  m.def("word_cache_set_lent", &daskwp::word_cache_set_lent, nb::arg("own_threads"),
        nb::arg("lent_bytes"),
        "The process's own kernel threads (0: unbounded) and the most bytes of the word memo "
        "of each thread of a call beyond them (0: none): such a thread's memo is its own, "
        "never a copy of a warm one.");
  m.def("word_cache_set_limit", &daskwp::word_cache_set_limit, nb::arg("nbytes"),
        "Most bytes of word memos (idle and in use) the pool keeps (0: none kept between "
        "calls); idle memos above it are freed.");
  m.def("word_cache_release", &daskwp::word_cache_release,
        "Give back the mappings of freed word memos that the pool keeps for its next memos; "
        "returns their bytes.");
  m.def("word_cache_clear", &daskwp::word_cache_clear,
        "Free the pool's idle word memos (those in use are freed when their call ends); "
        "returns how many memos there were.");
}
