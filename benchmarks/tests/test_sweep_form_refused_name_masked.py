"""The sweep form refusing a name that holds a stored secret's value or a well-known credential
shows the typed name again masked, as its refusal names them: the value is never repeated on the
page, with a deployment or without one."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from benchmarks.models import BenchmarkSweep
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.tests.factories import secret_api_store

pytestmark = pytest.mark.django_db

VALUE = "pw-Value-0123456"
HF = "hf_abcdefghijklmnopqrstuvwxyz0123456789AB"  # 41 characters


@pytest.mark.parametrize(("name", "shown", "refusal"), [
    (f"probe {VALUE}", "probe ***redacted***",
     "name holds the value of secret &#x27;hub&#x27;: refer to the secret by its name &#x27;hub&#x27; instead"),
    (f"probe {HF}", "probe hf_…(41 chars)", "name holds what looks like a Hugging Face token (hf_…)"),
], ids=["stored secret's value", "credential"])
@pytest.mark.parametrize("with_deployment", [True, False], ids=["deployment", "no deployment"])
def test_a_refused_name_is_shown_again_masked(admin_api, operator, name, shown, refusal, with_deployment):
    secret_api_store(admin_api, name="hub", value=VALUE)
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    client = Client()
    client.force_login(operator)

    page = client.post(reverse("benchmarks:sweep-create"), {
        "deployment": deployment.pk if with_deployment else 999999, "name": name, "concurrency": "1",
        "lengths": "128/16", "requests": "4", "warmup": "0", "seed": "0"})

    body = page.content.decode()
    assert page.status_code == 400
    assert refusal in body
    assert f'id="id_name" name="name" value="{shown}"' in body
    assert VALUE not in body and HF not in body
    assert not BenchmarkSweep.objects.exists()
