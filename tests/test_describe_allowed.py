"""What a value may be is described by one function, ``retrievers.params.describe_type``: the
library's ParamError messages and the harness's config errors both say it through that function
(issue 24: the text was written twice, in retrievers/params.py and viking_eval/config/schema.py,
and could disagree)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

import retrievers.params
import viking_eval.config.schema
from retrievers.params import ParamError, Params, describe_type, param
from viking_eval.config.errors import ConfigError
from viking_eval.config.validate import typed_values

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Knobs(Params):
    SECTION = "knobs"
    weight: float | None = param(None, low=0.0, high=1.0)
    depth: int | str = param(3)


def _harness_error(values: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        typed_values(Knobs, values, "retrievers.t")
    return caught.value.line()


def _library_error(values: dict[str, Any]) -> str:
    with pytest.raises(ParamError) as caught:
        Knobs.from_dict(values)
    return str(caught.value)


def test_the_descriptions_by_hand() -> None:
    assert describe_type(bool) == "true or false"
    assert describe_type(float | None) == "a number or null"
    assert describe_type(float | None, null=False) == "a number"
    assert describe_type(Literal["rrf", "convex"] | bool) == "one of ['rrf', 'convex'] or true or false"
    assert describe_type(tuple[str, ...]) == "a list"
    assert describe_type(list) == "a list"
    assert describe_type(dict[str, int] | None) == "a mapping or null"
    assert describe_type(Knobs) == "a mapping of Knobs settings"
    # the same field, refused by the harness (OmegaConf's type check) and by the library (Params)
    assert (
        _harness_error({"weight": "abc"})
        == "retrievers.t.weight: must be a number in [0, 1] or null, got 'abc'"
    )
    assert _library_error({"weight": "abc"}) == "knobs.weight must be a number in [0, 1] or null, got 'abc'"
    assert _library_error({"depth": [1]}) == "knobs.depth must be an integer or a string, got [1]"


def test_the_harness_describes_a_field_with_the_library_function(monkeypatch: pytest.MonkeyPatch) -> None:
    assert viking_eval.config.schema.describe_type is retrievers.params.describe_type
    calls: list[tuple[Any, bool]] = []

    def spy(hint: Any, *, null: bool = True) -> str:
        calls.append((hint, null))
        return "WHAT-DESCRIBE-TYPE-SAYS"

    monkeypatch.setattr(viking_eval.config.schema, "describe_type", spy)
    line = _harness_error({"weight": "abc"})
    assert line == "retrievers.t.weight: must be WHAT-DESCRIBE-TYPE-SAYS in [0, 1] or null, got 'abc'"
    assert calls == [(float | None, False)]


def test_the_library_describes_a_field_with_the_same_function(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retrievers.params, "describe_type", lambda hint, *, null=True: "WHAT-IT-SAYS")
    assert _library_error({"depth": [1]}) == "knobs.depth must be WHAT-IT-SAYS, got [1]"


def test_no_second_description_of_allowed_values() -> None:
    """The words of a description ("true or false", "a mapping of ... settings") are returned by
    no function outside retrievers/params.py."""
    found = []
    for package in ("retrievers", "viking_eval"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "retrievers" / "params.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Return) and isinstance(node.value, ast.Constant | ast.JoinedStr):
                    text = ast.unparse(node.value)
                    if "true or false" in text or ("settings" in text and "a mapping of" in text):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
