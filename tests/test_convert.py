"""Converters (viking_eval.data.convert): byte identity with the shared datasets, one-line errors on
bad raw input, staging and --force, checksum checks.

The byte-identity tests (marked ``needs_data``) read the raw releases from ``VIKING_EVAL_RAW``
(default: the ``raw`` folder beside the shared datasets) and compare with the shared datasets
(tests/conftest.py: ``shared_raw``, ``shared_datasets``); everything else builds tiny raw files here.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from viking_eval.data import DataError
from viking_eval.data.convert import CONVERTERS, convert, expected_files
from viking_eval.data.convert.__main__ import main
from viking_eval.data.registry import DEFAULT_REGISTRY, load_registry

RAW_FOLDER = {"locomo": "locomo", "cosqa": "cosqa"}  # the rest are in classic/
ALL = ["locomo", "cisi", "cranfield", "medline", "adi", "cosqa"]


@pytest.fixture
def shared(shared_datasets: Path, shared_raw: Path) -> tuple[Path, Path]:
    """(datasets folder, raw folder): tests/conftest.py finds them or skips saying how to get them."""
    return shared_datasets, shared_raw


def _raw(raw_root: Path, name: str) -> Path:
    return raw_root / RAW_FOLDER.get(name, "classic")


def _leftovers(dest: Path, name: str) -> list[str]:
    return (
        sorted(p.name for p in dest.iterdir() if p.name == name or p.name.startswith(f".{name}."))
        if dest.is_dir()
        else []
    )


# --------------------------------------------------------------------------- (a) byte identity


@pytest.mark.needs_data
@pytest.mark.parametrize("name", ALL)
def test_rebuilds_shared_dataset_byte_for_byte(name: str, shared: tuple[Path, Path], tmp_path: Path) -> None:
    datasets, raw_root = shared
    reference = datasets / name
    folder = convert(name, [_raw(raw_root, name)], tmp_path)
    assert folder == tmp_path / name
    want = sorted(
        str(p.relative_to(reference))
        for p in reference.rglob("*")
        if p.is_file() and p.name != "PROVENANCE.md"
    )
    got = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert got == want
    for rel in want:
        assert (folder / rel).read_bytes() == (reference / rel).read_bytes(), rel
    assert sorted(expected_files(name)) == want  # the registry checks every file
    assert _leftovers(tmp_path, name) == [name]


@pytest.mark.needs_data
def test_output_mismatch_refused_when_verifying_reported_otherwise(
    shared: tuple[Path, Path], tmp_path: Path
) -> None:
    _datasets, raw_root = shared
    registry = yaml.safe_load(DEFAULT_REGISTRY.read_text(encoding="utf-8"))
    registry["local_datasets"]["converters"]["adi"]["files"]["corpus.jsonl"] = "0" * 64
    bad_registry = tmp_path / "registry.yaml"
    bad_registry.write_text(yaml.safe_dump(registry), encoding="utf-8")
    lines: list[str] = []
    with pytest.raises(
        DataError, match=r"adi: 1 converted file\(s\) differ.*corpus.jsonl.*nothing was installed"
    ):
        convert("adi", [_raw(raw_root, "adi")], tmp_path / "out", registry=bad_registry, log=lines.append)
    assert any(line.split()[:2] == ["mismatch", "corpus.jsonl"] for line in lines)
    assert any(line.split()[:2] == ["OK", "queries.jsonl"] for line in lines)
    assert _leftovers(tmp_path / "out", "adi") == []
    folder = convert("adi", [_raw(raw_root, "adi")], tmp_path / "out", registry=bad_registry, verify=False)
    assert (folder / "corpus.jsonl").is_file()


def test_registry_matches_code_table() -> None:
    load_registry()  # the download registry still parses with the converters section
    section = yaml.safe_load(DEFAULT_REGISTRY.read_text(encoding="utf-8"))["local_datasets"]["converters"]
    assert sorted(section) == sorted(CONVERTERS)
    for name, spec in CONVERTERS.items():
        entry = section[name]
        assert entry["source"] == f"{spec.raw[0].repo} @ {spec.raw[0].commit}"
        assert entry["command"] == f"python -m viking_eval.data.convert {name} " + " ".join(
            r.name for r in spec.raw
        )
        assert entry["license"]
        assert {raw: info["sha256"] for raw, info in entry["raw"].items()} == {
            r.name: r.sha256 for r in spec.raw
        }
        assert {raw: info["url"] for raw, info in entry["raw"].items()} == {r.name: r.url for r in spec.raw}
        assert expected_files(name)


# --------------------------------------------------------------------------- tiny raw inputs

ADI_ALL = b".I 1\r\n.T\r\nfirst title\r\n.A\r\nA. AUTHOR\r\n.W\r\nfirst text\r\n.I 2\r\n.T\r\nsecond\r\n.W\r\nsecond text\r\n"
ADI_QRY = b".I 1\r\n.W\r\nwhat is first?  \r\n"
ADI_REL = b"1   1   0   0.000000   \r\n1   2   0   0.000000   \r\n"


def _tar(path: Path, members: dict[str, bytes], *, links: tuple[str, ...] = ()) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name in links:
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            tar.addfile(info)
    return path


def _adi(tmp_path: Path, **replace: bytes) -> Path:
    members = {"ADI.ALL": ADI_ALL, "ADI.QRY": ADI_QRY, "ADI.REL": ADI_REL}
    members.update({key.replace("_", "."): value for key, value in replace.items()})
    folder = tmp_path / "raw"
    folder.mkdir(parents=True, exist_ok=True)
    return _tar(folder / "adi.tar.gz", members)


def test_tiny_adi_converts(tmp_path: Path) -> None:
    folder = convert("adi", [_adi(tmp_path)], tmp_path / "out", verify=False)
    docs = [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines()]
    assert docs[0] == {
        "_id": "1",
        "title": "first title",
        "text": "first text",
        "metadata": {"authors": "A. AUTHOR"},
    }
    assert docs[1]["metadata"] == {}
    assert (
        folder / "queries.jsonl"
    ).read_text() == '{"_id": "1", "text": "what is first?", "metadata": {}}\n'
    assert (folder / "qrels/test.tsv").read_text() == "query-id\tcorpus-id\tscore\n1\t1\t1\n1\t2\t1\n"


# --------------------------------------------------------------------------- (b) bad raw input


@pytest.mark.parametrize(
    ("members", "where", "what"),
    [
        ({"ADI_ALL": b".W\r\nno record yet\r\n"}, "ADI.ALL:1", ".W before any .I record"),
        ({"ADI_ALL": b".I 1\r\n.W\r\nx\r\n.I 2b\r\n"}, "ADI.ALL:4", ".I needs an integer id, got '2b'"),
        (
            {"ADI_ALL": b".I 1\r\n.W\r\nx\r\n.I 1\r\n.W\r\ny\r\n"},
            "ADI.ALL:4",
            "duplicate id .I 1 (first at line 1)",
        ),
        ({"ADI_ALL": b".I 1\r\n.Q\r\nx\r\n"}, "ADI.ALL:2", "unknown field marker .Q"),
        ({"ADI_QRY": b"stray text\r\n.I 1\r\n"}, "ADI.QRY:1", "text before the first .I record"),
        ({"ADI_QRY": b".I 1\r\n.W\r\nq\r\n.I 2\r\n"}, "ADI.QRY:4", "record .I 2 has no fields (truncated?)"),
        ({"ADI_REL": b"1 1 0 0.0\r\n1 2 0\r\n"}, "ADI.REL:2", "expected 4 fields, got 3"),
        ({"ADI_REL": b"1 7 0 0.0\r\n"}, "ADI.REL:1", "document 7 is not in ADI.ALL"),
        ({"ADI_ALL": b".I 1\r\n.W\r\n\xff\r\n"}, "ADI.ALL:3", "not valid UTF-8"),
    ],
)
def test_bad_smart_input_names_member_and_line(
    tmp_path: Path, members: dict[str, bytes], where: str, what: str
) -> None:
    archive = _adi(tmp_path, **members)
    with pytest.raises(DataError) as err:
        convert("adi", [archive], tmp_path / "out", verify=False)
    message = str(err.value)
    assert message.startswith(f"{archive}!{where}: ")
    assert what in message
    assert "\n" not in message
    assert _leftovers(tmp_path / "out", "adi") == []


def test_missing_member_unsafe_member_and_not_a_tar(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "adi.tar.gz", {"ADI.ALL": ADI_ALL, "ADI.QRY": ADI_QRY})
    with pytest.raises(DataError, match=r"adi\.tar\.gz: missing tar member ADI\.REL"):
        convert("adi", [archive], tmp_path / "out", verify=False)
    _tar(archive, {"../ADI.ALL": ADI_ALL, "ADI.QRY": ADI_QRY, "ADI.REL": ADI_REL})
    with pytest.raises(DataError, match=r"adi\.tar\.gz!\.\./ADI\.ALL: unsafe member name"):
        convert("adi", [archive], tmp_path / "out", verify=False)
    _tar(archive, {"ADI.QRY": ADI_QRY, "ADI.REL": ADI_REL}, links=("ADI.ALL",))
    with pytest.raises(DataError, match=r"adi\.tar\.gz!ADI\.ALL: not a regular file"):
        convert("adi", [archive], tmp_path / "out", verify=False)
    archive.write_bytes(b"this is not a gzip file")
    with pytest.raises(DataError, match=r"adi\.tar\.gz: not a readable \.tar\.gz archive"):
        convert("adi", [archive], tmp_path / "out", verify=False)
    assert _leftovers(tmp_path / "out", "adi") == []


def test_wrong_file_for_dataset(tmp_path: Path) -> None:
    other = _tar(tmp_path / "cisi.tar.gz", {"ADI.ALL": ADI_ALL})
    with pytest.raises(
        DataError, match=r"cisi\.tar\.gz: not a raw file of adi; it needs adi\.tar\.gz from lailaglez/"
    ):
        convert("adi", [other], tmp_path / "out", verify=False)
    with pytest.raises(DataError, match=r"cosqa needs code_idx_map\.txt, not given \(download https://raw\."):
        convert("cosqa", [], tmp_path / "out", verify=False)
    with pytest.raises(DataError, match="unknown dataset 'scifact'"):
        convert("scifact", [other], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _locomo(samples: object) -> bytes:
    return json.dumps(samples, indent=1).encode()


def _sample(**changes: object) -> dict[str, object]:
    sample: dict[str, object] = {
        "qa": [
            {"question": "Where?", "answer": "Paris", "evidence": ["D1:1; D1:2"], "category": 4},
            {"question": "Who?", "evidence": ["D1:9"], "category": 5, "adversarial_answer": "Bob"},
        ],
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "1:00 pm on 1 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I live in Paris."},
                {
                    "speaker": "Bob",
                    "img_url": ["u"],
                    "blip_caption": "a photo",
                    "dia_id": "D1:2",
                    "text": "Nice!",
                },
            ],
        },
        "event_summary": {"events_session_1": {"Ann": [], "Bob": [], "date": "1 May, 2023"}},
        "observation": {"session_1_observation": {"Ann": [["Ann lives in Paris.", "D1:1"]]}},
        "session_summary": {"session_1_summary": "Ann and Bob talk."},
        "sample_id": "conv-1",
    }
    sample.update(changes)
    return sample


def test_tiny_locomo_converts(tmp_path: Path) -> None:
    raw = tmp_path / "locomo10.json"
    raw.write_bytes(_locomo([_sample()]))
    folder = convert("locomo", [raw], tmp_path / "out", verify=False)
    turn = json.loads((folder / "corpus.jsonl").read_text().splitlines()[1])
    assert turn["_id"] == "conv-1_D1:2" and turn["text"] == "Bob: Nice!"
    assert list(turn["metadata"])[-2:] == ["img_url", "blip_caption"]
    queries = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    assert list(queries[1]["metadata"]) == [
        "conversation",
        "category",
        "category_name",
        "adversarial_answer",
        "evidence_raw",
    ]
    assert (folder / "qrels/test.tsv").read_text().splitlines()[1:] == [
        "conv-1_q0\tconv-1_D1:1\t1",
        "conv-1_q0\tconv-1_D1:2\t1",
    ]
    session = json.loads((folder / "sessions.jsonl").read_text())
    assert session["turn_ids"] == ["conv-1_D1:1", "conv-1_D1:2"]


def test_bad_locomo_input_names_file_and_line(tmp_path: Path) -> None:
    raw = tmp_path / "locomo10.json"
    sample = _sample()
    del sample["qa"][1]["category"]  # type: ignore[index]
    raw.write_bytes(_locomo([sample]))
    lines = raw.read_text().splitlines()
    line = next(i for i, text in enumerate(lines) if '"question": "Who?"' in text)  # its "{" line, 1-based
    with pytest.raises(DataError) as err:
        convert("locomo", [raw], tmp_path / "out", verify=False)
    assert str(err.value) == f"{raw}:{line}: QA item is missing key 'category'"

    sample = _sample()
    del sample["session_summary"]
    raw.write_bytes(_locomo([sample]))
    with pytest.raises(DataError, match=rf"^{raw}:2: conversation sample is missing key 'session_summary'$"):
        convert("locomo", [raw], tmp_path / "out", verify=False)

    raw.write_text('[\n{"qa": [1,\n', encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{raw}:3: not a JSON file: "):
        convert("locomo", [raw], tmp_path / "out", verify=False)
    assert _leftovers(tmp_path / "out", "locomo") == []


def test_bad_cosqa_input_names_file_and_line(tmp_path: Path) -> None:
    code = "def f(x):\n    return x"
    (tmp_path / "code_idx_map.txt").write_text(json.dumps({code: 0, "def g():\n    pass": 1}, indent=1))
    item = {
        "idx": "cosqa-1",
        "doc": "f of x",
        "code": code,
        "code_tokens": "",
        "docstring_tokens": "",
        "label": 1,
        "retrieval_idx": 0,
    }
    (tmp_path / "cosqa-retrieval-test-500.json").write_text(json.dumps([item], indent=1))
    (tmp_path / "cosqa-retrieval-dev-500.json").write_text(
        json.dumps([{**item, "idx": "cosqa-2", "retrieval_idx": 1}], indent=1)
    )
    dev = tmp_path / "cosqa-retrieval-dev-500.json"
    code_map = tmp_path / "code_idx_map.txt"
    with pytest.raises(
        DataError, match=rf"^{dev}:9: retrieval_idx 1 does not match the index of the item's code"
    ):
        convert("cosqa", [tmp_path], tmp_path / "out", verify=False)
    dev.write_text(json.dumps([{**item, "idx": "cosqa-2"}], indent=1))
    good_map = code_map.read_text()
    code_map.write_text(json.dumps({code: 0, "def g():\n    pass": "1"}, indent=1))
    with pytest.raises(DataError, match=rf"^{code_map}:3: index must be an integer, got str$"):
        convert("cosqa", [tmp_path], tmp_path / "out", verify=False)
    code_map.write_text(good_map)
    folder = convert("cosqa", [tmp_path], tmp_path / "out", verify=False)
    assert (folder / "qrels/dev.tsv").read_text() == "query-id\tcorpus-id\tscore\ncosqa-2\t0\t1\n"


def test_cli_bad_input_one_error_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive = _adi(tmp_path, ADI_ALL=b".W\r\nx\r\n")
    code = main(["adi", str(archive), "--dest", str(tmp_path / "out"), "--no-verify"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.splitlines() == [f"error: {archive}!ADI.ALL:1: .W before any .I record"]
    assert _leftovers(tmp_path / "out", "adi") == []


# --------------------------------------------------------------------------- (c) staging, --force, checksums


def test_raw_checksum_mismatch_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive = _adi(tmp_path)
    with pytest.raises(
        DataError,
        match=r"adi\.tar\.gz: sha256 [0-9a-f]{64} is not that of the published adi\.tar\.gz.*--no-verify",
    ):
        convert("adi", [archive], tmp_path / "out")
    assert main(["adi", str(archive), "--dest", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "--no-verify" in err[0]
    assert not (tmp_path / "out").exists()


def test_writes_in_staging_and_renames_when_complete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dest = tmp_path / "out"
    spec = CONVERTERS["adi"]
    seen: list[Path] = []

    def run(files: object, out: Path) -> list[str]:
        seen.append(out)
        assert not (dest / "adi").exists()  # nothing where the finished folder belongs
        spec.run(files, out)  # type: ignore[arg-type]
        raise OSError("disk full")  # killed half-way

    monkeypatch.setitem(CONVERTERS, "adi", type(spec)(spec.name, spec.raw, spec.license, run, spec.summary))
    with pytest.raises(OSError, match="disk full"):
        convert("adi", [_adi(tmp_path)], dest, verify=False)
    assert seen == [dest / f".adi.partial-{os.getpid()}"]
    assert _leftovers(dest, "adi") == []


def test_stale_staging_removed_live_one_kept(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    stale = dest / f".adi.partial-{int(dead.stdout)}"
    stale.mkdir(parents=True)
    (stale / "corpus.jsonl").write_text("half")
    live = dest / f".adi.partial-{os.getppid()}"  # a run still in progress: not ours to remove
    live.mkdir()
    lines: list[str] = []
    convert("adi", [_adi(tmp_path)], dest, verify=False, log=lines.append)
    assert not stale.exists() and live.is_dir()
    assert f"removed stale staging folder {stale}" in lines
    assert _leftovers(dest, "adi") == [live.name, "adi"]


def test_existing_folder_needs_force(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    (dest / "adi").mkdir(parents=True)  # an empty folder is simply replaced
    folder = convert("adi", [_adi(tmp_path)], dest, verify=False)
    before = (folder / "corpus.jsonl").read_bytes()
    changed = _adi(tmp_path, ADI_ALL=ADI_ALL.replace(b"first text", b"new text"))
    with pytest.raises(DataError, match=r"out/adi already exists and is not empty; pass --force"):
        convert("adi", [changed], dest, verify=False)
    assert (folder / "corpus.jsonl").read_bytes() == before
    broken = _adi(tmp_path / "b", ADI_REL=b"1 1\r\n")
    with pytest.raises(DataError, match="expected 4 fields"):
        convert("adi", [broken], dest, verify=False, force=True)
    assert (folder / "corpus.jsonl").read_bytes() == before  # a failed --force run keeps the old one
    assert main(["adi", str(changed), "--dest", str(dest), "--no-verify", "--force"]) == 0
    assert b"new text" in (folder / "corpus.jsonl").read_bytes()
    assert _leftovers(dest, "adi") == ["adi"]
