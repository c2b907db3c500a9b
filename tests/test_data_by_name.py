"""Data by name (issue 14): a run whose dataset is found nowhere fetches it when the registry can
download it (``dataset.download=auto``, the default) into the data folder, and otherwise stops with
one line saying how to get it. A local HTTP server (tests/http_servers.py's FileServer, the ``file_server`` fixture) serves a tiny BEIR zip;
an unreachable URL plays the offline machine. Nothing here touches the network.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli, smoke_settings
from http_servers import FileServer, unreachable_url
from test_download import build_zip, sha256, write_registry

import viking_eval.data.registry as registry_module
from viking_eval.data import DataError, DatasetNotFound, data_home, resolve_dataset
from viking_eval.data.download import downloads_allowed
from viking_eval.data.resolve import find_or_download, how_to_get
from viking_eval.run.experiment import run_experiment

REPO = Path(__file__).resolve().parents[1]

# six documents, three judged queries: enough for BM25 and TF-IDF in a real run
DOCS = [
    ("d1", "Cats", "Cats purr and sleep in the sun."),
    ("d2", "Dogs", "Dogs bark at the mail carrier."),
    ("d3", "Birds", "Birds sing at dawn in the garden."),
    ("d4", "Fish", "Fish swim in the cold river."),
    ("d5", "Cows", "Cows graze in the green field."),
    ("d6", "Bees", "Bees make honey from flowers."),
]
FILES = {
    "corpus.jsonl": "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in DOCS),
    "queries.jsonl": "".join(
        json.dumps({"_id": q, "text": text}) + "\n"
        for q, text in [("q1", "which animal purrs"), ("q2", "honey flowers"), ("q3", "river fish")]
    ),
    "qrels/test.tsv": "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td6\t1\nq3\td4\t1\n",
}


@pytest.fixture
def downloads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Downloads allowed (the session forbids them), an empty search path and data folder."""
    monkeypatch.delenv("VIKING_EVAL_DOWNLOAD", raising=False)
    monkeypatch.setenv("VIKING_EVAL_DATA", str(tmp_path / "nothing_here"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "viking_eval" / "datasets"


def _registry(tmp_path: Path, url: str, **entry: object) -> Path:
    return write_registry(
        tmp_path / "registry.yaml", {"tiny": {"url": url, "sha256": None, "license": "x", **entry}}
    )


def test_a_missing_registry_dataset_is_downloaded_into_the_data_folder_and_run(
    downloads: Path,
    file_server: FileServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    body = build_zip(FILES)
    registry = _registry(tmp_path, file_server.serve("/tiny.zip", body), sha256=sha256(body))
    monkeypatch.setattr(registry_module, "DEFAULT_REGISTRY", registry)
    settings = smoke_settings("run.latency.n_queries=0", "dataset.name=tiny")
    assert settings.dataset.download == "auto"  # the default

    summary = run_experiment(settings, tmp_path / "run")

    assert data_home() == downloads
    assert summary.dataset == "tiny" and summary.results[0].n_queries == 3
    assert resolve_dataset("tiny") == downloads / "tiny"
    assert (downloads / "tiny" / "CHECKSUMS.json").is_file()
    assert file_server.hits == ["/tiny.zip"]
    err = capsys.readouterr().err
    assert (
        f"tiny: not found locally; downloading it from {file_server.base_url}/tiny.zip into {downloads / 'tiny'}"
        in err
    )
    # the next run finds it: no second transfer
    run_experiment(settings, tmp_path / "run2")
    assert file_server.hits == ["/tiny.zip"]


def test_download_never_and_the_environment_switch_stop_with_how_to_get_it(
    downloads: Path, file_server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = _registry(tmp_path, file_server.serve("/tiny.zip", build_zip(FILES)))
    monkeypatch.setattr(registry_module, "DEFAULT_REGISTRY", registry)
    with pytest.raises(DatasetNotFound) as never:
        run_experiment(
            smoke_settings("run.latency.n_queries=0", "dataset.name=tiny", "dataset.download=never"),
            tmp_path / "run",
        )
    monkeypatch.setenv("VIKING_EVAL_DOWNLOAD", "never")
    with pytest.raises(DatasetNotFound) as env_never:
        find_or_download("tiny", download="auto")
    for error in (never.value, env_never.value):
        message = str(error)
        assert "\n" not in message
        assert message.startswith("tiny: dataset not found in 3 folder(s) searched: ")
        assert message.endswith(
            "; download it with python -m viking_eval.data.download tiny (needs internet) or set "
            "VIKING_EVAL_DATA to a folder holding tiny/"
        )
    assert file_server.hits == [] and not downloads.exists()


def test_offline_is_one_line_and_leaves_nothing(
    downloads: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = unreachable_url().removesuffix("/v1") + "/tiny.zip"
    monkeypatch.setattr(registry_module, "DEFAULT_REGISTRY", _registry(tmp_path, url))
    with pytest.raises(DataError) as caught:
        run_experiment(smoke_settings("run.latency.n_queries=0", "dataset.name=tiny"), tmp_path / "run")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"tiny: dataset not found, and downloading it failed ({url}: download failed: ")
    assert message.endswith(
        "); download it with python -m viking_eval.data.download tiny (needs internet) or set VIKING_EVAL_DATA "
        "to a folder holding tiny/"
    )
    assert sorted(path.name for path in downloads.iterdir()) == [".tiny.lock"]  # no partial download
    assert "downloading" not in capsys.readouterr().err  # announced only once a server answers


def test_how_to_get_a_dataset_says_download_convert_or_folder() -> None:
    # the registry's scifact downloads; the shared classics are rebuilt from raw releases
    assert how_to_get("scifact") == (
        "download it with python -m viking_eval.data.download scifact (needs internet) or set VIKING_EVAL_DATA "
        "to a folder holding scifact/"
    )
    # the converted datasets are fetched by name too: their raw release, converted (issue 25)
    assert how_to_get("adi") == (
        "download it with python -m viking_eval.data.download adi (needs internet: it fetches adi.tar.gz from "
        "its public release and converts it) or set VIKING_EVAL_DATA to a folder holding adi/"
    )
    assert how_to_get("cosqa").startswith(
        "download it with python -m viking_eval.data.download cosqa (needs internet: it fetches code_idx_map.txt "
    )
    assert how_to_get("mine") == (
        "set VIKING_EVAL_DATA to a folder holding mine/, or give its folder (dataset.path=...); "
        "python -m viking_eval.data.download --list lists the datasets that can be downloaded"
    )


def test_download_modes_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VIKING_EVAL_DOWNLOAD", raising=False)
    assert downloads_allowed("auto") and not downloads_allowed("never")
    monkeypatch.setenv("VIKING_EVAL_DOWNLOAD", "Never")
    assert not downloads_allowed("auto")
    monkeypatch.setenv("VIKING_EVAL_DOWNLOAD", "sometimes")
    with pytest.raises(
        DataError, match=r"VIKING_EVAL_DOWNLOAD='sometimes': must be one of \['auto', 'never'\]"
    ):
        downloads_allowed("auto")
    with pytest.raises(Exception, match=r"dataset.download: must be one of \['auto', 'never'\], got 'maybe'"):
        smoke_settings("run.latency.n_queries=0", "dataset.download=maybe")


def test_bare_run_without_data_is_one_line_exit_2(tmp_path: Path) -> None:
    """``python -m viking_eval`` (the quickstart on SciFact) on a machine without SciFact and
    without downloads: one line saying how to get it, exit 2, the run folder marked failed."""
    # a developer's checkout may hold datasets/scifact (git-ignored): then a registry dataset that is absent
    name = "scifact" if not (REPO / "datasets" / "scifact").exists() else "nfcorpus"
    run_dir = tmp_path / "run"
    environment = {
        "VIKING_EVAL_DATA": str(tmp_path / "empty"),
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "VIKING_EVAL_DOWNLOAD": "never",
    }
    arguments = [] if name == "scifact" else [f"dataset.name={name}"]
    result = run_cli(*arguments, f"hydra.run.dir={run_dir}", env=environment, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(
        f"error: {name}: dataset not found in 3 folder(s) searched: {tmp_path / 'empty'} "
    )
    assert lines[0].endswith(
        f"download it with python -m viking_eval.data.download {name} (needs internet) or set VIKING_EVAL_DATA "
        f"to a folder holding {name}/"
    )
    assert json.loads((run_dir / "status.json").read_text())["status"] == "failed"
