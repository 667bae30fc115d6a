// daskwp — binding of the host output-memory pool (host_pool.cpp).
#include "bindings.hpp"
#include "host_pool.hpp"

void bind_memory(nb::module_& m) {
  m.def("host_pool_info", [] {
    const daskwp::HostPoolInfo i = daskwp::host_pool_info();
    return nb::make_tuple(i.limit, i.cached, i.live);
  }, "(limit, cached, live) bytes of the host output-memory pool.");
  m.def("host_pool_set_limit", &daskwp::host_pool_set_limit, nb::arg("nbytes"),
        "Most bytes of freed output blocks the pool keeps for reuse (0: none).");
  m.def("host_pool_release", &daskwp::host_pool_release,
        "Free the pool's cached blocks; returns their bytes.");
}
