// daskwp — CPU build of the strided windows (windows.hpp) over a whole batch (no Python:
// bind_windows.cpp is its binding `build_windows`).
//
// Three passes, exact-size outputs: (1) rows per document (window_count) and their
// exclusive scan, (2) allocate rows x width (or the ragged total), (3) fill every row
// independently, rows split into contiguous ranges over threads. The caller releases the
// GIL for passes 1-3.
#include "windows_cpu.hpp"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cpu_batch.hpp"
#include "windows.hpp"

namespace daskwp {
namespace {

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
  for (int t = 0; t < threads; ++t) {
    const int64_t r0 = rows * t / threads, r1 = rows * (t + 1) / threads;
    pool.emplace_back([&, t, r0, r1] {
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

template <typename MaskT>
void fill_rows(const int32_t* tokens, const int64_t* offsets, int64_t n_docs,
               const WindowParams& p, int64_t logid_offset, bool padded, int32_t width,
               WindowBatch& out, int threads) {
  const int64_t* doc_rows = out.doc_row_offsets.get();
  MaskT* mask = reinterpret_cast<MaskT*>(out.mask.get());
  const int64_t full_row = p.body_length + 2 * p.first_body_col;
  // Ragged: document d's rows start at doc_cells[d]; rows before the last are full.
  std::vector<int64_t> doc_cells;
  if (!padded) {
    doc_cells.resize(n_docs + 1);
    doc_cells[0] = 0;
    for (int64_t d = 0; d < n_docs; ++d)
      doc_cells[d + 1] = doc_cells[d] + window_tokens(offsets[d + 1] - offsets[d], p);
  }
  parallel_rows(out.rows, threads, [&](int64_t r0, int64_t r1) {
    if (r0 >= r1) return;
    int64_t d = find_document(doc_rows, n_docs, r0);
    for (int64_t r = r0; r < r1; ++r) {
      while (doc_rows[d + 1] <= r) ++d;
      const int64_t k = r - doc_rows[d];
      const int64_t n = offsets[d + 1] - offsets[d];
      const int32_t* doc = tokens + offsets[d];
      int64_t* meta = out.metadata.get() + 3 * r;
      if (padded) {
        const int64_t at = r * static_cast<int64_t>(width);
        fill_window_row<MaskT>(doc, n, k, logid_offset + d, p, width, out.ids.get() + at,
                               mask + at, meta);
      } else {
        const int64_t at = doc_cells[d] + k * full_row;
        const int32_t w = window_row(n, k, p).row_tokens;
        fill_window_row<MaskT>(doc, n, k, logid_offset + d, p, w, out.ids.get() + at,
                               mask + at, meta);
        out.row_offsets[r] = at;
      }
    }
  });
  if (!padded) out.row_offsets[out.rows] = doc_cells[n_docs];
}

}  // namespace

WindowBatch build_window_batch(const int32_t* tokens, const int64_t* offsets, int64_t n_docs,
                               const WindowParams& p, int64_t logid_offset, bool padded,
                               int32_t width, bool mask_int8, int num_threads) {
  WindowBatch out;
  out.doc_row_offsets = host_array<int64_t>(static_cast<size_t>(n_docs + 1));
  int64_t* doc_rows = out.doc_row_offsets.get();
  doc_rows[0] = 0;
  int64_t cells = 0, longest = 0;
  for (int64_t d = 0; d < n_docs; ++d) {
    const int64_t n = offsets[d + 1] - offsets[d];
    doc_rows[d + 1] = doc_rows[d] + window_count(n, p);
    if (!padded) cells += window_tokens(n, p);
    longest = std::max<int64_t>(longest, window_row(n, 0, p).row_tokens);
  }
  out.rows = doc_rows[n_docs];
  if (padded) {
    if (width < longest)
      throw std::invalid_argument("row width " + std::to_string(width) +
                                  " is shorter than the longest row (" +
                                  std::to_string(longest) + " tokens)");
    if (width && out.rows > std::numeric_limits<int64_t>::max() / 4 / width)
      throw std::overflow_error("rows x width of the window output overflows int64");
    cells = out.rows * width;
  }
  const size_t mask_bytes = mask_int8 ? 1 : 4;
  out.cells = cells;
  out.ids = host_array<int32_t>(static_cast<size_t>(std::max<int64_t>(cells, 1)));
  out.mask = host_array<uint8_t>(static_cast<size_t>(std::max<int64_t>(cells, 1) * mask_bytes));
  out.metadata = host_array<int64_t>(static_cast<size_t>(std::max<int64_t>(3 * out.rows, 1)));
  if (!padded) out.row_offsets = host_array<int64_t>(static_cast<size_t>(out.rows + 1));
  int threads = resolve_threads(num_threads);
  // Filling is memory bound: a thread only pays off for ~256K cells.
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, cells >> 18)));
  if (mask_int8)
    fill_rows<int8_t>(tokens, offsets, n_docs, p, logid_offset, padded, width, out, threads);
  else
    fill_rows<int32_t>(tokens, offsets, n_docs, p, logid_offset, padded, width, out, threads);
  return out;
}

}  // namespace daskwp
