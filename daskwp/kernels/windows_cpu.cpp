// daskwp — CPU build of the strided windows (windows.hpp) over a whole batch (no Python:
// bind_windows.cpp is its binding `build_windows`).
//
// Windows: three passes, exact-size outputs: (1) rows per document (window_count) and their
// exclusive scan, (2) allocate rows x width (or the ragged total), (3) fill every row
// independently, rows split into contiguous ranges over threads. The caller releases the
// GIL for passes 1-3.
//
// Buckets (build_bucket_batch): rows per document and the histogram of row lengths (one
// pass over the documents, no per-row array), the widths (given, or auto_bucket_widths of
// the histogram), each bucket allocated at its exact size, then every row written straight
// into its bucket, rows split into contiguous ranges over threads (each range's first row
// in each bucket counted first).
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

std::vector<int32_t> auto_bucket_widths(const int64_t* hist, int64_t longest,
                                        int32_t max_length, int n_buckets) {
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  // the candidates (the multiples of 8 up to max_length, and max_length) below the longest
  // row, then the smallest that holds it: O(longest), whatever max_length is
  std::vector<int64_t> c;
  for (int64_t w = 8; w < longest && w <= max_length; w += 8) c.push_back(w);
  if (max_length % 8 && max_length < longest) c.push_back(max_length);
  const int64_t up = (std::max<int64_t>(longest, 1) + 7) / 8 * 8;
  c.push_back(up <= max_length ? up : max_length);
  const int m = static_cast<int>(c.size());
  // N[j + 1], S[j + 1]: rows and their tokens of length <= min(c[j], longest)
  std::vector<int64_t> n_le(longest + 1), s_le(longest + 1);
  for (int64_t x = 0, n = 0, s = 0; x <= longest; ++x) {
    n += hist[x];
    s += hist[x] * x;
    n_le[x] = n;
    s_le[x] = s;
  }
  std::vector<int64_t> N(m + 1, 0), S(m + 1, 0);
  for (int j = 0; j < m; ++j) {
    const int64_t top = std::min(c[j], longest);
    N[j + 1] = n_le[top];
    S[j + 1] = s_le[top];
  }
  // cost(lo, j): the rows of candidates lo..j padded to c[j]
  auto cost = [&](int lo, int j) -> int64_t {
    if (lo > j) return kInf;
    return c[j] * (N[j + 1] - N[lo]) - (S[j + 1] - S[lo]);
  };
  auto add = [](int64_t a, int64_t b) { return (a == kInf || b == kInf) ? kInf : a + b; };
  const int k_max = std::min(n_buckets, m);
  std::vector<std::vector<int64_t>> best(k_max, std::vector<int64_t>(m, kInf));
  std::vector<std::vector<int>> back(k_max, std::vector<int>(m, -1));
  for (int j = 0; j < m; ++j) best[0][j] = cost(0, j);
  for (int k = 1; k < k_max; ++k)
    for (int j = 0; j < m; ++j) {
      // best[k][j] = min over i of best[k-1][i] + cost(i + 1, j); the first i on ties
      int bi = 0;
      int64_t bv = add(best[k - 1][0], cost(1, j));
      for (int i = 1; i < m; ++i) {
        const int64_t v = add(best[k - 1][i], i + 1 < m ? cost(i + 1, j) : kInf);
        if (v < bv) {
          bv = v;
          bi = i;
        }
      }
      back[k][j] = bi;
      best[k][j] = bv;
    }
  int j = m - 1, k = 0;
  for (int q = 1; q < k_max; ++q)
    if (best[q][j] < best[k][j]) k = q;  // the fewest buckets on ties
  std::vector<int32_t> chosen;
  while (k >= 0 && j >= 0) {
    chosen.push_back(static_cast<int32_t>(c[j]));
    j = k > 0 ? back[k][j] : -1;
    --k;
  }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

namespace {

// Row k of document d, geometry r (window_row), written into row i of bucket B: the
// values fill_window_row writes, by block copies and fills (bucket rows are short, so
// per-element loops cost more in their set-up than in their stores).
template <typename MaskT>
void fill_bucket_row(const int32_t* tokens, const int64_t* offsets, int64_t d, int64_t k,
                     const WindowRow& r, int64_t logid, const WindowParams& p,
                     const BucketExtras& ex, Bucket& B, int64_t i) {
  const int32_t w = B.width, len = r.row_tokens;
  const int64_t at = i * static_cast<int64_t>(w);
  int32_t* ids = B.ids.get() + at;
  MaskT* mask = reinterpret_cast<MaskT*>(B.mask.get()) + at;
  if (p.first_body_col) {
    ids[0] = p.cls_id;
    ids[len - 1] = p.sep_id;
  }
  const int32_t* body = tokens + offsets[d] + r.first_token;
  std::copy(body, body + r.body_tokens, ids + p.first_body_col);
  std::fill(ids + len, ids + w, p.pad_id);
  std::fill(mask, mask + len, MaskT{1});
  std::fill(mask + len, mask + w, MaskT{0});
  int64_t* meta = B.metadata.get() + 3 * i;
  meta[0] = logid;
  meta[1] = r.start;
  meta[2] = r.stop;
  B.window[i] = static_cast<int32_t>(k);
  if (!(ex.spans || ex.words || ex.special_mask || ex.token_type_ids || ex.sequence_ids))
    return;
  const int32_t b0 = p.first_body_col, b1 = p.first_body_col + r.body_tokens;  // body [b0, b1)
  const int64_t src = offsets[d] + r.first_token - b0;  // column c's token: src + c
  if (ex.token_type_ids) {
    MaskT* t = reinterpret_cast<MaskT*>(B.token_type_ids.get()) + at;
    std::fill(t, t + w, MaskT{0});
  }
  if (ex.sequence_ids) {
    int8_t* s = B.sequence_ids.get() + at;
    std::fill(s, s + w, int8_t{-1});
    std::fill(s + b0, s + b1, int8_t{0});
  }
  if (ex.special_mask) {
    MaskT* s = reinterpret_cast<MaskT*>(B.special_mask.get()) + at;
    std::fill(s, s + w, MaskT{1});
    std::fill(s + b0, s + b1, MaskT{0});
  }
  if (ex.words) {
    int32_t* o = B.word_ids.get() + at;
    std::fill(o, o + b0, -1);
    std::copy(ex.words + src + b0, ex.words + src + b1, o + b0);
    std::fill(o + b1, o + w, -1);
  }
  if (ex.spans) {
    int64_t* o = B.offsets.get() + 2 * at;
    std::fill(o, o + 2 * b0, int64_t{0});
    std::copy(ex.spans + 2 * (src + b0), ex.spans + 2 * (src + b1), o + 2 * b0);
    std::fill(o + 2 * b1, o + 2 * static_cast<int64_t>(w), int64_t{0});
  }
}

template <typename MaskT>
void fill_buckets(const int32_t* tokens, const int64_t* offsets, int64_t n_docs,
                  const int64_t* doc_rows, const WindowParams& p, int64_t logid_offset,
                  const std::vector<int32_t>& lut, const BucketExtras& ex,
                  std::vector<Bucket>& all, int64_t rows, int threads) {
  const int nb = static_cast<int>(all.size());
  // Each range of rows starts writing bucket q at first[t][q]: the rows of q before it.
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, rows)));
  std::vector<std::vector<int64_t>> first(threads, std::vector<int64_t>(nb, 0));
  auto row_bucket = [&](int64_t d, int64_t k) {
    return lut[window_row(offsets[d + 1] - offsets[d], k, p).row_tokens];
  };  // (the counting pass; the fill computes each row's geometry once)
  if (threads > 1) {
    for (int t = 0; t + 1 < threads; ++t) {
      const int64_t r0 = rows * t / threads, r1 = rows * (t + 1) / threads;
      first[t + 1] = first[t];
      int64_t d = find_document(doc_rows, n_docs, r0);
      for (int64_t r = r0; r < r1; ++r) {
        while (doc_rows[d + 1] <= r) ++d;
        ++first[t + 1][row_bucket(d, r - doc_rows[d])];
      }
    }
  }
  parallel_rows(rows, threads, [&](int64_t r0, int64_t r1) {
    if (r0 >= r1) return;
    // the range's index t (parallel_rows' ranges are [rows * t / threads, ...))
    int ti = 0;
    while (ti + 1 < threads && rows * (ti + 1) / threads <= r0) ++ti;
    std::vector<int64_t> cursor = first[ti];
    int64_t d = find_document(doc_rows, n_docs, r0);
    for (int64_t r = r0; r < r1; ++r) {
      while (doc_rows[d + 1] <= r) ++d;
      const int64_t k = r - doc_rows[d];
      const WindowRow wr = window_row(offsets[d + 1] - offsets[d], k, p);
      const int q = lut[wr.row_tokens];
      fill_bucket_row<MaskT>(tokens, offsets, d, k, wr, logid_offset + d, p, ex, all[q],
                             cursor[q]++);
    }
  });
}

}  // namespace

std::vector<Bucket> build_bucket_batch(const int32_t* tokens, const int64_t* offsets,
                                       int64_t n_docs, const WindowParams& p,
                                       int64_t logid_offset, const int32_t* widths,
                                       int n_widths, int auto_buckets, bool mask_int8,
                                       const BucketExtras& ex, int num_threads) {
  // Rows per document and the histogram of row lengths: every row but a document's last
  // is full (L + 2b tokens).
  // The histogram spans the longest row, not max_length (which may be 2**31-1).
  std::vector<int64_t> doc_rows(static_cast<size_t>(n_docs + 1));
  const int32_t full = p.body_length + 2 * p.first_body_col;
  doc_rows[0] = 0;
  int64_t longest = -1;
  for (int64_t d = 0; d < n_docs; ++d) {
    const int64_t n = offsets[d + 1] - offsets[d];
    const int64_t K = window_count(n, p);
    doc_rows[d + 1] = doc_rows[d] + K;
    longest = std::max<int64_t>(longest, K > 1 ? full : window_row(n, K - 1, p).row_tokens);
  }
  std::vector<int64_t> hist(static_cast<size_t>(std::max<int64_t>(longest, 0)) + 1, 0);
  for (int64_t d = 0; d < n_docs; ++d) {
    const int64_t K = doc_rows[d + 1] - doc_rows[d];
    if (K > 1) hist[full] += K - 1;   // full rows exist only then (longest >= full)
    ++hist[window_row(offsets[d + 1] - offsets[d], K - 1, p).row_tokens];
  }
  const int64_t rows = doc_rows[n_docs];
  std::vector<Bucket> out;
  if (rows == 0) return out;
  std::vector<int32_t> ws = n_widths ? std::vector<int32_t>(widths, widths + n_widths)
                                     : auto_bucket_widths(hist.data(), longest, p.max_length,
                                                          auto_buckets);
  // lut[x]: the bucket of a row of x tokens (the first width >= x), up to the longest row
  // (auto widths may end below max_length); rows per bucket
  std::vector<int32_t> lut(static_cast<size_t>(longest) + 1);
  std::vector<int64_t> count(ws.size(), 0);
  for (int64_t x = 0, q = 0; x <= longest; ++x) {
    while (q < static_cast<int64_t>(ws.size()) && ws[q] < x) ++q;
    if (q == static_cast<int64_t>(ws.size()))
      throw std::invalid_argument("no bucket width holds a row of " + std::to_string(x) +
                                  " tokens");
    lut[x] = static_cast<int32_t>(q);
    count[q] += hist[x];
  }
  // the non-empty buckets; lut then names their index in `out`
  std::vector<int32_t> index(ws.size(), -1);
  const size_t mask_bytes = mask_int8 ? 1 : 4;
  int64_t cells = 0;
  for (size_t q = 0; q < ws.size(); ++q) {
    if (!count[q]) continue;
    index[q] = static_cast<int32_t>(out.size());
    Bucket B;
    B.width = ws[q];
    B.rows = count[q];
    if (B.rows > std::numeric_limits<int64_t>::max() / 16 / std::max<int64_t>(B.width, 1))
      throw std::overflow_error("rows x width of a bucket overflows int64");
    const size_t nc = static_cast<size_t>(B.rows) * static_cast<size_t>(B.width);
    cells += static_cast<int64_t>(nc);
    B.ids = host_array<int32_t>(nc);
    B.mask = host_array<uint8_t>(nc * mask_bytes);
    B.metadata = host_array<int64_t>(3 * static_cast<size_t>(B.rows));
    B.window = host_array<int32_t>(static_cast<size_t>(B.rows));
    if (ex.token_type_ids) B.token_type_ids = host_array<uint8_t>(nc * mask_bytes);
    if (ex.sequence_ids) B.sequence_ids = host_array<int8_t>(nc);
    if (ex.spans) B.offsets = host_array<int64_t>(2 * nc);
    if (ex.words) B.word_ids = host_array<int32_t>(nc);
    if (ex.special_mask) B.special_mask = host_array<uint8_t>(nc * mask_bytes);
    out.push_back(std::move(B));
  }
  for (auto& q : lut) q = index[q];
  int threads = resolve_threads(num_threads);
  // as the plain fill: a thread only pays off for ~256K cells
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, cells >> 18)));
  if (mask_int8)
    fill_buckets<int8_t>(tokens, offsets, n_docs, doc_rows.data(), p, logid_offset, lut, ex,
                         out, rows, threads);
  else
    fill_buckets<int32_t>(tokens, offsets, n_docs, doc_rows.data(), p, logid_offset, lut, ex,
                          out, rows, threads);
  return out;
}

}  // namespace daskwp
