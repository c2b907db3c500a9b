"""The store: the built, immutable artifact every retriever reads, and its settings.

* ``context_store.py`` — :class:`ContextStore`: documents, embeddings, BM25, views (scopes).
* ``config.py`` — :class:`StoreConfig`, :class:`BM25Config`, :class:`ChunkingConfig`.
* ``tree.py`` — :class:`~retrievers.store.tree.ContextTree`; ``hierarchy_config.py`` — its
  :class:`HierarchyConfig`; ``tree_uris.py``, ``tree_nodes.py`` — its URIs and node columns.
* ``changes.py`` — add/delete/update (new store versions; ``row_plan.py``, ``change_config.py``);
  ``versions.py`` — :class:`StoreVersions`, versions on disk published atomically;
  ``row_digests.py`` — a digest per row, the parts a backend's identity is hashed from.
* ``edges.py`` — :class:`~retrievers.store.edges.EdgeSet`; ``edge_config.py`` — its :class:`EdgeConfig`.

Building lives in :mod:`retrievers.builders`; loading a store imports none of it.
"""

from retrievers.store.change_config import ChangeSettings, RowRecord, StoreVersion
from retrievers.store.config import BM25Config, ChunkingConfig, StoreConfig
from retrievers.store.context_store import STORE_FORMAT, ContextStore
from retrievers.store.edge_config import EdgeConfig
from retrievers.store.edges import EdgeSet
from retrievers.store.hierarchy_config import HierarchyConfig
from retrievers.store.tree import ContextTree
from retrievers.store.versions import StoreVersions

__all__ = [
    "STORE_FORMAT",
    "BM25Config",
    "ChangeSettings",
    "ChunkingConfig",
    "ContextStore",
    "ContextTree",
    "EdgeConfig",
    "EdgeSet",
    "HierarchyConfig",
    "RowRecord",
    "StoreConfig",
    "StoreVersion",
    "StoreVersions",
]
