"""Parent-child chunks: split documents into overlapping windows at store build.

Chunking (``store.chunking: {size, overlap}``) splits each document's text into windows of
``size`` tokens, consecutive windows sharing ``overlap`` tokens (stride ``size - overlap``). A
*token* here is a run of non-whitespace characters (``\\S+``), not a model word piece: the count
does not depend on the embedder, so BM25 and every embedder see the same chunks, and a chunk's
text is the exact slice of the original text from its first token to its last (spacing and
punctuation kept). Scientific English runs at about 1.3-1.5 MiniLM word pieces per token:
SciFact's 128-token chunks with their title are 199 word pieces at the median and 275 at the
95th percentile (MiniLM reads 256). Every chunk keeps its document's title (so a chunk is
embedded as ``title + " " + chunk``, as BEIR embeds whole documents) and metadata, plus
``parent_id`` (the document id) and ``chunk`` (its 0-based position). Chunk ids are
``<doc_id>#<n>``. A document with no text gives one chunk with empty text (its title remains).

Query time resolves matched chunks back to their documents (:mod:`retrievers.parents`).
"""

from __future__ import annotations

from collections.abc import Iterable

from retrievers.store.config import CHUNK_ID_SEPARATOR, TOKEN_RE, ChunkingConfig
from retrievers.types import Document

__all__ = ["chunk_documents", "chunk_text"]


def chunk_text(text: str, config: ChunkingConfig) -> list[str]:
    """``text`` cut into windows of ``config.size`` whitespace tokens sharing ``config.overlap``;
    each window is the original text from its first token's start to its last token's end. The
    last window ends at the last token (it may be shorter); an empty text gives ``[""]``."""
    spans = [match.span() for match in TOKEN_RE.finditer(text)]
    if not spans:
        return [""]
    return [text[spans[start][0] : spans[end - 1][1]] for start, end in config.windows(len(spans))]


def chunk_documents(documents: Iterable[Document], config: ChunkingConfig) -> list[Document]:
    """Every document's chunks (ids ``<doc_id>#<n>``, title and metadata kept, ``parent_id``
    and ``chunk`` added), in input order."""
    chunks: list[Document] = []
    for doc in documents:
        for n, text in enumerate(chunk_text(doc.text, config)):
            metadata = {**doc.metadata, "parent_id": doc.id, "chunk": n}
            chunks.append(
                Document(id=f"{doc.id}{CHUNK_ID_SEPARATOR}{n}", text=text, title=doc.title, metadata=metadata)
            )
    return chunks
