"""A download whose connection closes early with no Content-Length is a failed transfer: exit 1,
one line ``error: download of URL failed: ...``, and no partial file left in the destination; a
complete body that is no zip at all keeps its data error (exit 2)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
import yaml
from http_servers import FileServer

from viking_eval.data.download import main


def small_dataset_zip() -> bytes:
    corpus = "".join(
        json.dumps({"_id": f"d{i}", "text": f"document number {i} " * 200}) + "\n" for i in range(40)
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("small/corpus.jsonl", corpus)
        archive.writestr("small/queries.jsonl", json.dumps({"_id": "q1", "text": "number"}) + "\n")
        archive.writestr("small/qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return buffer.getvalue()


@pytest.fixture
def close_delimited(file_server: FileServer) -> FileServer:
    """``file_server`` answering HTTP/1.0 style: no Content-Length, the end of the body is the
    connection closing."""
    file_server.close_delimited = True
    return file_server


def registry(path: Path, url: str) -> Path:
    path.write_text(
        yaml.safe_dump({"version": 1, "datasets": {"small": {"url": url, "sha256": None, "license": "x"}}})
    )
    return path


def test_cut_short_without_content_length_is_a_failed_transfer(
    close_delimited: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = small_dataset_zip()
    url = close_delimited.serve("/small.zip", whole[: len(whole) // 2])
    dest = tmp_path / "data"
    assert main(["small", "--dest", str(dest), "--registry", str(registry(tmp_path / "r.yaml", url))]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"error: download of {url} failed: the connection closed after"
    )
    assert f"after {len(whole) // 2} bytes with no Content-Length" in err
    assert sorted(path.name for path in dest.iterdir()) == [".small.lock"]  # no partial file


def test_a_whole_close_delimited_zip_still_downloads(close_delimited: FileServer, tmp_path: Path) -> None:
    url = close_delimited.serve("/small.zip", small_dataset_zip())
    dest = tmp_path / "data"
    reg = registry(tmp_path / "r.yaml", url)
    assert main(["small", "--dest", str(dest), "--registry", str(reg)]) == 0
    assert (dest / "small" / "corpus.jsonl").is_file()


def test_a_whole_body_that_is_no_zip_stays_a_data_error(
    close_delimited: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = close_delimited.serve("/small.zip", b"<html>a login page</html>")
    reg = registry(tmp_path / "r.yaml", url)
    assert main(["small", "--dest", str(tmp_path / "data"), "--registry", str(reg)]) == 2
    assert "not a valid zip archive" in capsys.readouterr().err
