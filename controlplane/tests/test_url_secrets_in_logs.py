"""A stored secret's value typed into a URL never reaches a log line of the web server: neither
its access lines (``daphne.access``) nor Django's request lines, as typed or percent-encoded."""
from __future__ import annotations

import io
import logging

import pytest
from cryptography.fernet import Fernet
from django.test import AsyncClient

from controlplane import redaction
from controlplane.access_log import RedactedAccessLog, access_log_through_logging
from controlplane.logging import RedactSecretsFilter
from controlplane.redaction import REDACTED
from deployments import services

VALUE = "Sup3rS3cretVal!x"
SPELLINGS = [VALUE, "Sup3rS3cretVal%21x", "Sup3rS3cretVal%21X".replace("X", "x"), "%53up3rS3cretVal%21x"]


@pytest.fixture
def stored(transactional_db, settings, admin_user, monkeypatch):
    """VALUE stored as a secret, read from the database as a freshly started server would."""
    settings.CEILING_SECRETS_KEY = Fernet.generate_key().decode()
    services.secret_create(user=admin_user, name="url-typed", value=VALUE)
    monkeypatch.setattr(redaction, "_known_values", set())
    monkeypatch.setattr(redaction, "_stored_read_at", None)
    return VALUE


def traces(records) -> list[str]:
    lines = [r.getMessage() for r in records]
    return [line for line in lines if "Sup3rS3cretVal" in line or "3cretVal" in line]


def test_daphne_builds_the_masking_access_log():
    import daphne.cli

    import controlplane.asgi  # noqa: F401 - what daphne imports before it builds its server

    assert daphne.cli.AccessLogGenerator is RedactedAccessLog
    assert access_log_through_logging() is False


@pytest.mark.parametrize("path", [f"/login/?next=/{s}" for s in SPELLINGS] + [f"/api/recipes/?node={s}" for s in SPELLINGS])
def test_an_access_line_holds_no_secret_value(stored, caplog, path):
    access = RedactedAccessLog()
    with caplog.at_level(logging.INFO, logger="daphne.access"):
        # as daphne's HTTP protocol reports a finished request (its raw, still percent-encoded URI)
        access("http", "complete", {"client": "127.0.0.1:5000", "path": path, "status": 200, "size": 12, "method": "GET"})
        access("websocket", "connecting", {"client": "127.0.0.1:5000", "path": path})
        access.flush()
    records = [r for r in caplog.records if r.name == "daphne.access"]
    assert len(records) == 2
    assert traces(records) == []
    assert all(REDACTED in r.getMessage() for r in records)
    assert f'"GET {path.split("Sup3r")[0].split("%53")[0]}' in records[0].getMessage()
    access.close()


def test_an_access_log_file_gets_masked_lines(stored):
    out = io.StringIO()
    access = RedactedAccessLog(out)
    access("http", "complete", {"client": "c", "path": "/login/?next=/Sup3rS3cretVal%21x", "status": 302, "size": 0, "method": "GET"})
    access.flush()
    access.close()
    assert "3cretVal" not in out.getvalue() and REDACTED in out.getvalue()


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_request_line_of_django_holds_no_secret_value(stored, caplog, spelling):
    async def get():
        return await AsyncClient().get(f"/{spelling}/nowhere/?node={spelling}")

    import asyncio

    with caplog.at_level(logging.INFO):
        response = asyncio.run(get())
    assert response.status_code == 404
    records = [r for r in caplog.records if r.name.startswith("django")]
    assert any(r.name == "django.request" for r in records)
    assert traces(records) == []


def test_the_configured_loggers_carry_the_redact_filter():
    for name in ("django.request", "django.server", "daphne.access", "daphne.server", "uvicorn.access"):
        assert any(isinstance(f, RedactSecretsFilter) for f in logging.getLogger(name).filters), name


def test_masked_arguments_keep_the_record_formattable(stored):
    # uvicorn's access formatter unpacks record.args: the filter masks them in place
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:1", "GET", "/api/recipes/?node=Sup3rS3cretVal%21x", "1.1", 200), None)
    assert RedactSecretsFilter().filter(record)
    assert isinstance(record.args, tuple) and len(record.args) == 5
    assert "3cretVal" not in record.getMessage() and REDACTED in record.getMessage()
