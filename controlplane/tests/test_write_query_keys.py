"""A write's query string is judged like a read's (controlplane.drf_defaults.KnownQueryKeys): every
write action takes ``format`` alone, so ``POST /api/recipes/?dry=1`` is a 400 naming ``dry``,
before anything is written, instead of a write that silently ignored the option."""
from __future__ import annotations

import pytest

from deployments.models import Recipe


WRITES = [
    ("post", "/api/recipes/"),
    ("put", "/api/recipes/{recipe}/"),
    ("patch", "/api/recipes/{recipe}/"),
    ("delete", "/api/recipes/{recipe}/"),
    ("post", "/api/recipes/{recipe}/revert/"),
    ("post", "/api/deployments/"),
    ("post", "/api/deployments/{deployment}/stop/"),
    ("post", "/api/deployments/{deployment}/cancel/"),
    ("post", "/api/secrets/"),
    ("delete", "/api/nodes/{node}/"),
    ("post", "/api/sweeps/"),
    ("post", "/api/sweeps/{sweep}/cancel/"),
    ("post", "/api/runs/import/"),
    ("post", "/api/kernel-jobs/"),
    ("post", "/api/kernel-jobs/1/cancel/"),
]


@pytest.mark.parametrize("method, url", WRITES)
def test_a_key_no_write_takes_is_a_400_naming_it(admin_api, rows, method, url):
    answer = getattr(admin_api, method)(url.format(**rows) + "?dry=1&force=yes", {}, format="json")
    assert answer.status_code == 400, (method, url, answer.content)
    assert answer.json() == {"dry": ["unknown field 'dry'; allowed: format"],
                             "force": ["unknown field 'force'; allowed: format"]}


def test_nothing_is_written_and_the_role_still_comes_first(admin_api, operator_api, viewer_api, anon_api, rows):
    body = {"name": "r2", "spec": {}}
    assert operator_api.post("/api/recipes/?dry=1", body, format="json").status_code == 400
    assert operator_api.delete(f"/api/recipes/{rows['recipe']}/?dry=1").status_code == 403
    assert admin_api.delete(f"/api/recipes/{rows['recipe']}/?dry=1").status_code == 400
    assert list(Recipe.objects.values_list("name", flat=True)) == ["r1"]
    assert anon_api.post("/api/recipes/?dry=1", body, format="json").status_code == 401
    assert viewer_api.post("/api/recipes/?dry=1", body, format="json").status_code == 403
    # a key the write does not take is unknown however often it is given; format given twice, as such
    twice = operator_api.post("/api/recipes/?dry=1&dry=2", body, format="json")
    assert twice.status_code == 400 and twice.json() == {"dry": ["unknown field 'dry'; allowed: format"]}
    twice = operator_api.post("/api/recipes/?format=json&format=json", body, format="json")
    assert twice.status_code == 400 and twice.json() == {"format": ["is given 2 times (json, json): give it once"]}
    # format is taken: the write is judged on its body as without it
    plain = operator_api.post("/api/recipes/", {"name": "r2"}, format="json")
    with_format = operator_api.post("/api/recipes/?format=json", {"name": "r2"}, format="json")
    assert (with_format.status_code, with_format.json()) == (plain.status_code, plain.json())
