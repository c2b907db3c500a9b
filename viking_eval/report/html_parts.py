"""Small HTML pieces shared by the self-contained pages (report.html, sweep.html, benchmark.html):
the colours and CSS, escaping and number formats, a figure as an inline PNG, the provenance
items of a header, the page skeleton, and which cells of a column are best."""

from __future__ import annotations

import base64
import html
import io
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure


BETTER = "#1a7f37"
WORSE = "#cf222e"
NEUTRAL = "#8c959f"
PALETTE = ["#0969da", "#bf8700", "#8250df", "#1a7f37", "#cf222e", "#57606a", "#e16f24", "#1b7c83"]

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
    """``value`` as text safe inside HTML (quotes escaped too)."""
    return html.escape(str(value), quote=True)


def format_metric(value: float) -> str:
    return f"{value:.4f}"


def format_p(value: float) -> str:
    """A p-value: ``-`` for NaN, scientific below 0.001, else three decimals."""
    if math.isnan(value):
        return "-"
    return f"{value:.1e}" if 0 < value < 1e-3 else f"{value:.3f}"


def format_signed(value: float) -> str:
    return f"{value:+.4f}"


def format_effect(value: float) -> str:
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return "+∞" if value > 0 else "−∞"
    return f"{value:+.2f}"


def png_data_uri(figure: Figure, dpi: int = 100) -> str:
    """The figure as a ``data:image/png;base64,...`` URI."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, facecolor="white")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def figure_html(uri: str, alt: str, caption: str) -> str:
    return f'<figure><img src="{uri}" alt="{escape(alt)}"><figcaption>{caption}</figcaption></figure>'


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


def html_page(title: str, body: list[str]) -> str:
    """A complete page: ``title``, the inline CSS and the ``body`` lines."""
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


def best_indices(values: list[float | None], *, highest: bool) -> set[int]:
    """Indices of the best finite values (all of a tie); none when fewer than two are present."""
    present = [
        (index, value) for index, value in enumerate(values) if value is not None and math.isfinite(value)
    ]
    if len(present) < 2:
        return set()
    target = max(value for _, value in present) if highest else min(value for _, value in present)
    return {index for index, value in present if value == target}
