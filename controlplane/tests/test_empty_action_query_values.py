"""A query parameter of an API read other than a list given empty (``GET
/api/deployments/7/telemetry/?since=``, a script whose variable was unset) is a 400 naming it, as a
list's filter given empty is (controlplane.drf_defaults.empty_filter_errors), never read as left
out. Paging (``limit``, ``offset``), ``format`` and a parameter whose field takes a blank on purpose
(the comparison's ``ids=``, the node telemetry's ``fields=``) keep taking an empty value."""
from __future__ import annotations

import time

import pytest

from controlplane.api_urls import router
from controlplane.drf_defaults import ORDER_KEYS, PAGE_KEYS, _blank_taking_keys, declared_query_keys
from deployments.models import ServerProcess
from kernels.models import KernelJob, KernelPackage

#: Every query parameter of every read other than a list that refuses an empty value:
#: (URL, parameter, a value it takes).
CASES = [
    ("/api/nodes/{node}/telemetry/", "since", "{hour_ago}"),
    ("/api/nodes/{node}/telemetry/", "until", "{now}"),
    ("/api/recipes/{recipe}/diff/", "a", "1"),
    ("/api/recipes/{recipe}/diff/", "b", "1"),
    ("/api/recipes/{recipe}/dry-run/", "version", "1"),
    ("/api/deployments/{deployment}/telemetry/", "since", "{hour_ago}"),
    ("/api/deployments/{deployment}/telemetry/", "until", "{now}"),
    ("/api/processes/{process}/log/", "lines", "5"),
    ("/api/kernel-jobs/{job}/chart/", "shape", "small"),
]


@pytest.fixture
def more_rows(rows) -> dict:
    """``rows`` and its deployment's process and a kernel job (by id)."""
    process = ServerProcess.objects.filter(deployment_id=rows["deployment"]).first()
    package = KernelPackage.objects.create(name="toy_attn", title="toy", language="triton",
                                           manifest={"shapes": {"small": {}}}, source_hash="0" * 64, path="/x")
    job = KernelJob.objects.create(package=package, target_cc="9.0", status="done")
    now = int(time.time())
    return {**rows, "process": process.pk, "job": job.pk, "now": now, "hour_ago": now - 3600}


def test_the_table_holds_every_such_parameter_of_every_viewset():
    found = set()
    for prefix, viewset, _basename in router.registry:
        for action in getattr(viewset, "query_keys", None) or {}:
            if action == "list" or action in getattr(viewset, "query_keys_reported_by_action", ()):
                continue
            view = viewset()
            view.action = action
            skipped = {*PAGE_KEYS, "format", *ORDER_KEYS, *_blank_taking_keys(view)}
            found |= {(prefix, action, key) for key in declared_query_keys(view) if key not in skipped and "<" not in key}
    # an action that reports its query's problems itself (a kernel job's chart) refuses its empty
    # parameters itself: in CASES too, checked below, but not found here
    reported = {(prefix, action) for prefix, viewset, _basename in router.registry
                for action in getattr(viewset, "query_keys_reported_by_action", ())}
    cases = {(url.split("/")[2], url.split("/")[4].replace("-", "_"), key) for url, key, _ in CASES}
    assert found == {case for case in cases if case[:2] not in reported}


@pytest.mark.parametrize("url, key, value", CASES)
def test_a_parameter_given_empty_is_a_400_naming_it(admin_api, more_rows, url, key, value):
    answer = admin_api.get(f"{url.format(**more_rows)}?{key}=")
    assert answer.status_code == 400, (url, key, answer.content)
    assert answer.json() == {key: [f"query parameter '{key}' is empty: give a value or leave it out"]}
    # beside an unknown key, in one 400
    answer = admin_api.get(f"{url.format(**more_rows)}?{key}=&bogus=1")
    assert answer.status_code == 400
    assert set(answer.json()) == {key, "bogus"}


@pytest.mark.parametrize("url, key, value", CASES)
def test_the_same_parameter_given_a_value_is_not_refused_as_empty(admin_api, more_rows, url, key, value):
    answer = admin_api.get(url.format(**more_rows), {key: value.format(**more_rows)})
    assert key not in (answer.json() if answer.status_code == 400 else {}), (url, key, answer.content)


def test_paging_format_and_blank_taking_parameters_keep_taking_an_empty_value(admin_api, more_rows):
    assert admin_api.get(f"/api/deployments/{more_rows['deployment']}/events/?limit=&offset=").status_code == 200
    assert admin_api.get(f"/api/runs/{more_rows['run']}/export/?format=").status_code == 200
    assert admin_api.get(f"/api/nodes/{more_rows['node']}/telemetry/?fields=").status_code == 200


def test_the_role_is_checked_first(anon_api, outsider_api, more_rows):
    url = f"/api/deployments/{more_rows['deployment']}/telemetry/?since="
    assert anon_api.get(url).status_code == 401
    assert outsider_api.get(url).status_code == 403
