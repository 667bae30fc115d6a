// daskwp — CPU build of the strided windows (windows.hpp) over a whole batch
// (windows_cpu.cpp; its binding is bind_windows.cpp).
#pragma once

#include <cstdint>

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

}  // namespace daskwp
