// daskwp — CPU build of the strided windows (windows.hpp) over a whole batch
// (windows_cpu.cpp; its binding is bind_windows.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "cpu_batch.hpp"
#include "host_pool.hpp"
#include "windows.hpp"

namespace daskwp {

struct WindowBatch {
  HostArray<int32_t> ids;
  HostArray<uint8_t> mask;  // int8 or int32 elements, see mask_bytes
  HostArray<int64_t> metadata;
  HostArray<int64_t> row_offsets;      // ragged only: rows + 1
  HostArray<int64_t> doc_row_offsets;  // n_docs + 1
  int64_t rows = 0;
  int64_t cells = 0;  // elements of ids (rows * width, or the ragged total)
};

// The windows of a ragged batch (tokens, offsets): rows x width when padded (throws
// std::invalid_argument when width is shorter than the longest row), else ragged rows;
// int8 mask elements when mask_int8, else int32. Runs on `num_threads` threads (<= 0: all).
WindowBatch build_window_batch(const int32_t* tokens, const int64_t* offsets, int64_t n_docs,
                               const WindowParams& p, int64_t logid_offset, bool padded,
                               int32_t width, bool mask_int8, int num_threads);

// padding="bucket" (docs/design.md §7, daskwp/core/buckets.py): the rows of the windows
// grouped by width, each row in the smallest width that holds it, written straight from
// the encoding into its bucket's matrices (no ragged intermediate).

// The per-position outputs a bucketed fill writes besides ids and mask (docs/design.md §2.9):
// spans / words are the encoding's (2 values / 1 per token; null when not asked).
struct BucketExtras {
  const int64_t* spans = nullptr;   // -> offset_mapping, (0, 0) off the body
  const int32_t* words = nullptr;   // -> word_ids, -1 off the body
  bool special_mask = false;        // special_tokens_mask (mask dtype): 1 off the body
  bool token_type_ids = false;      // zeros (mask dtype)
  bool sequence_ids = false;        // int8: 0 on the body, -1 off it
};

// One bucket: `rows` rows of `width` columns. mask, token_type_ids and special_mask hold
// int8 or int32 elements (mask_int8); the optional arrays are empty when not asked.
struct Bucket {
  int32_t width = 0;
  int64_t rows = 0;
  HostArray<int32_t> ids;
  HostArray<uint8_t> mask;
  HostArray<int64_t> metadata;  // rows x 3
  HostArray<int32_t> window;    // each row's index within its document
  HostArray<uint8_t> token_type_ids;
  HostArray<int8_t> sequence_ids;
  HostArray<int64_t> offsets;   // rows x width x 2
  HostArray<int32_t> word_ids;
  HostArray<uint8_t> special_mask;
};

// The buckets of a batch, in increasing width, empty ones left out. `widths`: n_widths
// sorted unique widths in [1, max_length], the last max_length; n_widths == 0: the
// auto_bucket_widths of the batch's row lengths with at most `auto_buckets` widths.
std::vector<Bucket> build_bucket_batch(const int32_t* tokens, const int64_t* offsets,
                                       int64_t n_docs, const WindowParams& p,
                                       int64_t logid_offset, const int32_t* widths,
                                       int n_widths, int auto_buckets, bool mask_int8,
                                       const BucketExtras& extras, int num_threads);

// At most n_buckets widths that minimise the padding of rows whose lengths have the
// histogram hist[0..longest] (longest <= max_length, some row of length longest), among
// the multiples of 8 up to max_length and max_length: an exact dynamic program; ties go
// to fewer buckets, then to the earlier split (daskwp/core/buckets.py documents the rule).
std::vector<int32_t> auto_bucket_widths(const int64_t* hist, int64_t longest,
                                        int32_t max_length, int n_buckets);

}  // namespace daskwp
