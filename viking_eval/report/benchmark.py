"""The benchmark's pages: benchmark.md, benchmark.html and the rows of benchmark.csv, rendered from a
:class:`~viking_eval.benchmark.table.BenchmarkTable` in the style of a run's report (one table per
metric, retrievers x datasets plus the mean, ▲/▼ markers, best per column in bold, latency per
dataset). Renderers return text; results/benchmark_folder.py writes it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from viking_eval.report.html_parts import best_indices, escape, format_p, html_page, provenance_meta

if TYPE_CHECKING:
    from viking_eval.benchmark.table import BenchmarkTable

MEAN = "mean"
CSV_COLUMNS = [
    "retriever",
    "dataset",
    "metric",
    "value",
    "mean_difference",
    "p_value",
    "p_adjusted",
    "significant",
    "p50_ms",
    "p95_ms",
    "qps",
]


def _cell(table: BenchmarkTable, row: str, dataset: str, metric: str) -> str:
    value = table.value(row, dataset, metric)
    return "-" if value is None else f"{value:.4f}{table.marker(row, dataset, metric)}"


def _label(table: BenchmarkTable, row: str) -> str:
    return f"{row} (baseline)" if row == table.baseline else row


def metric_table(table: BenchmarkTable, metric: str, *, fmt: str = "github") -> str:
    """Rows x datasets on ``metric``, with the mean over datasets (4 decimals, markers)."""
    header = ["retriever", *table.datasets, MEAN]
    rows = []
    for row in table.rows:
        mean = table.mean(row, metric)
        rows.append(
            [
                _label(table, row),
                *(_cell(table, row, dataset, metric) for dataset in table.datasets),
                "-" if mean is None else f"{mean:.4f}",
            ]
        )
    text: str = tabulate(rows, headers=header, tablefmt=fmt, disable_numparse=True)  # tabulate: untyped
    return text


def latency_table(table: BenchmarkTable, key: str = "p50_ms", *, fmt: str = "github") -> str:
    header = ["retriever", *table.datasets]
    rows = [
        [
            row,
            *(
                f"{table.latency[row][dataset][key]:.2f}"
                if key in table.latency.get(row, {}).get(dataset, {})
                else "-"
                for dataset in table.datasets
            ),
        ]
        for row in table.rows
    ]
    text: str = tabulate(rows, headers=header, tablefmt=fmt, disable_numparse=True)  # tabulate: untyped
    return text


def _runs_rows(table: BenchmarkTable) -> list[list[str]]:
    return [
        [
            run.dataset,
            run.variant or "-",
            f"`{run.folder}/`",
            run.split,
            str(run.n_queries),
            f"{run.wall_seconds:.1f}",
            ", ".join(run.rows),
        ]
        for run in table.runs
    ]


def _variants_lines(table: BenchmarkTable) -> list[str]:
    if not table.variants:
        return []
    return [
        "Variants (rows `<retriever>@<variant>`: the same datasets run with these overrides):",
        "",
        *(f"- `{name}`: `{' '.join(overrides)}`" for name, overrides in table.variants.items()),
        "",
    ]


def benchmark_markdown(table: BenchmarkTable) -> str:
    """benchmark.md."""
    lines = [
        f"# {table.name}: {len(table.rows)} retrievers x {len(table.datasets)} datasets",
        "",
        f"Datasets: {', '.join(f'{d} ({table.n_queries.get(d, 0)} queries)' for d in table.datasets)}. "
        "The mean is over datasets (each weighs the same, as BEIR and MTEB average). "
        f"{table.legend()}. Wall time {table.wall_seconds:.1f} s.",
        "",
        *_variants_lines(table),
    ]
    for metric in table.metrics:
        lines += [f"## {metric}", "", metric_table(table, metric), ""]
    lines += [
        "## Latency p50 (ms, one query at a time)",
        "",
        latency_table(table, "p50_ms"),
        "",
        "## Latency p95 (ms)",
        "",
        latency_table(table, "p95_ms"),
        "",
        "## Runs",
        "",
        tabulate(
            _runs_rows(table),
            headers=["dataset", "variant", "run folder", "split", "queries", "wall s", "rows"],
            tablefmt="github",
            disable_numparse=True,
        ),
        "",
        "Each run folder is a normal run (report.md, metrics.json, per_query.csv, runs/*.trec). "
        "Files: `benchmark.json`, `benchmark.csv` (one row per retriever, dataset and metric, with the "
        "paired test against the baseline), `benchmark.html`.",
        "",
    ]
    return "\n".join(lines)


def csv_rows(table: BenchmarkTable) -> list[list[Any]]:
    """benchmark.csv: one row per (retriever, dataset, metric), then the mean over datasets
    (dataset ``mean``); the paired test against the baseline (primary test, adjusted over the
    whole table) and the cell's latency."""
    rows: list[list[Any]] = []
    for row in table.rows:
        for dataset in table.datasets:
            latency = table.latency.get(row, {}).get(dataset, {})
            for metric in table.metrics:
                value = table.value(row, dataset, metric)
                if value is None:
                    continue
                comparison = table.comparison(row, dataset, metric)
                rows.append(
                    [
                        row,
                        dataset,
                        metric,
                        value,
                        comparison.mean_difference if comparison else "",
                        comparison.p_value if comparison else "",
                        comparison.p_adjusted if comparison else "",
                        comparison.significant if comparison else "",
                        latency.get("p50_ms", ""),
                        latency.get("p95_ms", ""),
                        latency.get("qps", ""),
                    ]
                )
        for metric in table.metrics:
            mean = table.mean(row, metric)
            if mean is not None:
                rows.append([row, MEAN, metric, mean, "", "", "", "", "", "", ""])
    return rows


# --------------------------------------------------------------------------- html


def _marker_html(table: BenchmarkTable, row: str, dataset: str, metric: str) -> str:
    symbol = table.marker(row, dataset, metric)
    comparison = table.comparison(row, dataset, metric)
    if not symbol or comparison is None:
        return ""
    css = "better" if symbol == "▲" else "worse"
    title = (
        f"{comparison.test}: Δ {comparison.mean_difference:+.4f}, p {format_p(comparison.p_value)}, "
        f"{table.settings.correction}-adjusted over the table {format_p(comparison.p_adjusted)} vs {table.baseline}"
    )
    return f'<sup class="sig {css}" title="{escape(title)}">{symbol}</sup>'


def _metric_table_html(table: BenchmarkTable, metric: str) -> str:
    columns = [*table.datasets, MEAN]
    grid = [
        [table.value(row, dataset, metric) for dataset in table.datasets] + [table.mean(row, metric)]
        for row in table.rows
    ]
    best = [
        best_indices([grid[r][c] for r in range(len(table.rows))], highest=True) for c in range(len(columns))
    ]
    body = []
    for r, row in enumerate(table.rows):
        cells = []
        for c, column in enumerate(columns):
            value = grid[r][c]
            css = ' class="best"' if r in best[c] else ""
            if value is None:
                cells.append("<td>-</td>")
                continue
            marker = _marker_html(table, row, column, metric) if column != MEAN else ""
            cells.append(f"<td{css}>{value:.4f}{marker}</td>")
        tag = '<span class="tag">baseline</span>' if row == table.baseline else ""
        body.append(f"<tr><th>{escape(row)}{tag}</th>{''.join(cells)}</tr>")
    header = "".join(
        f"<th>{escape(column)}<br><span class='note'>{table.n_queries.get(column, '')}</span></th>"
        if column != MEAN
        else "<th>mean<br><span class='note'>over datasets</span></th>"
        for column in columns
    )
    return (
        f'<div class="scroll"><table class="metrics" id="metric-{escape(metric)}">'
        f"<thead><tr><th>retriever</th>{header}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def _latency_table_html(table: BenchmarkTable) -> str:
    body = []
    for row in table.rows:
        cells = []
        for dataset in table.datasets:
            latency = table.latency.get(row, {}).get(dataset, {})
            if "p50_ms" in latency:
                cells.append(f"<td>{latency['p50_ms']:.2f} / {latency.get('p95_ms', math.nan):.2f}</td>")
            else:
                cells.append("<td>-</td>")
        body.append(f"<tr><th>{escape(row)}</th>{''.join(cells)}</tr>")
    header = "".join(f"<th>{escape(dataset)}</th>" for dataset in table.datasets)
    return (
        '<div class="scroll"><table id="latency"><thead><tr><th>retriever</th>'
        f"{header}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def benchmark_html(table: BenchmarkTable, environment: dict[str, Any]) -> str:
    """benchmark.html: self-contained, like report.html."""
    meta = [
        f"{len(table.datasets)} datasets",
        f"{len(table.rows)} retrievers",
        f"wall {table.wall_seconds:.1f} s",
        *provenance_meta(environment),
    ]
    body = [
        f'<header><h1>{escape(table.name)} <span class="sub">benchmark: {escape(", ".join(table.datasets))}</span></h1>',
        f'<p class="meta">{" · ".join(meta)}</p></header>',
    ]
    for metric in table.metrics:
        body += [
            f"<section><h2>{escape(metric)}</h2>",
            _metric_table_html(table, metric),
            f'<p class="note">Bold: best per column. Under each dataset: its judged queries. {escape(table.legend())}. '
            "The mean is over datasets (each weighs the same) and has no test.</p></section>",
        ]
    body += [
        "<section><h2>Latency p50 / p95 (ms, one query at a time)</h2>",
        _latency_table_html(table),
        "</section>",
    ]
    runs = "".join(
        f"<tr><td class='text'>{escape(run.dataset)}</td><td class='text'>{escape(run.variant or '-')}</td>"
        f"<td class='text'><a href='{escape(run.folder)}/report.html'>{escape(run.folder)}/</a></td>"
        f"<td class='text'>{escape(run.split)}</td><td>{run.n_queries}</td><td>{run.wall_seconds:.1f}</td>"
        f"<td class='text'>{escape(', '.join(run.rows))}</td></tr>"
        for run in table.runs
    )
    variants = "".join(
        f"<li><code>{escape(name)}</code>: <code>{escape(' '.join(overrides))}</code></li>"
        for name, overrides in table.variants.items()
    )
    body += [
        "<section><h2>Runs</h2>",
        '<div class="scroll"><table id="runs"><thead><tr><th>dataset</th><th>variant</th><th>run folder</th>'
        f"<th>split</th><th>queries</th><th>wall s</th><th>rows</th></tr></thead><tbody>{runs}</tbody></table></div>",
        f"<p class='note'>Variants (rows <code>&lt;retriever&gt;@&lt;variant&gt;</code>):</p><ul>{variants}</ul>"
        if variants
        else "",
        '<p class="note">Each run folder is a normal run with its own report. Files: <code>benchmark.json</code>, '
        "<code>benchmark.csv</code>, <code>benchmark.md</code>.</p></section>",
    ]
    return html_page(f"{table.name}: benchmark", body)
