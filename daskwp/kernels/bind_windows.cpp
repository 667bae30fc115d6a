// daskwp — binding of the CPU windows (windows_cpu.cpp): build_windows checks its
// parameters, releases the GIL for the batch and hands the outputs to NumPy without a copy.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "windows_cpu.hpp"

namespace {

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

nb::tuple build_windows(I32 token_ids, I64 offsets, int64_t max_length, int64_t stride,
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
  // n documents take logIDs logid_offset .. logid_offset + n - 1
  if (logid_offset < 0 ||
      logid_offset > std::numeric_limits<int64_t>::max() - std::max<int64_t>(n_docs - 1, 0))
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
