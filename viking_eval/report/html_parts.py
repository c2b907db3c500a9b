"""The parts every HTML page of the harness shares (report.html, sweep.html, benchmark.html):
the style sheet, the page frame, escaping, p-value text, the best cells of a column and the
provenance items of a header."""

from __future__ import annotations

import html
import math
from typing import Any

CSS = """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; background: #f6f8fa; color: #1f2328;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 28px 32px 48px; }
header { border-bottom: 1px solid #d0d7de; margin-bottom: 8px; padding-bottom: 12px; }
h1 { font-size: 26px; margin: 0 0 4px; font-weight: 600; }
h1 .sub { color: #57606a; font-weight: 400; }
h2 { font-size: 19px; margin: 16px 0 8px; font-weight: 600; }
p { margin: 6px 0; }
.meta, .note { color: #57606a; font-size: 13.5px; }
section { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 4px 20px 16px;
  margin-top: 18px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 14px; }
th, td { padding: 5px 11px; border-bottom: 1px solid #d8dee4; }
table.comparisons { font-size: 13.5px; }
table.comparisons th, table.comparisons td { padding: 5px 8px; }
table.comparisons thead th { vertical-align: bottom; }
thead th { border-bottom: 2px solid #8c959f; text-align: right; font-weight: 600; white-space: nowrap; }
thead th:first-child, tbody th { text-align: left; }
tbody th { font-weight: 500; white-space: nowrap; }
td { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.text { text-align: left; }
tbody tr:nth-child(even) { background: #f6f8fa; }
tbody tr:hover { background: #eaeef2; }
td.best { font-weight: 700; }
.tag { display: inline-block; font-size: 11px; font-weight: 600; color: #0969da; border: 1px solid #0969da;
  border-radius: 10px; padding: 0 7px; margin-left: 6px; vertical-align: 1px; }
sup.sig { font-size: 11px; margin-left: 1px; }
.better { color: #1a7f37; }
.worse { color: #cf222e; }
.wtl .w { color: #1a7f37; } .wtl .l { color: #cf222e; } .wtl .t { color: #57606a; }
figure { margin: 12px 0 4px; }
figure img { max-width: 100%; height: auto; border: 1px solid #d8dee4; border-radius: 6px; background: #fff; }
figcaption { color: #57606a; font-size: 13px; margin-top: 4px; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px;
  background: #eff1f3; padding: 1px 5px; border-radius: 4px; }
ul { margin: 6px 0; padding-left: 22px; }
.scroll { overflow-x: auto; }
"""


def escape(value: object) -> str:
    """``value`` as HTML text (quotes escaped too: safe inside attributes)."""
    return html.escape(str(value), quote=True)


def format_p(value: float) -> str:
    """A p-value as the pages print it: ``-`` for NaN, scientific below 0.001, else 3 decimals."""
    if math.isnan(value):
        return "-"
    return f"{value:.1e}" if 0 < value < 1e-3 else f"{value:.3f}"


def best_indices(values: list[float | None], *, highest: bool) -> set[int]:
    """Positions of the best finite value (highest or lowest; ties all kept), none when fewer than
    two values are finite."""
    present = [
        (index, value) for index, value in enumerate(values) if value is not None and math.isfinite(value)
    ]
    if len(present) < 2:
        return set()
    target = max(value for _, value in present) if highest else min(value for _, value in present)
    return {index for index, value in present if value == target}


def html_page(title: str, body: list[str]) -> str:
    """A whole self-contained page: ``body`` inside the shared frame and style sheet."""
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            '<link rel="icon" href="data:,">',  # no favicon request
            f"<title>{escape(title)}</title>",
            f"<style>{CSS}</style>",
            "</head>",
            "<body><main>",
            *body,
            "</main></body>",
            "</html>",
            "",
        ]
    )


def provenance_meta(environment: dict[str, Any]) -> list[str]:
    """The header's provenance items (HTML): the git commit (and whether the tree was dirty) and
    the time, from environment.json's values, where present."""
    git = environment.get("git") if isinstance(environment.get("git"), dict) else {}
    sha = str((git or {}).get("sha") or "")
    items = []
    if sha:
        items.append(
            f"git <code>{escape(sha[:12])}</code>"
            + (" (uncommitted changes)" if (git or {}).get("dirty") else "")
        )
    if environment.get("time"):
        items.append(escape(environment["time"]))
    return items
