"""The reader's answers and the judge's verdicts, kept by content key so that a rerun costs
nothing: ``<cache root>/answers/<key[:2]>/<key>.json``, JSON (never pickle), written atomically.

The key is the sha256 of everything that determines a reply: the endpoint kind (reader or
judge), the model, the system text, the rendered user message (which holds the context, the
question, the gold answer for the judge) and the request parameters (temperature, max_tokens).
The endpoint's URL is not part of it: the same model behind another URL gives the same reply.
An entry that cannot be read (or is not an entry) counts as absent and is written again."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from viking_eval import files

__all__ = ["CachedReply", "ReplyCache", "reply_key"]

log = logging.getLogger(__name__)
FORMAT = 1


def reply_key(kind: str, model: str, system: str, user: str, params: dict[str, Any]) -> str:
    """The content key of one request (see the module docstring)."""
    text = json.dumps(
        {"format": FORMAT, "kind": kind, "model": model, "system": system, "user": user, "params": params},
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedReply:
    """A reply as the cache keeps it: the text and the tokens it cost when it was asked."""

    content: str
    prompt_tokens: int
    completion_tokens: int
    usage_known: bool


class ReplyCache:
    """Replies under ``root``/answers (``root`` None: nothing is kept)."""

    def __init__(self, root: Path | None) -> None:
        self.folder = None if root is None else root / "answers"

    def path(self, key: str) -> Path | None:
        return None if self.folder is None else self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> CachedReply | None:
        path = self.path(key)
        if path is None or not path.is_file():
            return None
        try:
            entry = files.read_json(path)
            return CachedReply(
                content=str(entry["content"]),
                prompt_tokens=int(entry["prompt_tokens"]),
                completion_tokens=int(entry["completion_tokens"]),
                usage_known=bool(entry["usage_known"]),
            )
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.warning("answer cache entry %s cannot be read (%s); asking again", path, error)
            return None

    def put(self, key: str, kind: str, model: str, reply: CachedReply) -> None:
        path = self.path(key)
        if path is None:
            return
        files.write_json(
            path,
            {
                "format": FORMAT,
                "kind": kind,
                "model": model,
                "content": reply.content,
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "usage_known": reply.usage_known,
            },
        )
