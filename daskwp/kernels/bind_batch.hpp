// daskwp — what the bindings of the CPU batch loops share (bind_encode.cpp, bind_count.cpp):
// the checks of a batch's blobs and Arrow buffers, and the handover of an output array to
// NumPy without a copy.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <utility>

#include "bindings.hpp"
#include "cpu_batch.hpp"

namespace daskwp {

template <typename T>
nb::ndarray<nb::numpy, T, nb::ndim<1>> to_numpy(HostArray<T> data, size_t n) {
  T* raw = data.release();
  nb::capsule owner(raw, [](void* q) noexcept { host_free(q); });
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(raw, {n}, owner);
}

// A batch's documents: n_docs and the validity bitmap (null: all valid), its inputs checked
// (the blobs; offsets non-decreasing and inside the data buffer; the bitmap long enough).
struct BatchInput {
  int64_t n_docs = 0;
  const uint8_t* validity = nullptr;
};

template <typename OffArr>
BatchInput check_batch_input(const U8& vocab_blob, const U8& norm_blob, const OffArr& offsets,
                             const U8& data, const nb::object& validity_obj,
                             int64_t validity_offset) {
  check_vocab_blob(vocab_blob.data(), vocab_blob.shape(0));
  check_norm_blob(norm_blob.data(), norm_blob.shape(0));
  if (offsets.shape(0) < 1) throw std::invalid_argument("offsets must not be empty");
  BatchInput in;
  in.n_docs = static_cast<int64_t>(offsets.shape(0)) - 1;
  const auto* off = offsets.data();
  // Bounds: offsets must be non-decreasing and inside the data buffer.
  const int64_t data_len = static_cast<int64_t>(data.shape(0));
  for (int64_t d = 0; d < in.n_docs; ++d)
    if (off[d] > off[d + 1]) throw std::invalid_argument("offsets are not non-decreasing");
  if (in.n_docs && (off[0] < 0 || static_cast<int64_t>(off[in.n_docs]) > data_len))
    throw std::invalid_argument("offsets point outside the data buffer");
  if (validity_offset < 0) throw std::invalid_argument("validity_offset must be >= 0");
  if (!validity_obj.is_none()) {
    U8 vm = nb::cast<U8>(validity_obj);
    if (static_cast<int64_t>(vm.shape(0)) * 8 < validity_offset + in.n_docs)
      throw std::invalid_argument("validity bitmap too short");
    in.validity = vm.data();
  }
  return in;
}

}  // namespace daskwp
