"""CachedEmbedder: any embedder behind the content-addressed cache (viking_eval/run/cache.py):
the same texts, kind and embedder are embedded once per machine, a large corpus in resumable
parts, with progress, and held in memory once per process."""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from retrievers.types import Embedder, EncodeKind
from viking_eval.progress import progress_bar, quiet_model_bars, stage
from viking_eval.run.cache import ArtifactCache, content_key, memo_get, memo_put, texts_key
from viking_eval.run.ray_encoder import EncodeBackend

log = logging.getLogger(__name__)


ENCODE_CHUNK = 256
"""Texts per call of the wrapped embedder on a cache miss (a multiple of the usual batch sizes)."""

RESUME_CHUNK = 4096
"""Texts per cache entry when more texts than this are encoded (a multiple of
:data:`ENCODE_CHUNK`): a corpus is cached in parts, so a build that stops (a crash, a kill, a
full disk) keeps what it encoded and the next run encodes only the missing parts."""

_LOADED: weakref.WeakSet[Any] = weakref.WeakSet()  # embedders whose model a wrapper loaded (said once)
_MEMO_BYTES = 256 << 20  # results larger than this are not kept in memory by ``encode``


class CachedEmbedder:
    """An Embedder whose ``encode`` goes through the cache: the same texts, kind and embedder
    are embedded once per machine (and held in memory once per process).

    On a cache miss the texts are encoded longest first in calls of :data:`ENCODE_CHUNK` texts
    under one labelled progress bar (``embedding scifact corpus (5,183 docs)``, with docs/s and
    the time left; ``label`` names what is embedded, ``show_progress`` as the config's: True,
    False, or None for a terminal only). Longest first is the order sentence-transformers
    batches in anyway, so batches are as full as in one call; the wrapped embedder never draws
    its own bar (a call is below its 1,000-text threshold).

    More than :data:`RESUME_CHUNK` texts are cached in parts of that many (in the longest-first
    order), each its own content-addressed entry (``.npy``, never pickled): an interrupted
    encoding resumes where it stopped, and the bar starts at what was already done. A corpus
    cached whole by an earlier version (one entry for all its texts) is still found. The parts
    make the same calls of the wrapped embedder as one whole encoding would (the part size is a
    multiple of the call size), so the vectors are the same.

    Several processes. When the wrapped embedder has more than one worker (``workers > 1``:
    ``SentenceTransformerEmbedder(processes=2)`` or ``devices=[...]``, sentence-transformers'
    multi-process pool), each part goes to it in one call of ``encode_chunked(texts, kind,
    ENCODE_CHUNK)``, which encodes the same calls of :data:`ENCODE_CHUNK` texts on its workers.

    :meth:`encode_into` writes the rows into an array it is given (a store's memory-mapped
    ``embeddings.npy``, :func:`retrievers.builders.build_store`), holding one part at a time."""

    def __init__(
        self,
        inner: Embedder,
        cache: ArtifactCache,
        *,
        label: str = "",
        show_progress: bool | None = False,
        backend: EncodeBackend | None = None,
    ) -> None:
        self.inner = inner
        #: where missing parts are encoded (``embedder.backend=ray``: viking_eval/run/ray_encoder.py)
        self.backend = backend or EncodeBackend()
        self.cache = cache
        self.name = inner.name
        self.label = label
        self.show_progress = show_progress
        self._dim: int | None = None  # the wrapped embedder's, once asked (its model loaded)
        #: parts found in the cache / encoded by the last call with more than RESUME_CHUNK texts
        self.parts_cached = 0
        self.parts_encoded = 0

    @property
    def dim(self) -> int:
        return self._loaded_dim()

    def _loaded_dim(self) -> int:
        """The wrapped embedder's width, its model loaded first when it loads one lazily (a
        ``model`` property: sentence-transformers), as a stage of its own (``loading model
        <name>``: plain lines without a terminal) with Hugging Face's own bars off."""
        if self._dim is not None:
            return self._dim
        if isinstance(getattr(type(self.inner), "model", None), property) and self.inner not in _LOADED:
            quiet_model_bars()
            what = getattr(self.inner, "model_name", self.name)
            with stage(f"loading model {what}", self.show_progress):
                dim = self.inner.dim
        else:
            dim = self.inner.dim
        self._dim = dim
        with contextlib.suppress(TypeError):  # not weakly referable: said again by the next wrapper
            _LOADED.add(self.inner)
        return dim

    def _load_model(self) -> None:
        """Load the wrapped embedder's model now, as a stage of its own, when it loads one lazily
        (a ``model`` property: sentence-transformers); others are left alone (asking an HTTP
        embedder its width would cost a request)."""
        lazy = isinstance(getattr(type(self.inner), "model", None), property)
        if self._dim is None and lazy and self.inner not in _LOADED:
            self._loaded_dim()

    def _key(self, kind: EncodeKind, texts: Sequence[str]) -> str:
        return content_key(["embeddings", self.name, kind, texts_key(texts)])

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        if len(texts) <= RESUME_CHUNK:
            return self.cache.embeddings(
                self.name, kind, list(texts), lambda batch: self._encode(batch, kind)
            )
        key = self._key(kind, texts)
        memo = memo_get(key)
        if isinstance(memo, np.ndarray):  # what an embeddings key holds
            self.cache.hits += 1
            return memo
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        self.encode_into(texts, kind=kind, out=out)
        out.setflags(write=False)
        if out.nbytes <= _MEMO_BYTES:
            memo_put(key, out)
        return out

    def encode_into(self, texts: Sequence[str], *, kind: EncodeKind, out: np.ndarray) -> None:
        """Write the embeddings of ``texts`` into ``out`` (``(len(texts), dim)`` float32), part
        by part (see the class docstring). ``texts`` may be any sequence; it is read a part at
        a time."""
        n = len(texts)
        if out.shape != (n, self.dim) or out.dtype != np.float32:
            raise ValueError(f"out must be float32 of shape ({n}, {self.dim}), got {out.dtype} {out.shape}")
        if n <= RESUME_CHUNK:
            out[:] = self.encode(list(texts), kind=kind)
            return
        whole = self.cache.find("embeddings", self._key(kind, texts))
        if whole is not None:  # cached in one entry (an earlier version, or a query set)
            self.cache.hits += 1
            vectors = np.load(whole / "vectors.npy", mmap_mode="r", allow_pickle=False)
            for start in range(0, n, RESUME_CHUNK):
                out[start : start + RESUME_CHUNK] = vectors[start : start + RESUME_CHUNK]
            return
        lengths = np.fromiter((len(text) for text in texts), dtype=np.int64, count=n)
        order = np.argsort(-lengths, kind="stable")  # longest first; ties keep their order
        parts = [order[start : start + RESUME_CHUNK] for start in range(0, n, RESUME_CHUNK)]
        missing: list[tuple[np.ndarray, str]] = []  # (rows, key): texts are read again when encoded
        self.parts_cached = self.parts_encoded = 0
        done = 0
        for rows in parts:
            part_texts = [texts[int(i)] for i in rows]
            key = self._key(kind, part_texts)
            found = self.cache.find("embeddings", key)
            if found is None:
                missing.append((rows, key))
                continue
            self.cache.hits += 1
            self.parts_cached += 1
            out[rows] = np.load(found / "vectors.npy", allow_pickle=False)
            done += rows.size
        if not missing:
            return
        unit = "doc" if kind == "document" else "query"
        what = f"{n:,} {'docs' if kind == 'document' else 'queries'}"
        desc = f"embedding {self.label} ({what})" if self.label else f"embedding {what}"
        if done:
            desc += f", {done:,} cached"
        with progress_bar(total=n, desc=desc, unit=unit, show=self.show_progress, initial=done) as bar:
            if self.backend.on_ray:
                self._encode_missing_on_ray(texts, kind, missing, out, bar)
                return
            for rows, key in missing:
                part_texts = [texts[int(i)] for i in rows]

                def build(folder: Path, part_texts: list[str] = part_texts) -> None:
                    vectors = np.ascontiguousarray(self._encode_part(part_texts, kind, bar), dtype=np.float32)
                    if vectors.shape != (len(part_texts), self.dim) or not np.isfinite(vectors).all():
                        raise ValueError(f"embedder {self.name} returned bad vectors: shape {vectors.shape}")
                    np.save(folder / "vectors.npy", vectors, allow_pickle=False)

                folder = self.cache.get_or_build("embeddings", key, build)
                out[rows] = np.load(folder / "vectors.npy", allow_pickle=False)
                self.parts_encoded += 1

    def _encode_missing_on_ray(
        self,
        texts: Sequence[str],
        kind: EncodeKind,
        missing: list[tuple[np.ndarray, str]],
        out: np.ndarray,
        bar: Any,
    ) -> None:
        """The missing parts on a Ray cluster (viking_eval/run/ray_encoder.py), each saved as its
        cache entry as soon as its vectors are back: the same entries the local loop writes."""
        from viking_eval.run.ray_encoder import encode_parts_on_ray

        def save(index: int, vectors: np.ndarray) -> None:
            rows, key = missing[index]
            if vectors.shape != (rows.size, self.dim) or not np.isfinite(vectors).all():
                raise ValueError(f"embedder {self.name} returned bad vectors: shape {vectors.shape}")

            def build(folder: Path) -> None:
                np.save(folder / "vectors.npy", np.ascontiguousarray(vectors), allow_pickle=False)

            folder = self.cache.get_or_build("embeddings", key, build)
            out[rows] = np.load(folder / "vectors.npy", allow_pickle=False)
            self.parts_encoded += 1

        self._load_model()
        encode_parts_on_ray(
            self.inner,
            kind,
            [[texts[int(i)] for i in rows] for rows, _ in missing],
            call_size=ENCODE_CHUNK,
            actors=self.backend.actors,
            done=save,
            progress=bar.update,
        )

    def _encode_part(self, texts: list[str], kind: EncodeKind, bar: Any) -> np.ndarray:
        """One part (already longest first): calls of ENCODE_CHUNK texts, on the wrapped
        embedder's workers when it has several."""
        encode_chunked = getattr(self.inner, "encode_chunked", None)
        if callable(encode_chunked) and getattr(self.inner, "workers", 1) > 1:
            vectors = np.asarray(encode_chunked(texts, kind, ENCODE_CHUNK))
            bar.update(len(texts))
            return vectors
        blocks = []
        for start in range(0, len(texts), ENCODE_CHUNK):
            piece = texts[start : start + ENCODE_CHUNK]
            blocks.append(np.asarray(self.inner.encode(piece, kind=kind), dtype=np.float32))
            bar.update(len(piece))
        return np.concatenate(blocks)

    def _encode(self, texts: Sequence[str], kind: EncodeKind) -> np.ndarray:
        self._load_model()  # a model loads here, as a stage, rather than inside the first call
        if len(texts) <= ENCODE_CHUNK:  # one call, as before; no bar for a few texts
            return self.inner.encode(texts, kind=kind)
        unit = "doc" if kind == "document" else "query"
        what = f"{len(texts):,} {'docs' if kind == 'document' else 'queries'}"
        desc = f"embedding {self.label} ({what})" if self.label else f"embedding {what}"
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # stable: ties keep their order
        with progress_bar(total=len(texts), desc=desc, unit=unit, show=self.show_progress) as bar:
            if self.backend.on_ray:  # one part of the same calls, on the cluster
                from viking_eval.run.ray_encoder import encode_parts_on_ray

                found: list[np.ndarray] = []
                encode_parts_on_ray(
                    self.inner,
                    kind,
                    [[texts[i] for i in order]],
                    call_size=ENCODE_CHUNK,
                    actors=self.backend.actors,
                    done=lambda _, part: found.append(part),
                    progress=bar.update,
                )
                vectors = found[0]
            else:
                vectors = self._encode_part([texts[i] for i in order], kind, bar)
        out = np.empty_like(vectors)
        out[np.asarray(order)] = vectors
        return out
