"""A secret that the shim's rotation, a download's read or a tail's window cuts in two is still
masked whole: the download masks the rotated part and the current file as one text, the shim
rotates at a line end where one fits under its cap, and a tail leaves out the part of a line
that began before what it read."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from django.test import Client

from controlplane.redaction import REDACTED, RedactingStream, redact_text, register_secret_value
from deployments import logfiles
from deployments.services import secret_create
from deployments.supervisor.logs import log_tail
from deployments.supervisor.shim import CappedLog
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

SECRET = "Zq8vL2mN4pR7tW1xY5cB9dF3gH6jK0"   # no token shape: only the stored value can catch it
CAP = 1024


@pytest.fixture
def process(db, settings, tmp_path, admin_user):
    """A ready process whose log lies in the log directory (not written yet), and :data:`SECRET`
    stored as a secret."""
    settings.CEILING_LOG_DIR = str(tmp_path / "logs")
    secret_create(user=admin_user, name="db-pass", value=SECRET, description="")
    deployment = deployment_row_create(recipe=recipe_row_create(node=cpu_node_create(name="local")))
    row = deployment.processes.get()
    path = tmp_path / "logs" / f"deployment-{deployment.pk}" / "single0.log"
    path.parent.mkdir(parents=True)
    row.log_path = str(path)
    row.save(update_fields=["log_path"])
    return row


def _path(process) -> Path:
    return Path(process.log_path)


def _downloads(process, viewer, viewer_api) -> dict[str, str]:
    """The page's and the API's download of the process's log, as text."""
    client = Client()
    client.force_login(viewer)
    out = {}
    for url, reader in ((f"/deployments/{process.deployment_id}/processes/{process.pk}/log/download/", client),
                        (f"/api/processes/{process.pk}/log/download/", viewer_api)):
        response = reader.get(url)
        assert response.status_code == 200, url
        out[url] = b"".join(response.streaming_content).decode()
    return out


def _tails(process, viewer, viewer_api) -> dict[str, str]:
    client = Client()
    client.force_login(viewer)
    page = client.get(f"/deployments/{process.deployment_id}/processes/{process.pk}/log/")
    api = viewer_api.get(f"/api/processes/{process.pk}/log/?lines=2000")
    assert page.status_code == api.status_code == 200
    return {"page": page.content.decode(), "api": api.json()["text"]}


def _none_of_it(text: str) -> bool:
    """Whether ``text`` holds no half of :data:`SECRET` (nor all of it)."""
    return SECRET[:15] not in text and SECRET[15:] not in text


def test_a_secret_split_by_a_rotation_inside_its_line_is_masked_in_the_download(process, viewer, viewer_api):
    log = CappedLog(process.log_path, CAP)
    # an engine with block-buffered stdout: a read ends inside a line, inside the secret, and the
    # next one has no line end that still fits under the cap, so the rotation falls where the read did
    log.write(b"x" * 900 + b"\ndb url postgres://app:" + SECRET[:15].encode())
    log.write(SECRET[15:].encode() + b"@db/app " + b"z" * 120 + b"\n" + b"y" * 200 + b"\n")
    rotated = Path(f"{process.log_path}.1").read_bytes()
    assert rotated.endswith(SECRET[:15].encode()) and _path(process).read_bytes().startswith(SECRET[15:].encode())

    for url, body in _downloads(process, viewer, viewer_api).items():
        assert _none_of_it(body), url
        assert f"db url postgres://app:{REDACTED}@db/app " in body, url
        assert body.startswith("x" * 900 + "\n") and body.endswith("y" * 200 + "\n"), url
    for where, tail in _tails(process, viewer, viewer_api).items():
        assert _none_of_it(tail) and f"app:{REDACTED}@db" in tail, where


def test_a_secret_split_between_the_parts_anywhere_is_masked(process, viewer, viewer_api):
    line = f"engine: connecting with {SECRET} now\n"
    text = "".join(f"line {i}\n" for i in range(40)) + line + "".join(f"after {i}\n" for i in range(40))
    start = text.index(SECRET)
    for cut in range(start - 2, start + len(SECRET) + 2):
        Path(f"{process.log_path}.1").write_text(text[:cut])
        _path(process).write_text(text[cut:])
        for url, body in _downloads(process, viewer, viewer_api).items():
            assert body == redact_text(text), (cut, url)
            assert _none_of_it(body), (cut, url)


def test_a_secret_cut_by_a_read_inside_an_overlong_line_is_masked(process, viewer, viewer_api):
    # A line of 3 MiB with the secret at every place a read of the download could have cut it.
    chunk = logfiles.DOWNLOAD_CHUNK_BYTES
    places = [chunk - 10, chunk + 1024 * 1024 - 7, 2 * 1024 * 1024 + 5, 2 * chunk - 3]
    data = bytearray(b"a" * (3 * 1024 * 1024))
    for at in places:
        data[at - 1:at + len(SECRET) + 1] = b" " + SECRET.encode() + b" "
    _path(process).write_bytes(bytes(data) + b"\nthe end\n")

    for url, body in _downloads(process, viewer, viewer_api).items():
        assert _none_of_it(body), url
        assert body.count(REDACTED) == len(places), url
        assert body.endswith("\nthe end\n"), url


def test_the_download_keeps_bytes_that_are_not_utf8_and_characters_split_by_a_read(process, viewer, viewer_api):
    chunk = logfiles.DOWNLOAD_CHUNK_BYTES
    raw = b"b" * (chunk - 1) + "é".encode() + b"\xff\xfe not utf-8\n" + f"key {SECRET}\n".encode()
    _path(process).write_bytes(raw)
    client = Client()
    client.force_login(viewer)

    body = b"".join(client.get(f"/deployments/{process.deployment_id}/processes/{process.pk}/log/download/")
                    .streaming_content)

    assert body == raw.replace(SECRET.encode(), REDACTED.encode())


def test_the_shim_rotates_at_a_line_end_that_fits_under_its_cap(tmp_path):
    path = tmp_path / "engine.log"
    log = CappedLog(str(path), CAP)
    log.write(b"x" * 900 + b"\ndb url postgres://app:" + SECRET[:15].encode())
    log.write(SECRET[15:].encode() + b" done\n" + b"y" * 200 + b"\n")

    rotated = Path(f"{path}.1").read_bytes()
    assert rotated.endswith(f"db url postgres://app:{SECRET} done\n".encode())
    assert path.read_bytes() == b"y" * 200 + b"\n"
    assert len(rotated) <= CAP


def test_the_shim_keeps_its_cap_and_writes_no_line_without_its_start(tmp_path):
    path = tmp_path / "engine.log"
    log = CappedLog(str(path), CAP)
    # one read larger than the cap: its newest bytes from the first line start among them
    log.write(b"old line\n" + b"p" * 2000 + b"\n" + b"q" * 500 + b"\nr" + SECRET[:10].encode())
    assert path.read_bytes() == b"q" * 500 + b"\nr" + SECRET[:10].encode()
    # one with no line start among its newest bytes: nothing of that line is written, up to its end
    log.write(SECRET[10:].encode() + b"\n")
    log.write(b"s" * 3000)
    log.write(b"t" * 100 + b"\nnext line\n")
    log.note("process 1 ended with exit code 0")
    content = path.read_bytes()
    assert content.startswith(b"q" * 500 + b"\nr" + SECRET.encode() + b"\nnext line\n[ceiling-shim ")
    assert b"sss" not in content and b"ttt" not in content
    assert len(content) <= CAP


@pytest.mark.parametrize("cut_at", [5, 15, 29])
def test_a_tail_whose_window_starts_inside_a_secret_leaves_that_line_out(tmp_path, cut_at):
    path = tmp_path / "engine.log"
    path.write_text(f"first\nkey {SECRET} end\nlast line\n")
    window = len(f"{SECRET[cut_at:]} end\nlast line\n")

    assert log_tail(path, max_bytes=window, lines=10) == "last line"
    # a window starting at a line start keeps that line
    assert log_tail(path, max_bytes=window + len(f"key {SECRET[:cut_at]}"), lines=10) == f"key {SECRET} end\nlast line"


def test_a_tail_reading_only_the_current_file_leaves_out_a_line_the_rotation_split(tmp_path):
    path = tmp_path / "engine.log"
    Path(f"{path}.1").write_text(f"first\nkey {SECRET[:12]}")
    path.write_text(f"{SECRET[12:]} end\nlast line\n")

    assert log_tail(path, max_bytes=path.stat().st_size, lines=10) == "last line"
    assert log_tail(path, max_bytes=path.stat().st_size + 4, lines=10) == "last line"
    assert log_tail(path, lines=10) == f"first\nkey {SECRET} end\nlast line"
    Path(f"{path}.1").write_text("first\n")
    assert log_tail(path, max_bytes=path.stat().st_size, lines=10) == f"{SECRET[12:]} end\nlast line"


def test_the_tail_endpoints_show_no_end_of_a_secret_their_window_cut(process, viewer, viewer_api):
    from deployments.services import LOG_TAIL_MAX_BYTES

    end = f"{SECRET[15:]} end\n" + "".join(f"line {i}\n" for i in range(10))
    filler = "f" * (LOG_TAIL_MAX_BYTES - len(end))
    _path(process).write_text(f"start\nkey {SECRET[:15]}" + end[:len(SECRET) - 15] + filler + end[len(SECRET) - 15:])

    for where, tail in _tails(process, viewer, viewer_api).items():
        assert SECRET[15:] not in tail and SECRET[20:] not in tail, where
        assert "line 0\nline 1" in tail and "line 9" in tail, where


def test_a_stream_in_any_pieces_masks_what_the_whole_text_masks(db, monkeypatch):
    from controlplane import redaction

    monkeypatch.setattr(redaction, "_known_values", set())
    register_secret_value(SECRET)
    rng = random.Random(20261207)
    words = ["engine", "ready", SECRET, f"%5A{SECRET[1:]}", "hf_" + "A1b2C3d4E5f6G7h8J9k0L1m2N3p4Q5r6",
             "Bearer abcdefgh12345678", "HF_TOKEN=sekritvalue", "token:", "x" * 300]
    for separators in ([" ", " ", "\n", "="], [" ", "="]):   # with line ends, and one long line
        for _ in range(10):
            text = "".join(rng.choice(words) + rng.choice(separators) for _ in range(rng.randint(200, 4000)))
            stream, out, at = RedactingStream(), [], 0
            while at < len(text):
                size = rng.randint(1, 9000)
                out.append(stream.feed(text[at:at + size]))
                at += size
            out.append(stream.end())
            assert "".join(out) == redact_text(text)


def test_the_shim_never_lets_a_file_pass_its_cap(tmp_path):
    path = tmp_path / "engine.log"
    log = CappedLog(str(path), CAP)
    rng = random.Random(7)
    for _ in range(500):
        size = rng.choice([rng.randint(1, 200), rng.randint(200, 3 * CAP)])
        log.write(bytes(rng.choice(b"abc\n") for _ in range(size)))
        for part in (path, Path(f"{path}.1")):
            assert not part.exists() or part.stat().st_size <= CAP
