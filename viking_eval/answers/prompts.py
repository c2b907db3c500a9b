"""Prompt files of the reader and the judge (conf/prompts/*.txt, or any path).

A prompt file has two sections, each opened by a line of its own: ``### system`` and
``### user``. The user section holds placeholders in braces that are replaced word for word (no
other brace is touched): the reader's ``{question}`` and ``{context}``, the judge's
``{question}``, ``{gold}`` and ``{answer}``. A file without a section or a placeholder it needs
is a ConfigError naming the file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from viking_eval.config.compose import CONFIG_DIR
from viking_eval.config.errors import ConfigError

__all__ = ["JUDGE_FIELDS", "READER_FIELDS", "Prompt", "load_prompt", "prompt_path"]

READER_FIELDS = ("question", "context")
JUDGE_FIELDS = ("question", "gold", "answer")
PROMPTS_DIR = CONFIG_DIR / "prompts"


@dataclass(frozen=True)
class Prompt:
    """A loaded prompt: where it came from, its system text and its user template."""

    path: str
    system: str
    user: str

    def render(self, values: Mapping[str, str]) -> str:
        """The user message with each ``{name}`` of ``values`` replaced."""
        text = self.user
        for name, value in values.items():
            text = text.replace("{" + name + "}", value)
        return text


def prompt_path(name: str) -> Path:
    """``name`` under conf/prompts/ (``answer_reader`` -> conf/prompts/answer_reader.txt) or a path."""
    if "/" in name or name.endswith(".txt"):
        return Path(name).expanduser()
    return PROMPTS_DIR / f"{name}.txt"


def load_prompt(name: str, key: str, fields: Sequence[str]) -> Prompt:
    """The prompt ``name`` (setting ``key``) checked to hold its sections and ``fields``."""
    path = prompt_path(name)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        shipped = sorted(p.stem for p in PROMPTS_DIR.glob("*.txt"))
        raise ConfigError(
            key, f"prompt file {path} cannot be read ({error.strerror}); give a path or one of {shipped}"
        ) from None
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        marker = line.strip().lower()
        if marker in ("### system", "### user"):
            current = sections.setdefault(marker.removeprefix("### "), [])
        elif current is not None:
            current.append(line)
    missing = [section for section in ("system", "user") if section not in sections]
    if missing:
        raise ConfigError(
            key, f"{path}: no '### {missing[0]}' line; a prompt file has '### system' and '### user' sections"
        )
    user = "\n".join(sections["user"]).strip()
    absent = [field for field in fields if "{" + field + "}" not in user]
    if absent:
        raise ConfigError(
            key,
            f"{path}: the user section has no {{{absent[0]}}}; it needs {['{' + f + '}' for f in fields]}",
        )
    return Prompt(path=str(path), system="\n".join(sections["system"]).strip(), user=user)
