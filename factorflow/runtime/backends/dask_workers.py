"""The workers of the Dask backend's own ``LocalCluster``: a plugin bounding a cache
that Dask lets grow with every task (``BoundedKeyCache``).

Imported only where the backend starts its own cluster (``dask_backend.default_client``),
and by each of its workers: a cluster of the caller's is left as it is.
"""

from __future__ import annotations

from typing import Any

from distributed import WorkerPlugin

#: the entries ``dask.utils.key_split``'s cache may hold on a worker before it is
#: emptied (each about 300 bytes: the key, its prefix, the cache's links)
KEY_CACHE_LIMIT = 1000


class BoundedKeyCache(WorkerPlugin):
    """Empties ``dask.utils.key_split``'s cache on the worker whenever, checked every
    ``every`` seconds, it holds more than ``limit`` entries.

    Each task a worker is sent calls ``key_split`` on its key (its prefix, for the task
    state and the metrics), and the function keeps a least-recently-used cache of
    100,000 keys: every key is new (each pass over the data is a computation of its
    own, each chunk's task keyed by it), so on the backend's workers the cache grew by
    about 300 bytes a task until it held 100,000 keys, some 30 MB, the largest thing a
    worker keeps (``tracemalloc``: 0.22 of 1.3 MB after 4 sweeps over 10⁶ points in 100
    chunks, with the diagnostics bounded; ``dask_backend.WORKER_CONFIG``).  The cache
    only saves recomputing a prefix, so emptying it changes nothing but that."""

    name = "factorflow-bounded-key-cache"

    def __init__(self, limit: int = KEY_CACHE_LIMIT, every: float = 1.0) -> None:
        self.limit, self.every = int(limit), float(every)
        self._callback: Any = None

    def setup(self, worker: Any) -> None:
        """Start the check on the worker's event loop."""
        from tornado.ioloop import PeriodicCallback
        self._callback = PeriodicCallback(self.trim, self.every * 1000)
        self._callback.start()

    def teardown(self, worker: Any) -> None:
        """Stop the check."""
        if self._callback is not None:
            self._callback.stop()

    def trim(self) -> None:
        """Empty the cache if it holds more than ``limit`` entries."""
        from dask.utils import key_split
        if key_split.cache_info().currsize > self.limit:
            key_split.cache_clear()


__all__ = ["BoundedKeyCache", "KEY_CACHE_LIMIT"]
