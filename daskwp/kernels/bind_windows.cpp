// daskwp — binding of the CPU windows (windows_cpu.cpp): build_windows and build_buckets
// check their parameters, release the GIL for the batch and hand the outputs to NumPy
// without a copy.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nanobind/stl/optional.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "bindings.hpp"
#include "cpu_batch.hpp"
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

// The window parameters of a call, checked against the batch (token_ids, offsets).
daskwp::WindowParams checked_params(int64_t n_ids, const I64& offsets, int64_t max_length,
                                    int64_t stride, bool truncation, bool add_special_tokens,
                                    int32_t cls_id, int32_t sep_id, int32_t pad_id,
                                    int64_t logid_offset) {
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
  if (off[0] < 0 || off[n_docs] > n_ids)
    throw std::invalid_argument("offsets point outside token_ids");
  for (int64_t d = 0; d < n_docs; ++d)
    if (off[d] > off[d + 1]) throw std::invalid_argument("offsets are not non-decreasing");
  // n documents take logIDs logid_offset .. logid_offset + n - 1
  if (logid_offset < 0 ||
      logid_offset > std::numeric_limits<int64_t>::max() - std::max<int64_t>(n_docs - 1, 0))
    throw std::invalid_argument("logid_offset must be >= 0 and leave room for the batch, got " +
                                std::to_string(logid_offset));
  return daskwp::make_window_params(static_cast<int32_t>(max_length),
                                    static_cast<int32_t>(stride), truncation,
                                    add_special_tokens, cls_id, sep_id, pad_id);
}

nb::tuple build_windows(I32 token_ids, I64 offsets, int64_t max_length, int64_t stride,
                        bool truncation, bool add_special_tokens, int32_t cls_id,
                        int32_t sep_id, int32_t pad_id, int64_t logid_offset, bool padding,
                        bool mask_int8, int64_t pad_width, int num_threads) {
  const daskwp::WindowParams p =
      checked_params(static_cast<int64_t>(token_ids.shape(0)), offsets, max_length, stride,
                     truncation, add_special_tokens, cls_id, sep_id, pad_id, logid_offset);
  const int64_t n_docs = static_cast<int64_t>(offsets.shape(0)) - 1;
  const int64_t* off = offsets.data();
  if (pad_width < 0) pad_width = max_length;
  if (pad_width > max_length)
    throw std::invalid_argument("pad_width " + std::to_string(pad_width) +
                                " exceeds max_length " + std::to_string(max_length));

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

#if defined(__SSE2__)
// `bytes` (a multiple of 16) from the 16-byte aligned src to the 16-byte aligned dst with
// non-temporal stores.
inline void stream_row(void* dst, const void* src, size_t bytes) {
  __m128i* d = reinterpret_cast<__m128i*>(dst);
  const __m128i* q = reinterpret_cast<const __m128i*>(src);
  for (size_t k = 0; k < bytes / 16; ++k) _mm_stream_si128(d + k, _mm_load_si128(q + k));
}
#endif

// Selected ragged rows padded into one rows x width matrix: ids (pad_id after each row's
// tokens) and the mask (1 on the row's tokens, 0 after). A row longer than width is refused.
// `stream` (stream_outputs): each row is built in a buffer that stays in L1 and written out
// with non-temporal stores, so that the output's cache lines are not read from memory
// before they are overwritten (760K rows x 128 on reused pool blocks, 2 threads: 31-33 ->
// 27-29 ms in a one-off A/B, not a script of benchmarks/).
constexpr int64_t kStreamWidth = 1024;

template <typename MaskT>
void pad_selected(const int32_t* values, const int64_t* off, const int64_t* rows, int64_t n,
                  int64_t width, int32_t pad_id, int32_t* ids, MaskT* mask, bool stream) {
#if defined(__SSE2__)
  alignas(64) int32_t row_buf[kStreamWidth];
  alignas(64) MaskT mask_buf[kStreamWidth];
#else
  stream = false;
#endif
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = rows ? rows[i] : i;
    const int64_t len = off[r + 1] - off[r];
#if defined(__SSE2__)
    int32_t* row = stream ? row_buf : ids + i * width;
    MaskT* mrow = stream ? mask_buf : mask + i * width;
#else
    int32_t* row = ids + i * width;
    MaskT* mrow = mask + i * width;
#endif
    std::copy(values + off[r], values + off[r] + len, row);
    std::fill(row + len, row + width, pad_id);
    std::fill(mrow, mrow + len, MaskT{1});
    std::fill(mrow + len, mrow + width, MaskT{0});
#if defined(__SSE2__)
    if (stream) {
      stream_row(ids + i * width, row_buf, size_t(width) * 4);
      stream_row(mask + i * width, mask_buf, size_t(width) * sizeof(MaskT));
    }
#endif
  }
#if defined(__SSE2__)
  if (stream) _mm_sfence();  // the streamed rows are visible before another thread reads
#endif
}

// Whether rows of `width` (cells of them in all) are streamed into the outputs (block,
// bytes a cell; a null block is not written): outputs of more than 32 MB (beyond the
// caches; a smaller one is read soon, from cache), 16-byte rows and blocks.
struct StreamOut {
  const void* block;
  size_t cell_bytes;
};
bool stream_outputs(std::initializer_list<StreamOut> outs, size_t cells, int64_t width) {
#if defined(__SSE2__)
  size_t per_cell = 0;
  bool fits = width <= kStreamWidth;
  for (const StreamOut& o : outs) {
    if (!o.block) continue;
    per_cell += o.cell_bytes;
    fits = fits && reinterpret_cast<uintptr_t>(o.block) % 16 == 0 &&
           (static_cast<size_t>(width) * o.cell_bytes) % 16 == 0;
  }
  return fits && cells * per_cell > (size_t(32) << 20);
#else
  (void)outs, (void)cells, (void)width;
  return false;
#endif
}

nb::tuple pad_rows(I32 values, I64 offsets, std::optional<I64> rows, int64_t width,
                   int32_t pad_id, bool mask_int8, int num_threads) {
  if (offsets.shape(0) < 1) throw std::invalid_argument("offsets must not be empty");
  if (width < 0 || width > std::numeric_limits<int32_t>::max())
    throw std::invalid_argument("width must be in [0, 2**31-1], got " + std::to_string(width));
  const int64_t n_rows = static_cast<int64_t>(offsets.shape(0)) - 1;
  const int64_t* off = offsets.data();
  const int64_t n_values = static_cast<int64_t>(values.shape(0));
  if (off[0] < 0 || off[n_rows] > n_values)
    throw std::invalid_argument("offsets point outside values");
  for (int64_t r = 0; r < n_rows; ++r)
    if (off[r] > off[r + 1]) throw std::invalid_argument("offsets are not non-decreasing");
  // rows: the selected rows, in order; none: every row
  const int64_t n = rows ? static_cast<int64_t>(rows->shape(0)) : n_rows;
  const int64_t* sel = rows ? rows->data() : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = sel ? sel[i] : i;
    if (r < 0 || r >= n_rows)
      throw std::invalid_argument("row " + std::to_string(r) + " out of range for " +
                                  std::to_string(n_rows) + " rows");
    if (off[r + 1] - off[r] > width)
      throw std::invalid_argument("row " + std::to_string(r) + " holds " +
                                  std::to_string(off[r + 1] - off[r]) +
                                  " tokens, more than width " + std::to_string(width));
  }
  const size_t cells = static_cast<size_t>(n) * static_cast<size_t>(width);
  auto ids = daskwp::host_array<int32_t>(cells);
  auto mask = daskwp::host_array<uint8_t>(cells * (mask_int8 ? 1 : 4));
  {
    nb::gil_scoped_release release;
    // Memory-bound (and, on fresh blocks, bound by the page faults): threads from 64K
    // rows each (8 MB of 128-wide ids).
    const int threads = std::max<int>(
        1, std::min<int64_t>(daskwp::resolve_threads(num_threads), n / 65536));
    int32_t* const out = ids.get();
    uint8_t* const m8 = mask.get();
    const bool stream = stream_outputs({{out, 4}, {m8, mask_int8 ? 1u : 4u}}, cells, width);
    daskwp::parallel_rows(n, threads, [&](int64_t r0, int64_t r1) {
      if (mask_int8)
        pad_selected(values.data(), off + (sel ? 0 : r0), sel ? sel + r0 : nullptr, r1 - r0,
                     width, pad_id, out + r0 * width, reinterpret_cast<int8_t*>(m8) + r0 * width,
                     stream);
      else
        pad_selected(values.data(), off + (sel ? 0 : r0), sel ? sel + r0 : nullptr, r1 - r0,
                     width, pad_id, out + r0 * width,
                     reinterpret_cast<int32_t*>(m8) + r0 * width, stream);
    });
  }
  const size_t nr = static_cast<size_t>(n), w = static_cast<size_t>(width);
  nb::object out_ids = numpy_owning<int32_t, 2>(ids.release(), {nr, w});
  nb::object out_mask = mask_int8 ? release_as<int8_t>(mask, {nr, w})
                                  : release_as<int32_t>(mask, {nr, w});
  return nb::make_tuple(out_ids, out_mask);
}

// Per-position extras of single-text windows (docs/design.md §2.9), gathered from the
// encoding's per-token spans / word ids by each cell's document token: row r of document d
// is its window k = r - doc_rows[d], holding tokens first = k * (L - stride) ... of the
// document in columns b .. b + body - 1 (b = 1 with [CLS]); other cells get (0, 0), -1 and
// special mask 1. Padded rows are `width` wide; ragged rows (row_offsets given) their own
// length. One pass, no temporaries (the NumPy form of this fill made 15 passes); rows
// [r0, r1) of the batch, so that threads can take ranges of rows.
// Each row is three runs (special cells, the tokens, padding) of fills and one copy.
// `stream` (stream_outputs): padded rows are built in L1 buffers and written out with
// non-temporal stores, as pad_selected's: the offsets are 16 bytes a cell, and the
// output's lines were read from memory before being overwritten. EWT 20 MB (260K rows x
// 128: 507 MB of spans, 127 MB of word ids), one thread: this fill 39.1 -> 20.6 ms
// (a cell-by-cell loop with plain stores before); windows with offsets against windows
// 2.21-2.40 -> 1.74-1.84 on English, logs unchanged (2.05-2.11), two builds in turn.
template <typename M>
void fill_extras(const int64_t* tok_off, const int64_t* doc_rows, int64_t n_docs, int64_t r0,
                 int64_t r1, const int64_t* row_off, int64_t width, int64_t L, int64_t stride,
                 int64_t b, const int64_t* spans, const int32_t* words, int64_t* out_spans,
                 int32_t* out_words, M* out_special, bool stream) {
  if (r0 >= r1) return;
  alignas(64) int64_t span_buf[2 * kStreamWidth];
  alignas(64) int32_t word_buf[kStreamWidth];
  alignas(64) M special_buf[kStreamWidth];
  const int64_t step = L - stride;
  // the document of row r0: doc_rows[d] <= r0 < doc_rows[d + 1]
  int64_t d = std::upper_bound(doc_rows, doc_rows + n_docs + 1, r0) - doc_rows - 1;
  for (int64_t r = r0; r < r1; ++r) {
    while (doc_rows[d + 1] <= r) ++d;
    const int64_t n = tok_off[d + 1] - tok_off[d];
    const int64_t k = r - doc_rows[d];
    const int64_t first = k * step;
    const int64_t body = std::min(std::max<int64_t>(n - first, 0), L);
    const int64_t base = row_off ? row_off[r] : r * width;
    const int64_t w = row_off ? row_off[r + 1] - row_off[r] : width;
    const int64_t src0 = tok_off[d] + first - b;
    // (stream is false without SSE2: stream_outputs)
    int64_t* const os = !out_spans ? nullptr : stream ? span_buf : out_spans + 2 * base;
    int32_t* const ow = !out_words ? nullptr : stream ? word_buf : out_words + base;
    M* const om = !out_special ? nullptr : stream ? special_buf : out_special + base;
    // the row's tokens in columns [lo, hi), the rest (0, 0) / -1 / 1
    const int64_t lo = std::min(b, w), hi = body > 0 ? std::min(b + body, w) : lo;
    if (os) {
      std::fill(os, os + 2 * lo, int64_t{0});
      if (hi > lo) std::copy(spans + 2 * (src0 + lo), spans + 2 * (src0 + hi), os + 2 * lo);
      std::fill(os + 2 * hi, os + 2 * w, int64_t{0});
    }
    if (ow) {
      std::fill(ow, ow + lo, -1);
      if (hi > lo) std::copy(words + src0 + lo, words + src0 + hi, ow + lo);
      std::fill(ow + hi, ow + w, -1);
    }
    if (om) {
      std::fill(om, om + lo, M{1});
      std::fill(om + lo, om + hi, M{0});
      std::fill(om + hi, om + w, M{1});
    }
#if defined(__SSE2__)
    if (stream) {
      if (os) stream_row(out_spans + 2 * base, os, size_t(w) * 16);
      if (ow) stream_row(out_words + base, ow, size_t(w) * 4);
      if (om) stream_row(out_special + base, om, size_t(w) * sizeof(M));
    }
#endif
  }
#if defined(__SSE2__)
  if (stream) _mm_sfence();  // the streamed rows are visible before another thread reads
#endif
}

nb::tuple window_extras(I64 tok_offsets, I64 doc_row_offsets, nb::object row_offsets_obj,
                        int64_t width, int64_t body_length, int64_t stride,
                        bool add_special_tokens, nb::object spans_obj, nb::object words_obj,
                        bool special_mask, bool mask_int8, int num_threads) {
  if (tok_offsets.shape(0) < 1 || doc_row_offsets.shape(0) != tok_offsets.shape(0))
    throw std::invalid_argument("tok_offsets and doc_row_offsets must both hold documents + 1 "
                                "entries");
  if (body_length < 1 || stride < 0 || stride >= body_length)
    throw std::invalid_argument("stride must be in [0, body_length)");
  const int64_t n_docs = static_cast<int64_t>(tok_offsets.shape(0)) - 1;
  const int64_t* tok_off = tok_offsets.data();
  const int64_t* doc_rows = doc_row_offsets.data();
  const int64_t rows = doc_rows[n_docs];
  if (doc_rows[0] != 0) throw std::invalid_argument("doc_row_offsets must start at 0");
  for (int64_t d = 0; d < n_docs; ++d)
    if (doc_rows[d] > doc_rows[d + 1] || tok_off[d] > tok_off[d + 1])
      throw std::invalid_argument("offsets are not non-decreasing");
  const int64_t b = add_special_tokens ? 1 : 0;
  const int64_t* row_off = nullptr;
  I64 row_offsets;
  int64_t cells = rows * width;
  if (!row_offsets_obj.is_none()) {
    row_offsets = nb::cast<I64>(row_offsets_obj);
    if (static_cast<int64_t>(row_offsets.shape(0)) != rows + 1)
      throw std::invalid_argument("row_offsets must hold rows + 1 entries");
    row_off = row_offsets.data();
    if (row_off[0] != 0) throw std::invalid_argument("row_offsets must start at 0");
    for (int64_t r = 0; r < rows; ++r) {
      if (row_off[r] > row_off[r + 1])
        throw std::invalid_argument("row_offsets are not non-decreasing");
    }
    cells = row_off[rows];
  } else if (width < 0) {
    throw std::invalid_argument("width must be >= 0");
  }
  // Every row's body must lie inside its document's tokens and its row's cells.
  const int64_t step = body_length - stride;
  for (int64_t d = 0; d < n_docs; ++d) {
    const int64_t n = tok_off[d + 1] - tok_off[d];
    for (int64_t r = doc_rows[d]; r < doc_rows[d + 1]; ++r) {
      const int64_t first = (r - doc_rows[d]) * step;
      const int64_t body = std::min(std::max<int64_t>(n - first, 0), body_length);
      const int64_t w = row_off ? row_off[r + 1] - row_off[r] : width;
      if (body > 0 && b + body > w)
        throw std::invalid_argument("row " + std::to_string(r) + " is narrower than its "
                                    "window's tokens");
    }
  }
  const int64_t n_tokens = tok_off[n_docs];
  I64 spans;
  I32 words;
  const int64_t* sp = nullptr;
  const int32_t* wd = nullptr;
  if (!spans_obj.is_none()) {
    spans = nb::cast<I64>(spans_obj);
    if (static_cast<int64_t>(spans.shape(0)) < 2 * n_tokens)
      throw std::invalid_argument("spans must hold 2 values per token");
    sp = spans.data();
  }
  if (!words_obj.is_none()) {
    words = nb::cast<I32>(words_obj);
    if (static_cast<int64_t>(words.shape(0)) < n_tokens)
      throw std::invalid_argument("words must hold one value per token");
    wd = words.data();
  }
  const size_t nc = static_cast<size_t>(cells);
  daskwp::HostArray<int64_t> o_sp;
  daskwp::HostArray<int32_t> o_wd;
  daskwp::HostArray<uint8_t> o_sm;
  if (sp) o_sp = daskwp::host_array<int64_t>(2 * nc);
  if (wd) o_wd = daskwp::host_array<int32_t>(nc);
  if (special_mask) o_sm = daskwp::host_array<uint8_t>(nc * (mask_int8 ? 1 : 4));
  {
    nb::gil_scoped_release release;
    // Threads from 256K cells each (the fill writes up to 20 bytes a cell).
    const int threads = static_cast<int>(std::max<int64_t>(
        1, std::min<int64_t>(daskwp::resolve_threads(num_threads), cells >> 18)));
    int64_t* osp = sp ? o_sp.get() : nullptr;
    int32_t* owd = wd ? o_wd.get() : nullptr;
    void* osm = special_mask ? o_sm.get() : nullptr;
    const bool stream =
        !row_off && stream_outputs({{osp, 16}, {owd, 4}, {osm, mask_int8 ? 1u : 4u}}, nc, width);
    daskwp::parallel_rows(rows, threads, [&](int64_t r0, int64_t r1) {
      if (mask_int8)
        fill_extras(tok_off, doc_rows, n_docs, r0, r1, row_off, width, body_length, stride, b,
                    sp, wd, osp, owd, static_cast<int8_t*>(osm), stream);
      else
        fill_extras(tok_off, doc_rows, n_docs, r0, r1, row_off, width, body_length, stride, b,
                    sp, wd, osp, owd, static_cast<int32_t*>(osm), stream);
    });
  }
  nb::object r_sp = nb::none(), r_wd = nb::none(), r_sm = nb::none();
  if (row_off) {
    if (sp) r_sp = numpy_owning<int64_t, 2>(o_sp.release(), {nc, size_t{2}});
    if (wd) r_wd = numpy_owning<int32_t, 1>(o_wd.release(), {nc});
    if (special_mask)
      r_sm = mask_int8 ? release_as<int8_t>(o_sm, {nc}) : release_as<int32_t>(o_sm, {nc});
  } else {
    const size_t nr = static_cast<size_t>(rows), w = static_cast<size_t>(width);
    if (sp) r_sp = numpy_owning<int64_t, 3>(o_sp.release(), {nr, w, size_t{2}});
    if (wd) r_wd = numpy_owning<int32_t, 2>(o_wd.release(), {nr, w});
    if (special_mask)
      r_sm = mask_int8 ? release_as<int8_t>(o_sm, {nr, w}) : release_as<int32_t>(o_sm, {nr, w});
  }
  return nb::make_tuple(r_sp, r_wd, r_sm);
}


// padding="bucket": the windows of a batch straight into per-bucket matrices
// (windows_cpu.cpp build_bucket_batch). widths: None (auto, at most auto_buckets widths) or
// sorted unique int64 widths in [1, max_length] ending with max_length.
nb::list build_buckets(I32 token_ids, I64 offsets, int64_t max_length, int64_t stride,
                       bool truncation, bool add_special_tokens, int32_t cls_id, int32_t sep_id,
                       int32_t pad_id, int64_t logid_offset, nb::object widths_obj,
                       int auto_buckets, bool mask_int8, nb::object spans_obj,
                       nb::object words_obj, bool special_mask, bool token_type_ids,
                       bool sequence_ids, int num_threads) {
  const daskwp::WindowParams p =
      checked_params(static_cast<int64_t>(token_ids.shape(0)), offsets, max_length, stride,
                     truncation, add_special_tokens, cls_id, sep_id, pad_id, logid_offset);
  const int64_t n_docs = static_cast<int64_t>(offsets.shape(0)) - 1;
  const int64_t n_tokens = n_docs ? offsets.data()[n_docs] : 0;
  std::vector<int32_t> widths;
  if (!widths_obj.is_none()) {
    I64 w = nb::cast<I64>(widths_obj);
    const int64_t* wd = w.data();
    const size_t nw = w.shape(0);
    for (size_t i = 0; i < nw; ++i) {
      if (wd[i] < 1 || wd[i] > max_length || (i && wd[i] <= wd[i - 1]))
        throw std::invalid_argument("bucket widths must be increasing, in [1, max_length=" +
                                    std::to_string(max_length) + "], got " +
                                    std::to_string(wd[i]));
      widths.push_back(static_cast<int32_t>(wd[i]));
    }
    if (widths.empty() || widths.back() != max_length)
      throw std::invalid_argument("bucket widths must end with max_length=" +
                                  std::to_string(max_length));
  } else if (auto_buckets < 1) {
    throw std::invalid_argument("auto_buckets must be >= 1, got " +
                                std::to_string(auto_buckets));
  }
  daskwp::BucketExtras ex;
  I64 spans;
  I32 words;
  if (!spans_obj.is_none()) {
    spans = nb::cast<I64>(spans_obj);
    if (static_cast<int64_t>(spans.shape(0)) < 2 * n_tokens)
      throw std::invalid_argument("spans must hold 2 values per token");
    ex.spans = spans.data();
  }
  if (!words_obj.is_none()) {
    words = nb::cast<I32>(words_obj);
    if (static_cast<int64_t>(words.shape(0)) < n_tokens)
      throw std::invalid_argument("words must hold one value per token");
    ex.words = words.data();
  }
  ex.special_mask = special_mask;
  ex.token_type_ids = token_type_ids;
  ex.sequence_ids = sequence_ids;
  std::vector<daskwp::Bucket> bs;
  {
    nb::gil_scoped_release release;
    bs = daskwp::build_bucket_batch(token_ids.data(), offsets.data(), n_docs, p, logid_offset,
                                    widths.data(), static_cast<int>(widths.size()),
                                    auto_buckets, mask_int8, ex, num_threads);
  }
  auto masklike = [&](daskwp::HostArray<uint8_t>& a, size_t nr, size_t w) {
    return mask_int8 ? release_as<int8_t>(a, {nr, w}) : release_as<int32_t>(a, {nr, w});
  };
  nb::list out;
  for (auto& B : bs) {
    const size_t nr = static_cast<size_t>(B.rows), w = static_cast<size_t>(B.width);
    nb::object none = nb::none();
    out.append(nb::make_tuple(
        B.width, numpy_owning<int32_t, 2>(B.ids.release(), {nr, w}), masklike(B.mask, nr, w),
        numpy_owning<int64_t, 2>(B.metadata.release(), {nr, size_t{3}}),
        numpy_owning<int32_t, 1>(B.window.release(), {nr}),
        token_type_ids ? masklike(B.token_type_ids, nr, w) : none,
        sequence_ids ? numpy_owning<int8_t, 2>(B.sequence_ids.release(), {nr, w}) : none,
        ex.spans ? numpy_owning<int64_t, 3>(B.offsets.release(), {nr, w, size_t{2}}) : none,
        ex.words ? numpy_owning<int32_t, 2>(B.word_ids.release(), {nr, w}) : none,
        special_mask ? masklike(B.special_mask, nr, w) : none));
  }
  return out;
}

// bucket_widths="auto" of a histogram of row lengths (hist[x]: rows of x tokens).
nb::tuple auto_widths(I64 hist, int64_t max_length, int n_buckets) {
  if (max_length < 1 || max_length > std::numeric_limits<int32_t>::max())
    throw std::invalid_argument("max_length must be in [1, 2**31-1], got " +
                                std::to_string(max_length));
  if (n_buckets < 1)
    throw std::invalid_argument("n_buckets must be >= 1, got " + std::to_string(n_buckets));
  const int64_t n = static_cast<int64_t>(hist.shape(0));
  const int64_t* h = hist.data();
  int64_t longest = -1;
  for (int64_t x = 0; x < n; ++x) {
    if (h[x] < 0) throw std::invalid_argument("the histogram holds a negative count");
    if (h[x]) longest = x;
  }
  if (longest > max_length)
    throw std::invalid_argument("a row of " + std::to_string(longest) +
                                " tokens is longer than max_length=" +
                                std::to_string(max_length));
  if (longest < 0) return nb::make_tuple(max_length);
  const std::vector<int32_t> ws = daskwp::auto_bucket_widths(
      h, longest, static_cast<int32_t>(max_length), n_buckets);
  nb::list out;
  for (int32_t w : ws) out.append(w);
  return nb::tuple(out);
}

}  // namespace

void bind_windows(nb::module_& m) {
  m.def("window_extras", &window_extras, nb::arg("tok_offsets"), nb::arg("doc_row_offsets"),
        nb::arg("row_offsets").none(), nb::arg("width"), nb::arg("body_length"),
        nb::arg("stride"), nb::arg("add_special_tokens"), nb::arg("spans").none(),
        nb::arg("words").none(), nb::arg("special_mask"), nb::arg("mask_int8") = false,
        nb::arg("num_threads") = 1,
        "offset_mapping / word_ids / special_tokens_mask of single-text windows, gathered\n"
        "from the encoding's flat spans (2 per token) and word ids by each cell's document\n"
        "token (docs/design.md §2.9): (0, 0), -1 and 1 on [CLS], [SEP] and padding.\n"
        "Padded rows x width, or flat cells of ragged rows (row_offsets given); on up to\n"
        "num_threads threads (<= 0: all cores).");
  m.def("pad_rows", &pad_rows, nb::arg("values"), nb::arg("offsets"), nb::arg("rows").none(),
        nb::arg("width"), nb::arg("pad_id"), nb::arg("mask_int8") = false,
        nb::arg("num_threads") = 1,
        "The selected rows (None: all) of a ragged batch (values, offsets) padded to width:\n"
        "(input_ids, attention_mask), rows x width; the mask is 1 on each row's tokens. The fill of the\n"
        "padding='bucket' buckets of ragged rows (pairs; single texts use build_buckets)\n"
        "and of read_tokenized's batches; on up to num_threads threads (<= 0: all cores).");
  m.def("build_buckets", &build_buckets, nb::arg("token_ids"), nb::arg("offsets"),
        nb::arg("max_length"), nb::arg("stride"), nb::arg("truncation"),
        nb::arg("add_special_tokens"), nb::arg("cls_id"), nb::arg("sep_id"), nb::arg("pad_id"),
        nb::arg("logid_offset"), nb::arg("widths").none(), nb::arg("auto_buckets"),
        nb::arg("mask_int8"), nb::arg("spans").none(), nb::arg("words").none(),
        nb::arg("special_mask"), nb::arg("token_type_ids"), nb::arg("sequence_ids"),
        nb::arg("num_threads") = 0,
        "padding='bucket': the strided windows of a ragged batch written straight into\n"
        "per-bucket matrices, each row in the smallest width that holds it. widths: None\n"
        "(auto: auto_bucket_widths of the row lengths) or increasing widths ending with\n"
        "max_length. Returns a list, increasing width, empty buckets left out, of (width,\n"
        "input_ids, attention_mask, metadata, window, token_type_ids, sequence_ids,\n"
        "offset_mapping, word_ids, special_tokens_mask), None for an output not asked.");
  m.def("auto_bucket_widths", &auto_widths, nb::arg("hist"), nb::arg("max_length"),
        nb::arg("n_buckets"),
        "At most n_buckets widths minimising the padding of rows whose lengths have the\n"
        "histogram hist (hist[x]: rows of x tokens, x <= max_length), among the multiples\n"
        "of 8 up to max_length and max_length (exact dynamic program).");
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
