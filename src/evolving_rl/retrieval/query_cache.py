"""The retrieval server's cache of encoded queries: least recently used, bounded by bytes.

Owns the byte accounting: an entry costs what it keeps alive, the query text (`sys.getsizeof`,
so a text of wide characters costs what it occupies) plus its vector's `nbytes` (a copy of the
row, so no entry keeps its whole batch alive). Entries are evicted, least recently used first,
until the total fits `max_bytes`; an entry larger than the whole bound is never kept.
Thread-safe.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict

import numpy as np


def entry_bytes(text: str, vector: np.ndarray) -> int:
    """What keeping `text` → `vector` costs."""
    return sys.getsizeof(text) + vector.nbytes


class QueryCache:
    """Query text → vector, at most `max_bytes` in all (0: keeps nothing)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, text: str) -> bool:
        return text in self._entries

    def get_many(self, texts: list[str]) -> dict[str, np.ndarray]:
        """The cached vectors among `texts`, each marked as just used."""
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for text in texts:
                vector = self._entries.get(text)
                if vector is not None:
                    self._entries.move_to_end(text)
                    found[text] = vector
        return found

    def put_many(self, texts: list[str], vectors: np.ndarray) -> None:
        """Keep `texts[i]` → `vectors[i]`, evicting the least recently used beyond the bound."""
        with self._lock:
            for text, vector in zip(texts, vectors, strict=True):
                cost = entry_bytes(text, vector)
                if cost > self.max_bytes:
                    continue
                old = self._entries.pop(text, None)
                if old is not None:
                    self._bytes -= entry_bytes(text, old)
                self._entries[text] = vector.copy()  # a row alone, not a view of its batch
                self._bytes += cost
                while self._bytes > self.max_bytes:
                    evicted, evicted_vector = self._entries.popitem(last=False)
                    self._bytes -= entry_bytes(evicted, evicted_vector)
