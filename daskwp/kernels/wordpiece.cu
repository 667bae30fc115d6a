// daskwp — CUDA kernels: the shared normalize+WordPiece core and the shared window fill,
// launched over whole partitions.
//
// The algorithm lives in wordpiece_core.hpp and windows.hpp, the very headers the CPU
// extension compiles (cpu_batch.cpp, windows_cpu.cpp); this file adds only the parallel
// structure. It is compiled at run time by NVRTC through CuPy (daskwp/cuda.py); the test
// suite also compiles it with nvcc for sm_80 and sm_90.
//
// Load balance. A partition is cut into chunks of about `chunk_bytes` bytes and every
// chunk is one thread, so one 100 MB document or a partition of very uneven lengths keeps
// the whole GPU busy. A document is cut only just before a *boundary byte*: an ASCII byte
// that the normalization table makes a word break (whitespace, or punctuation, which is a
// one-character word) and that occurs in no literal special token. The core ends the
// current word at such a byte, its UTF-8 decoder never consumes an ASCII byte as part of
// another character, and no special-token match can straddle it, so the tokens of a
// document are exactly the concatenation of the tokens of its chunks. The boundary table
// is computed on the device from the two blobs (dwp_boundary_bytes).
//
// Pipeline (one stream, exact-size outputs; the host reads back only scalars: the offsets
// check, the token total and, for windows, the row and cell totals):
//   dwp_piece_counts   per document: number of nominal pieces ceil(bytes / chunk_bytes)
//   (inclusive scan on the host side with cupy.cumsum -> piece_first[d])
//   dwp_chunk_starts   per piece: its start, the first boundary byte in its nominal span
//                      (the document start for piece 0), or -1 when the span has none
//   dwp_chunk_ends     per piece: the start of the next live piece of the same document,
//                      or the document end
//   dwp_chunk_tokenize per chunk, count pass: token count (the core with a counting sink)
//   (exclusive scan with cupy.cumsum -> chunk_tok_off; document d's tokens start at
//    chunk_tok_off[piece_first[d]])
//   dwp_chunk_tokenize per chunk, write pass: the same core, writing at chunk_tok_off[j]
//   dwp_window_counts  per document: rows, ragged cells and width of row 0 (windows.hpp)
//   dwp_window_fill_*  per row: fill_window_row (windows.hpp)
//
// Memory access. Consecutive threads own consecutive chunks, so a warp works on one
// contiguous stretch of the byte buffer; each thread streams its own bytes front to back,
// every 32-byte sector is fetched from DRAM once and consumed by one thread out of L1 (no
// read amplification), and the read-only path is used (const __restrict__). The work is
// dominated by dependent lookups in the trie, not by bandwidth: the core's context with its
// byte feed table, the ASCII tables and the boundary table live in shared memory, built once per
// block; the trie's hot node array walked per byte and the rest of the blobs stay in L2
// (a BERT vocabulary blob is a few MB).
#include "windows.hpp"
#include "wordpiece_core.hpp"

namespace daskwp {
namespace gpu {

// What the threads of a block share: the core's context (views, parameters and its
// 256-byte feed table) and copies of the ASCII tables, all in shared memory.
struct BlockContext {
  CoreContext ctx;
  uint8_t ascii_kind[128];
  uint8_t ascii_byte[128];
};

// Builds the block's context; every thread of the block must call it (it synchronizes).
__device__ void load_block_context(BlockContext& sh, const uint8_t* vocab_blob,
                                   const uint8_t* norm_blob, int32_t max_input_chars_per_word) {
  if (threadIdx.x == 0) {
    TokenizeParams p;
    p.max_input_chars_per_word = max_input_chars_per_word;
    init_context(sh.ctx, vocab_blob, norm_blob, p);
  }
  const NormView nm = make_norm_view(norm_blob);
  for (int i = threadIdx.x; i < 128; i += blockDim.x) {
    sh.ascii_kind[i] = nm.ascii_kind[i];
    sh.ascii_byte[i] = nm.ascii_byte[i];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    sh.ctx.nm.ascii_kind = sh.ascii_kind;
    sh.ctx.nm.ascii_byte = sh.ascii_byte;
  }
  __syncthreads();
}

__device__ DWP_FORCEINLINE bool document_valid(const uint8_t* validity, int64_t validity_offset,
                                               int64_t d) {
  if (validity == nullptr) return true;
  const int64_t b = d + validity_offset;
  return ((validity[b >> 3] >> (b & 7)) & 1) != 0;
}

__device__ DWP_FORCEINLINE int64_t grid_start() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ DWP_FORCEINLINE int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

template <typename MaskT>
__device__ void window_fill(const int32_t* __restrict__ tokens,
                            const int64_t* __restrict__ doc_tok_off,
                            const int64_t* __restrict__ doc_row_off,
                            const int64_t* __restrict__ doc_cells, int64_t n_docs,
                            int64_t n_rows, int64_t logid_offset, const WindowParams& p,
                            int32_t padded, int32_t width, int32_t* __restrict__ ids,
                            MaskT* __restrict__ mask, int64_t* __restrict__ metadata,
                            int64_t* __restrict__ row_offsets) {
  const int64_t full_row = p.body_length + 2 * p.first_body_col;
  for (int64_t r = grid_start(); r < n_rows; r += grid_stride()) {
    const int64_t d = find_document(doc_row_off, n_docs, r);
    const int64_t k = r - doc_row_off[d];
    const int64_t n = doc_tok_off[d + 1] - doc_tok_off[d];
    const int32_t* doc = tokens + doc_tok_off[d];
    int64_t* meta = metadata + 3 * r;
    if (padded) {
      const int64_t at = r * static_cast<int64_t>(width);
      fill_window_row<MaskT>(doc, n, k, logid_offset + d, p, width, ids + at, mask + at, meta);
    } else {
      const int64_t at = doc_cells[d] + k * full_row;
      const int32_t w = window_row(n, k, p).row_tokens;
      fill_window_row<MaskT>(doc, n, k, logid_offset + d, p, w, ids + at, mask + at, meta);
      row_offsets[r] = at;
      if (r == n_rows - 1) row_offsets[n_rows] = doc_cells[n_docs];
    }
  }
}

}  // namespace gpu
}  // namespace daskwp

using daskwp::NormView;
using daskwp::VocabView;
using daskwp::WindowParams;

extern "C" {

// boundary[c] = 1 when a chunk may start at byte c (see the top of the file), else 0.
// Launch: one block (256 threads suggested); thread t decides bytes t, t + blockDim.x, ...
__global__ void dwp_boundary_bytes(const uint8_t* __restrict__ vocab_blob,
                                   const uint8_t* __restrict__ norm_blob,
                                   uint8_t* __restrict__ boundary) {
  const NormView nm = daskwp::make_norm_view(norm_blob);
  const VocabView v = daskwp::make_vocab_view(vocab_blob);
  for (int c = threadIdx.x; c < 256; c += blockDim.x) {
    bool ok = false;
    if (c < 128) {
      const uint8_t kind = nm.ascii_kind[c];
      ok = kind == daskwp::kAsciiSpace || kind == daskwp::kAsciiPunct;
      const int32_t end = v.special_offsets[v.h->n_specials];
      for (int32_t i = v.special_offsets[0]; ok && i < end; ++i)
        if (v.special_bytes[i] == c) ok = false;
    }
    boundary[c] = ok ? 1 : 0;
  }
}

// piece_counts[d + 1] = ceil(bytes of document d / chunk_bytes) (0 for null or empty
// documents); piece_counts[0] = 0. An inclusive scan turns it into piece_first.
// Launch: 1-D grid-stride over documents.
__global__ void dwp_piece_counts(const int64_t* __restrict__ doc_off,
                                 const uint8_t* __restrict__ validity, int64_t validity_offset,
                                 int32_t has_validity, int64_t n_docs, int64_t chunk_bytes,
                                 int64_t* __restrict__ piece_counts) {
  const uint8_t* valid = has_validity ? validity : nullptr;
  for (int64_t d = daskwp::gpu::grid_start(); d < n_docs; d += daskwp::gpu::grid_stride()) {
    const int64_t len = doc_off[d + 1] - doc_off[d];
    const bool live = len > 0 && daskwp::gpu::document_valid(valid, validity_offset, d);
    piece_counts[d + 1] = live ? (len + chunk_bytes - 1) / chunk_bytes : 0;
    if (d == 0) piece_counts[0] = 0;
  }
}

// chunk_begin[j] for every piece slot j < n_slots (n_slots >= piece_first[n_docs]): piece k
// of document d covers the nominal span [b + k*chunk_bytes, b + (k+1)*chunk_bytes); piece 0
// starts at b, a later piece at the first boundary byte of its span, or is dead (-1) when
// the span has none (the previous live piece then runs on). Slots past the last piece: -1.
// Launch: 1-D grid-stride over piece slots; block size <= 1024.
__global__ void dwp_chunk_starts(const int64_t* __restrict__ doc_off,
                                 const int64_t* __restrict__ piece_first, int64_t n_docs,
                                 int64_t n_slots, int64_t chunk_bytes,
                                 const uint8_t* __restrict__ data,
                                 const uint8_t* __restrict__ boundary,
                                 int64_t* __restrict__ chunk_begin) {
  __shared__ uint8_t sh_boundary[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) sh_boundary[i] = boundary[i];
  __syncthreads();
  const int64_t n_pieces = piece_first[n_docs];
  for (int64_t j = daskwp::gpu::grid_start(); j < n_slots; j += daskwp::gpu::grid_stride()) {
    int64_t begin = -1;
    if (j < n_pieces) {
      const int64_t d = daskwp::find_document(piece_first, n_docs, j);
      const int64_t k = j - piece_first[d];
      const int64_t b = doc_off[d], e = doc_off[d + 1];
      if (k == 0) {
        begin = b;
      } else {
        const int64_t w = b + k * chunk_bytes;
        const int64_t we = (e - w < chunk_bytes) ? e : w + chunk_bytes;
        for (int64_t q = w; q < we; ++q) {
          if (sh_boundary[data[q]]) {
            begin = q;
            break;
          }
        }
      }
    }
    chunk_begin[j] = begin;
  }
}

// chunk_end[j] for every live piece: the start of the next live piece of its document, or
// the document end; -1 for dead slots. Each dead piece is walked over by exactly one live
// piece (the one before it), so the total work is linear.
// Launch: 1-D grid-stride over piece slots.
__global__ void dwp_chunk_ends(const int64_t* __restrict__ doc_off,
                               const int64_t* __restrict__ piece_first, int64_t n_docs,
                               int64_t n_slots, const int64_t* __restrict__ chunk_begin,
                               int64_t* __restrict__ chunk_end) {
  for (int64_t j = daskwp::gpu::grid_start(); j < n_slots; j += daskwp::gpu::grid_stride()) {
    int64_t end = -1;
    if (chunk_begin[j] >= 0) {
      const int64_t d = daskwp::find_document(piece_first, n_docs, j);
      const int64_t last = piece_first[d + 1];
      int64_t i = j + 1;
      while (i < last && chunk_begin[i] < 0) ++i;
      end = (i < last) ? chunk_begin[i] : doc_off[d + 1];
    }
    chunk_end[j] = end;
  }
}

// The core over every chunk. Count pass (write == 0): counts[j] = tokens of chunk j (0 for
// dead slots). Write pass (write != 0): the ids of chunk j go to out[tok_off[j],
// tok_off[j + 1]) (tok_off: exclusive scan of the counts, n_slots + 1 entries). One kernel
// for both passes, so the core is instantiated once.
// Launch: 1-D grid-stride over piece slots, any block size (shared: BlockContext, ~3 KB).
__global__ void dwp_chunk_tokenize(const uint8_t* __restrict__ vocab_blob,
                                   const uint8_t* __restrict__ norm_blob,
                                   int32_t max_input_chars_per_word,
                                   const uint8_t* __restrict__ data,
                                   const int64_t* __restrict__ chunk_begin,
                                   const int64_t* __restrict__ chunk_end, int64_t n_slots,
                                   int32_t write, int64_t* __restrict__ counts,
                                   const int64_t* __restrict__ tok_off,
                                   int32_t* __restrict__ out) {
  __shared__ daskwp::gpu::BlockContext sh;
  daskwp::gpu::load_block_context(sh, vocab_blob, norm_blob, max_input_chars_per_word);
  for (int64_t j = daskwp::gpu::grid_start(); j < n_slots; j += daskwp::gpu::grid_stride()) {
    const int64_t b = chunk_begin[j];
    if (!write) {
      counts[j] = (b < 0) ? 0
                          : daskwp::tokenize_document(sh.ctx, data + b, chunk_end[j] - b,
                                                      nullptr, 0);
    } else if (b >= 0) {
      const int64_t at = tok_off[j], cap = tok_off[j + 1] - at;
      if (cap > 0)
        daskwp::tokenize_document(sh.ctx, data + b, chunk_end[j] - b, out + at, cap);
    }
  }
}

// The core with offsets and word ids over every chunk (docs/design.md §2.9). Count pass
// (write == 0): counts[j], words[j] and units[j] = tokens, words and units (characters when
// `chars`, else bytes) of chunk j (0 for dead slots). Write pass: the ids, spans (2 per token)
// and word ids of chunk j go to tok_off[j] on, shifted by the words and units of the
// document's chunks before j (word_off, unit_off: exclusive scans of words and units;
// piece_first: the first slot of every document). want_spans / want_words: which of the two
// are written.
// Launch: 1-D grid-stride over piece slots, any block size (shared: BlockContext).
__global__ void dwp_chunk_tokenize_offsets(
    const uint8_t* __restrict__ vocab_blob, const uint8_t* __restrict__ norm_blob,
    int32_t max_input_chars_per_word, const uint8_t* __restrict__ data,
    const int64_t* __restrict__ chunk_begin, const int64_t* __restrict__ chunk_end,
    int64_t n_slots, int32_t write, int32_t chars, int32_t want_spans, int32_t want_words,
    int64_t* __restrict__ counts, int64_t* __restrict__ words, int64_t* __restrict__ units,
    const int64_t* __restrict__ tok_off, const int64_t* __restrict__ word_off,
    const int64_t* __restrict__ unit_off, const int64_t* __restrict__ piece_first,
    int64_t n_docs, int32_t* __restrict__ out, int64_t* __restrict__ spans,
    int32_t* __restrict__ wids) {
  __shared__ daskwp::gpu::BlockContext sh;
  daskwp::gpu::load_block_context(sh, vocab_blob, norm_blob, max_input_chars_per_word);
  for (int64_t j = daskwp::gpu::grid_start(); j < n_slots; j += daskwp::gpu::grid_stride()) {
    const int64_t b = chunk_begin[j];
    if (!write) {
      int64_t nw = 0, nu = 0, n = 0;
      if (b >= 0)
        n = daskwp::tokenize_document_offsets(sh.ctx, data + b, chunk_end[j] - b, nullptr,
                                              nullptr, nullptr, 0, chars != 0, &nw, &nu);
      counts[j] = n;
      words[j] = nw;
      units[j] = nu;
    } else if (b >= 0) {
      const int64_t at = tok_off[j], cap = tok_off[j + 1] - at;
      if (cap <= 0) continue;
      const int64_t d = daskwp::find_document(piece_first, n_docs, j);
      const int64_t first = piece_first[d];
      const int64_t wb = word_off[j] - word_off[first], ub = unit_off[j] - unit_off[first];
      int64_t* sp = want_spans ? spans + 2 * at : nullptr;
      int32_t* wi = want_words ? wids + at : nullptr;
      daskwp::tokenize_document_offsets(sh.ctx, data + b, chunk_end[j] - b, out + at, sp, wi,
                                        cap, chars != 0, nullptr, nullptr);
      for (int64_t k = 0; k < cap; ++k) {
        if (sp) {
          sp[2 * k] += ub;
          sp[2 * k + 1] += ub;
        }
        if (wi) wi[k] += static_cast<int32_t>(wb);
      }
    }
  }
}

// Per document d (tokens doc_tok_off[d] .. doc_tok_off[d + 1]): rows[d + 1] = window_count,
// cells[d + 1] = window_tokens (the ragged size), width0[d] = real width of its row 0;
// rows[0] = cells[0] = 0. Inclusive scans turn rows and cells into offsets.
// Launch: 1-D grid-stride over documents.
__global__ void dwp_window_counts(const int64_t* __restrict__ doc_tok_off, int64_t n_docs,
                                  int32_t max_length, int32_t stride, int32_t truncation,
                                  int32_t add_special_tokens, int64_t* __restrict__ rows,
                                  int64_t* __restrict__ cells, int32_t* __restrict__ width0) {
  const WindowParams p = daskwp::make_window_params(max_length, stride, truncation != 0,
                                                    add_special_tokens != 0, 0, 0, 0);
  for (int64_t d = daskwp::gpu::grid_start(); d < n_docs; d += daskwp::gpu::grid_stride()) {
    const int64_t n = doc_tok_off[d + 1] - doc_tok_off[d];
    rows[d + 1] = daskwp::window_count(n, p);
    cells[d + 1] = daskwp::window_tokens(n, p);
    width0[d] = daskwp::window_row(n, 0, p).row_tokens;
    if (d == 0) {
      rows[0] = 0;
      cells[0] = 0;
    }
  }
}

// Fills output row r with fill_window_row: padded (rows x width, row r at r * width) or
// ragged (row r of document d at doc_cells[d] + k * (L + 2b), recorded in row_offsets).
// Launch: 1-D grid-stride over output rows, one thread per row.
#define DWP_WINDOW_FILL(NAME, MASK_T)                                                          \
  __global__ void NAME(const int32_t* __restrict__ tokens,                                     \
                       const int64_t* __restrict__ doc_tok_off,                                \
                       const int64_t* __restrict__ doc_row_off,                                \
                       const int64_t* __restrict__ doc_cells, int64_t n_docs, int64_t n_rows,  \
                       int64_t logid_offset, int32_t max_length, int32_t stride,               \
                       int32_t truncation, int32_t add_special_tokens, int32_t cls_id,         \
                       int32_t sep_id, int32_t pad_id, int32_t padded, int32_t width,          \
                       int32_t* __restrict__ ids, MASK_T* __restrict__ mask,                   \
                       int64_t* __restrict__ metadata, int64_t* __restrict__ row_offsets) {    \
    const WindowParams p = daskwp::make_window_params(                                         \
        max_length, stride, truncation != 0, add_special_tokens != 0, cls_id, sep_id, pad_id); \
    daskwp::gpu::window_fill<MASK_T>(tokens, doc_tok_off, doc_row_off, doc_cells, n_docs,      \
                                     n_rows, logid_offset, p, padded, width, ids, mask,        \
                                     metadata, row_offsets);                                   \
  }

DWP_WINDOW_FILL(dwp_window_fill_mask32, int32_t)
DWP_WINDOW_FILL(dwp_window_fill_mask8, int8_t)

#undef DWP_WINDOW_FILL

}  // extern "C"
