"""Views over a context tree's columns: its nodes (:class:`NodeColumns`, a node built when it is
read), the URI -> node index (:class:`UriIndex`, a binary search), each node's doc id
(:class:`DocIds`, None for directories) and context type (:class:`CodeNames`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.store.columns import decode_metadata
from retrievers.store.rows import RowSequence
from retrievers.store.text_column import TextColumn
from retrievers.types import ContextNode

__all__ = ["CodeNames", "DocIds", "NodeColumns", "UriIndex"]

IntArray = npt.NDArray[np.int64]


class NodeColumns(RowSequence[ContextNode]):
    """The nodes of a tree as columns: ``nodes[i]`` builds node ``i`` (metadata parsed then)."""

    _what = "node"

    def __init__(self, texts: Mapping[str, TextColumn], level: npt.NDArray[Any], parents: IntArray) -> None:
        self._texts = texts
        self._level = level
        self._parents = parents

    def __len__(self) -> int:
        return int(self._level.shape[0])

    def _row(self, i: int) -> ContextNode:
        texts = self._texts
        parent = int(self._parents[i])
        level = int(self._level[i])
        return ContextNode(
            uri=texts["uri"][i],
            level=level,
            parent_uri=None if parent < 0 else texts["uri"][parent],
            abstract=texts["abstract"][i],
            content=texts["content"][i],
            doc_id=texts["doc_id"][i] if level == 2 else None,
            metadata=decode_metadata(texts["metadata"][i]),
        )

    def __iter__(self) -> Iterator[ContextNode]:
        for i in range(len(self)):
            yield self[i]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"NodeColumns({len(self)} nodes)"


class UriIndex(Mapping[str, int]):
    """URI -> node index: a binary search over the sorted URI column (UTF-8 byte order is
    code point order, the order nodes are sorted in)."""

    def __init__(self, uris: TextColumn) -> None:
        self._uris = uris

    def _find(self, key: object) -> int:
        if not isinstance(key, str):
            return -1
        data = key.encode("utf-8")
        lo, hi = 0, len(self._uris)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._uris.raw(mid) < data:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < len(self._uris) and self._uris.raw(lo) == data else -1

    def __getitem__(self, key: str) -> int:
        index = self._find(key)
        if index < 0:
            raise KeyError(key)
        return index

    def __contains__(self, key: object) -> bool:
        return self._find(key) >= 0

    def __iter__(self) -> Iterator[str]:
        return iter(self._uris)

    def __len__(self) -> int:
        return len(self._uris)


class DocIds(Sequence[str | None]):
    def __init__(self, column: TextColumn, is_leaf: npt.NDArray[np.bool_]) -> None:
        self._column = column
        self._is_leaf = is_leaf

    def __len__(self) -> int:
        return len(self._column)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self._column[index] if self._is_leaf[index] else None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


class CodeNames(Sequence[str]):
    def __init__(self, codes: npt.NDArray[Any], names: Sequence[str]) -> None:
        self._codes = codes
        self._names = tuple(names)

    def __len__(self) -> int:
        return int(self._codes.shape[0])

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._names[code] for code in np.asarray(self._codes[index]).tolist()]
        return self._names[int(self._codes[index])]

    def __iter__(self) -> Iterator[str]:
        names = self._names
        return iter([names[code] for code in np.asarray(self._codes).tolist()])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]
