"""A download whose connection closes early with no Content-Length is a failed transfer: exit 1,
one line ``error: download of URL failed: ...``, and no partial file left in the destination; a
complete body that is no zip at all keeps its data error (exit 2)."""

from __future__ import annotations

import io
import json
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

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
def close_delimited() -> Iterator[dict[str, object]]:
    """A server on 127.0.0.1 answering every GET with ``state["body"]``, HTTP/1.0 style: no
    Content-Length, the end of the body is the connection closing."""
    state: dict[str, object] = {"body": b""}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/zip")
            self.end_headers()
            body = state["body"]
            assert isinstance(body, bytes)
            self.wfile.write(body)
            self.close_connection = True

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state["url"] = f"http://127.0.0.1:{httpd.server_address[1]}/small.zip"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def registry(path: Path, url: str) -> Path:
    path.write_text(
        yaml.safe_dump({"version": 1, "datasets": {"small": {"url": url, "sha256": None, "license": "x"}}})
    )
    return path


def test_cut_short_without_content_length_is_a_failed_transfer(
    close_delimited: dict[str, object], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = small_dataset_zip()
    close_delimited["body"] = whole[: len(whole) // 2]
    url = str(close_delimited["url"])
    dest = tmp_path / "data"
    assert main(["small", "--dest", str(dest), "--registry", str(registry(tmp_path / "r.yaml", url))]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"error: download of {url} failed: the connection closed after"
    )
    assert f"after {len(whole) // 2} bytes with no Content-Length" in err
    assert sorted(path.name for path in dest.iterdir()) == [".small.lock"]  # no partial file


def test_a_whole_close_delimited_zip_still_downloads(
    close_delimited: dict[str, object], tmp_path: Path
) -> None:
    close_delimited["body"] = small_dataset_zip()
    dest = tmp_path / "data"
    reg = registry(tmp_path / "r.yaml", str(close_delimited["url"]))
    assert main(["small", "--dest", str(dest), "--registry", str(reg)]) == 0
    assert (dest / "small" / "corpus.jsonl").is_file()


def test_a_whole_body_that_is_no_zip_stays_a_data_error(
    close_delimited: dict[str, object], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    close_delimited["body"] = b"<html>a login page</html>"
    reg = registry(tmp_path / "r.yaml", str(close_delimited["url"]))
    assert main(["small", "--dest", str(tmp_path / "data"), "--registry", str(reg)]) == 2
    assert "not a valid zip archive" in capsys.readouterr().err
