// daskwp — framing of ragged token ids into one flat sequence of sequences
// (daskwp/frames/megatron.py frame_pieces: Megatron's .bin data with [CLS]/[SEP] and the
// end-of-document id, and global packing's document units). Each piece becomes
// [lead] ids [trail] [eod if last[piece]] in the output's dtype, one memcpy-like copy per
// piece: the masked NumPy assignment it replaces cost ~3 ns per token. The pass that checks
// the ids' range before the copy also counts the unknown id (the job's statistic), which
// a NumPy `ids == unk` would read the ids once more for, with a bool array per slice.
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <nanobind/stl/optional.h>

#include "bindings.hpp"

namespace {

using Flags = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
template <typename T>
using Out = nb::ndarray<T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// An id of `what` that the output dtype T cannot hold (negative: none).
template <typename T>
void check_special(int64_t id, const char* what) {
  if (id >= 0 && id > static_cast<int64_t>(std::numeric_limits<T>::max()))
    throw std::invalid_argument(std::string(what) + " id " + std::to_string(id) +
                                " does not fit the output dtype");
}

// m ids from src to dst, converted to T (a plain copy for int32).
template <typename T>
inline void copy_ids(const int32_t* __restrict src, T* __restrict dst, int64_t m) {
  if constexpr (std::is_same_v<T, int32_t>) {
    std::memcpy(dst, src, static_cast<size_t>(m) * sizeof(T));
  } else {
    for (int64_t j = 0; j < m; ++j) dst[j] = static_cast<T>(src[j]);
  }
}

// The ids' range [lo, hi] (lo <= 0 <= hi) and how many of them equal unk_id (none when
// unk_id < 0): one pass that vectorizes.
struct Scan {
  int32_t lo = 0, hi = 0;
  int64_t unknown = 0;
};

Scan scan_ids(const int32_t* __restrict src, int64_t n, int64_t unk_id) {
  Scan r;
  int32_t hi = 0, lo = 0;
  if (unk_id < 0 || unk_id > std::numeric_limits<int32_t>::max()) {
    for (int64_t j = 0; j < n; ++j) {
      hi = src[j] > hi ? src[j] : hi;
      lo = src[j] < lo ? src[j] : lo;
    }
  } else {
    const int32_t unk = static_cast<int32_t>(unk_id);
    // counted in 32-bit lanes per block of 2^20 ids, so that the count vectorizes too
    for (int64_t b = 0; b < n; b += (int64_t{1} << 20)) {
      const int64_t e = n - b < (int64_t{1} << 20) ? n : b + (int64_t{1} << 20);
      uint32_t c = 0;
      for (int64_t j = b; j < e; ++j) {
        hi = src[j] > hi ? src[j] : hi;
        lo = src[j] < lo ? src[j] : lo;
        c += src[j] == unk;
      }
      r.unknown += c;
    }
  }
  r.lo = lo;
  r.hi = hi;
  return r;
}

// Ids copied kBlock at a time: a piece holds ~25 ids on average, where an exact-length
// loop spends more in its prologue and remainder than in copying.
constexpr int64_t kBlock = 16;

// m ids rounded up to whole blocks from src to dst, converted to T (the ids fit T):
// reads and writes up to kBlock - 1 entries past m.
template <typename T>
inline void copy_blocks(const int32_t* __restrict src, T* __restrict dst, int64_t m) {
  for (int64_t j = 0; j < m; j += kBlock)
    for (int64_t q = 0; q < kBlock; ++q) dst[j + q] = static_cast<T>(src[j + q]);
}

template <typename T>
int64_t frame_sequences(I32 values, I64 lengths, int64_t lead_id, int64_t trail_id,
                        int64_t eod_id, std::optional<Flags> last, Out<T> out,
                        int64_t unk_id) {
  const int64_t n_pieces = static_cast<int64_t>(lengths.shape(0));
  const int64_t n_values = static_cast<int64_t>(values.shape(0));
  const int64_t* len = lengths.data();
  const uint8_t* is_last = last ? last->data() : nullptr;
  if (eod_id >= 0 && (!last || static_cast<int64_t>(last->shape(0)) != n_pieces))
    throw std::invalid_argument("an eod id needs `last`, one flag per piece");
  check_special<T>(lead_id, "lead");
  check_special<T>(trail_id, "trail");
  check_special<T>(eod_id, "eod");
  const int64_t per_piece = (lead_id >= 0) + (trail_id >= 0);
  int64_t total = 0, want = n_pieces * per_piece;
  for (int64_t k = 0; k < n_pieces; ++k) {
    if (len[k] < 0) throw std::invalid_argument("lengths must not be negative");
    total += len[k];
    if (eod_id >= 0 && is_last[k]) ++want;
  }
  if (total != n_values)
    throw std::invalid_argument("lengths add up to " + std::to_string(total) +
                                " tokens, values holds " + std::to_string(n_values));
  want += total;
  if (static_cast<int64_t>(out.shape(0)) != want)
    throw std::invalid_argument("out holds " + std::to_string(out.shape(0)) +
                                " entries, the framed sequences " + std::to_string(want));
  const int32_t* src = values.data();
  T* dst = out.data();
  int32_t hi = 0, lo = 0;
  int64_t unknown = 0;
  {
    nb::gil_scoped_release release;
    const Scan range = scan_ids(src, n_values, unk_id);   // apart from the copy: it vectorizes
    hi = range.hi;
    lo = range.lo;
    unknown = range.unknown;
    const int32_t* src_end = src + n_values;
    const T* dst_end = dst + want;
    if (lo >= 0 && static_cast<int64_t>(hi) <= static_cast<int64_t>(std::numeric_limits<T>::max()))
      for (int64_t k = 0; k < n_pieces; ++k) {
        if (lead_id >= 0) *dst++ = static_cast<T>(lead_id);
        // whole blocks of kBlock ids, the last one past the piece where both arrays go on
        // as far: what it writes there the pieces after it overwrite (the output is one
        // stream in order)
        if (src_end - src >= len[k] + kBlock && dst_end - dst >= len[k] + kBlock)
          copy_blocks(src, dst, len[k]);
        else
          copy_ids(src, dst, len[k]);
        src += len[k];
        dst += len[k];
        if (trail_id >= 0) *dst++ = static_cast<T>(trail_id);
        if (eod_id >= 0 && is_last[k]) *dst++ = static_cast<T>(eod_id);
      }
  }
  if (lo < 0 || static_cast<int64_t>(hi) > static_cast<int64_t>(std::numeric_limits<T>::max()))
    throw std::invalid_argument("token id " + std::to_string(lo < 0 ? lo : hi) +
                                " does not fit the output dtype");
  return unknown;
}

}  // namespace

void bind_frame(nb::module_& m) {
  const char* doc =
      "Write each piece of the ragged ids (values, lengths) into out (uint16 or int32, its\n"
      "size exactly the result's) as [lead_id] ids [trail_id] [eod_id where last[piece]];\n"
      "an id < 0 is left out. Returns how many of values equal unk_id (0 when unk_id < 0).\n"
      "Raises ValueError for an id out does not hold.";
  m.def("frame_sequences", &frame_sequences<uint16_t>, nb::arg("values"), nb::arg("lengths"),
        nb::arg("lead_id"), nb::arg("trail_id"), nb::arg("eod_id"), nb::arg("last").none(),
        nb::arg("out"), nb::arg("unk_id") = -1, doc);
  m.def("frame_sequences", &frame_sequences<int32_t>, nb::arg("values"), nb::arg("lengths"),
        nb::arg("lead_id"), nb::arg("trail_id"), nb::arg("eod_id"), nb::arg("last").none(),
        nb::arg("out"), nb::arg("unk_id") = -1, doc);
}
