// daskwp — the binding of the LZ4 block compressor (lz4_block.hpp): the part writer
// compresses each data page from its reused page buffer into a second reused buffer, the
// GIL released (docs/design.md §3.3, "The part writer").
#include <cstdint>
#include <stdexcept>
#include <string>

#include "bindings.hpp"
#include "lz4_block.hpp"

namespace {

using Out = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

int64_t lz4_raw_bound(int64_t n) {
  if (n < 0) throw std::invalid_argument("lz4_raw_bound: n must be >= 0, got " + std::to_string(n));
  return static_cast<int64_t>(daskwp::lz4::compress_bound(static_cast<size_t>(n)));
}

// `src` as one LZ4 block into the start of `out`; the block's size. `out` must hold the
// worst case (lz4_raw_bound(len(src))), checked before anything is written.
int64_t lz4_raw_compress(U8 src, Out out) {
  const size_t n = src.shape(0);
  const size_t need = daskwp::lz4::compress_bound(n);
  if (out.shape(0) < need)
    throw std::invalid_argument("lz4_raw_compress: out holds " + std::to_string(out.shape(0)) +
                                " bytes, the worst case of " + std::to_string(n) +
                                " input bytes is " + std::to_string(need) +
                                " (lz4_raw_bound)");
  size_t size;
  {
    nb::gil_scoped_release release;
    size = daskwp::lz4::compress_block(src.data(), n, out.data());
  }
  return static_cast<int64_t>(size);
}

}  // namespace

void bind_lz4(nb::module_& m) {
  m.def("lz4_raw_bound", &lz4_raw_bound, nb::arg("n"),
        "The most bytes lz4_raw_compress writes for n input bytes: n + n // 255 + 16.");
  m.def("lz4_raw_compress", &lz4_raw_compress, nb::arg("src").noconvert(), nb::arg("out").noconvert(),
        "The uint8 array `src` as one LZ4 block (Parquet's LZ4_RAW page) written to the start "
        "of the uint8 array `out`, which holds at least lz4_raw_bound(len(src)) bytes; returns "
        "the block's size. The GIL is released.");
}
