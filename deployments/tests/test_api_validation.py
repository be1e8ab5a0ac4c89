"""Every recipe validation rule, sent through the API: a bad input is a 400 whose JSON names
the field by its dotted path, and no input at all produces a 500.

The base payload is the seed PD recipe on the seed node (prefill GPU0-3 / NUMA node 0 on
:30000 with bootstrap :8998, decode GPU4-7 / NUMA node 1 on :30001, router :30080).
"""
from __future__ import annotations

import copy
import json

import pytest

from deployments.examples import example_recipe
from deployments.models import Recipe
from deployments.tests.factories import secret_row_create, seed_node_create

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def model_roots(settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]


@pytest.fixture(autouse=True)
def node(db):
    return seed_node_create()


@pytest.fixture
def api(operator_api):
    # Django's test client re-raises view exceptions; a 500 would fail the test loudly.
    return operator_api


def payload(mutate=None) -> dict:
    example = example_recipe("seed-v4-flash-pd")
    data = copy.deepcopy({k: example[k] for k in ("name", "description", "engine", "topology", "node", "spec")})
    if mutate:
        mutate(data["spec"])
    return data


def post_spec(api, mutate):
    return api.post("/api/recipes/", payload(mutate), format="json")


def assert_field_error(response, field: str, fragment: str = "") -> list[str]:
    assert response.status_code == 400, (response.status_code, response.content[:500])
    body = response.json()
    assert field in body, body
    assert all(isinstance(m, str) for m in body[field])
    if fragment:
        assert any(fragment in m for m in body[field]), body[field]
    assert Recipe.objects.count() == 0
    return body[field]


def roles(spec) -> dict:
    return spec["roles"]


# --- the rules ---------------------------------------------------------------------------------


def test_it_refuses_an_empty_cpu_list_instead_of_deploying_unpinned(api):
    def mutate(spec):
        roles(spec)["decode"]["cpus"] = ""

    messages = assert_field_error(post_spec(api, mutate), "spec.roles.decode.cpus")
    assert messages == ["empty; omit the key (or use null) for no pinning, or give a CPU list like 0-15"]


def test_it_refuses_gpus_shared_between_prefill_and_decode(api):
    def mutate(spec):
        roles(spec)["decode"]["gpus"] = [3, 4, 5, 6]

    response = post_spec(api, mutate)
    assert_field_error(response, "spec.roles.prefill.gpus", "GPU 3 is also used by role decode")
    assert_field_error(response, "spec.roles.decode.gpus", "GPU 3 is also used by role prefill")


def test_it_refuses_tp_that_does_not_match_the_gpu_count(api):
    def mutate(spec):
        roles(spec)["prefill"]["tp"] = 2

    assert_field_error(post_spec(api, mutate), "spec.roles.prefill.tp", "lists 4")


def test_it_refuses_duplicate_ports(api):
    def mutate(spec):
        roles(spec)["decode"]["port"] = 30000

    response = post_spec(api, mutate)
    assert_field_error(response, "spec.roles.decode.port", "port 30000 also used by spec.roles.prefill.port")


def test_it_refuses_a_port_flag_clashing_with_the_router(api):
    def mutate(spec):
        roles(spec)["prefill"]["bootstrap_port"] = 30080

    assert_field_error(post_spec(api, mutate), "spec.roles.prefill.bootstrap_port", "30080")


def test_it_refuses_a_numa_node_the_node_lacks(api):
    def mutate(spec):
        roles(spec)["decode"]["numa_node"] = 2

    assert_field_error(post_spec(api, mutate), "spec.roles.decode.numa_node", "NUMA node 2 does not exist")


def test_it_refuses_a_gpu_the_node_lacks(api):
    def mutate(spec):
        roles(spec)["decode"]["gpus"] = [4, 5, 6, 8]

    assert_field_error(post_spec(api, mutate), "spec.roles.decode.gpus", "GPU 8 does not exist")


def test_it_refuses_cpus_outside_the_roles_numa_node(api):
    def mutate(spec):
        roles(spec)["prefill"]["cpus"] = "28-35"

    assert_field_error(post_spec(api, mutate), "spec.roles.prefill.cpus", "32-35")


def test_it_refuses_a_model_path_outside_the_model_roots(api):
    def mutate(spec):
        spec["model"] = {"path": "/etc/DeepSeek-V4-Flash"}

    assert_field_error(post_spec(api, mutate), "spec.model.path", "not under a model root")


def test_it_refuses_a_model_path_with_dot_dot(api):
    def mutate(spec):
        spec["model"] = {"path": "/models/../etc/shadow"}

    assert_field_error(post_spec(api, mutate), "spec.model.path", "..")


@pytest.mark.parametrize(
    ("field", "mutate"),
    [
        ("spec.model.name", lambda s: s.update(model={"name": "--trust-remote-code"})),
        ("spec.served_model_name", lambda s: s.update(served_model_name="-x")),
        ("spec.roles.decode.flags.attention-backend", lambda s: roles(s)["decode"].update(flags={"attention-backend": "--evil"})),
        ("spec.roles.prefill.flags.chat-template", lambda s: roles(s)["prefill"].update(flags={"chat-template": "-/x"})),
    ],
)
def test_it_refuses_values_starting_with_a_dash_where_a_path_or_name_is_expected(api, field, mutate):
    assert_field_error(post_spec(api, mutate), field)


def test_it_refuses_unknown_flags(api):
    def mutate(spec):
        roles(spec)["decode"]["flags"] = {"mem-fraction-statik": 0.8}

    messages = assert_field_error(post_spec(api, mutate), "spec.roles.decode.flags.mem-fraction-statik", "allowlist")
    assert "mem-fraction-static" in messages[0]


def test_it_points_an_unknown_flag_at_the_recipe_reference(api):
    def mutate(spec):
        roles(spec)["decode"]["flags"] = {"totally-unknown": 1}

    messages = assert_field_error(post_spec(api, mutate), "spec.roles.decode.flags.totally-unknown", "allowed: ")
    assert "mem-fraction-static" in messages[0] and "docs/recipes.md" in messages[0]


def test_it_refuses_a_role_pinned_to_another_numa_node_than_its_gpus(api):
    def mutate(spec):
        roles(spec)["decode"]["numa_node"] = 0

    messages = assert_field_error(post_spec(api, mutate), "spec.roles.decode.numa_node",
                                  "GPUs 4,5,6,7 are on NUMA node 1, not 0")
    assert "allow_cross_numa: true" in messages[0]


def test_it_accepts_the_cross_numa_role_that_opts_in_and_warns_in_the_dry_run(api):
    def mutate(spec):
        roles(spec)["decode"].update(numa_node=0, allow_cross_numa=True)

    response = post_spec(api, mutate)
    assert response.status_code == 201, response.content[:500]
    assert response.json()["spec"]["roles"]["decode"]["allow_cross_numa"] is True
    plan = api.get(f"/api/recipes/{response.json()['id']}/dry-run/").json()["plan"]
    decode = next(p for p in plan["processes"] if p["role"] == "decode")
    assert decode["wrapper"][1:] == ["--cpunodebind=0", "--membind=0", "--"]
    assert decode["env"]["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert plan["warnings"] == [
        "decode: GPUs 4,5,6,7 are on NUMA node 1, not 0 (allowed by allow_cross_numa); every host-GPU copy crosses "
        "the link between NUMA nodes",
        # on NUMA node 0 the decode now takes the prefill's CPUs too
        "prefill and decode are both pinned to CPUs 0-31: they compete for them (CPU work of one delays the "
        "other's steps); give each role its own CPUs where the node has them"]


@pytest.mark.parametrize(
    ("flag", "value", "fragment"),
    [
        ("attention-backend", "evil", "must be one of triton, torch_native"),
        ("chat-template", "/etc/shadow", "'/etc/shadow' is not under a model root (/models)"),
        ("tokenizer-path", "/etc", "'/etc' is not under a model root"),
        ("reasoning-parser", "a/b", "must be a name"),
    ],
)
def test_it_refuses_flag_values_outside_their_type(api, flag, value, fragment):
    def mutate(spec):
        roles(spec)["decode"]["flags"] = {flag: value}

    assert_field_error(post_spec(api, mutate), f"spec.roles.decode.flags.{flag}", fragment)


def test_it_accepts_a_built_in_chat_template_name(api):
    def mutate(spec):
        roles(spec)["decode"]["flags"] = {"chat-template": "chatml", "attention-backend": "flashmla"}

    response = post_spec(api, mutate)
    assert response.status_code == 201, response.content[:500]
    assert response.json()["spec"]["roles"]["decode"]["flags"] == {"attention-backend": "flashmla",
                                                                   "chat-template": "chatml"}


def test_it_refuses_flags_ceiling_renders_itself(api):
    def mutate(spec):
        roles(spec)["prefill"]["flags"] = {"tp-size": 8}

    assert_field_error(post_spec(api, mutate), "spec.roles.prefill.flags.tp-size", "spec.roles.prefill")


@pytest.mark.parametrize("name", ["LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "NCCL_NET_PLUGIN", "DYLD_INSERT_LIBRARIES"])
def test_it_refuses_env_that_changes_what_code_is_loaded(api, name):
    def mutate(spec):
        spec["env"] = {name: "/tmp/evil.so"}

    assert_field_error(post_spec(api, mutate), f"spec.env.{name}", "not allowed")


def test_it_refuses_ld_preload_in_a_roles_env(api):
    def mutate(spec):
        roles(spec)["router"]["env"] = {"LD_PRELOAD": "/tmp/evil.so"}

    assert_field_error(post_spec(api, mutate), "spec.roles.router.env.LD_PRELOAD", "not allowed")


def test_it_refuses_a_reference_to_a_missing_secret(api):
    secret_row_create(name="hf-token")

    def mutate(spec):
        spec["secrets"] = {"HF_TOKEN": "hf-token-typo"}

    assert_field_error(post_spec(api, mutate), "spec.secrets.HF_TOKEN", "'hf-token-typo' does not exist")


def test_it_accepts_the_same_reference_when_the_secret_exists(api):
    secret_row_create(name="hf-token")

    def mutate(spec):
        spec["secrets"] = {"HF_TOKEN": "hf-token"}

    assert post_spec(api, mutate).status_code == 201


def test_it_reports_every_problem_at_once(api):
    def mutate(spec):
        spec["model"] = {"path": "/models/../x"}
        roles(spec)["decode"]["numa_node"] = 9
        spec["env"] = {"LD_PRELOAD": "x"}

    response = post_spec(api, mutate)
    assert response.status_code == 400
    assert {"spec.model.path", "spec.roles.decode.numa_node", "spec.env.LD_PRELOAD"} <= set(response.json())


def test_it_refuses_the_same_rules_on_update(api):
    pk = api.post("/api/recipes/", payload(), format="json").json()["id"]
    bad = payload()
    bad["spec"]["roles"]["decode"]["gpus"] = [0, 4, 5, 6]
    response = api.patch(f"/api/recipes/{pk}/", {"spec": bad["spec"]}, format="json")
    assert response.status_code == 400
    assert "spec.roles.decode.gpus" in response.json()
    assert Recipe.objects.get(pk=pk).version == 1


# --- garbage -----------------------------------------------------------------------------------


def with_top(**changes):
    data = payload()
    data.update(changes)
    return data


def without(key):
    data = payload()
    del data[key]
    return data


GARBAGE = [
    ("null spec", with_top(spec=None), "spec"),
    ("string spec", with_top(spec="roles: prefill"), "spec"),
    ("list spec", with_top(spec=[1, 2, 3]), "spec"),
    ("missing spec", without("spec"), "spec"),
    ("unknown engine", with_top(engine="tensorrt-llm"), "engine"),
    ("engine as a number", with_top(engine=7), "engine"),
    ("unknown topology", with_top(topology="ring"), "topology"),
    ("unknown node", with_top(node="no-such-node"), "node"),
    ("node as an object", with_top(node={"name": "seed-8gpu"}), "node"),
    ("name starting with a dash", with_top(name="-rf"), "name"),
    ("name with spaces", with_top(name="my recipe"), "name"),
    ("name as a list", with_top(name=["a"]), "name"),
    ("name too long", with_top(name="a" * 64), "name"),
    ("description as an object", with_top(description={"a": 1}), "description"),
    ("huge expected_version", with_top(expected_version=10**30), "expected_version"),
    ("roles as a string", payload(lambda s: s.update(roles="prefill,decode")), "spec.roles"),
    ("role as a list", payload(lambda s: roles(s).update(prefill=[0, 1])), "spec.roles.prefill"),
    ("gpus as a string", payload(lambda s: roles(s)["prefill"].update(gpus="0-3")), "spec.roles.prefill.gpus"),
    ("gpus with a bool", payload(lambda s: roles(s)["prefill"].update(gpus=[True, 1, 2, 3])), "spec.roles.prefill.gpus"),
    ("huge gpu id", payload(lambda s: roles(s)["prefill"].update(gpus=[10**40, 1, 2, 3])), "spec.roles.prefill.gpus"),
    ("huge tp", payload(lambda s: roles(s)["prefill"].update(tp=2**70)), "spec.roles.prefill.tp"),
    ("huge port", payload(lambda s: roles(s)["decode"].update(port=10**25)), "spec.roles.decode.port"),
    ("negative port", payload(lambda s: roles(s)["decode"].update(port=-1)), "spec.roles.decode.port"),
    ("privileged port", payload(lambda s: roles(s)["router"].update(port=80)), "spec.roles.router.port"),
    ("port as a float", payload(lambda s: roles(s)["decode"].update(port=30001.5)), "spec.roles.decode.port"),
    ("huge numa node", payload(lambda s: roles(s)["decode"].update(numa_node=10**20)), "spec.roles.decode.numa_node"),
    ("numa node as a string", payload(lambda s: roles(s)["decode"].update(numa_node="1")), "spec.roles.decode.numa_node"),
    ("flags as a list", payload(lambda s: roles(s)["decode"].update(flags=["--x"])), "spec.roles.decode.flags"),
    ("flag value of the wrong type", payload(lambda s: roles(s)["decode"].update(flags={"mem-fraction-static": "lots"})),
     "spec.roles.decode.flags.mem-fraction-static"),
    ("flag value out of range", payload(lambda s: roles(s)["decode"].update(flags={"mem-fraction-static": 1e308})),
     "spec.roles.decode.flags.mem-fraction-static"),
    ("env as a list", payload(lambda s: s.update(env=["A=1"])), "spec.env"),
    ("env value as an object", payload(lambda s: s.update(env={"NCCL_DEBUG": {"a": 1}})), "spec.env.NCCL_DEBUG"),
    ("secrets as a string", payload(lambda s: s.update(secrets="hf-token")), "spec.secrets"),
    ("unknown top-level spec key", payload(lambda s: s.update(command=["rm", "-rf", "/"])), "spec.command"),
    ("unknown role key", payload(lambda s: roles(s)["decode"].update(argv=["--x"])), "spec.roles.decode.argv"),
    ("model as a string", payload(lambda s: s.update(model="/models/x")), "spec.model"),
    ("NUL in a string", payload(lambda s: s.update(served_model_name="a\u0000b")), "spec.served_model_name"),
    ("NUL in an env value", payload(lambda s: s.update(env={"NCCL_DEBUG": "IN\u0000FO"})), "spec.env.NCCL_DEBUG"),
    ("NUL in a key", payload(lambda s: s.update(env={"NCCL_\u0000DEBUG": "INFO"})), "spec.env"),
    ("a very long string", payload(lambda s: s.update(served_model_name="m" * 100_000)), "spec.served_model_name"),
    # 100k ids (~600 KiB) stays under the 1 MiB body limit, so the spec rules answer it.
    ("a huge GPU list", payload(lambda s: roles(s)["prefill"].update(gpus=list(range(100_000)))),
     "spec.roles.prefill.gpus"),
    ("deeply nested spec", payload(lambda s: s.update(sim=json.loads("[" * 40 + "]" * 40))),
     "spec.sim" + ".0" * 16),
]


@pytest.mark.parametrize(("data", "field"), [g[1:] for g in GARBAGE], ids=[g[0] for g in GARBAGE])
def test_it_answers_garbage_with_a_400_naming_the_field(api, data, field):
    assert_field_error(api.post("/api/recipes/", data, format="json"), field)


PATCH_GARBAGE = [g for g in GARBAGE if not g[0].startswith("missing")]


@pytest.mark.parametrize(("data", "field"), [g[1:] for g in PATCH_GARBAGE], ids=[g[0] for g in PATCH_GARBAGE])
def test_it_answers_garbage_in_a_patch_with_a_400_naming_the_field(api, data, field):
    recipe_id = api.post("/api/recipes/", payload(), format="json").json()["id"]
    response = api.patch(f"/api/recipes/{recipe_id}/", data, format="json")
    assert response.status_code == 400, (response.status_code, response.content[:500])
    assert field in response.json()
    assert Recipe.objects.get(pk=recipe_id).version == 1


RAW_BODIES = [
    ("a JSON list", b"[1, 2, 3]", "non_field_errors"),
    ("a JSON string", b'"recipe"', "non_field_errors"),
    ("JSON null", b"null", "non_field_errors"),
    ("broken JSON", b'{"name": ', "non_field_errors"),
    ("nested 100000 deep", b"[" * 100_000 + b"]" * 100_000, "non_field_errors"),
    ("invalid UTF-8", b'{"name": "\xff\xfe"}', "non_field_errors"),
    ("NaN", b'{"name": "x", "spec": {"stop_grace_s": NaN}}', None),
    ("a lone surrogate", json.dumps(payload(lambda s: s.update(served_model_name="\ud800"))).encode(),
     "spec.served_model_name"),
    ("an empty body", b"", None),
]


@pytest.mark.parametrize(("body", "key"), [r[1:] for r in RAW_BODIES], ids=[r[0] for r in RAW_BODIES])
def test_it_answers_malformed_bodies_with_a_400(api, body, key):
    response = api.generic("POST", "/api/recipes/", body, content_type="application/json")
    assert response.status_code == 400, (response.status_code, response.content[:300])
    data = response.json()
    assert isinstance(data, dict)
    if key:
        assert key in data, data
    assert Recipe.objects.count() == 0


def test_it_answers_an_unsupported_media_type_with_415(api):
    response = api.generic("POST", "/api/recipes/", b"name: x", content_type="application/yaml")
    assert response.status_code == 415
    assert "Unsupported media type" in response.json()["detail"]


def test_it_answers_garbage_revert_bodies_with_a_400(api):
    recipe_id = api.post("/api/recipes/", payload(), format="json").json()["id"]
    for body, field in [
        ({}, "version"),
        ({"version": None}, "version"),
        ({"version": [1]}, "version"),
        ({"version": 10**30}, "version"),
        ({"version": -3}, "version"),
        ({"version": 1, "expected_version": "x"}, "expected_version"),
    ]:
        response = api.post(f"/api/recipes/{recipe_id}/revert/", body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert field in response.json()


def test_it_answers_garbage_secrets_with_a_400(admin_api):
    for body, field in [
        ({"name": "-x", "value": "v-value"}, "name"),
        ({"name": "ok"}, "value"),
        ({"name": "ok", "value": ""}, "value"),
        ({"name": "ok", "value": "a\u0000b"}, "value"),
        ({"name": "ok", "value": {"a": 1}}, "value"),
        ({"name": ["ok"], "value": "v-value"}, "name"),
    ]:
        response = admin_api.post("/api/secrets/", body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert field in response.json()


@pytest.mark.parametrize(
    "url",
    [
        "/api/recipes/?node=%00",
        "/api/recipes/?topology[]=pd",
        "/api/deployments/?recipe=99999999999999999999",
        "/api/deployments/?status=exploded",
        "/api/processes/?role=wizard",
        "/api/nodes/99999999999999999999/",
        "/api/secrets/99999999999999999999/",
    ],
)
def test_it_never_answers_odd_query_strings_with_a_500(admin_api, url):
    response = admin_api.get(url)
    assert response.status_code in (200, 400, 404), (url, response.status_code)
    assert isinstance(response.json(), dict)


# --- body size -----------------------------------------------------------------------------------


def test_it_refuses_a_20_mib_body_with_413_before_parsing_it(api):
    # Not even valid JSON: a 400 would mean the parser ran.
    body = b'{"name": "' + b"x" * (20 * 1024 * 1024)
    response = api.generic("POST", "/api/recipes/", body, content_type="application/json")
    assert response.status_code == 413
    assert response.json() == {"detail": "Request body too large: at most 1048576 bytes are accepted.",
                               "code": "too_large", "limit_bytes": 1048576}
    assert Recipe.objects.count() == 0


def test_it_applies_the_configured_body_limit(api, settings):
    settings.CEILING_API_MAX_BODY_BYTES = 4096
    data = payload()
    data["description"] = "d" * 5000
    response = api.post("/api/recipes/", data, format="json")
    assert response.status_code == 413
    assert response.json()["limit_bytes"] == 4096
    data["description"] = "fits"
    assert api.post("/api/recipes/", data, format="json").status_code == 201


def test_it_refuses_a_body_longer_than_its_declared_length_at_the_limit(api, settings):
    settings.CEILING_API_MAX_BODY_BYTES = 64
    body = json.dumps(payload()).encode()
    # A client that under-declares cannot slip more than the limit past the parser.
    response = api.generic("POST", "/api/recipes/", body, content_type="application/json", CONTENT_LENGTH="60")
    assert response.status_code == 400
    assert Recipe.objects.count() == 0
