"""The settings of the context tree (``store.hierarchy``): which builder makes it and how.

The builders live in :mod:`retrievers.builders.hierarchy`, the tree in
:class:`~retrievers.store.tree.ContextTree`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from retrievers.params import Params, param
from retrievers.store.tree_uris import TreeError, context_type_of

__all__ = ["HierarchyConfig"]


@dataclass(frozen=True)
class HierarchyConfig(Params):
    """How the store's context tree is built (``store.hierarchy``; None = no tree).

    Common: ``builder`` (``kmeans`` | ``metadata_path``), ``root_uri`` (under an OpenViking root),
    ``directory_vector`` (``abstract``: embed the L0 text; ``centroid``: the normalised mean of
    the directory's leaf vectors), ``overview`` (also embed an L1 overview record), and the size
    of extractive texts: ``abstract_snippets``/``abstract_terms`` (L0) and
    ``overview_snippets``/``overview_terms`` (L1), ``snippet_chars`` (opening characters of a
    document used when it has no title).

    kmeans: ``branching_factor``, ``max_leaf_size``, ``seed``, ``kmeans_iterations``, and which
    k-means splits a set: ``kmeans`` = ``numpy`` (the default: float64 spherical k-means over every
    member, :func:`retrievers.builders.hierarchy.spherical_kmeans`) or ``faiss`` (faiss's spherical
    k-means trained on at most ``kmeans_sample`` members per centre, then every member assigned to
    its nearest centre; directory texts and centroids summed bottom-up:
    :mod:`retrievers.builders.kmeans_tree`), with ``leaf_reassign`` (0: off) moving the documents
    far from their leaf directory's centroid to the nearest one with room
    (:func:`~retrievers.builders.kmeans_tree.reassign_leaves`). ``faiss`` gives another tree than
    ``numpy``; the three keys are left out of :meth:`to_dict` at their defaults, so existing
    stores keep their content keys.

    metadata_path: ``path_keys`` (document metadata keys, outermost first; at least one),
    ``summaries_file`` (JSON lines in the dataset folder; a record holding every path key up to
    depth d describes the directory at depth d), ``abstract_template``/``overview_template``
    (``str.format`` templates over a summary record's fields).
    """

    SECTION = "store.hierarchy"

    builder: Literal["kmeans", "metadata_path"] = param("kmeans")
    root_uri: str = param("viking://resources", doc="an OpenViking root, without a trailing '/'")
    directory_vector: Literal["abstract", "centroid"] = param("abstract")
    overview: bool = param(True)
    abstract_snippets: int = param(3, low=0, high=100)
    abstract_terms: int = param(8, low=0, high=200)
    overview_snippets: int = param(10, low=0, high=1000)
    overview_terms: int = param(24, low=0, high=1000)
    snippet_chars: int = param(120, low=1, high=100_000)
    branching_factor: int = param(8, low=2, high=256)
    max_leaf_size: int = param(32, low=1, high=1_000_000)
    seed: int = param(0, low=0, high=2**32 - 1)
    kmeans_iterations: int = param(25, low=1, high=1000)
    kmeans: Literal["numpy", "faiss"] = param("numpy", doc="the k-means that splits a set (see above)")
    kmeans_sample: int = param(
        256, low=1, high=1_000_000, doc="kmeans faiss: training members per centre (a seeded sample)"
    )
    leaf_reassign: float = param(
        0.0,
        low=0.0,
        high=1.0,
        doc="kmeans faiss: move the documents whose similarity to their leaf directory's centroid is "
        "below this fraction of the median to the leaf directory with the most similar centroid "
        "(room permitting); 0 = off",
    )
    path_keys: tuple[str, ...] = param((), non_empty=False, unique=True)
    summaries_file: str | None = param(None, non_empty=True)
    abstract_template: str | None = param(None, non_empty=True)
    overview_template: str | None = param(None, non_empty=True)

    def check(self) -> None:
        try:
            context_type_of(self.root_uri)
        except TreeError as error:
            raise self.fail("root_uri", f"must lie under an OpenViking root: {error}") from None
        if self.root_uri.endswith("/"):
            raise self.fail("root_uri", f"must not end with '/', got {self.root_uri!r}")
        if self.abstract_snippets + self.abstract_terms == 0:
            raise self.fail("abstract_snippets", "and abstract_terms cannot both be 0 (empty abstracts)")
        if any(not key for key in self.path_keys):
            raise self.fail("path_keys", f"must be non-empty strings, got {list(self.path_keys)}")
        if self.builder == "metadata_path" and not self.path_keys:
            raise self.fail("path_keys", "must name at least one metadata key for builder metadata_path")
        if self.builder == "kmeans" and (self.path_keys or self.summaries_file):
            raise self.fail("path_keys", "and summaries_file are for builder metadata_path, not kmeans")
        if self.kmeans != "numpy" and self.builder != "kmeans":
            raise self.fail("kmeans", f"is for builder kmeans, not {self.builder}; leave it at 'numpy'")
        if self.kmeans_sample != 256 and self.kmeans != "faiss":
            raise self.fail(
                "kmeans_sample", "is for kmeans faiss; set store.hierarchy.kmeans: faiss or drop it"
            )
        if self.leaf_reassign != 0.0 and self.kmeans != "faiss":
            raise self.fail(
                "leaf_reassign", "is for kmeans faiss; set store.hierarchy.kmeans: faiss or drop it"
            )
        if self.summaries_file is not None and Path(self.summaries_file).is_absolute():
            raise self.fail(
                "summaries_file", f"must be relative to the dataset folder, got {self.summaries_file!r}"
            )
        if (self.abstract_template or self.overview_template) and self.summaries_file is None:
            raise self.fail("abstract_template", "and overview_template need store.hierarchy.summaries_file")

    def to_dict(self) -> dict[str, Any]:
        """As :meth:`Params.to_dict`, without ``kmeans``, ``kmeans_sample`` and ``leaf_reassign``
        at their defaults (a store built before they existed keeps its content key)."""
        plain = super().to_dict()
        if self.leaf_reassign == 0.0:
            plain.pop("leaf_reassign")
        if self.kmeans == "numpy":
            plain.pop("kmeans")
            if self.kmeans_sample == 256:
                plain.pop("kmeans_sample")
        return plain

    def input_files(self, source_folder: Path | None) -> list[Path]:
        """Files besides the corpus that a build reads (their content belongs in cache keys)."""
        if self.summaries_file is None:
            return []
        if source_folder is None:
            raise TreeError(
                f"hierarchy.summaries_file={self.summaries_file!r} needs the dataset folder, but none was given"
            )
        return [Path(source_folder) / self.summaries_file]
