"""Data by name for every registry dataset (issue 25, item 1; item 6's download exit code).

A clone with nothing beside it: ``VIKING_EVAL_DATA`` unset, an empty data folder
(``XDG_DATA_HOME``), downloads allowed. A local HTTP server stands in for the public releases: it
serves the shared raw files (``shared_raw``) under the URL paths of ``datasets/registry.yaml``
(``local_datasets.converters``), and ``VIKING_EVAL_MIRROR`` points every registry URL at it. A
run by name fetches the raw release, converts it with the project's converter and installs it;
the installed files must have the registry's sha256 (those of the shared folders, byte for
byte). Offline (a closed port) and altered bytes are refused with one line and nothing
installed.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import urllib.parse
from pathlib import Path

import pytest
from conftest import child_environment, cli_in_this_process, run_python
from filelock import FileLock
from http_servers import FileServer, unreachable_url

from viking_eval.data.errors import DataError
from viking_eval.data.fetch import fetch_converted
from viking_eval.data.registry import load_registry
from viking_eval.data.transfer import DownloadError, mirrored

SPREAD_OVER_WORKERS = True  # tests/conftest.py: independent tests, each to the next free worker

REPO = Path(__file__).resolve().parents[1]
REGISTRY = load_registry(REPO / "datasets" / "registry.yaml")


def fetched(releases: FileServer, name: str) -> list[str]:
    """The requests for ``name``'s raw files."""
    paths = {urllib.parse.urlsplit(raw.url).path for raw in REGISTRY.converted[name].raw}
    return [hit for hit in releases.hits if hit in paths]


def _raw_file(shared_raw: Path, name: str) -> Path:
    found = sorted(shared_raw.rglob(name))
    if len(found) != 1:
        raise FileNotFoundError(f"{shared_raw}: expected one {name}, found {found}")
    return found[0]


@pytest.fixture
def releases(shared_raw: Path, file_server: FileServer) -> FileServer:
    """``file_server`` serving the raw releases under their registry URL paths."""
    for entry in REGISTRY.converted.values():
        for raw in entry.raw:
            file_server.serve(urllib.parse.urlsplit(raw.url).path, _raw_file(shared_raw, raw.name))
    return file_server


def _environment(tmp_path: Path, mirror: str) -> dict[str, str]:
    """A clone with nothing beside it: no VIKING_EVAL_DATA, an empty data folder, downloads on."""
    return child_environment(
        {"XDG_DATA_HOME": str(tmp_path / "xdg"), "VIKING_EVAL_MIRROR": mirror},
        drop=("VIKING_EVAL_DATA", "VIKING_EVAL_DOWNLOAD", "VIKING_EVAL_MIRROR"),
    )


def _data_home(tmp_path: Path) -> Path:
    return tmp_path / "xdg" / "viking_eval" / "datasets"


def _run(
    tmp_path: Path, mirror: str, *overrides: str, label: str = "run"
) -> subprocess.CompletedProcess[str]:
    return cli_in_this_process(
        [*overrides, "run.latency.n_queries=0", "run.metrics=[nDCG@10]", f"hydra.run.dir={tmp_path / label}"],
        env=_environment(tmp_path, mirror),
        timeout=900,
    )


def _download(tmp_path: Path, mirror: str, name: str) -> subprocess.CompletedProcess[str]:
    return run_python(
        ["-m", "viking_eval.data.download", name], cwd=REPO, env=_environment(tmp_path, mirror), timeout=600
    )


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _assert_installed_as_registered(folder: Path, name: str) -> None:
    expected = dict(REGISTRY.converted[name].files)
    assert expected, f"the registry lists no converted files for {name}"
    data_files = sorted(
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file() and path.name != "CHECKSUMS.json"
    )
    assert data_files == sorted(expected)
    assert {rel: _sha256(folder / rel) for rel in expected} == expected
    assert (folder / "CHECKSUMS.json").is_file()  # re-verified on every load


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


# --------------------------------------------------------------------------- runs by name


@pytest.mark.needs_data
def test_smoke_fetches_adi_by_name_once(releases: FileServer, tmp_path: Path) -> None:
    first = _run(tmp_path, releases.base_url, "experiment=smoke", label="first")
    assert first.returncode == 0, first.stderr[-3000:]
    home = _data_home(tmp_path)
    _assert_installed_as_registered(home / "adi", "adi")
    assert fetched(releases, "adi") == [urllib.parse.urlsplit(REGISTRY.converted["adi"].raw[0].url).path]
    assert "adi: not found locally; downloading its public release (" in first.stderr
    assert sorted(p.name for p in home.iterdir()) == [".adi.lock", "adi"]  # no partial left

    second = _run(tmp_path, releases.base_url, "experiment=smoke", label="second")
    assert second.returncode == 0, second.stderr[-3000:]
    assert len(releases.hits) == 1  # found by name: not fetched again
    assert "downloading" not in second.stderr


@pytest.mark.needs_data
@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        # BM25 only: what is tested is the fetch, the conversion and a run over what was installed
        ("cisi", ("experiment=smoke", "dataset=cisi", "~retrievers.dense")),
        ("locomo", ("experiment=smoke", "dataset=locomo", "~retrievers.dense")),
        ("cosqa", ("experiment=smoke", "dataset=cosqa", "embedder=static", "~retrievers.dense")),
    ],
)
def test_a_converted_dataset_runs_by_name(
    releases: FileServer, tmp_path: Path, name: str, overrides: tuple[str, ...]
) -> None:
    result = _run(tmp_path, releases.base_url, *overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["dataset"] == name
    _assert_installed_as_registered(_data_home(tmp_path) / name, name)
    assert sorted(fetched(releases, name)) == sorted(
        urllib.parse.urlsplit(raw.url).path for raw in REGISTRY.converted[name].raw
    )
    assert len(releases.hits) == len(REGISTRY.converted[name].raw)  # each raw file once, nothing else


@pytest.mark.needs_data
def test_download_command_fetches_every_raw_file_then_finds_it(releases: FileServer, tmp_path: Path) -> None:
    result = _download(tmp_path, releases.base_url, "cranfield")
    assert result.returncode == 0, result.stderr
    folder = _data_home(tmp_path) / "cranfield"
    _assert_installed_as_registered(folder, "cranfield")
    assert f"cranfield is in {folder.resolve()}" in result.stdout
    again = _download(tmp_path, releases.base_url, "cranfield")
    assert again.returncode == 0 and len(releases.hits) == 1


# --------------------------------------------------------------------------- refusals


def test_offline_run_is_one_line_exit_2_and_installs_nothing(tmp_path: Path) -> None:
    closed = unreachable_url().removesuffix("/v1")
    result = _run(tmp_path, closed, "experiment=smoke")
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    lines = _error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    public = REGISTRY.converted["adi"].raw[0].url
    assert lines[0].startswith(
        f"error: adi: dataset not found, and downloading its public release failed ({mirrored_to(public, closed)}: "
        "download failed: "
    )
    home = _data_home(tmp_path)
    assert lines[0].endswith(
        f"; fetch {public} on a machine with internet, put it in one folder and run python -m "
        f"viking_eval.data.convert adi adi.tar.gz there (it installs {home / 'adi'}), or set "
        "VIKING_EVAL_DATA to a folder holding adi/"
    )
    assert not (home / "adi").exists()
    assert [p.name for p in home.iterdir()] == [".adi.lock"]


@pytest.mark.parametrize("name", ["scifact", "cosqa"])
def test_offline_download_command_exits_2_like_a_run(tmp_path: Path, name: str) -> None:
    closed = unreachable_url().removesuffix("/v1")
    result = _download(tmp_path, closed, name)
    assert result.returncode == 2, result.stderr
    lines = _error_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"error: {name}: {closed}/"), result.stderr
    assert "download failed: " in lines[0] and "on a machine with internet" in lines[0]
    if name == "cosqa":  # every raw file to fetch, and the command that converts them
        for raw in REGISTRY.converted["cosqa"].raw:
            assert raw.url in lines[0]
        assert "python -m viking_eval.data.convert cosqa code_idx_map.txt " in lines[0]
    assert not (_data_home(tmp_path) / name).exists()


@pytest.mark.needs_data
def test_altered_bytes_are_refused_and_nothing_installed(releases: FileServer, tmp_path: Path) -> None:
    raw = REGISTRY.converted["adi"].raw[0]
    releases.altered.add(urllib.parse.urlsplit(raw.url).path)
    result = _run(tmp_path, releases.base_url, "experiment=smoke")
    assert result.returncode == 2, result.stderr[-3000:]
    lines = _error_lines(result.stderr)
    assert lines[-1].startswith(
        f"error: {mirrored_to(raw.url, releases.base_url)}: sha256 mismatch: expected {raw.sha256} "
        "(registry local_datasets.converters.adi.raw.adi.tar.gz.sha256), got "
    )
    assert "nothing was installed" in lines[-1] and "Traceback" not in result.stderr
    home = _data_home(tmp_path)
    assert sorted(p.name for p in home.iterdir()) == [".adi.lock"]


def mirrored_to(url: str, base: str) -> str:
    """``url`` as ``VIKING_EVAL_MIRROR=base`` rewrites it (written out by hand)."""
    return base + urllib.parse.urlsplit(url).path


def test_the_mirror_replaces_scheme_and_host(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "https://raw.githubusercontent.com/o/r/abc/adi/adi.tar.gz"
    monkeypatch.delenv("VIKING_EVAL_MIRROR", raising=False)
    assert mirrored(url) == url
    monkeypatch.setenv("VIKING_EVAL_MIRROR", "http://127.0.0.1:8000/base/")
    assert mirrored(url) == "http://127.0.0.1:8000/base/o/r/abc/adi/adi.tar.gz"
    monkeypatch.setenv("VIKING_EVAL_MIRROR", "ftp://mirror")
    with pytest.raises(DataError, match=r"VIKING_EVAL_MIRROR='ftp://mirror': must be an http\(s\) base URL"):
        mirrored(url)


def test_a_fetch_waits_for_the_lock_of_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process holding ``.adi.lock`` (fetching adi): this fetch does not start a second
    transfer; with a bound on the wait it gives up with one line, nothing fetched or installed."""
    closed = unreachable_url().removesuffix("/v1")  # were anything fetched, it would fail differently
    monkeypatch.setenv("VIKING_EVAL_MIRROR", closed)
    dest = tmp_path / "data"
    dest.mkdir()
    with FileLock(str(dest / ".adi.lock")), pytest.raises(DownloadError) as caught:
        fetch_converted("adi", dest, lock_timeout=0.05)
    assert str(caught.value) == (
        f"{dest / '.adi.lock'}: another download of adi still holds the lock after 0.05 s; "
        "wait for it to finish or stop it"
    )
    assert [p.name for p in dest.iterdir()] == [".adi.lock"]


def test_a_benchmark_accepts_a_converted_dataset_it_will_fetch(monkeypatch: pytest.MonkeyPatch) -> None:
    """experiment=benchmark's pre-flight: a dataset found nowhere is accepted when its run will
    fetch it, a BEIR zip (scifact) or a raw release the project converts (adi, cisi), unless
    downloads are off."""
    from viking_eval.benchmark.run import _downloadable

    monkeypatch.delenv("VIKING_EVAL_DOWNLOAD", raising=False)  # the test session's never
    assert _downloadable("scifact", "auto") and _downloadable("adi", "auto") and _downloadable("cisi", "auto")
    assert not _downloadable("adi", "never") and not _downloadable("no-such-dataset", "auto")
