"""An LRU of prompt-prefix K/V, bounded by bytes, found by chained block hashes.

An entry holds the K/V of every layer for a token prefix whose length is a multiple of
`block`. Each block boundary of an entry is indexed under a chained hash

    h_0 = H(namespace),  h_k = H(h_{k-1} || tokens[(k-1)·block : k·block])

so a new prompt finds the longest stored prefix it starts with by walking its own blocks.
The namespace names everything else that changes the K/V (model, dtype, template).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..runtime import mx

LayerKV = tuple[mx.array, mx.array]


@dataclass
class Entry:
    length: int
    kv: list[LayerKV]
    nbytes: int
    index_keys: list[bytes] = field(default_factory=list)


@dataclass(frozen=True)
class Hit:
    """`length` leading tokens are cached; `kv` holds exactly those (None when length is 0)."""

    length: int
    kv: list[LayerKV] | None


class PrefixCache:
    def __init__(self, namespace: str, budget_bytes: int, block: int = 16) -> None:
        assert block > 0, "block size must be positive"
        self.root = hashlib.sha256(namespace.encode()).digest()
        self.budget = budget_bytes
        self.block = block
        self.entries: OrderedDict[int, Entry] = OrderedDict()  # oldest first
        self.index: dict[bytes, list[int]] = {}
        self.nbytes = 0
        self.hits = 0
        self.lookups = 0
        self._next_id = 0

    def block_keys(self, tokens: Sequence[int]) -> list[bytes]:
        """One key per whole block of `tokens`: key k covers tokens[: (k+1)·block]."""
        arr = np.asarray(tokens, dtype=np.int32)
        keys, h = [], self.root
        for k in range(len(arr) // self.block):
            h = hashlib.sha256(h + arr[k * self.block : (k + 1) * self.block].tobytes()).digest()
            keys.append(h)
        return keys

    def lookup(self, tokens: Sequence[int], counted: bool = True) -> Hit:
        """The longest cached block-aligned prefix of `tokens`; `counted`: in `lookups` and `hits` (a
        request's own lookup, not the engine's for a start several requests share)."""
        self.lookups += counted
        best: tuple[int, int] | None = None  # (length, entry id)
        for k, key in enumerate(self.block_keys(tokens)):
            ids = self.index.get(key)
            if not ids:
                break
            best = ((k + 1) * self.block, ids[-1])
        if best is None:
            return Hit(0, None)
        length, entry_id = best
        self.entries.move_to_end(entry_id)
        self.hits += counted
        entry = self.entries[entry_id]
        kv = entry.kv if length == entry.length else [(k[..., :length, :], v[..., :length, :]) for k, v in entry.kv]
        return Hit(length, kv)

    def store(self, tokens: Sequence[int], kv: list[LayerKV]) -> bool:
        """Keep the K/V of `tokens` (a whole number of blocks). False if it cannot fit."""
        assert len(tokens) % self.block == 0, "only whole blocks are stored"
        nbytes = sum(k.nbytes + v.nbytes for k, v in kv)
        if nbytes > self.budget or not tokens:
            return False
        while self.entries and self.nbytes + nbytes > self.budget:
            self._evict_oldest()
        entry_id, self._next_id = self._next_id, self._next_id + 1
        entry = Entry(len(tokens), kv, nbytes, self.block_keys(tokens))
        self.entries[entry_id] = entry
        self.nbytes += nbytes
        for key in entry.index_keys:
            self.index.setdefault(key, []).append(entry_id)
        return True

    def _evict_oldest(self) -> None:
        entry_id, entry = self.entries.popitem(last=False)
        self.nbytes -= entry.nbytes
        for key in entry.index_keys:
            ids = self.index[key]
            ids.remove(entry_id)
            if not ids:
                del self.index[key]

    def clear(self) -> None:
        self.entries.clear()
        self.index.clear()
        self.nbytes = 0

    @property
    def stats(self) -> dict:
        return {"entries": len(self.entries), "bytes": self.nbytes, "lookups": self.lookups, "hits": self.hits}
