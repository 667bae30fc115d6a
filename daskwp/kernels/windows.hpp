// daskwp — strided windows over the tokens of a document (host and device).
//
// The GST layout (docs/design.md §2): a document with tokens t[0..n) becomes K rows; row k
// holds the body t[k*step, k*step + L) (shorter for the last row), framed by [CLS] ... [SEP]
// when special tokens are added, padded with [PAD] to the row width. Each row also owns a
// disjoint slice [start, stop] (columns, stop inclusive) of its body; over the rows of one
// document these slices rebuild t[0..n) exactly once.
//
// Everything here is a pure function of (document length, row index, parameters), so a
// batch is built in three passes with no guessing: count rows per document
// (window_count), exclusive scan, then fill every row independently (fill_window_row) —
// a CPU loop over rows (windows_cpu.cpp) or one GPU thread per row. No allocation, no
// library calls: the header compiles unchanged with a host compiler, nvcc and NVRTC.
#pragma once

#include "common.hpp"

namespace daskwp {

// Per-call window parameters, validated on the host before any fill.
struct WindowParams {
  int32_t max_length;      // row capacity, special tokens included
  int32_t body_length;     // L: max_length - 2 with special tokens, else max_length (>= 1)
  int32_t stride;          // overlap of consecutive bodies, 0 <= stride < L
  int32_t step;            // L - stride (>= 1)
  int32_t first_body_col;  // b: column of the first body token (1 with [CLS], else 0)
  int32_t truncation;      // nonzero: one row per document, the rest of the tokens dropped
  int32_t cls_id;          // ids framing a row when first_body_col == 1
  int32_t sep_id;
  int32_t pad_id;          // id written into padding columns
};

// The parameters for (max_length, stride, truncation, add_special_tokens). The caller
// checks 1 <= L and 0 <= stride < L first (window_params_valid).
DWP_HD inline WindowParams make_window_params(int32_t max_length, int32_t stride,
                                              bool truncation, bool add_special_tokens,
                                              int32_t cls_id, int32_t sep_id,
                                              int32_t pad_id) {
  WindowParams p;
  p.max_length = max_length;
  p.first_body_col = add_special_tokens ? 1 : 0;
  p.body_length = max_length - 2 * p.first_body_col;
  p.stride = stride;
  p.step = p.body_length - stride;
  p.truncation = truncation ? 1 : 0;
  p.cls_id = cls_id;
  p.sep_id = sep_id;
  p.pad_id = pad_id;
  return p;
}

DWP_HD inline bool window_params_valid(const WindowParams& p) {
  return p.max_length >= 1 && p.body_length >= 1 && p.stride >= 0 &&
         p.stride < p.body_length && p.step == p.body_length - p.stride;
}

// Number of rows of a document of n_tokens tokens:
// 1 when truncating or n <= L, else 1 + ceil((n - L) / step). Never 0: an empty document
// still has its (empty) row.
DWP_HD inline int64_t window_count(int64_t n_tokens, const WindowParams& p) {
  if (p.truncation || n_tokens <= p.body_length) return 1;
  return 1 + (n_tokens - p.body_length + p.step - 1) / p.step;
}

// Geometry of row k (0 <= k < window_count) of a document.
struct WindowRow {
  int64_t first_token;  // document index of the row's first body token
  int32_t body_tokens;  // body tokens in the row (0 only for an empty document)
  int32_t row_tokens;   // real (unpadded) width: body_tokens + 2*first_body_col
  int32_t start;        // owned slice [start, stop], columns, stop inclusive;
  int32_t stop;         //   stop == start - 1 for an empty document
};

// The fixed split (docs/design.md §2): row 0 starts at b, row k > 0 at b + floor(stride/2);
// a row that is not the last stops at b + L - ceil(stride/2) - 1, the last row at its last
// body token. Row k+1 then starts exactly one past where row k stops, for every stride,
// odd or even, and whether or not the last window is full.
DWP_HD inline WindowRow window_row(int64_t n_tokens, int64_t k, const WindowParams& p) {
  WindowRow r;
  const int64_t rows = window_count(n_tokens, p);
  const bool last = (k == rows - 1);
  r.first_token = k * static_cast<int64_t>(p.step);
  int64_t left = n_tokens - r.first_token;
  if (left > p.body_length) left = p.body_length;
  if (left < 0) left = 0;
  r.body_tokens = static_cast<int32_t>(left);
  r.row_tokens = r.body_tokens + 2 * p.first_body_col;
  const int32_t b = p.first_body_col;
  r.start = (k == 0) ? b : b + p.stride / 2;
  r.stop = last ? b + r.body_tokens - 1 : b + p.body_length - (p.stride + 1) / 2 - 1;
  return r;
}

// Real (unpadded) tokens over all rows of a document: the size of its ragged output.
// Every row but the last is full (L + 2b tokens).
DWP_HD inline int64_t window_tokens(int64_t n_tokens, const WindowParams& p) {
  const int64_t rows = window_count(n_tokens, p);
  const WindowRow last = window_row(n_tokens, rows - 1, p);
  return (rows - 1) * static_cast<int64_t>(p.body_length + 2 * p.first_body_col) +
         last.row_tokens;
}

// Fills row k of a document: `width` columns of ids and mask (width >= row_tokens; the
// columns past row_tokens are [PAD] with mask 0) and the metadata triple
// (logid, start, stop). doc_tokens points at the document's first token.
template <typename MaskT>
DWP_HD inline void fill_window_row(const int32_t* doc_tokens, int64_t n_tokens, int64_t k,
                                   int64_t logid, const WindowParams& p, int32_t width,
                                   int32_t* ids, MaskT* mask, int64_t* metadata) {
  const WindowRow r = window_row(n_tokens, k, p);
  int32_t col = 0;
  if (p.first_body_col) ids[col++] = p.cls_id;
  const int32_t* body = doc_tokens + r.first_token;
  for (int32_t j = 0; j < r.body_tokens; ++j) ids[col++] = body[j];
  if (p.first_body_col) ids[col++] = p.sep_id;
  for (int32_t c = 0; c < col; ++c) mask[c] = static_cast<MaskT>(1);
  for (; col < width; ++col) {
    ids[col] = p.pad_id;
    mask[col] = static_cast<MaskT>(0);
  }
  metadata[0] = logid;
  metadata[1] = r.start;
  metadata[2] = r.stop;
}

// The document that item `row` belongs to, given first[0..n_docs]: a non-decreasing
// exclusive scan of per-document counts (output rows from window_count, or the GPU's
// document pieces), with first[0] <= row < first[n_docs]. The last d with
// first[d] <= row, so documents with no items are skipped. Binary search: lets a GPU
// launch one thread per item.
DWP_HD inline int64_t find_document(const int64_t* first, int64_t n_docs, int64_t row) {
  int64_t lo = 0, hi = n_docs;  // invariant: first[lo] <= row < first[hi]
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (first[mid] <= row)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

}  // namespace daskwp
