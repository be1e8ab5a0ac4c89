"""A server process's full log downloads through the API (``/api/processes/<id>/log/download/``)
with a token, masked exactly as the deployment page's download (the same bytes, the same file
name), for a viewer and up; 401 without credentials, 403 without a role, a JSON 404 for an
unknown process or a process without a log file; and the schema documents it, the tail's 404
included."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from controlplane import redaction
from controlplane.redaction import REDACTED
from deployments.services import secret_create
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = pytest.mark.django_db

HF_VALUE = "hf_SUPERSECRET_abc123XYZ"
PLAIN_VALUE = "violet lantern quarry 58"  # no token shape: only the stored value can catch it


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """This process as a web server started after the secrets were stored: nothing registered,
    nothing read from the database yet."""
    monkeypatch.setattr(redaction, "_known_values", set())
    monkeypatch.setattr(redaction, "_stored_read_at", None)


@pytest.fixture
def process(settings, tmp_path, admin_user):
    """A process whose log was rotated once: ``single0.log.1`` (older) and ``single0.log``, each
    with a stored secret value in it, and a byte that is not UTF-8."""
    settings.CEILING_LOG_DIR = tmp_path / "logs"
    secret_create(user=admin_user, name="hf-token", value=HF_VALUE)
    secret_create(user=admin_user, name="plain", value=PLAIN_VALUE)
    deployment = deployment_row_create(recipe=recipe_row_create(node=cpu_node_create()))
    row = deployment.processes.get()
    log_path = Path(settings.CEILING_LOG_DIR) / f"deployment-{deployment.pk}" / "single0.log"
    log_path.parent.mkdir(parents=True)
    Path(f"{log_path}.1").write_bytes(f"engine started\nfetching with credential {HF_VALUE}\n".encode())
    log_path.write_bytes(f"login as {PLAIN_VALUE} done\n".encode() + b"raw byte \xff here\n")
    row.log_path = str(log_path)
    row.save(update_fields=["log_path"])
    return row


def download(api, pk: int, **headers):
    return api.get(f"/api/processes/{pk}/log/download/", **headers)


def test_it_downloads_the_whole_log_masked_like_the_page_download(process, viewer_api, viewer):
    response = download(viewer_api, process.pk)

    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    name = f"deployment-{process.deployment_id}-single-{process.ordinal}.log"
    assert response["Content-Disposition"] == f'attachment; filename="{name}"'
    body = b"".join(response.streaming_content)
    assert body == (f"engine started\nfetching with credential {REDACTED}\n"
                    f"login as {REDACTED} done\nraw byte ").encode() + b"\xff here\n"
    page = Client()
    page.force_login(viewer)
    from_page = page.get(reverse("deployments:process-log-download", args=[process.deployment_id, process.pk]))
    assert b"".join(from_page.streaming_content) == body
    assert from_page["Content-Disposition"] == response["Content-Disposition"]


def test_it_answers_whatever_the_client_accepts(process, viewer_api):
    response = download(viewer_api, process.pk, HTTP_ACCEPT="text/plain")

    assert response.status_code == 200
    assert b"".join(response.streaming_content).startswith(b"engine started\n")


def test_it_needs_credentials_and_a_role(process, anon_api, outsider_api, operator_api, admin_api):
    anonymous = download(anon_api, process.pk)
    no_role = download(outsider_api, process.pk)

    assert anonymous.status_code == 401
    assert anonymous.json() == {"detail": "Authentication credentials were not provided."}
    assert no_role.status_code == 403
    assert no_role.json() == {"detail": "This needs the viewer role; your account has no role."}
    assert download(operator_api, process.pk).status_code == 200
    assert download(admin_api, process.pk).status_code == 200


def test_it_answers_a_json_404_for_an_unknown_process_and_one_without_a_log_file(process, viewer_api, tmp_path):
    unknown = download(viewer_api, 424242)
    assert unknown.status_code == 404
    assert unknown["Content-Type"] == "application/json"
    assert set(unknown.json()) == {"detail"}

    for log_path in ("", str(tmp_path / "elsewhere.log"), str(Path(process.log_path).with_name("gone.log"))):
        (tmp_path / "elsewhere.log").write_text(f"not a supervisor log {HF_VALUE}\n")
        process.log_path = log_path
        process.save(update_fields=["log_path"])

        response = download(viewer_api, process.pk, HTTP_ACCEPT="text/plain")

        assert response.status_code == 404, log_path
        assert response.json() == {"detail": "No log file for this process."}


def test_the_schema_documents_the_download_and_the_tails_404(viewer_api):
    schema = viewer_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    detail = {"$ref": "#/components/schemas/Detail"}

    operation = schema["paths"]["/api/processes/{id}/log/download/"]["get"]
    assert set(operation["responses"]) == {"200", "400", "401", "403", "404"}   # 400: a format, a key not taken
    assert operation["responses"]["200"]["content"] == {"text/plain": {"schema": {"type": "string"}}}
    for code in ("401", "403", "404"):
        assert operation["responses"][code]["content"]["application/json"]["schema"] == detail
    assert "no log file" in operation["responses"]["404"]["description"]
    assert [p["name"] for p in operation["parameters"]] == ["id"]

    tail = schema["paths"]["/api/processes/{id}/log/"]["get"]["responses"]
    assert set(tail) == {"200", "400", "401", "403", "404"}
    assert tail["404"]["content"]["application/json"]["schema"] == detail


def test_the_api_tail_reads_only_a_log_inside_the_log_directory(process, viewer_api, tmp_path):
    inside = viewer_api.get(f"/api/processes/{process.pk}/log/", {"lines": 5})
    assert inside.status_code == 200
    assert f"login as {REDACTED} done\n" in inside.json()["text"]

    outside = tmp_path / "elsewhere.log"
    outside.write_text("a file the supervisor never wrote\n")
    for log_path in (str(outside), str(Path(settings_log_dir(process)) / ".." / "elsewhere.log"), "relative.log"):
        process.log_path = log_path
        process.save(update_fields=["log_path"])

        response = viewer_api.get(f"/api/processes/{process.pk}/log/", {"lines": 5})

        assert response.status_code == 200, log_path
        assert response.json()["text"] == "", log_path


def settings_log_dir(process) -> Path:
    """The log directory the fixture set: two levels above the process's log file."""
    return Path(process.log_path).parent.parent


def test_a_rotated_part_linked_outside_the_log_directory_is_never_read(process, viewer_api, tmp_path):
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("NAME=not a log of this process\n")
    rotated = Path(f"{process.log_path}.1")
    rotated.unlink()
    rotated.symlink_to(outside)

    tail = viewer_api.get(f"/api/processes/{process.pk}/log/", {"lines": 5})
    download = viewer_api.get(f"/api/processes/{process.pk}/log/download/")

    assert tail.status_code == 200 and tail.json()["text"] == ""
    assert download.status_code == 404


@pytest.mark.parametrize("fmt", ["xml", "json", "csv"])
def test_a_format_the_download_does_not_answer_in_is_refused_not_ignored(process, viewer_api, fmt):
    response = viewer_api.get(f"/api/processes/{process.pk}/log/download/?format={fmt}")

    assert response.status_code == 400
    assert response.json() == {"format": [f"the log downloads as text/plain only: leave format out; got '{fmt}'"]}
