// daskwp — CPU build of the strided windows (windows.hpp) over a whole batch, and its
// Python binding `build_windows`.
//
// Three passes, exact-size outputs: (1) rows per document (window_count) and their
// exclusive scan, (2) allocate rows x width (or the ragged total), (3) fill every row
// independently, rows split into contiguous ranges over threads. The GIL is released for
// passes 1-3.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cpu_batch.hpp"
#include "windows.hpp"

namespace nb = nanobind;

namespace daskwp {
namespace {

struct WindowBatch {
  HostArray<int32_t> ids;
  HostArray<uint8_t> mask;  // int8 or int32 elements, see mask_bytes
  HostArray<int64_t> metadata;
  HostArray<int64_t> row_offsets;      // ragged only: rows + 1
  HostArray<int64_t> doc_row_offsets;  // n_docs + 1
  int64_t rows = 0;
  int64_t cells = 0;  // elements of ids (rows * width, or the ragged total)
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

}  // namespace
}  // namespace daskwp

// ------------------------------------------------------------------------------------
// Binding
// ------------------------------------------------------------------------------------
namespace {

using I32In = nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using I64In = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

template <typename T, size_t Dim>
nb::object numpy_owning(T* raw, const size_t (&shape)[Dim]) {
  nb::capsule owner(raw, [](void* q) noexcept { daskwp::host_free(q); });
  return nb::cast(nb::ndarray<nb::numpy, T>(raw, Dim, shape, owner));
}

template <typename T>
nb::object release_as(daskwp::HostArray<uint8_t>& bytes, std::initializer_list<size_t> dims) {
  // The mask buffer is allocated as bytes; hand it over typed.
  T* raw = reinterpret_cast<T*>(bytes.release());
  nb::capsule owner(raw, [](void* q) noexcept { daskwp::host_free(q); });
  std::vector<size_t> shape(dims);
  return nb::cast(nb::ndarray<nb::numpy, T>(raw, shape.size(), shape.data(), owner));
}

nb::tuple build_windows(I32In token_ids, I64In offsets, int64_t max_length, int64_t stride,
                        bool truncation, bool add_special_tokens, int32_t cls_id,
                        int32_t sep_id, int32_t pad_id, int64_t logid_offset, bool padding,
                        bool mask_int8, int64_t pad_width, int num_threads) {
  const int64_t max32 = std::numeric_limits<int32_t>::max();
  if (max_length < 1 || max_length > max32)
    throw std::invalid_argument("max_length must be in [1, 2**31-1], got " +
                                std::to_string(max_length));
  const int64_t body = max_length - (add_special_tokens ? 2 : 0);
  if (body < 1)
    throw std::invalid_argument("max_length " + std::to_string(max_length) +
                                " leaves no room for tokens (with special tokens it must be "
                                ">= 3)");
  if (stride < 0 || stride >= body)
    throw std::invalid_argument("stride must be in [0, " + std::to_string(body) + "), got " +
                                std::to_string(stride));
  if (offsets.shape(0) < 1) throw std::invalid_argument("offsets must not be empty");
  const int64_t n_docs = static_cast<int64_t>(offsets.shape(0)) - 1;
  const int64_t* off = offsets.data();
  const int64_t n_ids = static_cast<int64_t>(token_ids.shape(0));
  if (off[0] < 0 || off[n_docs] > n_ids)
    throw std::invalid_argument("offsets point outside token_ids");
  for (int64_t d = 0; d < n_docs; ++d)
    if (off[d] > off[d + 1]) throw std::invalid_argument("offsets are not non-decreasing");
  if (logid_offset < 0 || logid_offset > std::numeric_limits<int64_t>::max() - n_docs)
    throw std::invalid_argument("logid_offset must be >= 0 and leave room for the batch, got " +
                                std::to_string(logid_offset));
  if (pad_width < 0) pad_width = max_length;
  if (pad_width > max_length)
    throw std::invalid_argument("pad_width " + std::to_string(pad_width) +
                                " exceeds max_length " + std::to_string(max_length));

  const daskwp::WindowParams p = daskwp::make_window_params(
      static_cast<int32_t>(max_length), static_cast<int32_t>(stride), truncation,
      add_special_tokens, cls_id, sep_id, pad_id);
  daskwp::WindowBatch r;
  {
    nb::gil_scoped_release release;
    r = daskwp::build_window_batch(token_ids.data(), off, n_docs, p, logid_offset, padding,
                                   static_cast<int32_t>(pad_width), mask_int8, num_threads);
  }
  const size_t rows = static_cast<size_t>(r.rows);
  nb::object meta = numpy_owning<int64_t, 2>(r.metadata.release(), {rows, size_t{3}});
  nb::object doc_rows =
      numpy_owning<int64_t, 1>(r.doc_row_offsets.release(), {static_cast<size_t>(n_docs + 1)});
  if (padding) {
    const size_t w = static_cast<size_t>(pad_width);
    nb::object ids = numpy_owning<int32_t, 2>(r.ids.release(), {rows, w});
    nb::object mask = mask_int8 ? release_as<int8_t>(r.mask, {rows, w})
                                : release_as<int32_t>(r.mask, {rows, w});
    return nb::make_tuple(ids, mask, meta, nb::none(), doc_rows);
  }
  const size_t cells = static_cast<size_t>(r.cells);
  nb::object ids = numpy_owning<int32_t, 1>(r.ids.release(), {cells});
  nb::object mask = mask_int8 ? release_as<int8_t>(r.mask, {cells})
                              : release_as<int32_t>(r.mask, {cells});
  nb::object row_off = numpy_owning<int64_t, 1>(r.row_offsets.release(), {rows + 1});
  return nb::make_tuple(ids, mask, meta, row_off, doc_rows);
}

}  // namespace

void bind_windows(nb::module_& m) {
  m.def("build_windows", &build_windows, nb::arg("token_ids"), nb::arg("offsets"),
        nb::arg("max_length"), nb::arg("stride"), nb::arg("truncation"),
        nb::arg("add_special_tokens"), nb::arg("cls_id"), nb::arg("sep_id"), nb::arg("pad_id"),
        nb::arg("logid_offset"), nb::arg("padding"), nb::arg("mask_int8") = false,
        nb::arg("pad_width") = -1, nb::arg("num_threads") = 0,
        "Strided windows of a ragged batch (token_ids, offsets).\n\n"
        "Returns (input_ids, attention_mask, metadata, row_offsets, doc_row_offsets):\n"
        "padded: input_ids/attention_mask are rows x pad_width (default max_length) and\n"
        "row_offsets is None; ragged (padding=False): input_ids/attention_mask are flat and\n"
        "row r is [row_offsets[r], row_offsets[r+1]). metadata is rows x 3 int64\n"
        "(logID, start, stop), stop inclusive; doc_row_offsets[d] is document d's first row.");
}
