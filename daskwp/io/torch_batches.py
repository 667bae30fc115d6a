"""``read_tokenized(...).to_torch``: a tokenized dataset's batches as a PyTorch
``IterableDataset``. This module imports torch; only ``TokenizedDataset.to_torch`` loads it."""

from __future__ import annotations

import torch.utils.data as tud

__all__ = ["TokenizedBatches"]


class TokenizedBatches(tud.IterableDataset):
    """The :meth:`~daskwp.io.tokenized.TokenizedDataset.batches` of ``dataset`` as torch
    tensors, its files sharded over a ``DataLoader``'s workers (worker k of n reads files k,
    k+n, ...). A module-level class, so it pickles: a ``DataLoader`` whose workers start
    with ``spawn`` or ``forkserver`` sends it to them that way."""

    def __init__(self, dataset, batch_size: int, max_length: int | None = None):
        super().__init__()
        self.dataset = dataset
        self.batch_size = batch_size
        self.max_length = max_length

    def __iter__(self):
        info = tud.get_worker_info()
        files = self.dataset.files if info is None else \
            self.dataset.files[info.id::info.num_workers]
        return self.dataset.batches(self.batch_size, max_length=self.max_length,
                                    return_tensors="pt", files=files)

    def __repr__(self) -> str:
        return (f"TokenizedBatches({self.dataset!r}, batch_size={self.batch_size}, "
                f"max_length={self.max_length})")
