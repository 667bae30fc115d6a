"""daskwp's ``distributed`` WorkerPlugin: per-worker state with setup and teardown.

Registered by :func:`daskwp.connect` and by batch jobs on the clients they use
(``client.register_plugin(DaskwpWorkerPlugin())`` does it for any other client). Setup gives
the worker a fresh :class:`~daskwp.distributed.state.WorkerState`; teardown (worker close or
plugin removal) drops its tokenizers and the process's daskwp caches, device-resident
vocabularies included.
"""

from __future__ import annotations

from distributed.diagnostics.plugin import WorkerPlugin

from .state import PLUGIN_NAME, WorkerState

__all__ = ["DaskwpWorkerPlugin", "register_worker_plugin"]


class DaskwpWorkerPlugin(WorkerPlugin):
    """Holds a worker's :class:`WorkerState` from setup to teardown."""

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self):
        self.state = None

    def setup(self, worker) -> None:
        self.state = WorkerState(name=f"worker_tokenizers[{worker.address}]")

    def teardown(self, worker) -> None:
        if self.state is not None:
            self.state.close()
            self.state = None


def register_worker_plugin(client) -> None:
    """Register daskwp's plugin on every worker of ``client`` (present and future)."""
    client.register_plugin(DaskwpWorkerPlugin(), name=PLUGIN_NAME)
