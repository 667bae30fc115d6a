// daskwp — the CPU batch loop (cpu_batch.cpp): a batch of Arrow-style strings through the
// shared core on several threads, and the checks of the blobs it reads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "host_pool.hpp"
#include "model.hpp"

namespace daskwp {

struct EncodedBatch {
  HostArray<int32_t> ids;      // flat token ids
  HostArray<int64_t> offsets;  // n_docs + 1
  HostArray<int64_t> spans;    // with offsets: 2 per token, [begin, end) in the document
  HostArray<int32_t> words;    // with word ids: 1 per token
  int64_t n_ids = 0;
  int64_t unknown = 0;  // ids equal to the vocabulary blob's unk_id, counted as written
};

// What encode_batch returns besides the ids (docs/design.md §2.9).
struct EncodeExtras {
  int32_t offsets = 0;  // 0: none; kOffsetsBytes / kOffsetsChars: spans in that unit
  bool word_ids = false;
};
constexpr int32_t kOffsetsBytes = 1;
constexpr int32_t kOffsetsChars = 2;

// Number of worker threads for `requested` (<= 0: all hardware threads).
int resolve_threads(int requested);

// CPU time of the threads the kernel spawns, charged to the thread that called the kernel
// (its stage clocks see only their own thread's CPU otherwise). helper_cpu_sink(): the
// calling thread's counter (nanoseconds), or, on a spawned thread, the counter it charges.
// A spawned thread's body starts with a HelperCpu made from the spawner's sink.
std::atomic<int64_t>* helper_cpu_sink();
// The calling thread's running total of its spawned threads' CPU, in seconds.
double helper_thread_cpu_seconds();
class HelperCpu {
 public:
  explicit HelperCpu(std::atomic<int64_t>* sink);
  ~HelperCpu();
  HelperCpu(const HelperCpu&) = delete;
  HelperCpu& operator=(const HelperCpu&) = delete;

 private:
  std::atomic<int64_t>* sink_;
  int64_t start_;
};

// Runs fn(r0, r1) over [0, rows) on up to `threads` threads, contiguous ranges.
template <typename Fn>
void parallel_rows(int64_t rows, int threads, Fn fn) {
  if (threads <= 1 || rows < 2) {
    fn(int64_t{0}, rows);
    return;
  }
  threads = static_cast<int>(std::min<int64_t>(threads, rows));
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(threads);
  std::atomic<int64_t>* sink = helper_cpu_sink();
  for (int t = 0; t < threads; ++t) {
    const int64_t r0 = rows * t / threads, r1 = rows * (t + 1) / threads;
    pool.emplace_back([&, t, r0, r1] {
      HelperCpu charge(sink);
      try {
        fn(r0, r1);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

struct CoreContext;
struct WordCache;

// How a batch is run (plan_batch): its threads, its byte-balanced contiguous document
// chunks (cut[c] .. cut[c + 1], handed out as threads come free) and the word-memo pool's
// key and bookkeeping for the call. encode_batch and count_batch (count_batch.cpp) share it.
struct BatchPlan {
  int threads = 1, chunks = 1;
  std::vector<int64_t> cut;  // chunks + 1 document indices
  int64_t data_end = 0;      // how far every document may read ahead (the batch's end)
  uint64_t key = 0, generation = 0, call = 0;
  bool big = false, merge = false;
  int32_t unit = 0;  // the memos' entry layout (0: ids only)
};
template <typename Off>
BatchPlan plan_batch(const Off* offsets, int64_t n_docs, int num_threads, uint64_t cache_key,
                     int32_t unit);
// Runs fn(memo, chunk) over the plan's chunks on its threads, each thread with its word memo
// (null: none) from the pool for the whole call; the first error is rethrown.
void run_chunks(const CoreContext& ctx, const BatchPlan& plan,
                const std::function<void(WordCache*, int)>& fn);

// The length of document d of an Arrow batch (its bytes from offsets[d]); 0 for a null one.
template <typename Off>
inline int64_t document_bytes(const Off* offsets, const uint8_t* validity,
                              int64_t validity_offset, int64_t d) {
  const int64_t vb = d + validity_offset;
  if (validity && !((validity[vb >> 3] >> (vb & 7)) & 1)) return 0;
  const int64_t len = static_cast<int64_t>(offsets[d + 1] - offsets[d]);
  return len > 0 ? len : 0;
}

// Tokenizes n_docs documents data[offsets[d], offsets[d+1]). A null validity bitmap means
// all valid; null documents are empty. Runs on `num_threads` threads (<= 0: all).
// cache_key != 0: the threads take their word memos from the process-wide pool, which keeps
// them for later calls with the same key; the caller guarantees that equal keys mean equal
// blobs and parameters (the Python glue hashes both blobs and max_input_chars_per_word).
// 0: memos of the call's own (for ~1 MB per thread and more), as without the pool.
template <typename Off>
EncodedBatch encode_batch(const uint8_t* vocab_blob, const uint8_t* norm_blob,
                          const TokenizeParams& p, const Off* offsets, const uint8_t* data,
                          const uint8_t* validity, int64_t validity_offset, int64_t n_docs,
                          int num_threads, uint64_t cache_key = 0,
                          const EncodeExtras& extras = EncodeExtras());

// count_batch (count_batch.cpp): per document its number of tokens (lengths, n_docs
// entries), their total and the [UNK] (the vocabulary blob's unk_id) among them: what
// encode_batch's ids and offsets give, without the ids. Arguments as encode_batch's.
struct CountedBatch {
  HostArray<int64_t> lengths;
  int64_t tokens = 0;
  int64_t unknown = 0;
};
template <typename Off>
CountedBatch count_batch(const uint8_t* vocab_blob, const uint8_t* norm_blob,
                         const TokenizeParams& p, const Off* offsets, const uint8_t* data,
                         const uint8_t* validity, int64_t validity_offset, int64_t n_docs,
                         int num_threads, uint64_t cache_key = 0);

// The word-memo pool (cpu_batch.cpp): bytes, memos and counters.
struct WordCacheInfo {
  uint64_t limit = 0;        // most bytes of memos, idle and in use
  uint64_t bytes = 0;        // bytes of the memos alive now
  uint64_t memos = 0;        // memos alive (idle + in use)
  uint64_t idle = 0;         // memos kept for a later call
  uint64_t keys = 0;         // distinct keys among the idle memos
  uint64_t hits = 0;         // chunks and words served from a memo (memos given back)
  uint64_t misses = 0;       // chunks and words walked and offered to a memo
  uint64_t long_resets = 0;  // long-table arenas emptied when full
  uint64_t created = 0;      // memos made
  uint64_t copied = 0;       // of those, copies of a warm memo for a call's other threads
  uint64_t merged = 0;       // memos merged with those one call made with them (pool_merge)
  uint64_t reused = 0;       // memos a call took from the pool
  uint64_t evictions = 0;    // idle memos freed to make room (least recently used first)
  uint64_t refused = 0;      // threads that ran without a memo: no room under the limit
  uint64_t spare_bytes = 0;  // mappings of freed memos kept for the next ones (in the limit)
  uint64_t recycled = 0;     // memos made in such a mapping
  uint64_t lent = 0;         // memos made for lent threads (word_cache_set_lent)
};
WordCacheInfo word_cache_info();
void word_cache_set_limit(size_t bytes);  // frees idle memos above the new limit
size_t word_cache_clear();  // frees the idle memos, drops the busy ones when returned
size_t word_cache_release();  // gives back the kept mappings of freed memos (their bytes)
// A process's own kernel threads (0: no such bound, the default): thread t >= own_threads
// of a call (one a driver lent it: another worker process's idle core) takes a memo of its
// own of at most lent_bytes (0: none), never a copy of a warm full-size memo.
void word_cache_set_lent(int own_threads, size_t lent_bytes);

void check_vocab_blob(const uint8_t* p, size_t size);
void check_norm_blob(const uint8_t* p, size_t size);

}  // namespace daskwp
