"""Tests for viking_eval.data.download (and its registry and archive modules): registry validation, checksummed download, safe unzip, CLI.

A local server on 127.0.0.1 (``file_server``: tests/http_servers.py's FileServer) serves zips
built in the test; nothing touches the network. After a download, ``DEST`` holds the dataset folder and the dataset's lock file
(``.NAME.lock``) and nothing else: no partial file survives a failure.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import struct
import threading
import time
import zipfile
from pathlib import Path

import pytest
import yaml
from filelock import FileLock
from http_servers import FileServer

import viking_eval.data.download as download_module
from viking_eval.data import CHECKSUMS_FILE, DataError, load_beir
from viking_eval.data.archive import ExtractLimits, safe_extract_zip
from viking_eval.data.download import DownloadError, download_dataset, main
from viking_eval.data.registry import DEFAULT_REGISTRY, load_registry

TINY_FILES = {
    "corpus.jsonl": "".join(
        json.dumps(d) + "\n"
        for d in [{"_id": "d1", "title": "Cats", "text": "Cats purr."}, {"_id": "d2", "text": "Dogs bark."}]
    ),
    "queries.jsonl": json.dumps({"_id": "q1", "text": "what purrs"}) + "\n",
    "qrels/test.tsv": "query-id\tcorpus-id\tscore\nq1\td1\t1\n",
}


def build_zip(members: dict[str, str], *, prefix: str = "tiny/") -> bytes:
    """A zip of ``members`` (path -> text), each path prefixed with ``prefix``; BEIR-style
    zips have a top-level folder entry too."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        if prefix:
            zf.writestr(prefix, "")
        for name, text in members.items():
            zf.writestr(prefix + name, text)
    return buffer.getvalue()


def with_symlink(link_name: str, target: str) -> bytes:
    """The tiny dataset plus a symlink member pointing at ``target``."""
    buffer = io.BytesIO(build_zip(TINY_FILES))
    with zipfile.ZipFile(buffer, "a") as zf:
        info = zipfile.ZipInfo(link_name)
        info.external_attr = 0o120777 << 16
        zf.writestr(info, target)
    return buffer.getvalue()


def with_member(name: str) -> bytes:
    """The tiny dataset followed by one extra (hostile) member called ``name``."""
    buffer = io.BytesIO(build_zip(TINY_FILES))
    with zipfile.ZipFile(buffer, "a") as zf:
        zf.writestr(zipfile.ZipInfo(name), "evil")
    return buffer.getvalue()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_registry(path: Path, datasets: dict[str, dict[str, object]], **top: object) -> Path:
    path.write_text(yaml.safe_dump({"version": 1, "datasets": datasets, **top}), encoding="utf-8")
    return path


def all_files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")}


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --------------------------------------------------------------------------- download


def test_download_with_matching_checksum(file_server: FileServer, tmp_path: Path) -> None:
    body = build_zip(TINY_FILES)
    url = file_server.serve("/tiny.zip", body)
    registry = write_registry(
        tmp_path / "registry.yaml", {"tiny": {"url": url, "sha256": sha256(body), "license": "CC0"}}
    )
    dest = tmp_path / "data"
    folder = download_dataset("tiny", dest, registry=registry)
    assert folder == dest / "tiny"
    assert names(dest) == [".tiny.lock", "tiny"]  # no temp files left beside it
    assert (folder / "qrels" / "test.tsv").read_text(encoding="utf-8") == TINY_FILES["qrels/test.tsv"]
    ds = load_beir(folder)
    assert list(ds.corpus) == ["d1", "d2"] and ds.qrels == {"q1": {"d1": 1}}
    assert file_server.hits == ["/tiny.zip"]


def test_existing_dataset_is_not_downloaded_again(
    file_server: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = build_zip(TINY_FILES)
    url = file_server.serve("/tiny.zip", body)
    registry = write_registry(
        tmp_path / "r.yaml", {"tiny": {"url": url, "sha256": sha256(body), "license": "x"}}
    )
    dest = tmp_path / "data"
    download_dataset("tiny", dest, registry=registry)
    capsys.readouterr()
    assert download_dataset("tiny", dest, registry=registry) == dest / "tiny"
    assert file_server.hits == ["/tiny.zip"]
    assert "already holds tiny" in capsys.readouterr().out


def test_existing_folder_without_corpus_is_not_overwritten(file_server: FileServer, tmp_path: Path) -> None:
    url = file_server.serve("/tiny.zip", build_zip(TINY_FILES))
    registry = write_registry(tmp_path / "r.yaml", {"tiny": {"url": url, "sha256": None, "license": "x"}})
    (tmp_path / "data" / "tiny").mkdir(parents=True)
    (tmp_path / "data" / "tiny" / "mine.txt").write_text("keep", encoding="utf-8")
    with pytest.raises(DataError, match=r"exists but holds no corpus"):
        download_dataset("tiny", tmp_path / "data", registry=registry)
    assert file_server.hits == []
    assert (tmp_path / "data" / "tiny" / "mine.txt").read_text(encoding="utf-8") == "keep"


def test_wrong_checksum_fails_and_leaves_nothing(file_server: FileServer, tmp_path: Path) -> None:
    body = build_zip(TINY_FILES)
    url = file_server.serve("/tiny.zip", body)
    wrong = "0" * 64
    registry = write_registry(tmp_path / "r.yaml", {"tiny": {"url": url, "sha256": wrong, "license": "x"}})
    dest = tmp_path / "data"
    with pytest.raises(DataError, match="sha256 mismatch") as info:
        download_dataset("tiny", dest, registry=registry)
    assert str(info.value).startswith(f"{url}: sha256 mismatch")
    assert wrong in str(info.value) and sha256(body) in str(info.value)
    assert names(dest) == [".tiny.lock"]


def test_no_checksum_downloads_and_prints_the_hash(
    file_server: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = build_zip(TINY_FILES)
    url = file_server.serve("/tiny.zip", body)
    registry = write_registry(tmp_path / "r.yaml", {"tiny": {"url": url, "sha256": None, "license": "x"}})
    download_dataset("tiny", tmp_path / "data", registry=registry)
    assert sha256(body) in capsys.readouterr().out
    assert (tmp_path / "data" / "tiny" / "corpus.jsonl").is_file()


def test_flat_zip_is_handled(file_server: FileServer, tmp_path: Path) -> None:
    body = build_zip(TINY_FILES, prefix="")
    url = file_server.serve("/flat.zip", body)
    registry = write_registry(
        tmp_path / "r.yaml", {"tiny": {"url": url, "sha256": sha256(body), "license": "x"}}
    )
    folder = download_dataset("tiny", tmp_path / "data", registry=registry)
    (tmp_path / "plain").mkdir()
    assert folder.stat().st_mode == (tmp_path / "plain").stat().st_mode  # not a private temp-dir mode
    assert all_files(folder) == {
        Path("corpus.jsonl"),
        Path("queries.jsonl"),
        Path("qrels"),
        Path("qrels/test.tsv"),
        Path(CHECKSUMS_FILE),
    }


def test_url_override_uses_registry_checksum(file_server: FileServer, tmp_path: Path) -> None:
    body = build_zip(TINY_FILES)
    mirror = file_server.serve("/mirror/tiny.zip", body)
    registry = write_registry(
        tmp_path / "r.yaml",
        {"tiny": {"url": "https://example.invalid/tiny.zip", "sha256": sha256(body), "license": "x"}},
    )
    folder = download_dataset("tiny", tmp_path / "data", registry=registry, url=mirror)
    assert (folder / "corpus.jsonl").is_file()
    assert file_server.hits == ["/mirror/tiny.zip"]
    # a name the registry does not know can be fetched from an explicit URL (no checksum then)
    other = download_dataset("other", tmp_path / "data", registry=registry, url=mirror)
    assert other == tmp_path / "data" / "other" and (other / "corpus.jsonl").is_file()


def test_file_checksums_inside_the_archive_are_checked(file_server: FileServer, tmp_path: Path) -> None:
    body = build_zip(TINY_FILES)
    url = file_server.serve("/tiny.zip", body)
    good = sha256(TINY_FILES["corpus.jsonl"].encode("utf-8"))
    entry = {"url": url, "sha256": None, "license": "x", "files": {"corpus.jsonl": good}}
    assert download_dataset(
        "tiny", tmp_path / "ok", registry=write_registry(tmp_path / "a.yaml", {"tiny": entry})
    )
    entry["files"] = {"corpus.jsonl": "f" * 64}
    with pytest.raises(DataError, match=r"^tiny/corpus\.jsonl: sha256 mismatch"):
        download_dataset(
            "tiny", tmp_path / "bad", registry=write_registry(tmp_path / "b.yaml", {"tiny": entry})
        )
    assert names(tmp_path / "bad") == [".tiny.lock"]


def test_http_error_and_truncated_body(file_server: FileServer, tmp_path: Path) -> None:
    registry = write_registry(
        tmp_path / "r.yaml",
        {
            "missing": {"url": file_server.base_url + "/nope.zip", "sha256": None, "license": "x"},
            "short": {
                "url": file_server.serve("/short.zip", build_zip(TINY_FILES)),
                "sha256": None,
                "license": "x",
            },
        },
    )
    file_server.short_by["/short.zip"] = 100
    dest = tmp_path / "data"
    with pytest.raises(DownloadError, match="HTTP 404"):
        download_dataset("missing", dest, registry=registry)
    with pytest.raises(DownloadError, match=r"short\.zip: (truncated download|download failed)"):
        download_dataset("short", dest, registry=registry)
    assert names(dest) == [".missing.lock", ".short.lock"]


def test_archive_without_corpus_is_refused(file_server: FileServer, tmp_path: Path) -> None:
    body = build_zip({"README.txt": "hello"})
    registry = write_registry(
        tmp_path / "r.yaml",
        {"tiny": {"url": file_server.serve("/x.zip", body), "sha256": None, "license": "x"}},
    )
    with pytest.raises(DataError, match="not a BEIR dataset"):
        download_dataset("tiny", tmp_path / "data", registry=registry)
    assert names(tmp_path / "data") == [".tiny.lock"]


def test_not_a_zip_is_refused(file_server: FileServer, tmp_path: Path) -> None:
    registry = write_registry(
        tmp_path / "r.yaml",
        {"tiny": {"url": file_server.serve("/x.zip", b"<html>oops</html>"), "sha256": None, "license": "x"}},
    )
    with pytest.raises(DataError, match="not a valid zip archive"):
        download_dataset("tiny", tmp_path / "data", registry=registry)
    assert names(tmp_path / "data") == [".tiny.lock"]


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("parent", r"'\.\.' component"),
        ("grandparent", r"'\.\.' component"),
        ("absolute", r"absolute path or drive letter"),
        ("drive", r"absolute path or drive letter"),
        ("symlink", r"symbolic link"),
    ],
)
def test_malicious_zip_is_refused_and_writes_nothing(
    file_server: FileServer, tmp_path: Path, kind: str, message: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "data"
    bodies = {
        "parent": with_member("../evil.txt"),
        "grandparent": with_member("tiny/../../../evil.txt"),
        "absolute": with_member(str(outside / "abs_evil.txt")),
        "drive": with_member("C:/evil.txt"),
        "symlink": with_symlink("tiny/link", str(outside)),
    }
    registry = write_registry(
        tmp_path / "r.yaml",
        {"tiny": {"url": file_server.serve("/evil.zip", bodies[kind]), "sha256": None, "license": "x"}},
    )
    before = all_files(tmp_path)
    with pytest.raises(DataError, match=message) as info:
        download_dataset("tiny", dest, registry=registry)
    assert str(info.value).startswith(
        f"{file_server.base_url}/evil.zip: member "
    )  # the source, not a temp file
    assert names(dest) == [".tiny.lock"]  # no dataset folder, no temp files, not even the good members
    assert all_files(tmp_path) == before | {Path("data"), Path("data/.tiny.lock")}
    assert not list(tmp_path.rglob("*evil*"))


def test_safe_extract_checks_every_member_before_writing(tmp_path: Path) -> None:
    archive = tmp_path / "a.zip"
    archive.write_bytes(with_member("tiny/../../x.txt"))
    target = tmp_path / "target"
    target.mkdir()
    with pytest.raises(DataError, match=r"member 'tiny/\.\./\.\./x\.txt'"):
        safe_extract_zip(archive, target)
    assert list(target.iterdir()) == []


# --------------------------------------------------------------------------- registry


def test_real_registry_is_valid_and_lists_beir() -> None:
    registry = load_registry(DEFAULT_REGISTRY)
    standard = {
        "scifact",
        "nfcorpus",
        "arguana",
        "fiqa",
        "trec-covid",
        "scidocs",
        "quora",
        "nq",
        "hotpotqa",
        "climate-fever",
        "dbpedia-entity",
        "fever",
        "msmarco",
        "cqadupstack",
        "webis-touche2020",
    }
    assert standard <= set(registry.datasets)
    for name in standard:
        entry = registry.datasets[name]
        assert entry.url == f"https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"
        assert entry.license
    for name in ("bioasq", "signal1m", "trec-news", "robust04"):
        assert registry.datasets[name].url is None
    assert set(registry.local_names) == {"adi", "cisi", "cosqa", "cranfield", "locomo", "medline", "scifact"}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"url": "https://x/y.zip", "sha256": "ABC", "license": "x"}, r"datasets\.tiny\.sha256 must be 64"),
        ({"url": "ftp://x/y.zip", "sha256": None, "license": "x"}, r"datasets\.tiny\.url must be an http"),
        ({"url": "https://x/y.zip", "sha256": None}, r"datasets\.tiny\.license is required"),
        (
            {"url": "https://x/y.zip", "sha256": None, "license": "x", "sha": "typo"},
            r"unknown key\(s\) \['sha'\]",
        ),
        ({"url": "https://x/y.zip", "license": "x", "files": {"../c": "a" * 64}}, r"files\.\.\./c"),
        ("just a string", r"datasets\.tiny must be a mapping"),
    ],
)
def test_registry_validation_names_the_key(tmp_path: Path, entry: object, message: str) -> None:
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump({"datasets": {"tiny": entry}}), encoding="utf-8")
    with pytest.raises(DataError, match=rf"registry\.yaml: .*{message}"):
        load_registry(path)


def test_registry_bad_yaml_and_bad_names(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("datasets: [unclosed\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.yaml: malformed YAML"):
        load_registry(bad)
    escape = write_registry(tmp_path / "esc.yaml", {"../up": {"url": None, "sha256": None, "license": "x"}})
    with pytest.raises(DataError, match=r"datasets\.\.\./up: dataset names must match"):
        load_registry(escape)


def test_unknown_unpublished_and_local_names(tmp_path: Path) -> None:
    registry = write_registry(
        tmp_path / "r.yaml",
        {"closed": {"url": None, "sha256": None, "license": "x", "notes": "ask NIST"}},
        local_datasets={"names": ["adi"], "note": "shared"},
    )
    with pytest.raises(DataError, match=r"'nope' is not in the registry.*known: closed"):
        download_dataset("nope", tmp_path / "d", registry=registry)
    with pytest.raises(DataError, match=r"no public download URL.*ask NIST"):
        download_dataset("closed", tmp_path / "d", registry=registry)
    with pytest.raises(DataError, match=r"'adi' is a shared local dataset.*VIKING_EVAL_DATA"):
        download_dataset("adi", tmp_path / "d", registry=registry)
    with pytest.raises(DataError, match=r"plain folder name"):
        download_dataset("../x", tmp_path / "d", registry=registry)
    assert not (tmp_path / "d").exists()


# --------------------------------------------------------------------------- CLI


def test_cli_downloads_and_explains_viking_eval_data(
    file_server: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = build_zip(TINY_FILES)
    registry = write_registry(
        tmp_path / "r.yaml",
        {"tiny": {"url": file_server.serve("/tiny.zip", body), "sha256": sha256(body), "license": "x"}},
    )
    dest = tmp_path / "data"
    assert main(["tiny", "--dest", str(dest), "--registry", str(registry)]) == 0
    out = capsys.readouterr().out
    assert str((dest / "tiny").resolve()) in out
    assert f'export VIKING_EVAL_DATA="{dest.resolve()}' in out
    assert (dest / "tiny" / "corpus.jsonl").is_file()


def test_cli_reports_errors_with_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry = write_registry(tmp_path / "r.yaml", {"closed": {"url": None, "sha256": None, "license": "x"}})
    assert main(["closed", "--dest", str(tmp_path / "d"), "--registry", str(registry)]) == 2  # bad input
    err = capsys.readouterr().err
    assert err == f"error: {registry}: 'closed' has no public download URL (datasets.closed.url is null).\n"


def test_cli_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "scifact" in out and "robust04" in out and "not public" in out


# --------------------------------------------------------------------------- locks and leftovers (issue 12)


def tiny_registry(file_server: FileServer, tmp_path: Path, *, sha: bool = True) -> tuple[Path, str]:
    body = build_zip(TINY_FILES)
    url = file_server.serve("/tiny.zip", body)
    entry = {"url": url, "sha256": sha256(body) if sha else None, "license": "x"}
    return write_registry(tmp_path / "r.yaml", {"tiny": entry}), url


class _Signal(logging.Handler):
    """Sets ``event`` when a record containing ``text`` is logged (from any thread)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


def test_two_downloads_of_one_dataset_at_once_share_one_transfer(
    file_server: FileServer, tmp_path: Path
) -> None:
    registry, _ = tiny_registry(file_server, tmp_path)
    dest = tmp_path / "data"
    file_server.holds["/tiny.zip"] = release = threading.Event()
    results: dict[str, object] = {}

    def run(label: str) -> None:
        try:
            results[label] = download_dataset("tiny", dest, registry=registry)
        except BaseException as exc:  # reported by the assertions below
            results[label] = exc

    waiting = _Signal("another download of tiny is running")
    logger = logging.getLogger("viking_eval.data.download")
    logger.addHandler(waiting)
    try:
        first = threading.Thread(target=run, args=("first",))
        first.start()
        assert file_server.held.wait(10)  # the first download is mid-transfer, holding the lock
        second = threading.Thread(target=run, args=("second",))
        second.start()
        assert waiting.event.wait(10)  # the second one found the lock taken and waits
        release.set()
        first.join(10)
        second.join(10)
    finally:
        logger.removeHandler(waiting)
        release.set()
    assert results == {"first": dest / "tiny", "second": dest / "tiny"}
    assert file_server.hits == ["/tiny.zip"]  # one transfer; the second found the dataset in place
    assert names(dest) == [".tiny.lock", "tiny"]
    assert load_beir(dest / "tiny").qrels == {"q1": {"d1": 1}}


def test_a_lock_held_too_long_is_one_clear_error(file_server: FileServer, tmp_path: Path) -> None:
    registry, _ = tiny_registry(file_server, tmp_path)
    dest = tmp_path / "data"
    dest.mkdir()
    # another process downloading tiny holds the lock
    with FileLock(str(dest / ".tiny.lock")), pytest.raises(DownloadError) as info:
        download_dataset("tiny", dest, registry=registry, lock_timeout=0)
    assert str(info.value) == (
        f"{dest / '.tiny.lock'}: another download of tiny still holds the lock after 0 s; "
        "wait for it to finish or stop it"
    )
    assert file_server.hits == [] and names(dest) == [".tiny.lock"]


def test_leftovers_of_a_killed_download_are_removed_next_time(
    file_server: FileServer, tmp_path: Path
) -> None:
    registry, _ = tiny_registry(file_server, tmp_path)
    dest = tmp_path / "data"
    dest.mkdir()
    long_ago = time.time() - 3600
    stale_part = dest / ".tiny.k1ll3d_1.zip.part"
    stale_unpack = dest / ".tiny.k1ll3d_2.unpack"
    (stale_unpack / "content" / "tiny").mkdir(parents=True)
    (stale_unpack / "content" / "tiny" / "corpus.jsonl").write_text("half", encoding="utf-8")
    stale_part.write_bytes(b"PK half a zip")
    kept = {
        ".tiny.x.abcdefgh.zip.part": "a partial of dataset 'tiny.x', not ours",
        ".other.abcdefgh.zip.part": "another dataset's partial",
        ".tiny.notes": "not a partial name",
    }
    for name, text in kept.items():
        (dest / name).write_text(text, encoding="utf-8")
    for path in [stale_part, stale_unpack, *(dest / name for name in kept)]:
        os.utime(path, (long_ago, long_ago))
    # a partial younger than our lock is someone else's live work, whatever its name
    young = dest / ".tiny.youngpar.zip.part"
    young.write_bytes(b"being written")
    os.utime(young, (time.time() + 3600, time.time() + 3600))

    assert download_dataset("tiny", dest, registry=registry) == dest / "tiny"
    assert names(dest) == sorted([".tiny.lock", "tiny", young.name, *kept])


def test_an_interrupted_unpack_never_leaves_a_partial_dataset(
    file_server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry, _ = tiny_registry(file_server, tmp_path)
    dest = tmp_path / "data"

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # Ctrl-C after every file was unpacked and checked

    monkeypatch.setattr(download_module, "record_checksums", interrupted)
    with pytest.raises(KeyboardInterrupt):
        download_dataset("tiny", dest, registry=registry)
    assert names(dest) == [".tiny.lock"]
    monkeypatch.undo()
    assert (download_dataset("tiny", dest, registry=registry) / CHECKSUMS_FILE).is_file()


def test_unwritable_destination_is_one_line(file_server: FileServer, tmp_path: Path) -> None:
    registry, _ = tiny_registry(file_server, tmp_path)
    (tmp_path / "a_file").write_text("x", encoding="utf-8")
    dest = tmp_path / "a_file" / "data"  # cannot be created, whoever runs the test
    with pytest.raises(DownloadError) as info:
        download_dataset("tiny", dest, registry=registry)
    assert str(info.value).startswith(f"{dest}: cannot write the destination folder (")
    assert str(info.value).endswith("pass --dest a writable folder")
    assert file_server.hits == []


# --------------------------------------------------------------------------- zip bombs (issue 12)


def zeros_zip(size: int) -> bytes:
    """The tiny dataset plus ``size`` zero bytes that deflate to almost nothing."""
    buffer = io.BytesIO(build_zip(TINY_FILES))
    with zipfile.ZipFile(buffer, "a", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("tiny/padding.bin", b"\0" * size)
    return buffer.getvalue()


def understated_zip() -> bytes:
    """The tiny dataset whose corpus declares (in the central directory, which zipfile reads)
    fewer bytes than it holds."""
    data = bytearray(build_zip(TINY_FILES))
    entry = data.index(b"PK\x01\x02")  # central directory headers: size at +24, name at +46
    while bytes(data[entry + 46 : entry + 46 + struct.unpack_from("<H", data, entry + 28)[0]]) != (
        b"tiny/corpus.jsonl"
    ):
        entry = data.index(b"PK\x01\x02", entry + 4)
    struct.pack_into("<I", data, entry + 24, 10)
    return bytes(data)


@pytest.mark.parametrize(
    ("body", "limits", "message"),
    [
        (
            zeros_zip(5000),
            ExtractLimits(max_bytes=4096),
            r"would unpack to 5,\d{3} bytes, more than the limit of 4,096",
        ),
        (
            zeros_zip(2_000_000),
            None,
            r"\(ratio \d[\d,]*\), more than the limit of 100 \(ExtractLimits\.max_ratio\)",
        ),
        (build_zip(TINY_FILES), ExtractLimits(max_members=3), r"4 members, more than the limit of 3"),
        (understated_zip(), None, r"Bad CRC-32|unpacks to more than the 10 bytes it declares"),
    ],
    ids=["total_size", "compression_ratio", "member_count", "understated_member_size"],
)
def test_zip_bombs_are_refused_and_write_nothing(
    file_server: FileServer, tmp_path: Path, body: bytes, limits: ExtractLimits | None, message: str
) -> None:
    url = file_server.serve("/bomb.zip", body)
    registry = write_registry(tmp_path / "r.yaml", {"tiny": {"url": url, "sha256": None, "license": "x"}})
    dest = tmp_path / "data"
    with pytest.raises(DataError, match=message) as info:
        download_dataset("tiny", dest, registry=registry, limits=limits)
    assert str(info.value).startswith(f"{url}: ") and "\n" not in str(info.value)
    assert names(dest) == [".tiny.lock"]


def test_genuine_archive_within_limits_unpacks(tmp_path: Path) -> None:
    archive = tmp_path / "a.zip"
    archive.write_bytes(build_zip(TINY_FILES))
    target = tmp_path / "t"
    target.mkdir()
    safe_extract_zip(archive, target, limits=ExtractLimits(max_bytes=1024, max_members=4))
    assert (target / "tiny" / "qrels" / "test.tsv").read_text(encoding="utf-8") == TINY_FILES[
        "qrels/test.tsv"
    ]


@pytest.mark.parametrize("field_name", ["max_bytes", "max_members", "max_ratio"])
@pytest.mark.parametrize("value", [0, -1, True])
def test_extract_limits_are_validated(field_name: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"ExtractLimits\.{field_name} must be a number >= 1"):
        ExtractLimits(**{field_name: value})  # type: ignore[arg-type]


def test_cli_limits_and_exit_codes(
    file_server: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    registry, url = tiny_registry(file_server, tmp_path, sha=False)
    dest = tmp_path / "data"
    assert main(["tiny", "--dest", str(dest), "--registry", str(registry), "--max-members", "2"]) == 2
    assert capsys.readouterr().err == (
        f"error: {url}: 4 members, more than the limit of 2 (ExtractLimits.max_members, --max-members); "
        "refusing the archive\n"
    )
    (tmp_path / "a_file").write_text("x", encoding="utf-8")
    assert main(["tiny", "--dest", str(tmp_path / "a_file" / "d"), "--registry", str(registry)]) == 1
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'a_file' / 'd'}: cannot write")


# --------------------------------------------------------------------------- checksums on first use (issue 12)


def test_unpublished_checksums_are_recorded_and_verified_on_every_load(
    file_server: FileServer, tmp_path: Path
) -> None:
    registry, url = tiny_registry(file_server, tmp_path, sha=False)
    folder = download_dataset("tiny", tmp_path / "data", registry=registry)
    recorded = json.loads((folder / CHECKSUMS_FILE).read_text(encoding="utf-8"))
    assert recorded["source"] == url and recorded["dataset"] == "tiny"
    assert recorded["archive_sha256"] == sha256(build_zip(TINY_FILES))
    assert recorded["archive_checked_against"] is None  # trust on first use: nothing was published
    assert recorded["files"] == {rel: sha256(text.encode("utf-8")) for rel, text in TINY_FILES.items()}
    assert load_beir(folder).checksums_verified == tuple(sorted(TINY_FILES))
    # a later edit is caught, naming the file and both hashes
    qrels = folder / "qrels" / "test.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td2\t1\n", encoding="utf-8")
    with pytest.raises(DataError) as info:
        load_beir(folder)
    message = str(info.value)
    assert message.startswith(f"{qrels}: sha256 {sha256(qrels.read_bytes())} differs from ")
    assert recorded["files"]["qrels/test.tsv"] in message


def test_published_checksums_are_checked_and_recorded(file_server: FileServer, tmp_path: Path) -> None:
    body = build_zip(TINY_FILES)
    url = file_server.serve("/tiny.zip", body)
    files = {"qrels/test.tsv": sha256(TINY_FILES["qrels/test.tsv"].encode("utf-8"))}
    registry = write_registry(
        tmp_path / "r.yaml", {"tiny": {"url": url, "sha256": sha256(body), "license": "x", "files": files}}
    )
    folder = download_dataset("tiny", tmp_path / "data", registry=registry)
    recorded = json.loads((folder / CHECKSUMS_FILE).read_text(encoding="utf-8"))
    assert recorded["archive_checked_against"] == "registry datasets.tiny.sha256"
    assert recorded["files_checked_against_registry"] == ["qrels/test.tsv"]
    assert recorded["files"]["qrels/test.tsv"] == files["qrels/test.tsv"]


def test_checksums_are_recorded_per_dataset_of_a_multi_dataset_archive(
    file_server: FileServer, tmp_path: Path
) -> None:
    forums = {f"{forum}/{rel}": text for forum in ("android", "gis") for rel, text in TINY_FILES.items()}
    url = file_server.serve("/cqa.zip", build_zip(forums, prefix="cqa/"))
    registry = write_registry(tmp_path / "r.yaml", {"cqa": {"url": url, "sha256": None, "license": "x"}})
    folder = download_dataset("cqa", tmp_path / "data", registry=registry)
    top = json.loads((folder / CHECKSUMS_FILE).read_text(encoding="utf-8"))
    assert set(top["files"]) == set(forums)  # the whole archive, written before the forums' own
    for forum in ("android", "gis"):
        assert load_beir(folder / forum).checksums_verified == tuple(sorted(TINY_FILES))
    (folder / "gis" / "corpus.jsonl").write_text(TINY_FILES["corpus.jsonl"] + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"gis/corpus\.jsonl: sha256 .* differs from"):
        load_beir(folder / "gis")
    assert load_beir(folder / "android").num_judgments == 1
