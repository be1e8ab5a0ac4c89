"""``GET /api/kernel-whatif/`` refuses a parameter given empty (``share=``, a script whose variable
was unset) with a 400 naming it, in the words every other read uses
(controlplane.drf_defaults.empty_query_value), never reading it as left out: an empty share was
silently the seed's 0.63. Left out, the share is still that default, said so in ``share_source``."""
from __future__ import annotations

import pytest

from kernels.whatif import DEFAULT_SHARE


def _empty(key: str) -> list[str]:
    return [f"query parameter '{key}' is empty: give a value or leave it out"]


@pytest.mark.parametrize("key", ["sweep", "share", "speedup", "best"])
def test_each_whatif_parameter_given_empty_is_a_400_naming_it(viewer_api, seed_pd_sweep, key):
    query = {"sweep": seed_pd_sweep.pk, "share": 0.5, "speedup": 2, key: ""}
    if key == "best":
        del query["speedup"]   # best stands in for speedup: one of them, as the endpoint takes them
    answer = viewer_api.get("/api/kernel-whatif/", query)
    assert answer.status_code == 400, answer.content
    assert answer.json()[key] == _empty(key)
    assert "projected_tok_s" not in answer.content.decode()   # nothing projected with a value not given


def test_an_empty_share_is_refused_not_taken_as_the_default(viewer_api, seed_pd_sweep):
    answer = viewer_api.get(f"/api/kernel-whatif/?sweep={seed_pd_sweep.pk}&speedup=2&share=")
    assert (answer.status_code, answer.json()) == (400, {"share": _empty("share")})
    # every problem of the query at once: empty parameters beside an unknown key
    answer = viewer_api.get(f"/api/kernel-whatif/?sweep={seed_pd_sweep.pk}&speedup=&share=&shares=0.5")
    assert answer.status_code == 400
    assert answer.json() == {"speedup": _empty("speedup"), "share": _empty("share"),
                             "shares": ["unknown field 'shares'; allowed: sweep, share, speedup, best, format"]}


def test_a_share_left_out_or_given_is_answered(viewer_api, seed_pd_sweep):
    left_out = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "speedup": 2})
    assert left_out.status_code == 200
    assert DEFAULT_SHARE == 0.63   # the seed deployment's measured share of decode step time
    assert left_out.json()["share"] == DEFAULT_SHARE and left_out.json()["share_source"].startswith("default: 0.63, ")
    given = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "speedup": 2, "share": 0.5})
    assert given.status_code == 200
    assert (given.json()["share"], given.json()["share_source"]) == (0.5, "given")
