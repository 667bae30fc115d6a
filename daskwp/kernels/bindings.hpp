// daskwp — the binding files of `daskwp._ext`: one register function per concern, called
// by the module definition (bind_module.cpp), and the input array types they share.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>

namespace nb = nanobind;

// One-dimensional, C-contiguous host arrays, read only.
using U8 = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using I32 = nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using I64 = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

void bind_memory(nb::module_& m);   // bind_memory.cpp: the host output-memory pool
void bind_vocab(nb::module_& m);    // bind_vocab.cpp: build_vocab, BLOB_VERSION
void bind_encode(nb::module_& m);   // bind_encode.cpp: encode32, encode64, ceiling_pass
void bind_count(nb::module_& m);    // bind_count.cpp: count32, count64 (count_batch.cpp)
void bind_windows(nb::module_& m);  // bind_windows.cpp: windows, buckets, pad_rows
void bind_parquet(nb::module_& m);  // parquet_pages.cpp: the part writer's data pages
void bind_lz4(nb::module_& m);      // lz4_block.cpp: lz4_raw_compress, lz4_raw_bound (LZ4_RAW pages)
void bind_text_lines(nb::module_& m);  // text_lines.cpp: split_lines, count_newlines, count_nonblank_lines, host_bytes, plain_byte_array_values
void bind_jsonl_reader(nb::module_& m);  // jsonl_reader.cpp: read_jsonl_fields
void bind_frame(nb::module_& m);    // frame_sequences.cpp: frame_sequences
