"""daskwp's ``distributed`` WorkerPlugin: per-worker state with setup and teardown.

Registered by :func:`daskwp.connect` and by batch jobs on the clients they use
(``client.register_plugin(DaskwpWorkerPlugin())`` does it for any other client). Setup gives
the worker a fresh :class:`~daskwp.distributed.state.WorkerState`; teardown (worker close or
plugin removal) drops its tokenizers and the process's daskwp caches, device-resident
vocabularies included.
"""

from __future__ import annotations

from distributed.diagnostics.plugin import WorkerPlugin

from ..frames.storage import clear_warm_filesystems, is_url, warm_filesystems
from .state import PLUGIN_NAME, WorkerState

__all__ = ["DaskwpWorkerPlugin", "STORAGE_WARMUP_NAME", "StorageWarmup",
           "register_worker_plugin"]

#: The name :class:`StorageWarmup` is registered under (a new job's replaces the last one's)
STORAGE_WARMUP_NAME = "daskwp-storage-warmup"


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


class StorageWarmup(WorkerPlugin):
    """Builds a job's object-store filesystems on each worker ahead of its first task.

    ``urls``: the job's input and output URLs (local paths are left out); ``storage_options``:
    their filesystems' options. Setup starts :func:`~daskwp.frames.storage.warm_filesystems`
    (a background thread: the filesystem's module imported, its client built) and returns at
    once; a task that needs the filesystem waits for that thread. Teardown forgets them.
    Its ``repr`` shows neither the options nor the URLs."""

    name = STORAGE_WARMUP_NAME

    def __init__(self, urls, storage_options: dict | None = None):
        self.urls = [u for u in urls if is_url(u)]
        self.storage_options = dict(storage_options or {})

    def __repr__(self) -> str:
        return f"StorageWarmup({len(self.urls)} URLs)"

    def setup(self, worker) -> None:
        warm_filesystems(self.urls, self.storage_options)

    def teardown(self, worker) -> None:
        clear_warm_filesystems()
