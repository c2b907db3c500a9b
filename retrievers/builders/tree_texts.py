"""Extractive texts of context-tree directories and the leaf nodes under a directory.

A directory's abstract (L0) and overview (L1) are made of the titles (or opening words) of its
most central documents and its top TF-IDF terms (:func:`retrievers.text.fit_tfidf` over
:data:`retrievers.text.LABEL_PATTERN` words); nothing is generated. Used by both tree builders
(:mod:`retrievers.builders.hierarchy`, :mod:`retrievers.builders.kmeans_tree`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.store.hierarchy_config import HierarchyConfig
from retrievers.store.tree_uris import uri_segment
from retrievers.text import LABEL_PATTERN, fit_tfidf
from retrievers.types import ContextNode, Document

__all__ = ["Extractor", "leaf_nodes", "snippet"]

FloatMatrix = npt.NDArray[np.float32]


def snippet(doc: Document, chars: int) -> str:
    """A document's title, else its opening ``chars`` characters (cut at a word boundary)."""
    if doc.title.strip():
        return " ".join(doc.title.split())
    text = " ".join(doc.text.split())
    if len(text) <= chars:
        return text
    cut = text[:chars]
    space = cut.rfind(" ")
    return (cut[:space] if space > chars // 2 else cut) + "..."


class Extractor:
    """Extractive directory texts: central documents' snippets and top TF-IDF terms."""

    def __init__(self, documents: Sequence[Document], vectors: FloatMatrix, config: HierarchyConfig) -> None:
        self.documents = documents
        self.vectors = vectors
        self.config = config
        self.terms: list[str] = []
        self.matrix: Any = None
        texts = [doc.full_text for doc in documents]
        if max(config.abstract_terms, config.overview_terms if config.overview else 0) > 0:
            try:
                vectorizer, self.matrix = fit_tfidf(texts, token_pattern=LABEL_PATTERN, dtype=np.float64)
                self.terms = [str(term) for term in vectorizer.get_feature_names_out()]
            except ValueError:  # no usable term anywhere: abstracts fall back to snippets only
                self.matrix = None

    def central(self, members: Sequence[int], count: int) -> list[int]:
        """Up to ``count`` members closest to their normalised mean vector (ties: lower position)."""
        if count <= 0 or not members:
            return []
        rows = np.asarray(members, dtype=np.int64)
        block = self.vectors[rows].astype(np.float64)
        centre = block.mean(axis=0)
        norm = float(np.linalg.norm(centre))
        if norm > 0:
            centre /= norm
        # Vectors are float32: documents equally close to the centre differ only by rounding noise,
        # so similarities are compared at 1e-6 and such ties go to the lower position, as documented.
        similarity = np.round(block @ centre, 6)
        order = np.lexsort((rows, -similarity))[:count]
        return [int(rows[i]) for i in order]

    def top_terms(self, members: Sequence[int], count: int) -> list[str]:
        if count <= 0 or self.matrix is None or not members:
            return []
        weights = np.asarray(self.matrix[np.asarray(members, dtype=np.int64)].sum(axis=0)).ravel()
        positive = np.flatnonzero(weights > 0)
        if positive.size == 0:
            return []
        order = positive[np.lexsort((positive, -weights[positive]))][:count]
        return [self.terms[int(i)] for i in order]

    def text(self, members: Sequence[int], snippets: int, terms: int) -> str:
        parts: list[str] = []
        chosen = [
            snippet(self.documents[i], self.config.snippet_chars) for i in self.central(members, snippets)
        ]
        chosen = [text for text in chosen if text]
        if chosen:
            parts.append("; ".join(chosen) + ".")
        words = self.top_terms(members, terms)
        if words:
            parts.append("Key terms: " + ", ".join(words) + ".")
        return " ".join(parts)

    def abstract(self, members: Sequence[int]) -> str:
        return self.text(members, self.config.abstract_snippets, self.config.abstract_terms)

    def overview(self, members: Sequence[int]) -> str:
        if not self.config.overview:
            return ""
        return self.text(members, self.config.overview_snippets, self.config.overview_terms)


def leaf_nodes(
    documents: Sequence[Document], members: Sequence[int], parent: str, config: HierarchyConfig
) -> list[ContextNode]:
    """One leaf per member document, under directory ``parent`` (the leaf's abstract is its
    snippet)."""
    return [
        ContextNode(
            uri=f"{parent}/{uri_segment(documents[i].id)}",
            level=2,
            parent_uri=parent,
            abstract=snippet(documents[i], config.snippet_chars),
            doc_id=documents[i].id,
        )
        for i in members
    ]
