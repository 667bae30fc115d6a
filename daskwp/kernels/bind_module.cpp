// daskwp — the CPU extension module `daskwp._ext`: one NB_MODULE, one bind_* per file.
#include "bindings.hpp"

NB_MODULE(_ext, m) {
  m.doc() = "daskwp native core (CPU build of the fused normalize+WordPiece kernel)";
  bind_memory(m);
  bind_vocab(m);
  bind_encode(m);
  bind_count(m);
  bind_windows(m);
  bind_parquet(m);
  bind_lz4(m);
  bind_text_lines(m);
  bind_jsonl_reader(m);
  bind_frame(m);
}
