// daskwp — the CPU extension module `daskwp._ext`: one NB_MODULE, one bind_* per file.
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void bind_core(nb::module_& m);
void bind_windows(nb::module_& m);

NB_MODULE(_ext, m) {
  m.doc() = "daskwp native core (CPU build of the fused normalize+WordPiece kernel)";
  bind_core(m);
  bind_windows(m);
}
