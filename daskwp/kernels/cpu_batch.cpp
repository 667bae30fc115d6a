// daskwp — CPU loop over a batch of documents (no Python: bind_encode.cpp is its binding).
//
// The batch arrives as Arrow-style buffers (offsets + UTF-8 bytes, optional validity
// bitmap); documents are split into contiguous, byte-balanced chunks handed out to the
// threads, and each thread runs the shared core (wordpiece_core.hpp) with its own word
// memo (word_memo.hpp), kept between calls in a process-wide pool. The caller releases the
// GIL.
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <cstring>
#include <ctime>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "batch_range.hpp"
#include "cpu_batch.hpp"
#include "word_memo.hpp"
#include "wordpiece_core.hpp"

namespace daskwp {
namespace {

// A growable int32 buffer without zero-initialisation, with (spans, words) the offsets
// and word ids of its tokens, and the [UNK] (`unk`) among its ids: counted as it fills,
// kCountTokens ids at a time while they are in the cache (batch_range.hpp), the rest by
// count_rest() when the chunk is done.
struct IdBuffer {
  HostArray<int32_t> data;
  HostArray<int64_t> spans;
  HostArray<int32_t> words;
  bool with_spans = false, with_words = false;
  int64_t size = 0, cap = 0;
  int32_t unk = -1;
  int64_t counted = 0, unknown = 0;  // ids [0, counted) counted: `unknown` of them [UNK]
  template <typename T>
  void grow(HostArray<T>& a, int64_t c, int64_t per) {
    HostArray<T> d = host_array<T>(static_cast<size_t>(c * per));
    if (size) std::memcpy(d.get(), a.get(), size * per * sizeof(T));
    a.swap(d);
  }
  void reserve(int64_t want) {
    if (want <= cap) return;
    int64_t c = std::max<int64_t>(want, cap * 2 + 1024);
    grow(data, c, 1);
    if (with_spans) grow(spans, c, 2);
    if (with_words) grow(words, c, 1);
    cap = c;
  }
  // (batch_range.hpp's tokenize_range: before each document)
  void room(int64_t want) {
    if (size - counted >= kCountTokens) count_rest();
    reserve(size + want);
  }
  void count_rest() {
    unknown += count_equal_ids(data.get() + counted, size - counted, unk);
    counted = size;
  }
  int32_t* at() { return data.get() + size; }
  int64_t left() const { return cap - size; }
};

// The memos (WordCache, word_memo.hpp) outlive the call: a process-wide pool keeps them,
// keyed by what their entries depend on (the caller's hash of the vocabulary blob, the
// normalization blob and max_input_chars_per_word), so that a process tokenizing batch
// after batch of one corpus runs warm. Each thread of a call takes a memo of its call's key
// from the pool for the whole call (one thread at a time uses a memo: nothing is locked on
// the hot path) and gives it back at the end. The memory of all memos, idle and in use, is
// at most the limit (kDefaultWordCacheMB until word_cache_set_limit; the Python layer sets
// it from the option word_cache_mb, its dask.config key or DASKWP_WORD_CACHE_MB):
// least recently used idle memos go first, and a thread that finds no room runs without a
// memo. Limit 0 keeps nothing between calls (each call makes its own memos, as before the
// pool, for batches of ~1 MB per thread and more). Fork: the pool's lock is held across
// fork() (pthread_atfork), and a child that finds another pid drops the memos that threads
// of its parent held (they do not exist in the child); its idle memos stay valid.
constexpr size_t kDefaultWordCacheMB = 256;

// word_cache_set_lent: the process's own threads (0: unbounded) and the most bytes of the
// memo of each thread beyond them. A thread lent to a 1-thread worker process's last write
// by an idle worker process took a copy of the warm memo (pool_seed: +30 MB of the
// process's peak, for a fraction of a second at a job's end). Cold, one thread, over a
// 64 MB partition of the benchmark's corpus (ns of CPU per byte): warm 30 MB 2.35, cold
// 30 MB 2.99, 16 MB 3.09, 8 MB 5.33, 4 MB 7.87, 2 MB 9.87, none 9.29 (docs/design.md §3.5).
std::atomic<int> g_own_threads{0};
std::atomic<size_t> g_lent_bytes{size_t(16) << 20};

struct IdleMemo {
  WordCache* memo;
  uint64_t key;
  uint64_t last_use;
};

// The mapping of a freed memo, kept for the next memo of its size (free_memos).
struct SpareMapping {
  WordCache::Mapping map;
  size_t block_bytes;
};

struct MemoPool {
  std::mutex mu;
  size_t limit = kDefaultWordCacheMB << 20;
  size_t bytes = 0;      // every pooled memo alive, idle or in use
  // Mappings of freed memos, kept while they and the memos fit the limit: a new memo
  // made in one of them writes its tables empty instead of faulting in fresh pages. On a
  // VM whose host takes freed memory back, faulting in a fresh 30 MB memo took 3 ms
  // mostly but 70-550 ms at times (an mmap-touch-munmap loop of 60 MB: 3.0, 72.4 and
  // 555.7 ms), and a cold 20 MB call on 2 threads 35 ms or 220-270 ms.
  std::vector<SpareMapping> spare;
  size_t spare_bytes = 0;
  uint64_t generation = 0;  // clear() bumps it: memos in use then are freed when returned
  uint64_t tick = 0;
  pid_t pid = getpid();
  std::vector<IdleMemo> idle;
  std::vector<WordCache*> busy;  // in use by a call
  WordCacheInfo totals{};        // counters of memos freed, and of calls
};

void pool_prepare_fork();
void pool_after_fork_parent();
void pool_after_fork_child();

// Never destroyed: a thread may give a memo back during interpreter shutdown.
MemoPool& memo_pool() {
  static MemoPool* p = [] {
    MemoPool* q = new MemoPool();
    pthread_atfork(pool_prepare_fork, pool_after_fork_parent, pool_after_fork_child);
    return q;
  }();
  return *p;
}
void pool_prepare_fork() { memo_pool().mu.lock(); }
void pool_after_fork_parent() { memo_pool().mu.unlock(); }
void pool_after_fork_child() { memo_pool().mu.unlock(); }

void add_stats(WordCacheInfo& to, const WordCacheStats& s) {
  to.hits += s.hits;
  to.misses += s.misses;
  to.long_resets += s.long_resets;
}

// Under the lock: a child of fork() forgets the memos its parent's threads held.
void pool_check_pid(MemoPool& P, std::vector<WordCache*>& drop) {
  const pid_t now = getpid();
  if (P.pid == now) return;
  P.pid = now;
  for (WordCache* m : P.busy) {
    P.bytes -= m->block_bytes;
    drop.push_back(m);
  }
  P.busy.clear();
}

// Under the lock: frees idle memos, least recently used first, until `bytes` fit.
void pool_trim(MemoPool& P, size_t keep, std::vector<WordCache*>& drop) {
  while (P.bytes > keep && !P.idle.empty()) {
    size_t old = 0;
    for (size_t k = 1; k < P.idle.size(); ++k)
      if (P.idle[k].last_use < P.idle[old].last_use) old = k;
    WordCache* m = P.idle[old].memo;
    P.idle.erase(P.idle.begin() + static_cast<std::ptrdiff_t>(old));
    P.bytes -= m->block_bytes;
    add_stats(P.totals, m->stats);
    ++P.totals.evictions;
    drop.push_back(m);
  }
}

// Under the lock: how many bytes of kept mappings fit beside the memos under the limit.
size_t spare_room(const MemoPool& P) { return P.limit > P.bytes ? P.limit - P.bytes : 0; }

// Frees the memos of `drop` (outside the lock), keeping the mapping of each while the
// pool's memos and kept mappings fit its limit.
void free_memos(const std::vector<WordCache*>& drop) {
  if (drop.empty()) return;
  MemoPool& P = memo_pool();
  for (WordCache* m : drop) {
    if (m->map_base) {
      std::lock_guard<std::mutex> lock(P.mu);
      if (P.spare_bytes + m->block_bytes <= spare_room(P)) {
        P.spare.push_back(SpareMapping{m->release_mapping(), m->block_bytes});
        P.spare_bytes += m->block_bytes;
      }
    }
    delete m;
  }
}

// (Outside the lock; null ones are skipped: a memo took them.)
void unmap_spares(const std::vector<WordCache::Mapping>& maps) {
#if defined(__linux__)
  for (const WordCache::Mapping& m : maps)
    if (m.base) munmap(m.base, m.bytes);
#else
  (void)maps;
#endif
}

// Under the lock: kept mappings into `unmap` until at most `keep` bytes of them are left.
void shed_spares(MemoPool& P, size_t keep, std::vector<WordCache::Mapping>& unmap) {
  while (!P.spare.empty() && P.spare_bytes > keep) {
    unmap.push_back(P.spare.back().map);
    P.spare_bytes -= P.spare.back().block_bytes;
    P.spare.pop_back();
  }
}

// Under the lock, `need` bytes having been reserved for a new memo: a kept mapping of that
// size for it (none: the memo maps its own), and into `unmap` the kept mappings that no
// longer fit.
WordCache::Mapping take_spare(MemoPool& P, size_t need, std::vector<WordCache::Mapping>& unmap) {
  WordCache::Mapping got;
  for (size_t k = 0; k < P.spare.size(); ++k)
    if (P.spare[k].block_bytes == need) {
      got = P.spare[k].map;
      P.spare_bytes -= need;
      P.spare.erase(P.spare.begin() + static_cast<std::ptrdiff_t>(k));
      ++P.totals.recycled;
      break;
    }
  shed_spares(P, spare_room(P), unmap);
  return got;
}

// A memo for `key`, its tables filled for ctx; nullptr when the pool keeps nothing
// (*kept_nothing set) or no memo fits the limit. `threads`: how many the call takes, so
// that each may get one.
// offsets_unit: the layout of its entries (reset_word_cache; part of the key, pool_key).
// lent: for a thread beyond the process's own (word_cache_set_lent): only a lent memo, of
// at most g_lent_bytes.
WordCache* pool_acquire(const CoreContext& ctx, uint64_t key, int threads, int32_t offsets_unit,
                        bool* kept_nothing, uint64_t call, bool lent) {
  MemoPool& P = memo_pool();
  std::vector<WordCache*> drop;
  int bits = kWordCacheDefaultBits;
  bool made = false;
  WordCache* found = nullptr;
  WordCache::Mapping adopt;
  std::vector<WordCache::Mapping> unmap;
  {
    std::lock_guard<std::mutex> lock(P.mu);
    pool_check_pid(P, drop);
    *kept_nothing = P.limit == 0;
    if (!*kept_nothing) {
      size_t best = P.idle.size();
      for (size_t k = 0; k < P.idle.size(); ++k)
        if (P.idle[k].key == key && P.idle[k].memo->lent == lent &&
            (best == P.idle.size() || P.idle[k].last_use > P.idle[best].last_use))
          best = k;
      if (best < P.idle.size()) {
        found = P.idle[best].memo;
        P.idle.erase(P.idle.begin() + static_cast<std::ptrdiff_t>(best));
        P.busy.push_back(found);
        ++P.totals.reused;
      } else {
        // A new memo: as large as the default, or as the limit allows for every thread.
        // A lent thread's: at most g_lent_bytes (0: none).
        size_t share = P.limit / static_cast<size_t>(threads > 0 ? threads : 1);
        const size_t cap = g_lent_bytes.load();
        if (lent) share = std::min(share, cap);
        while (bits > kWordCacheMinBits && WordCache::bytes_for(bits) > share) --bits;
        const size_t need = WordCache::bytes_for(bits);
        const bool allowed = !lent || need <= cap;  // (cap 0: a lent thread takes none)
        if (allowed && need <= P.limit) pool_trim(P, P.limit - need, drop);
        if (allowed && need <= P.limit && P.bytes + need <= P.limit) {
          P.bytes += need;  // reserved; the memo is made outside the lock
          ++P.totals.created;
          if (lent) ++P.totals.lent;
          made = true;
          adopt = take_spare(P, need, unmap);
        } else {
          ++P.totals.refused;  // the room is taken by memos in use (or a lent cap of 0)
        }
      }
    }
  }
  free_memos(drop);
  unmap_spares(unmap);
  if (found || !made) return found;
  WordCache* m = nullptr;
  try {
    // (its own memory, huge-page backed: not the output pool's)
    m = new WordCache(bits, nullptr, nullptr, &adopt);
    adopt.base = nullptr;  // the memo holds it now
    reset_word_cache(ctx, m, offsets_unit);
    m->lent = lent;
    m->fill_call = lent ? 0 : call;  // (not merged: a lent memo holds a few words)
  } catch (...) {
    unmap_spares({adopt});
    delete m;
    std::lock_guard<std::mutex> lock(P.mu);
    P.bytes -= WordCache::bytes_for(bits);
    throw;
  }
  std::lock_guard<std::mutex> lock(P.mu);
  P.busy.push_back(m);
  return m;
}

// Gives a memo back after a call that started at `generation`.
void pool_release(WordCache* m, uint64_t key, uint64_t generation) {
  if (!m) return;
  MemoPool& P = memo_pool();
  std::vector<WordCache*> drop;
  {
    std::lock_guard<std::mutex> lock(P.mu);
    pool_check_pid(P, drop);
    auto it = std::find(P.busy.begin(), P.busy.end(), m);
    if (it == P.busy.end()) {  // not the pool's any more (a fork's child): just free it
      drop.push_back(m);
    } else {
      P.busy.erase(it);
      if (generation != P.generation || P.limit == 0 || P.bytes > P.limit) {
        P.bytes -= m->block_bytes;
        add_stats(P.totals, m->stats);
        drop.push_back(m);
      } else {
        P.idle.push_back(IdleMemo{m, key, ++P.tick});
      }
      pool_trim(P, P.limit, drop);
    }
  }
  free_memos(drop);
}

// The idle memos of `key` that one multi-threaded call made (the group of the newest such
// memo), merged (merge_memos) so that each holds every word the group holds: the threads of
// a cold call each fill their memo with the words of the chunks they happen to get, and
// the next call's threads missed on the others' words. (EWT, 20 MB on 2 threads after the
// 1.1 MB file cold on 2: 38K misses, ~900 instructions each.) One pass over both tables,
// made by a call of 4 MB a thread or more, before its threads start.
void pool_merge(uint64_t key, uint64_t generation) {
  MemoPool& P = memo_pool();
  std::vector<WordCache*> drop, group;
  {
    std::lock_guard<std::mutex> lock(P.mu);
    pool_check_pid(P, drop);
    uint64_t call = 0, newest = 0;
    for (const IdleMemo& m : P.idle)
      if (m.key == key && m.memo->fill_call && m.last_use >= newest) {
        newest = m.last_use;
        call = m.memo->fill_call;
      }
    if (call && generation == P.generation) {
      for (size_t k = 0; k < P.idle.size();) {
        if (P.idle[k].key == key && P.idle[k].memo->fill_call == call) {
          group.push_back(P.idle[k].memo);
          P.idle.erase(P.idle.begin() + static_cast<std::ptrdiff_t>(k));
        } else {
          ++k;
        }
      }
      for (WordCache* m : group) P.busy.push_back(m);
    }
  }
  free_memos(drop);
  if (group.size() >= 2) {
    // Into the first from each other, then back: each then holds the group's union (as far
    // as its sets have room).
    for (size_t k = 1; k < group.size(); ++k) merge_memos(*group[0], *group[k]);
    for (size_t k = 1; k + 1 < group.size(); ++k) merge_memos(*group[0], *group[k]);
    std::lock_guard<std::mutex> lock(P.mu);
    P.totals.merged += group.size();
  }
  for (WordCache* m : group) {
    m->fill_call = 0;
    pool_release(m, key, generation);
  }
}

// Before the threads of a call start: when the pool holds some idle memos of `key` but
// fewer than the call's `threads`, copies of the newest one join them (as far as the limit
// allows), so that no thread of the call starts with an empty memo while another has the
// words. (A small call runs on one thread and leaves one memo; the next large call's
// second thread then walked every word afresh: Arabic+Hebrew, 20 MB on 2 threads after a
// 0.2 MB call, 23,105 misses, 307 with the copy; docs/design.md §3.5.) The copy is
// made from a memo no thread writes (taken from the idle list meanwhile) and costs about a
// fault-in and a copy of its tables (~20 MB), less than a few thousand misses.
void pool_seed(const CoreContext& ctx, uint64_t key, int threads, int32_t offsets_unit,
               uint64_t generation, bool merge) {
  MemoPool& P = memo_pool();
  if (merge) pool_merge(key, generation);
  std::vector<WordCache*> drop;
  WordCache* src = nullptr;
  int copies = 0;
  std::vector<WordCache::Mapping> adopt, unmap;
  {
    std::lock_guard<std::mutex> lock(P.mu);
    pool_check_pid(P, drop);
    size_t best = P.idle.size();
    int have = 0;
    for (size_t k = 0; k < P.idle.size(); ++k)
      if (P.idle[k].key == key && !P.idle[k].memo->lent) {
        ++have;
        if (best == P.idle.size() || P.idle[k].last_use > P.idle[best].last_use) best = k;
      }
    if (P.limit && have > 0 && have < threads && generation == P.generation) {
      src = P.idle[best].memo;
      P.idle.erase(P.idle.begin() + static_cast<std::ptrdiff_t>(best));
      P.busy.push_back(src);
      const size_t need = src->block_bytes;
      for (int k = have; k < threads; ++k) {
        if (need > P.limit) break;
        pool_trim(P, P.limit - need, drop);
        if (P.bytes + need > P.limit) break;
        P.bytes += need;  // reserved; the copies are made outside the lock
        ++P.totals.created;
        ++P.totals.copied;
        ++copies;
        adopt.push_back(take_spare(P, need, unmap));
      }
    }
  }
  free_memos(drop);
  unmap_spares(unmap);
  if (!src) return;
  std::vector<WordCache*> made;
  try {
    for (; copies > 0; --copies) {
      std::unique_ptr<WordCache> m(
          new WordCache(src->bits, nullptr, nullptr, &adopt[made.size()]));
      adopt[made.size()].base = nullptr;  // the memo holds it now
      m->skip_next_clear();  // copy_tables_from writes every table
      reset_word_cache(ctx, m.get(), offsets_unit);
      m->copy_tables_from(*src);
      made.push_back(m.release());
      std::lock_guard<std::mutex> lock(P.mu);
      P.busy.push_back(made.back());
    }
  } catch (...) {
    unmap_spares(adopt);  // the ones no memo took
    std::lock_guard<std::mutex> lock(P.mu);
    P.bytes -= static_cast<size_t>(copies) * src->block_bytes;  // the ones not made
  }
  pool_release(src, key, generation);
  for (WordCache* m : made) pool_release(m, key, generation);
}

// How many idle memos of `key` the pool holds; -1 when it keeps nothing (limit 0).
int pool_idle(uint64_t key) {
  MemoPool& P = memo_pool();
  std::lock_guard<std::mutex> lock(P.mu);
  if (P.limit == 0) return -1;
  int n = 0;
  for (const IdleMemo& m : P.idle) n += m.key == key && !m.memo->lent;
  return n;
}

// Ids of multi-threaded calls, never 0, one sequence for every instantiation of
// encode_batch. (Which memos pool_merge merges is a matter of worth only: any two memos of
// one key hold the same tokens for the same strings.)
uint64_t next_call_id() {
  static std::atomic<uint64_t> calls{0};
  return ++calls;
}

uint64_t pool_generation() {
  MemoPool& P = memo_pool();
  std::lock_guard<std::mutex> lock(P.mu);
  return P.generation;
}

// The pool key of memos whose entries have the layout `offsets_unit` (word_memo.hpp): the
// caller's key for the ids-only layout, a mix of it and the unit for the offsets layouts
// (0 stays 0: no pool).
uint64_t pool_key(uint64_t key, int32_t offsets_unit) {
  if (!key || !offsets_unit) return key;
  const uint64_t k = (key ^ (0xD6E8FEB86659FD93ull * (uint64_t)offsets_unit)) * 0x9E3779B97F4A7C15ull;
  return k ? k : 1;
}

// One thread's memo for a call: from the pool (key != 0), else, when the pool keeps
// nothing or no key is given, its own for batches of ~1 MB per thread and more (`big`),
// freed after the call.
struct ThreadMemo {
  WordCache* memo = nullptr;
  std::unique_ptr<WordCache> own;
  uint64_t key = 0, generation = 0;
  ThreadMemo(const CoreContext& ctx, uint64_t k, uint64_t gen, int threads, bool big,
             int32_t offsets_unit = 0, uint64_t call = 0, bool lent = false)
      : key(k), generation(gen) {
    bool kept_nothing = true;
    if (k) memo = pool_acquire(ctx, k, threads, offsets_unit, &kept_nothing, call, lent);
    if (!memo && big && kept_nothing) {
      own.reset(new WordCache(16));  // 2^16 short entries, as before the pool
      reset_word_cache(ctx, own.get(), offsets_unit);
      memo = own.get();
    }
  }
  ~ThreadMemo() {
    if (memo && !own) pool_release(memo, key, generation);
  }
  ThreadMemo(const ThreadMemo&) = delete;
  ThreadMemo& operator=(const ThreadMemo&) = delete;
};

}  // namespace

WordCacheInfo word_cache_info() {
  MemoPool& P = memo_pool();
  std::vector<WordCache*> drop;
  WordCacheInfo i;
  {
    std::lock_guard<std::mutex> lock(P.mu);
    pool_check_pid(P, drop);
    i = P.totals;
    for (const IdleMemo& m : P.idle) add_stats(i, m.memo->stats);
    i.limit = P.limit;
    i.bytes = P.bytes;
    i.spare_bytes = P.spare_bytes;
    i.memos = P.idle.size() + P.busy.size();
    i.idle = P.idle.size();
    std::vector<uint64_t> keys;
    for (const IdleMemo& m : P.idle)
      if (std::find(keys.begin(), keys.end(), m.key) == keys.end()) keys.push_back(m.key);
    i.keys = keys.size();
  }
  free_memos(drop);
  return i;
}

void word_cache_set_lent(int own_threads, size_t lent_bytes) {
  g_own_threads = own_threads > 0 ? own_threads : 0;
  g_lent_bytes = lent_bytes;
}

void word_cache_set_limit(size_t bytes) {
  MemoPool& P = memo_pool();
  std::vector<WordCache*> drop;
  std::vector<WordCache::Mapping> unmap;
  {
    std::lock_guard<std::mutex> lock(P.mu);
    pool_check_pid(P, drop);
    P.limit = bytes;
    pool_trim(P, bytes, drop);
    shed_spares(P, spare_room(P), unmap);
  }
  free_memos(drop);
  unmap_spares(unmap);
}

size_t word_cache_clear() {
  MemoPool& P = memo_pool();
  std::vector<WordCache*> drop;
  size_t n;
  {
    std::lock_guard<std::mutex> lock(P.mu);
    pool_check_pid(P, drop);
    n = P.idle.size() + P.busy.size();
    ++P.generation;
    const uint64_t evictions = P.totals.evictions;  // a clear is not an eviction
    pool_trim(P, 0, drop);
    P.totals.evictions = evictions;
  }
  free_memos(drop);
  return n;
}

size_t word_cache_release() {
  MemoPool& P = memo_pool();
  std::vector<WordCache::Mapping> unmap;
  size_t bytes;
  {
    std::lock_guard<std::mutex> lock(P.mu);
    bytes = P.spare_bytes;
    shed_spares(P, 0, unmap);
  }
  unmap_spares(unmap);
  return bytes;
}

namespace {

template <typename Off>
void encode_range(const CoreContext& ctx, const Off* offsets, const uint8_t* data, const uint8_t* validity,
                  int64_t validity_offset, int64_t d0, int64_t d1, int64_t data_end,
                  WordCache* cache, IdBuffer& buf, int64_t* counts) {
  // Room for one token per input byte up front (the usual bound; a document that needs
  // more grows the buffer below), so the buffer is not regrown and copied as it fills.
  // Pages that stay untouched cost no memory.
  if (d1 > d0) buf.reserve(static_cast<int64_t>(offsets[d1] - offsets[d0]) + 64);
  tokenize_range(ctx, offsets, data, validity, validity_offset, d0, d1, data_end, cache, buf,
                 counts);
  buf.count_rest();
}

// encode_range with offsets and / or word ids (docs/design.md §2.9): the core with its
// offsets state, through a memo of the offsets layout in the unit (its buffer holds both
// spans and word ids, whichever the call returns).
template <typename Off>
void encode_range_extras(const CoreContext& ctx, const Off* offsets, const uint8_t* data,
                         const uint8_t* validity, int64_t validity_offset, int64_t d0,
                         int64_t d1, int64_t data_end, bool chars, WordCache* cache,
                         IdBuffer& buf, int64_t* counts) {
  if (d1 > d0) buf.reserve(static_cast<int64_t>(offsets[d1] - offsets[d0]) + 64);
  tokenize_range<Off, IdBuffer, MemoWordPieceE2ET<true>>(
      ctx, offsets, data, validity, validity_offset, d0, d1, data_end, cache, buf, counts,
      [&buf, chars](MemoWordPieceE2ET<true>& t) {
        t.set_offsets(buf.with_spans ? buf.spans.get() + 2 * buf.size : nullptr,
                      buf.with_words ? buf.words.get() + buf.size : nullptr, chars);
      });
  buf.count_rest();
}

int64_t thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

thread_local std::atomic<int64_t> own_helper_cpu{0};
// On a spawned thread: the counter of the thread that spawned it (so that a thread it
// spawns in turn charges the same caller).
thread_local std::atomic<int64_t>* charged_helper_cpu = nullptr;

}  // namespace

std::atomic<int64_t>* helper_cpu_sink() {
  return charged_helper_cpu ? charged_helper_cpu : &own_helper_cpu;
}

double helper_thread_cpu_seconds() { return own_helper_cpu.load() * 1e-9; }

HelperCpu::HelperCpu(std::atomic<int64_t>* sink) : sink_(sink), start_(thread_cpu_ns()) {
  charged_helper_cpu = sink;
}

HelperCpu::~HelperCpu() {
  charged_helper_cpu = nullptr;
  sink_->fetch_add(thread_cpu_ns() - start_);
}

int resolve_threads(int requested) {
  if (requested > 0) return requested;
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? static_cast<int>(hc) : 1;
}

template <typename Off>
BatchPlan plan_batch(const Off* offsets, int64_t n_docs, int num_threads, uint64_t cache_key,
                     int32_t unit) {
  BatchPlan b;
  b.unit = unit;
  const int64_t total_bytes = n_docs ? static_cast<int64_t>(offsets[n_docs] - offsets[0]) : 0;
  int threads = resolve_threads(num_threads);
  // Small batches are not worth a thread each: 256 KB per thread at least (with the
  // pool's warm memos a thread's start costs less than tokenizing that much).
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, total_bytes >> 18)));
  threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(n_docs, 1)));
  b.key = total_bytes ? pool_key(cache_key, unit) : 0;
  // A call of under 1 MB a thread takes at most one thread more than the pool has idle
  // memos of its key: a thread without one maps a new memo (tens of MB faulted in) and
  // misses every word, which costs more than its share of so short a call saves. So the
  // first call after clear_caches() runs on one thread, the next on two, and so on
  // (docs/design.md §3.5).
  if (b.key && threads > 1 && total_bytes / threads < (int64_t(1) << 20)) {
    const int idle = pool_idle(b.key);
    if (idle >= 0) threads = std::max(1, std::min(threads, idle + 1));
  }
  b.threads = threads;
  // Byte-balanced contiguous document chunks: one per thread, or 8 per thread handed out as
  // threads come free, so that a thread slowed down by its core's other work does not hold
  // up the batch.
  b.chunks = threads == 1 ? 1 : 8 * threads;
  b.cut.assign(b.chunks + 1, n_docs);
  b.cut[0] = 0;
  for (int c = 1; c < b.chunks; ++c) {
    const Off target = offsets[0] + static_cast<Off>(total_bytes * c / b.chunks);
    b.cut[c] = std::lower_bound(offsets, offsets + n_docs + 1, target) - offsets;
    b.cut[c] = std::max(b.cut[c], b.cut[c - 1]);
  }
  // Every document may read ahead up to the end of the batch's bytes (word_end's 16-byte
  // scan); the other threads only read them too.
  b.data_end = n_docs ? static_cast<int64_t>(offsets[n_docs]) : 0;
  // A memo from the pool (cache_key != 0) pays off on any batch, as the pool keeps it;
  // one of the call's own only from ~1 MB of text per thread.
  b.big = total_bytes / threads >= (int64_t(1) << 20);
  b.generation = cache_key && total_bytes ? pool_generation() : 0;
  // A multi-threaded call's id (the memos it makes: pool_merge), and whether it is large
  // enough to merge such memos first.
  b.call = threads > 1 ? next_call_id() : 0;
  b.merge = total_bytes / threads >= (int64_t(4) << 20);
  return b;
}

template BatchPlan plan_batch<int32_t>(const int32_t*, int64_t, int, uint64_t, int32_t);
template BatchPlan plan_batch<int64_t>(const int64_t*, int64_t, int, uint64_t, int32_t);

void run_chunks(const CoreContext& ctx, const BatchPlan& b,
                const std::function<void(WordCache*, int)>& fn) {
  // Threads beyond the process's own (word_cache_set_lent) take a lent memo: no copies.
  const int own = g_own_threads.load();
  const int full = own > 0 ? std::min(b.threads, own) : b.threads;
  if (b.threads > 1 && b.key && b.big)
    pool_seed(ctx, b.key, full, b.unit, b.generation, b.merge);
  std::atomic<int> next{0};
  std::vector<std::exception_ptr> errors(b.threads);
  auto work = [&](int t) {
    try {
      ThreadMemo memo(ctx, b.key, b.generation, b.threads, b.big, b.unit, b.call, t >= full);
      for (int c = next++; c < b.chunks; c = next++) fn(memo.memo, c);
    } catch (...) {
      errors[t] = std::current_exception();
      next = b.chunks;  // the others stop at their next chunk
    }
  };
  if (b.threads == 1) {
    work(0);
  } else {
    // spawned threads charge their CPU to the caller (threads == 1: the caller itself)
    std::vector<std::thread> pool;
    std::atomic<int64_t>* sink = helper_cpu_sink();
    for (int t = 0; t < b.threads; ++t)
      pool.emplace_back([&, t] {
        HelperCpu charge(sink);
        work(t);
      });
    for (auto& th : pool) th.join();
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

template <typename Off>
EncodedBatch encode_batch(const uint8_t* vocab_blob, const uint8_t* norm_blob,
                          const TokenizeParams& p, const Off* offsets, const uint8_t* data,
                          const uint8_t* validity, int64_t validity_offset, int64_t n_docs,
                          int num_threads, uint64_t cache_key, const EncodeExtras& extras) {
  CoreContext ctx;
  init_context(ctx, vocab_blob, norm_blob, p);
  EncodedBatch out;
  out.offsets = host_array<int64_t>(static_cast<size_t>(n_docs + 1));
  out.offsets[0] = 0;
  int64_t* counts = out.offsets.get() + 1;
  const bool with_extras = extras.offsets != 0 || extras.word_ids;
  const bool chars = extras.offsets == kOffsetsChars;
  const int32_t unit = !with_extras ? 0 : chars ? kMemoOffsetsChars : kMemoOffsetsBytes;
  const BatchPlan plan = plan_batch(offsets, n_docs, num_threads, cache_key, unit);
  const int chunks = plan.chunks, threads = plan.threads;
  std::vector<IdBuffer> bufs(chunks);
  // With extras both arrays are kept (the memo's hits need them), only those asked for
  // are returned; they go through memos of the offsets layout in the unit (their own key).
  for (IdBuffer& b : bufs) {
    b.with_spans = b.with_words = with_extras;
    b.unk = ctx.v.h->unk_id;
  }
  run_chunks(ctx, plan, [&](WordCache* memo, int c) {
    if (with_extras)
      encode_range_extras(ctx, offsets, data, validity, validity_offset, plan.cut[c],
                          plan.cut[c + 1], plan.data_end, chars, memo, bufs[c], counts);
    else
      encode_range(ctx, offsets, data, validity, validity_offset, plan.cut[c],
                   plan.cut[c + 1], plan.data_end, memo, bufs[c], counts);
  });
  int64_t total = 0;
  for (int c = 0; c < chunks; ++c) {
    total += bufs[c].size;
    out.unknown += bufs[c].unknown;
  }
  if (chunks == 1) {
    out.ids = std::move(bufs[0].data);
    if (extras.offsets) out.spans = std::move(bufs[0].spans);
    if (extras.word_ids) out.words = std::move(bufs[0].words);
  } else {
    out.ids = host_array<int32_t>(static_cast<size_t>(std::max<int64_t>(total, 1)));
    if (extras.offsets) out.spans = host_array<int64_t>(static_cast<size_t>(2 * total + 2));
    if (extras.word_ids) out.words = host_array<int32_t>(static_cast<size_t>(total + 1));
    std::vector<int64_t> at(chunks + 1, 0);
    for (int c = 0; c < chunks; ++c) at[c + 1] = at[c] + bufs[c].size;
    auto copy = [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t k = bufs[c].size, a = at[c];
        if (!k) continue;
        std::memcpy(out.ids.get() + a, bufs[c].data.get(), k * 4);
        if (extras.offsets) std::memcpy(out.spans.get() + 2 * a, bufs[c].spans.get(), k * 16);
        if (extras.word_ids) std::memcpy(out.words.get() + a, bufs[c].words.get(), k * 4);
      }
    };
    // The chunks' buffers into the arrays: by the call's threads from 1M tokens on (a
    // serial copy of 20 MB of text's ids cost 5% of a 2-thread call; its chunks are byte-
    // balanced, so are the threads' shares).
    parallel_rows(chunks, total >= (int64_t(1) << 20) ? threads : 1, copy);
  }
  if (!out.ids) out.ids = host_array<int32_t>(1);
  if (extras.offsets && !out.spans) out.spans = host_array<int64_t>(2);
  if (extras.word_ids && !out.words) out.words = host_array<int32_t>(1);
  out.n_ids = total;
  for (int64_t d = 0; d < n_docs; ++d) out.offsets[d + 1] += out.offsets[d];
  return out;
}

template EncodedBatch encode_batch<int32_t>(const uint8_t*, const uint8_t*,
                                            const TokenizeParams&, const int32_t*,
                                            const uint8_t*, const uint8_t*, int64_t, int64_t,
                                            int, uint64_t, const EncodeExtras&);
template EncodedBatch encode_batch<int64_t>(const uint8_t*, const uint8_t*,
                                            const TokenizeParams&, const int64_t*,
                                            const uint8_t*, const uint8_t*, int64_t, int64_t,
                                            int, uint64_t, const EncodeExtras&);

void check_vocab_blob(const uint8_t* p, size_t size) {
  if (size < sizeof(VocabHeader)) throw std::invalid_argument("vocabulary blob too small");
  const auto* h = reinterpret_cast<const VocabHeader*>(p);
  if (h->magic != kVocabMagic) throw std::invalid_argument("not a daskwp vocabulary blob");
  if (h->version != kBlobVersion)
    throw std::invalid_argument("vocabulary blob version " + std::to_string(h->version) +
                                ", this build reads version " + std::to_string(kBlobVersion));
  if (h->total_bytes > size) throw std::invalid_argument("vocabulary blob truncated");
  if (reinterpret_cast<uintptr_t>(p) % 8)
    throw std::invalid_argument("vocabulary blob not 8-byte aligned");
}

void check_norm_blob(const uint8_t* p, size_t size) {
  if (size < sizeof(NormHeader)) throw std::invalid_argument("normalization blob too small");
  const auto* h = reinterpret_cast<const NormHeader*>(p);
  if (h->magic != kNormMagic) throw std::invalid_argument("not a daskwp normalization blob");
  if (h->version != kBlobVersion)
    throw std::invalid_argument("normalization blob version " + std::to_string(h->version) +
                                ", this build reads version " + std::to_string(kBlobVersion));
  if (h->total_bytes > size) throw std::invalid_argument("normalization blob truncated");
  if (reinterpret_cast<uintptr_t>(p) % 8)
    throw std::invalid_argument("normalization blob not 8-byte aligned");
}

}  // namespace daskwp
