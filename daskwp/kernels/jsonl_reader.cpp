// daskwp — binding of the JSON Lines text-field reader (jsonl_reader.hpp): the read stage of
// a JSON Lines partition (daskwp/jobs/inputs/json_format.py) without Arrow's JSON parser.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "jsonl_reader.hpp"

namespace {

using U8Out = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

template <typename T>
nb::ndarray<nb::numpy, T, nb::ndim<1>> vector_to_numpy(std::vector<T>&& v) {
  auto* owned = new std::vector<T>(std::move(v));
  nb::capsule owner(owned, [](void* q) noexcept { delete static_cast<std::vector<T>*>(q); });
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(owned->data(), {owned->size()}, owner);
}

nb::tuple read_jsonl_fields(U8 data, const std::vector<std::string>& fields,
                            std::vector<U8Out> outs) {
  if (fields.empty() || fields.size() > 2)
    throw std::invalid_argument("fields: one or two field names, got " +
                                std::to_string(fields.size()));
  if (outs.size() != fields.size())
    throw std::invalid_argument("outs: one output buffer per field (" +
                                std::to_string(fields.size()) + "), got " +
                                std::to_string(outs.size()));
  const size_t n = data.shape(0);
  std::vector<daskwp::JsonlColumn> cols(fields.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].shape(0) < n + daskwp::JsonlReader::kSlack)
      throw std::invalid_argument(
          "outs[" + std::to_string(i) + "] holds " + std::to_string(outs[i].shape(0)) +
          " bytes; it needs the data's bytes + " +
          std::to_string(daskwp::JsonlReader::kSlack) + " (" +
          std::to_string(n + daskwp::JsonlReader::kSlack) + ")");
    cols[i].out = outs[i].data();
  }
  daskwp::JsonlOutcome r;
  {
    nb::gil_scoped_release release;
    daskwp::JsonlReader reader(data.data(), n, fields, &cols);
    r = reader.run();
  }
  if (r.unsupported)
    return nb::make_tuple(std::string(r.unsupported), r.line, nb::none());
  nb::list columns;
  for (auto& c : cols) {
    const int64_t nulls = c.nulls;
    columns.append(nb::make_tuple(vector_to_numpy(std::move(c.offsets)),
                                  vector_to_numpy(std::move(c.validity)), nulls));
  }
  return nb::make_tuple(nb::none(), r.rows, columns);
}

}  // namespace

void bind_jsonl_reader(nb::module_& m) {
  m.def("read_jsonl_fields", &read_jsonl_fields, nb::arg("data"), nb::arg("fields"),
        nb::arg("outs"),
        "The string fields `fields` (one or two names) of every line of JSON Lines `data`, "
        "JSON escapes decoded, each into its buffer of `outs` (len(data) + JSONL_SLACK "
        "bytes). "
        "Returns (None, rows, [(offsets, validity, nulls)] per field): int64 offsets into "
        "the buffer (rows + 1), an Arrow validity bitmap (null: absent or null), the nulls; "
        "or (reason, line, None) when a line holds something the reader leaves to Arrow's "
        "JSON parser (see jsonl_reader.hpp: it accepts only what it reads as Arrow does).");
  m.attr("JSONL_SLACK") = daskwp::JsonlReader::kSlack;
}
