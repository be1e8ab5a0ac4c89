"""Launch plans beyond the golden argv: pinning wrappers with and without numactl, secret
redaction, the llama.cpp and sim engines, and the ``dryrun`` management command."""
from __future__ import annotations

import dataclasses
import json

import pytest
from django.core.management import CommandError, call_command

from controlplane.errors import InvalidInput
from controlplane.redaction import REDACTED
from deployments.examples import example_node_facts, example_recipe, local_node_facts_example, seed_node_facts_example
from deployments.launch import launch_plan_render

PY = "/opt/ceiling/venv/bin/python"
NUMACTL = "/usr/bin/numactl"
TOKEN = "hf_abcdefghijklmnopqrstuvwxyz012345"


@pytest.fixture(autouse=True)
def _pinned_settings(settings, tmp_path):
    settings.CEILING_EXECUTABLES = {"python": PY, "numactl": NUMACTL, "vllm": "/opt/vllm", "vllm-router": "/opt/vllm-router"}
    settings.VAR_DIR = tmp_path
    settings.CEILING_MODEL_ROOTS = ["/models", str(tmp_path / "models")]


def render(name: str, *, node=None, spec=None, **kw):
    recipe = example_recipe(name)
    return launch_plan_render(engine=recipe["engine"], topology=recipe["topology"], spec=spec or recipe["spec"],
                              node=node or example_node_facts(recipe["node"]), **kw)


def seed_without_numactl():
    return dataclasses.replace(seed_node_facts_example(), tools={"numactl": None})


# --- pinning -----------------------------------------------------------------------------

def test_it_falls_back_to_sched_setaffinity_without_numactl():
    plan = render("seed-v4-flash-pd", node=seed_without_numactl())
    prefill, decode, router = plan.processes
    assert prefill.argv[:3] == [PY, "-m", "sglang.launch_server"]
    assert prefill.wrapper == []
    assert (prefill.pin_method, prefill.cpus, prefill.numa_node, prefill.mem_nodes) == ("sched_setaffinity", "0-31", 0, "")
    assert (decode.pin_method, decode.cpus) == ("sched_setaffinity", "32-63")
    assert router.pin_method == "none"
    assert plan.warnings == [
        "prefill: numactl is not installed on node seed-8gpu; memory binding to NUMA node(s) 0 is not applied",
        "decode: numactl is not installed on node seed-8gpu; memory binding to NUMA node(s) 1 is not applied",
    ]


def test_it_uses_physcpubind_for_an_explicit_cpu_list():
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    spec["roles"]["prefill"]["cpus"] = "0-15"
    spec["roles"]["decode"].update({"cpus": "32-47", "membind": "local"})
    spec["roles"]["router"].update({"cpus": "63", "membind": [0, 1]})
    plan = render("seed-v4-flash-pd", spec=spec)
    prefill, decode, router = plan.processes
    assert prefill.wrapper == [NUMACTL, "--physcpubind=0-15", "--membind=0", "--"]
    assert (prefill.cpus, prefill.numa_node, prefill.mem_nodes) == ("0-15", 0, "0")
    assert decode.wrapper == [NUMACTL, "--physcpubind=32-47", "--localalloc", "--"]
    assert (decode.numa_node, decode.mem_nodes) == (1, "1")
    assert router.argv[:4] == [NUMACTL, "--physcpubind=63", "--membind=0-1", "--"]
    assert router.argv[4:7] == [PY, "-m", "sglang_router.launch_router"]
    assert (router.numa_node, router.mem_nodes, router.pin_method) == (1, "0-1", "numactl")


def test_it_renders_no_wrapper_for_an_unpinned_role_even_with_numactl():
    spec = example_recipe("seed-v4-flash-tp4")["spec"]
    del spec["roles"]["single"]["numa_node"]
    (single,) = render("seed-v4-flash-tp4", spec=spec).processes
    assert single.argv[0] == PY
    assert (single.pin_method, single.cpus, single.mem_nodes, single.numa_node) == ("none", "", "", None)


# --- secrets -----------------------------------------------------------------------------

def test_it_refuses_to_render_a_role_pinned_away_from_its_gpus():
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    spec["roles"]["decode"]["numa_node"] = 0
    with pytest.raises(InvalidInput) as info:
        render("seed-v4-flash-pd", spec=spec)
    assert list(info.value.errors) == ["spec.roles.decode.numa_node"]
    assert info.value.errors["spec.roles.decode.numa_node"][0].startswith("GPUs 4,5,6,7 are on NUMA node 1, not 0;")


def test_it_renders_an_allowed_cross_numa_role_with_a_warning():
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    spec["roles"]["decode"].update({"numa_node": 0, "allow_cross_numa": True})
    plan = render("seed-v4-flash-pd", spec=spec)
    decode = plan.process("decode")
    assert decode.wrapper == [NUMACTL, "--cpunodebind=0", "--membind=0", "--"]
    assert decode.env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert plan.warnings == [
        "decode: GPUs 4,5,6,7 are on NUMA node 1, not 0 (allowed by allow_cross_numa); every host-GPU copy crosses "
        "the link between NUMA nodes",
        "prefill and decode are both pinned to CPUs 0-31: they compete for them (CPU work of one delays the "
        "other's steps); give each role its own CPUs where the node has them"]
    assert plan.to_dict()["warnings"] == plan.warnings
    assert render("seed-v4-flash-pd").warnings == []


def test_it_warns_that_trust_remote_code_runs_the_models_code():
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    for role in ("prefill", "decode"):
        spec["roles"][role]["flags"] = {"trust-remote-code": True}
    plan = render("seed-v4-flash-pd", spec=spec)
    assert "--trust-remote-code" in plan.process("prefill").argv
    assert plan.warnings == [
        "prefill, decode: trust-remote-code runs the Python code shipped in the model directory "
        "/models/DeepSeek-V4-Flash with the node agent's privileges; use it only for a model whose origin you trust"]
    spec["roles"]["decode"]["flags"] = {"trust-remote-code": False}
    spec["roles"]["prefill"]["flags"] = {}
    assert render("seed-v4-flash-pd", spec=spec).warnings == []


def test_it_redacts_secrets_everywhere_a_person_or_log_sees_them():
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    spec["secrets"] = {"HF_TOKEN": "hf-token"}
    plan = render("seed-v4-flash-pd", spec=spec, secret_values={"hf-token": TOKEN})
    prefill, decode, router = plan.processes
    assert prefill.env["HF_TOKEN"] == TOKEN and decode.env["HF_TOKEN"] == TOKEN
    assert prefill.env_redacted["HF_TOKEN"] == REDACTED
    assert prefill.secret_env == {"HF_TOKEN": "hf-token"}
    assert "HF_TOKEN" not in router.env and router.secret_env == {}
    dumped = json.dumps(plan.to_dict())
    assert TOKEN not in dumped
    assert plan.to_dict()["processes"][0]["env"]["HF_TOKEN"] == REDACTED
    assert all(TOKEN not in arg for p in plan.processes for arg in p.argv)


def test_it_leaves_secret_values_out_when_none_are_given():
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    spec["secrets"] = {"HF_TOKEN": "hf-token"}
    prefill = render("seed-v4-flash-pd", spec=spec).process("prefill")
    assert "HF_TOKEN" not in prefill.env
    assert prefill.env_redacted["HF_TOKEN"] == REDACTED


def test_it_refuses_to_render_with_a_missing_secret_value():
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    spec["secrets"] = {"HF_TOKEN": "hf-token"}
    with pytest.raises(InvalidInput) as info:
        render("seed-v4-flash-pd", spec=spec, secret_values={"other": "x"})
    assert info.value.errors == {"spec.secrets.HF_TOKEN": ["secret 'hf-token' has no value"]}


def test_it_revalidates_the_spec_against_the_node():
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    with pytest.raises(InvalidInput) as info:
        render("seed-v4-flash-pd", spec=spec, node=local_node_facts_example())
    assert "spec.roles.prefill.gpus" in info.value.errors


# --- llama.cpp and sim -------------------------------------------------------------------

def test_it_renders_the_llamacpp_plan_with_threads_from_the_pinned_cpus(tmp_path):
    plan = render("local-llamacpp")
    (single,) = plan.processes
    model = str(tmp_path / "models" / "tiny-random.gguf")
    assert single.argv == [
        PY, "-m", "llama_cpp.server",
        "--model", model, "--model_alias", "tiny-random",
        "--host", "127.0.0.1", "--port", "31090", "--interrupt_requests", "false",
        "--n_ctx", "512", "--n_threads", "2",
    ]
    assert single.env == {"CUDA_VISIBLE_DEVICES": ""}
    assert (single.pin_method, single.cpus, single.gpu_ids) == ("sched_setaffinity", "0-1", [])
    assert single.health_url == "http://127.0.0.1:31090/v1/models"
    assert single.generate_url == "http://127.0.0.1:31090/v1/completions"
    assert plan.warnings == []


def test_it_keeps_explicit_llamacpp_threads_and_renders_boolean_values():
    spec = example_recipe("local-llamacpp")["spec"]
    spec["roles"]["single"]["flags"] = {"n_threads": 1, "use_mmap": False, "verbose": True}
    spec["roles"]["single"]["numa_node"] = 0
    del spec["roles"]["single"]["cpus"]
    node = local_node_facts_example(numactl=True)
    (single,) = render("local-llamacpp", spec=spec, node=node).processes
    assert single.argv[:4] == [NUMACTL, "--cpunodebind=0", "--membind=0", "--"]
    assert single.argv[-6:] == ["--n_threads", "1", "--use_mmap", "false", "--verbose", "true"]


def test_it_renders_the_sim_pd_plan_with_the_real_router():
    plan = render("local-sim-pd")
    prefill, decode, router = plan.processes
    assert prefill.argv == [
        PY, "-m", "deployments.engines.sim_server", "--role", "prefill",
        "--host", "127.0.0.1", "--port", "31000", "--bootstrap-port", "31998",
        "--model-name", "DeepSeek-V4-Flash", "--profile", "seed-sm120-fallback",
    ]
    assert decode.argv == [
        PY, "-m", "deployments.engines.sim_server", "--role", "decode",
        "--host", "127.0.0.1", "--port", "31001",
        "--model-name", "DeepSeek-V4-Flash", "--profile", "seed-sm120-fallback",
    ]
    assert router.argv == [
        PY, "-m", "sglang_router.launch_router", "--pd-disaggregation",
        "--prefill", "http://127.0.0.1:31000", "31998", "--decode", "http://127.0.0.1:31001",
        "--host", "127.0.0.1", "--port", "31080", "--prometheus-port", "31081", "--prometheus-host", "127.0.0.1",
    ]
    assert (prefill.cpus, prefill.pin_method, decode.cpus) == ("0", "sched_setaffinity", "1")
    assert plan.entry_url == "http://127.0.0.1:31080"
    assert plan.startup_timeout_s == 60 and plan.stop_grace_s == 10


def test_it_renders_a_sim_single_server_with_its_own_flags():
    spec = {"model": {"name": "org/tiny"}, "roles": {"single": {"host": "::1", "flags": {"time-scale": 0.5, "seed": 7}}},
            "sim": {"profile": "demo-fast"}}
    plan = launch_plan_render(engine="sim", topology="single", spec=spec, node=local_node_facts_example())
    (single,) = plan.processes
    assert single.argv == [PY, "-m", "deployments.engines.sim_server", "--role", "single", "--host", "::1",
                           "--port", "31000", "--model-name", "org/tiny", "--profile", "demo-fast",
                           "--seed", "7", "--time-scale", "0.5"]
    assert single.health_url == "http://[::1]:31000/health"
    assert single.pin_method == "none"


# --- the dryrun command ------------------------------------------------------------------

@pytest.fixture
def seed_recipe(db, settings):
    from deployments.services import recipe_create
    from deployments.tests.factories import seed_node_create

    node = seed_node_create()
    recipe = example_recipe("seed-v4-flash-pd")
    return recipe_create(user=None, name=recipe["name"], description=recipe["description"], engine="sglang",
                         topology="pd", node=node, spec=recipe["spec"])


def test_it_prints_the_plan_from_the_dryrun_command(seed_recipe, capsys):
    call_command("dryrun", "seed-v4-flash-pd")
    out = capsys.readouterr().out
    assert "recipe seed-v4-flash-pd v1: engine sglang, topology pd, node seed-8gpu" in out
    assert (f"  $ {NUMACTL} --cpunodebind=0 --membind=0 -- {PY} -m sglang.launch_server "
            "--model-path /models/DeepSeek-V4-Flash") in out
    assert '"--disaggregation-bootstrap-port", "8998"]' in out
    assert "  env CUDA_VISIBLE_DEVICES=4,5,6,7" in out
    assert "  pinning: numactl; cpus 32-63; NUMA node 1; memory nodes 1" in out


def test_it_prints_json_for_a_given_version_from_the_dryrun_command(seed_recipe, capsys):
    from deployments.services import recipe_update

    spec = dict(seed_recipe.spec, secrets={"HF_TOKEN": "hf-token"})
    from deployments.tests.factories import secret_row_create

    secret_row_create(name="hf-token", value=TOKEN)
    recipe_update(recipe=seed_recipe, user=None, spec=spec)
    call_command("dryrun", "seed-v4-flash-pd", "--version", "2", "--json")
    data = json.loads(capsys.readouterr().out)
    assert data["version"] == 2
    assert data["plan"]["processes"][0]["env"]["HF_TOKEN"] == REDACTED
    assert data["plan"]["processes"][2]["argv"][-5:] == ["30080", "--prometheus-port", "30081", "--prometheus-host", "0.0.0.0"]
    call_command("dryrun", "seed-v4-flash-pd", "--version", "1", "--json")
    assert "HF_TOKEN" not in json.loads(capsys.readouterr().out)["plan"]["processes"][0]["env"]


def test_it_fails_the_dryrun_command_for_an_unknown_recipe(db):
    with pytest.raises(CommandError, match="^no recipe named 'nope'$") as err:
        call_command("dryrun", "nope")
    # refused input: argparse's status for a bad option, not 1
    assert err.value.returncode == 2


def test_the_dryrun_command_refuses_a_version_below_1_naming_the_option(seed_recipe):
    for raw in ("0", "-3"):
        with pytest.raises(CommandError) as err:
            call_command("dryrun", "seed-v4-flash-pd", "--version", raw)
        assert str(err.value) == f"--version must be a whole number between 1 and 2147483647, got '{raw}'"
        assert err.value.returncode == 2
    # a version the recipe does not have: one line, exit status 2
    with pytest.raises(CommandError) as err:
        call_command("dryrun", "seed-v4-flash-pd", "--version", "7")
    assert "\n" not in str(err.value) and "7" in str(err.value) and err.value.returncode == 2


def test_the_dryrun_command_lists_every_problem_of_a_spec_that_does_not_render_with_status_2(seed_recipe):
    from deployments.models import Recipe

    spec = json.loads(json.dumps(seed_recipe.spec))
    spec["roles"]["prefill"]["port"] = 70000
    spec["roles"]["decode"]["port"] = 0
    Recipe.objects.filter(pk=seed_recipe.pk).update(spec=spec)
    with pytest.raises(CommandError) as err:
        call_command("dryrun", "seed-v4-flash-pd")
    lines = str(err.value).split("\n")
    assert lines[0] == f"recipe seed-v4-flash-pd does not render on node {seed_recipe.node.name}:", lines
    assert len(lines) >= 3 and any("prefill" in line for line in lines) and any("decode" in line for line in lines)
    assert err.value.returncode == 2


def test_the_dryrun_command_json_has_the_keys_of_the_api_dry_run(seed_recipe, viewer_api, capsys):
    api = viewer_api.get(f"/api/recipes/{seed_recipe.pk}/dry-run/")
    assert api.status_code == 200, api.json()
    call_command("dryrun", "seed-v4-flash-pd", "--json")
    cli = json.loads(capsys.readouterr().out)
    assert list(cli) == list(api.json()) == ["recipe", "recipe_name", "version", "plan"]
    # the recipe by id under recipe, as the API gives it, and by name beside it
    assert (cli["recipe"], cli["recipe_name"], cli["version"]) == (seed_recipe.pk, "seed-v4-flash-pd", 1)
    assert (api.json()["recipe"], api.json()["recipe_name"]) == (seed_recipe.pk, "seed-v4-flash-pd")
    assert cli["plan"] == api.json()["plan"]


def test_a_plan_for_another_host_runs_the_interpreter_its_agent_registered(db, settings):
    """The control plane's dry run of a remote node shows the argv that node's agent will run:
    the interpreter the agent recorded at registration (``tools["python"]``), not this one's."""
    from deployments.nodes import node_register, with_engine_python
    from deployments.topology import node_facts_from_row

    remote_python = "/srv/engines/.venv/bin/python"
    settings.CEILING_EXECUTABLES = {**settings.CEILING_EXECUTABLES, "python": remote_python}
    facts = with_engine_python(dataclasses.replace(seed_node_facts_example(), tools={"numactl": NUMACTL}))
    row = node_register(facts=facts)
    settings.CEILING_EXECUTABLES = {**settings.CEILING_EXECUTABLES, "python": PY}   # the control plane's own
    plan = render("seed-v4-flash-pd", node=node_facts_from_row(row))
    assert plan.process("decode").argv[plan.process("decode").argv.index("--") + 1] == remote_python
    assert plan.process("router").argv[0] == remote_python           # the router is not pinned
    # a node whose agent recorded none (the seed machine's captured facts) falls back to this one's
    plan = render("seed-v4-flash-pd")
    assert plan.process("decode").argv[plan.process("decode").argv.index("--") + 1] == PY
