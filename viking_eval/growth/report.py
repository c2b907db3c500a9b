"""A growth run's outputs: growth.json (everything), growth.csv (one value per line, for
machines), growth.md and growth.html (tables, rank changes, cost per step) and the plots
``growth_<metric>.png`` (each metric against memory size: all questions and each query group)
and ``growth_cost.png`` (ingest seconds against memory size)."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from viking_eval.report.html_parts import PALETTE, escape, figure_html, html_page, provenance_meta
from viking_eval.results.growth_folder import write_growth
from viking_eval.results.run_folder import csv_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["csv_rows", "rank_changes", "write_report"]

ALL, NEW = "(all)", "(new)"
CSV_COLUMNS = [
    "step", "label", "memory_documents", "memory_documents_per_scope", "asked", "new",
    "retriever", "family", "group", "metric", "value", "n_queries", "ingest_kind", "ingest_seconds",
]  # fmt: skip


def _size(record: dict[str, Any]) -> float:
    """The memory size plotted: documents per query scope when queries are scoped, else all."""
    memory = record["memory"]
    return float(
        memory["documents_per_scope"]
        if memory.get("documents_per_scope") is not None
        else memory["documents"]
    )


def _size_label(document: dict[str, Any]) -> str:
    scoped = any(r["memory"].get("documents_per_scope") is not None for r in document["steps"])
    return "documents in memory per conversation (scope), mean" if scoped else "documents in memory"


def _metric_names(document: dict[str, Any]) -> list[str]:
    for record in document["steps"]:
        if record.get("retrievers"):
            return list(record["metric_names"])
    return []


def _groups(document: dict[str, Any]) -> list[str]:
    found: dict[str, None] = {}
    for record in document["steps"]:
        for entry in record.get("retrievers", {}).values():
            found.update(dict.fromkeys(entry["groups"]))
    return sorted(found)


def _value(
    record: dict[str, Any], retriever: str, group: str, metric: str
) -> tuple[float | None, int | None]:
    entry = record.get("retrievers", {}).get(retriever)
    if entry is None:
        return None, None
    if group == ALL:
        return entry["metrics"].get(metric), entry["n_queries"]
    if group == NEW:
        return entry["new_metrics"].get(metric), record["questions"]["new"]
    found = entry["groups"].get(group)
    return (found["metrics"].get(metric), found["n_queries"]) if found else (None, None)


def csv_rows(document: dict[str, Any]) -> list[list[Any]]:
    """growth.csv: one row per step, retriever, group and metric."""
    rows = []
    for record in document["steps"]:
        memory = record["memory"]
        head = [
            record["step"], record["label"], memory["documents"], memory.get("documents_per_scope"),
            record["questions"]["asked"], record["questions"]["new"],
        ]  # fmt: skip
        for name, entry in record.get("retrievers", {}).items():
            for group in [ALL, NEW, *sorted(entry["groups"])]:
                for metric in record["metric_names"]:
                    value, n = _value(record, name, group, metric)
                    rows.append(
                        [*head, name, entry["family"], group, metric, value, n, record["ingest"]["kind"],
                         record["ingest"]["seconds"]]
                    )  # fmt: skip
    return rows


def _scored(record: dict[str, Any], metric: str, level: str) -> dict[str, tuple[float, str]]:
    """Each retriever's value of ``metric`` (all questions asked), or at ``level="family"`` each
    family's best retriever's: name -> (value, what it is)."""
    scored: dict[str, tuple[float, str]] = {}
    for name, entry in record.get("retrievers", {}).items():
        value = entry["metrics"].get(metric)
        if value is None:
            continue
        if level == "family":
            family = entry["family"]
            if family not in scored or value > scored[family][0]:
                scored[family] = (value, name)
        else:
            scored[name] = (value, entry["family"])
    return scored


def rank_changes(document: dict[str, Any], metric: str, level: str = "family") -> list[str]:
    """Each step where the order by ``metric`` (all questions asked; ties by name) differs from
    the step before, as who passed whom: families (each by its best retriever) or retrievers."""
    lines: list[str] = []
    previous: list[str] | None = None
    for record in document["steps"]:
        scored = _scored(record, metric, level)
        order = sorted(scored, key=lambda name: (-scored[name][0], name))
        if previous is not None and order != previous:
            passes = [
                f"{a} ({scored[a][1]}, {scored[a][0]:.3f}) passes {b} ({scored[b][1]}, {scored[b][0]:.3f})"
                for a in order
                for b in order
                if a in previous and b in previous
                and order.index(a) < order.index(b) and previous.index(a) > previous.index(b)
            ]  # fmt: skip
            if passes:
                lines.append(f"step {record['step']} ({record['label']}): " + "; ".join(passes))
        previous = order if order else previous
    return lines


def _family_ranks(document: dict[str, Any], metric: str) -> tuple[list[str], list[list[str]]]:
    """Per step, each family's rank by its best retriever's ``metric`` (1 = best)."""
    entries = [e for r in document["steps"] for e in r.get("retrievers", {}).values()]
    families = list(dict.fromkeys(e["family"] for e in entries))
    header = ["step", "memory docs", *families]
    rows = []
    for record in document["steps"]:
        scored = _scored(record, metric, "family")
        if not scored:
            continue
        order = sorted(scored, key=lambda name: (-scored[name][0], name))
        ranks = [str(order.index(f) + 1) if f in scored else "" for f in families]
        rows.append([str(record["step"]), str(record["memory"]["documents"]), *ranks])
    return header, rows


def _line_looks(document: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Each retriever's colour (its family's) and line style (its place within the family: the
    first solid, then dashed, dotted, dash-dot)."""
    families: dict[str, list[str]] = {}
    for record in document["steps"]:
        for name, entry in record.get("retrievers", {}).items():
            members = families.setdefault(entry["family"], [])
            if name not in members:
                members.append(name)
    styles = ["-", "--", ":", "-."]
    return {
        name: (PALETTE[number % len(PALETTE)], styles[place % len(styles)])
        for number, members in enumerate(families.values())
        for place, name in enumerate(members)
    }


def _figure(document: dict[str, Any], metric: str, groups: Sequence[str]) -> Figure:
    from matplotlib.figure import Figure

    panels = [ALL, *groups]
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    figure = Figure(figsize=(5.2 * columns, 3.6 * rows + 0.8), layout="constrained")
    axes_grid = figure.subplots(rows, columns, squeeze=False)
    looks = _line_looks(document)
    for index, group in enumerate(panels):
        axes = axes_grid[index // columns][index % columns]
        for name in document["retrievers"]:
            points = [(_size(r), _value(r, name, group, metric)[0]) for r in document["steps"]]
            kept = [(x, y) for x, y in points if y is not None]
            if kept:
                color, style = looks[name]
                axes.plot(
                    [x for x, _ in kept], [y for _, y in kept], style, color=color, marker="o",
                    markersize=2.5, linewidth=1.2, label=name,
                )  # fmt: skip
        axes.set_title(
            "all questions asked" if group == ALL else f"{document.get('group_key')}: {group}", fontsize=10
        )
        axes.set_xlabel(_size_label(document), fontsize=8)
        axes.set_ylabel(metric, fontsize=9)
        axes.grid(alpha=0.3)
    for index in range(len(panels), rows * columns):
        axes_grid[index // columns][index % columns].set_visible(False)
    handles, labels = axes_grid[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=min(6, len(labels)), fontsize=8)
    figure.suptitle(f"{document['dataset']}: {metric} as the memory grows", fontsize=12)
    return figure


def _cost_figure(document: dict[str, Any]) -> Figure:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 3.8), layout="constrained")
    axes = figure.subplots()
    xs = [float(r["memory"]["documents"]) for r in document["steps"]]
    axes.plot(xs, [r["ingest"]["seconds"] for r in document["steps"]], "o-", color=PALETTE[0], markersize=3)
    axes.set_xlabel("documents in memory (all scopes)")
    axes.set_ylabel(f"ingest seconds per step ({document['ingest_kind']})")
    how = "ContextStore.add" if document["ingest_kind"] == "add" else "a full rebuild of the store"
    axes.set_title(f"cost of adding a step: {how}", fontsize=10)
    axes.grid(alpha=0.3)
    return figure


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, facecolor="white")
    return buffer.getvalue()


def _fmt(value: Any, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _step_table(document: dict[str, Any], metric: str) -> tuple[list[str], list[list[str]]]:
    header = ["step", "added", "memory docs", "per scope", "asked", "new", *document["retrievers"]]
    rows = []
    for r in document["steps"]:
        memory = r["memory"]
        rows.append(
            [str(r["step"]), r["label"], str(memory["documents"]), _fmt(memory.get("documents_per_scope"), 1),
             str(r["questions"]["asked"]), str(r["questions"]["new"]),
             *(_fmt(_value(r, name, ALL, metric)[0]) for name in document["retrievers"])]
        )  # fmt: skip
    return header, rows


def _checkpoints(document: dict[str, Any]) -> list[dict[str, Any]]:
    """About five steps spread over the run (the first with questions, the last)."""
    asked = [r for r in document["steps"] if r.get("retrievers")]
    if len(asked) <= 5:
        return asked
    return [asked[round(i * (len(asked) - 1) / 4)] for i in range(5)]


def _group_table(
    document: dict[str, Any], metric: str, groups: Sequence[str]
) -> tuple[list[str], list[list[str]]]:
    points = _checkpoints(document)
    header = ["group", "retriever", "family", *(f"step {r['step']} ({_size(r):.0f} docs)" for r in points)]
    rows = []
    for group in [NEW, *groups]:
        for name in document["retrievers"]:
            family = next(
                (r["retrievers"][name]["family"] for r in points if name in r.get("retrievers", {})), ""
            )
            rows.append([group, name, family, *(_fmt(_value(r, name, group, metric)[0]) for r in points)])
    return header, rows


def _cost_table(document: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    parts = sorted({part for r in document["steps"] for part in r["ingest"]["parts"]})
    header = ["step", "added docs", "memory docs", "ingest s", *(f"{p} s" for p in parts), "evaluation s"]
    rows = [
        [str(r["step"]), str(r["added"]), str(r["memory"]["documents"]), _fmt(r["ingest"]["seconds"], 2),
         *(_fmt(r["ingest"]["parts"].get(p), 2) for p in parts), _fmt(r["eval_seconds"], 1)]
        for r in document["steps"]
    ]  # fmt: skip
    return header, rows


def _families(document: dict[str, Any]) -> str:
    for record in document["steps"]:
        if record.get("retrievers"):
            return ", ".join(f"{name} ({e['family']})" for name, e in record["retrievers"].items())
    return ""


def _intro(document: dict[str, Any]) -> list[str]:
    embedding = document["embedding"]
    growth = document["growth"]
    return [
        f"Dataset **{document['dataset']}** ({document['split']}, half: {document['half']}), "
        f"{len(document['steps'])} steps (growth.by={growth['by']}, order_key={growth['order_key']}, "
        f"steps={growth['steps']}); {document['n_questions']} questions, each asked from the step its "
        f"last evidence document enters ({len(document['never_asked'])} with no relevant document never asked).",
        f"Embedder **{embedding['name']}**: every document embedded once up front in "
        f"{embedding['up_front_seconds']:.1f} s ({'from the cache' if embedding['from_cache'] else 'encoded now'}).",
        _ingest_line(document),
        f"Retrievers: {_families(document)}.",
    ]


def _ingest_line(document: dict[str, Any]) -> str:
    kinds = [str(record["ingest"]["kind"]) for record in document["steps"]]
    counted = ", ".join(f"{kind} {kinds.count(kind)}" for kind in dict.fromkeys(kinds))
    trees = [record["ingest"].get("tree") for record in document["steps"]]
    tree_note = (
        f"; the tree was inserted into at {trees.count('inserted')} and built again at "
        f"{trees.count('rebuilt')} of the added steps"
        if any(trees)
        else ""
    )
    if document["ingest_kind"] == "add":
        how = (
            "the first step builds the store, every later one adds its documents with ContextStore.add "
            "(BM25 and exact search as a rebuild's; the tree inserted into and the edges updated, which "
            "differ from a rebuild's by design)"
        )
    else:
        how = "the whole store built again from the documents so far at every step"
    return (
        f"Ingest (growth.ingest={document['ingest_kind']}): {how}; steps by kind: {counted}{tree_note}. "
        "Document vectors are looked up (embedded once up front)."
    )


def _markdown(document: dict[str, Any], metrics: list[str], groups: list[str], plots: list[str]) -> str:
    lines = [f"# Growth: {document['dataset']}", "", *(f"- {line}" for line in _intro(document)), ""]
    for metric, plot in zip(metrics, plots, strict=True):
        header, rows = _step_table(document, metric)
        lines += [f"## {metric} by step (all questions asked)", "", f"![{metric}]({plot})", ""]
        lines += [tabulate(rows, headers=header, tablefmt="github", disable_numparse=True), ""]
        header, rows = _group_table(document, metric, groups)
        lines += [f"### {metric} per {document.get('group_key') or 'group'} at five steps", ""]
        lines += [tabulate(rows, headers=header, tablefmt="github", disable_numparse=True), ""]
    lines += [
        "## Rank changes",
        "",
        "Families, each by its best retriever (all questions asked at the step):",
        "",
    ]
    for metric in metrics:
        changes = rank_changes(document, metric)
        lines += [f"{metric}:", "", *(f"- {line}" for line in changes or ["no change of order"]), ""]
    if metrics:
        header, rows = _family_ranks(document, metrics[0])
        lines += [f"Rank of each family by {metrics[0]} (1 = best):", ""]
        lines += [tabulate(rows, headers=header, tablefmt="github", disable_numparse=True), ""]
        changes = rank_changes(document, metrics[0], "retriever") or ["no change of order"]
        lines += [f"Every preset, {metrics[0]}:", "", *(f"- {line}" for line in changes), ""]
    header, rows = _cost_table(document)
    lines += ["## Cost per step", "", "![cost](growth_cost.png)", ""]
    lines += [tabulate(rows, headers=header, tablefmt="github", disable_numparse=True), ""]
    return "\n".join(lines)


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(cell)}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _html(
    document: dict[str, Any], environment: dict[str, Any], metrics: list[str], pngs: list[bytes]
) -> str:
    """growth.html; ``pngs``: one plot per metric, then the cost plot."""
    body = [
        f"<header><h1>Growth <span class='sub'>{escape(document['dataset'])}</span></h1>",
        f"<p class='meta'>{' · '.join(provenance_meta(environment))}</p></header>",
        "<section><ul>" + "".join(f"<li>{escape(line.replace('**', ''))}</li>" for line in _intro(document)),
        "</ul></section>",
    ]
    groups = _groups(document)
    for metric, png in zip(metrics, pngs[: len(metrics)], strict=True):
        body += [f"<section><h2>{escape(metric)}</h2>", figure_html(_uri(png), metric, "")]
        body += [
            _html_table(*_step_table(document, metric)),
            _html_table(*_group_table(document, metric, groups)),
        ]
        changes = rank_changes(document, metric) or ["no change of order"]
        body += [
            "<h2>Rank changes of the families</h2><ul>" + "".join(f"<li>{escape(c)}</li>" for c in changes)
        ]
        body += ["</ul>", _html_table(*_family_ranks(document, metric)), "</section>"]
    body += ["<section><h2>Cost per step</h2>", figure_html(_uri(pngs[-1]), "cost", "")]
    body += [_html_table(*_cost_table(document)), "</section>"]
    return html_page(f"growth: {document['dataset']}", body)


def write_report(folder: Path, document: dict[str, Any], environment: dict[str, Any]) -> None:
    """Every output of a growth run into ``folder`` (``results/growth_folder.py``: growth.json
    last, then a failed attempt's status.json removed). Token recall is in the tables and the
    CSV, not plotted."""
    metrics = [name for name in _metric_names(document) if not name.startswith("answer_token_recall@")]
    groups = _groups(document)
    pngs = [_png(_figure(document, metric, groups)) for metric in metrics]  # each drawn once
    plots = [f"growth_{''.join(c if c.isalnum() else '_' for c in metric)}.png" for metric in metrics]
    cost = _png(_cost_figure(document))
    changes = {
        m: {"family": rank_changes(document, m), "retriever": rank_changes(document, m, "retriever")}
        for m in metrics
    }
    write_growth(
        folder,
        pngs={**dict(zip(plots, pngs, strict=True)), "growth_cost.png": cost},
        texts={
            "growth.csv": csv_text(CSV_COLUMNS, csv_rows(document)),
            "growth.md": _markdown(document, metrics, groups, plots),
            "growth.html": _html(document, environment, metrics, [*pngs, cost]),
        },
        environment=environment,
        document={**document, "rank_changes": changes},
    )
