"""Recipe spec validation (deployments.recipes.recipe_validate), rule by rule, at the pure
function level: every refusal is asserted with the field path it is reported under."""
from __future__ import annotations

import copy
import dataclasses
import json
import random
import re
import time
from pathlib import Path

import pytest

from controlplane.errors import InvalidInput
from deployments.engines import ENGINES
from deployments.engines.base import NAME_RE, flag_type_text, flag_value_check
from deployments.examples import example_node_facts, example_recipe, example_recipes, seed_node_facts_example
from deployments.recipes import RECIPE_DOC_PATH, flag_table_render, recipe_doc_render, recipe_validate


@pytest.fixture(autouse=True)
def _model_roots(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    settings.CEILING_MODEL_ROOTS = ["/models", str(tmp_path / "models")]


def seed_pd_spec() -> dict:
    return example_recipe("seed-v4-flash-pd")["spec"]


def validate(spec: dict, *, engine: str = "sglang", topology: str = "pd", node=None, **kw) -> dict:
    return recipe_validate(engine=engine, topology=topology, spec=spec, node=node or seed_node_facts_example(), **kw)


def errors_of(spec, **kw) -> dict[str, list[str]]:
    with pytest.raises(InvalidInput) as info:
        validate(spec, **kw)
    return info.value.errors


# --- accepted recipes --------------------------------------------------------------------

def test_it_accepts_every_example_and_fills_defaults():
    for recipe in example_recipes():
        out = recipe_validate(engine=recipe["engine"], topology=recipe["topology"], spec=recipe["spec"],
                              node=example_node_facts(recipe["node"]))
        assert out["startup_timeout_s"] == recipe["spec"]["startup_timeout_s"]
        assert out["restart"] == {"policy": "never", "max_failures": 3, "window_s": 600,
                                  "backoff_initial_s": 1.0, "backoff_max_s": 60.0}
    out = validate(seed_pd_spec())
    assert out["roles"]["prefill"] == {
        "gpus": [0, 1, 2, 3], "tp": 4, "dp": 1, "ep": 1, "numa_node": 0, "cpus": None, "membind": "numa",
        "host": "127.0.0.1", "port": 30000, "bootstrap_port": 8998, "side_channel_port": None, "flags": {}, "env": {},
    }
    assert out["roles"]["router"]["host"] == "0.0.0.0"
    assert out["transfer_backend"] == "nixl"
    assert out["env"] == {"SGLANG_FP8_PAGED_MQA_LOGITS_TORCH": "1"}
    assert out["model"] == {"path": "/models/DeepSeek-V4-Flash", "name": None}


def test_it_is_idempotent_on_its_own_output():
    for recipe in example_recipes():
        node = example_node_facts(recipe["node"])
        once = recipe_validate(engine=recipe["engine"], topology=recipe["topology"], spec=recipe["spec"], node=node)
        twice = recipe_validate(engine=recipe["engine"], topology=recipe["topology"], spec=copy.deepcopy(once), node=node)
        assert twice == once


def test_it_defaults_tp_to_the_gpu_count_over_dp():
    spec = seed_pd_spec()
    del spec["roles"]["prefill"]["tp"]
    spec["roles"]["decode"].pop("tp")
    spec["roles"]["decode"]["dp"] = 2
    out = validate(spec)
    assert (out["roles"]["prefill"]["tp"], out["roles"]["decode"]["tp"], out["roles"]["decode"]["dp"]) == (4, 2, 2)


def test_it_normalises_model_path_cpus_and_flag_spelling():
    spec = seed_pd_spec()
    spec["model"] = {"path": "/models//DeepSeek-V4-Flash/"}
    spec["roles"]["prefill"]["cpus"] = "3,0-2, 4"
    spec["roles"]["prefill"]["flags"] = {"--mem-fraction-static": 0.8, "trust-remote-code": True}
    out = validate(spec)
    assert out["model"]["path"] == "/models/DeepSeek-V4-Flash"
    assert out["served_model_name"] == "DeepSeek-V4-Flash"
    assert out["roles"]["prefill"]["cpus"] == "0-4"
    assert out["roles"]["prefill"]["flags"] == {"mem-fraction-static": 0.8, "trust-remote-code": True}


# --- engine and topology -----------------------------------------------------------------

def test_it_rejects_unknown_engine_topology_and_non_dict_spec():
    with pytest.raises(InvalidInput) as info:
        recipe_validate(engine="tgi", topology="ring", spec=[], node=seed_node_facts_example())
    assert set(info.value.errors) == {"engine", "topology", "spec"}
    assert "unknown engine 'tgi'" in info.value.errors["engine"][0]
    assert "unknown topology 'ring'" in info.value.errors["topology"][0]


def test_it_rejects_llamacpp_pd():
    errs = errors_of(seed_pd_spec(), engine="llamacpp", topology="pd")
    assert errs["topology"] == ["engine llamacpp supports topology single only, not pd"]


def test_it_requires_the_roles_of_the_topology():
    spec = seed_pd_spec()
    del spec["roles"]["router"]
    spec["roles"]["single"] = {"gpus": [0]}
    errs = errors_of(spec)
    assert errs["spec.roles.router"] == ["role router is required for topology pd"]
    assert "unknown role 'single' for topology pd" in errs["spec.roles.single"][0]


def test_it_rejects_unknown_fields_at_every_level():
    spec = seed_pd_spec()
    spec["colour"] = "blue"
    spec["roles"]["prefill"]["gpu"] = [0]
    spec["restart"] = {"policy": "never", "retries": 3}
    spec["model"]["revision"] = "main"
    errs = errors_of(spec)
    assert {"spec.colour", "spec.roles.prefill.gpu", "spec.restart.retries", "spec.model.revision"} <= set(errs)


# --- GPUs and parallelism ----------------------------------------------------------------

def test_it_rejects_overlapping_gpus_between_roles():
    spec = seed_pd_spec()
    spec["roles"]["decode"]["gpus"] = [3, 4, 5, 6]
    errs = errors_of(spec)
    assert errs["spec.roles.prefill.gpus"] == ["GPU 3 is also used by role decode"]
    assert errs["spec.roles.decode.gpus"] == ["GPU 3 is also used by role prefill"]


def test_it_rejects_tp_not_matching_the_gpu_count():
    spec = seed_pd_spec()
    spec["roles"]["prefill"]["tp"] = 2
    errs = errors_of(spec)
    assert errs == {"spec.roles.prefill.tp": [
        "tp × dp = 2 × 1 = 2 GPUs expected, but spec.roles.prefill.gpus lists 4 (0,1,2,3): give a tp that fits, or leave tp out (\"tp\": null in a PATCH) to have it follow gpus"]}


def test_it_counts_gpus_as_tp_with_sglang_dp_attention():
    spec = seed_pd_spec()
    spec["roles"]["decode"].update({"dp": 4, "flags": {"enable-dp-attention": True}})
    assert validate(spec)["roles"]["decode"]["dp"] == 4
    spec["roles"]["decode"]["flags"] = {}
    errs = errors_of(spec)
    assert errs["spec.roles.decode.tp"][0].startswith("tp × dp = 4 × 4 = 16 GPUs expected")


def test_it_applies_each_engines_ep_rule():
    spec = seed_pd_spec()
    spec["roles"]["prefill"]["ep"] = 3
    assert errors_of(spec)["spec.roles.prefill.ep"] == [
        "ep 3 must divide tp 4 (SGLang splits the TP group into expert groups)"]
    spec["roles"]["prefill"]["ep"] = 2
    errs = errors_of(spec, engine="vllm")
    assert errs["spec.roles.prefill.ep"][0].startswith("ep must be 1 or tp × dp = 4")
    spec["roles"]["prefill"]["ep"] = 4
    spec["roles"]["prefill"].pop("bootstrap_port")
    assert validate(spec, engine="vllm")["roles"]["prefill"]["ep"] == 4


def test_it_rejects_gpus_the_node_does_not_have_and_bad_ids():
    spec = seed_pd_spec()
    spec["roles"]["decode"]["gpus"] = [4, 5, 6, 8]
    spec["roles"]["prefill"]["gpus"] = [0, 0, True, "1"]
    errs = errors_of(spec)
    assert errs["spec.roles.decode.gpus"] == ["GPU 8 does not exist on node seed-8gpu (it has 0,1,2,3,4,5,6,7)"]
    assert errs["spec.roles.prefill.gpus"] == [
        "GPU 0 is listed twice", "item 2 must be an integer GPU id, got true", "item 3 must be an integer GPU id, got '1'"]


def test_it_requires_gpus_for_gpu_engines_and_refuses_them_for_cpu_engines():
    spec = seed_pd_spec()
    del spec["roles"]["prefill"]["gpus"]
    spec["roles"]["router"]["gpus"] = [7]
    errs = errors_of(spec)
    assert errs["spec.roles.prefill.gpus"][0].startswith("is required: the GPU ids this role runs on")
    assert errs["spec.roles.router.gpus"] == ["the router takes no GPUs, got [7]"]

    sim = example_recipe("local-sim-pd")["spec"]
    sim["roles"]["prefill"]["gpus"] = [0]
    sim["roles"]["decode"]["tp"] = 2
    errs = errors_of(sim, engine="sim", node=example_node_facts("local"))
    assert errs["spec.roles.prefill.gpus"] == ["sim runs on CPUs and takes no GPUs, got [0]"]
    assert errs["spec.roles.decode.tp"] == ["sim runs on CPUs; tp must be 1, got 2"]


# --- ports -------------------------------------------------------------------------------

def test_it_rejects_duplicate_ports_across_roles_including_bootstrap():
    spec = seed_pd_spec()
    spec["roles"]["decode"]["port"] = 30000
    spec["roles"]["router"]["port"] = 8998
    errs = errors_of(spec)
    assert errs["spec.roles.decode.port"] == ["port 30000 also used by spec.roles.prefill.port"]
    assert errs["spec.roles.prefill.port"] == ["port 30000 also used by spec.roles.decode.port"]
    assert errs["spec.roles.router.port"] == ["port 8998 also used by spec.roles.prefill.bootstrap_port"]


def test_it_reserves_a_tp_x_dp_block_for_vllm_side_channels():
    spec = seed_pd_spec()
    spec["roles"]["prefill"].pop("bootstrap_port")
    spec["roles"]["prefill"]["side_channel_port"] = 5600
    spec["roles"]["decode"]["side_channel_port"] = 5602
    errs = errors_of(spec, engine="vllm")
    assert errs["spec.roles.decode.side_channel_port"] == ["ports 5602-5603 also used by spec.roles.prefill.side_channel_port"]
    spec["roles"]["decode"]["side_channel_port"] = 5604
    out = validate(spec, engine="vllm")
    assert (out["roles"]["prefill"]["side_channel_port"], out["roles"]["decode"]["side_channel_port"]) == (5600, 5604)


def test_it_counts_port_typed_flags_in_uniqueness():
    spec = seed_pd_spec()
    spec["roles"]["router"]["flags"] = {"prometheus-port": 30001}
    errs = errors_of(spec)
    assert errs["spec.roles.router.flags.prometheus-port"] == ["port 30001 also used by spec.roles.decode.port"]


def test_a_port_clash_names_a_flag_as_the_recipe_wrote_it():
    spec = seed_pd_spec()
    spec["roles"]["router"]["flags"] = {"--prometheus-port": 30001}
    errs = errors_of(spec)
    assert errs["spec.roles.router.flags.--prometheus-port"] == ["port 30001 also used by spec.roles.decode.port"]
    assert errs["spec.roles.decode.port"] == ["port 30001 also used by spec.roles.router.flags.--prometheus-port"]
    assert "spec.roles.router.flags.prometheus-port" not in errs
    spec["roles"]["router"]["flags"] = {"-prometheus-port": 31081}
    assert validate(spec)["roles"]["router"]["flags"] == {"prometheus-port": 31081}   # the spec keeps it normalised


@pytest.mark.parametrize("port, message", [
    (80, "must be between 1024 and 65535, got 80"),
    (70000, "must be between 1024 and 65535, got 70000"),
    pytest.param(10**5000, "must be between 1024 and 65535, got <int>", id="huge-int"),
    (True, "must be an integer port, got true"),
    ("8000", "must be an integer port, got '8000'"),
    (8000.0, "must be an integer port, got 8000 written with a decimal point or exponent (write 8000)"),
])
def test_it_rejects_bad_ports(port, message):
    spec = seed_pd_spec()
    spec["roles"]["router"]["port"] = port
    assert errors_of(spec)["spec.roles.router.port"] == [message]


def test_it_rejects_ports_and_bootstrap_on_the_wrong_roles():
    spec = seed_pd_spec()
    spec["roles"]["decode"]["bootstrap_port"] = 9000
    spec["roles"]["decode"]["side_channel_port"] = 5700
    errs = errors_of(spec)
    assert errs["spec.roles.decode.bootstrap_port"] == ["only applies to the prefill role of a PD recipe on sglang or sim"]
    assert errs["spec.roles.decode.side_channel_port"] == ["only applies to prefill and decode roles of a vLLM PD recipe"]


# --- NUMA and CPUs -----------------------------------------------------------------------

def test_it_rejects_a_numa_node_the_node_does_not_have():
    spec = seed_pd_spec()
    spec["roles"]["decode"]["numa_node"] = 2
    errs = errors_of(spec)
    assert errs == {"spec.roles.decode.numa_node": ["NUMA node 2 does not exist on node seed-8gpu (it has 0,1)"]}


def test_it_requires_cpus_to_exist_and_lie_in_the_numa_node():
    spec = seed_pd_spec()
    spec["roles"]["prefill"]["cpus"] = "28-35"
    spec["roles"]["decode"]["cpus"] = "60-70"
    errs = errors_of(spec)
    assert errs["spec.roles.prefill.cpus"] == ["CPUs 32-35 are not on NUMA node 0 (its CPUs are 0-31)"]
    assert errs["spec.roles.decode.cpus"] == ["CPUs 64-70 do not exist on node seed-8gpu (it has 0-63)"]


@pytest.mark.parametrize("cpus", ["3-1", "a", "1,,2", "-1", 7, {"0": 1}, ["0"], [True]])
def test_it_rejects_malformed_cpu_lists(cpus):
    spec = seed_pd_spec()
    spec["roles"]["router"]["cpus"] = cpus
    errs = errors_of(spec)
    assert list(errs) == ["spec.roles.router.cpus"]
    assert "out of range" not in errs["spec.roles.router.cpus"][0]


@pytest.mark.parametrize(("cpus", "named"), [
    ("0-1000000000", 1000000000),
    ("0-99999999999", 99999999999),
    ("4,65536", 65536),
    ([0, 1000000000], 1000000000),
    ([-1, 3], -1),
])
def test_it_says_a_cpu_id_is_out_of_range_rather_than_malformed(cpus, named):
    spec = seed_pd_spec()
    spec["roles"]["router"]["cpus"] = cpus
    errs = errors_of(spec)
    assert errs == {"spec.roles.router.cpus": [
        f"CPU {named} is out of range: CPU ids are 0-65535, and node seed-8gpu has CPUs 0-63"]}


def test_it_checks_the_range_before_expanding_it():
    spec = seed_pd_spec()
    spec["roles"]["router"]["cpus"] = ",".join(["0-9999999"] * 100)
    started = time.monotonic()
    errs = errors_of(spec)
    assert time.monotonic() - started < 1.0
    assert errs["spec.roles.router.cpus"][0].startswith("CPU 9999999 is out of range")


@pytest.mark.parametrize("cpus", ["", "  ", []])
def test_it_refuses_empty_cpus_instead_of_reading_them_as_unpinned(cpus):
    spec = seed_pd_spec()
    spec["roles"]["router"]["cpus"] = cpus
    errs = errors_of(spec)
    assert errs == {"spec.roles.router.cpus": [
        "empty; omit the key (or use null) for no pinning, or give a CPU list like 0-15"]}


def test_it_leaves_a_role_unpinned_only_for_null_or_no_cpus_key():
    spec = seed_pd_spec()
    assert "cpus" not in spec["roles"]["router"]
    without_key = validate(spec)["roles"]["router"]
    spec["roles"]["router"]["cpus"] = None
    assert validate(spec)["roles"]["router"] == without_key
    assert (without_key["cpus"], without_key["numa_node"], without_key["membind"]) == (None, None, "none")


def test_a_missing_numa_node_reads_the_same_in_numa_node_and_membind():
    spec = seed_pd_spec()
    spec["roles"]["decode"]["numa_node"] = 3
    spec["roles"]["prefill"]["membind"] = [0, 3]
    errs = errors_of(spec)
    said = "NUMA node 3 does not exist on node seed-8gpu (it has 0,1)"
    assert errs["spec.roles.decode.numa_node"] == [said]
    assert errs["spec.roles.prefill.membind"] == [said]


@pytest.mark.parametrize("membind", ["", []])
def test_it_refuses_an_empty_membind(membind):
    spec = seed_pd_spec()
    spec["roles"]["router"]["membind"] = membind
    assert list(errors_of(spec)) == ["spec.roles.router.membind"]


def test_it_checks_membind_modes():
    spec = seed_pd_spec()
    spec["roles"]["router"]["membind"] = "numa"
    spec["roles"]["decode"]["membind"] = [1, 5]
    spec["roles"]["prefill"]["membind"] = "interleave"
    errs = errors_of(spec)
    assert errs["spec.roles.router.membind"] == [
        "'numa' binds memory to the role's NUMA node: set numa_node, or cpus within one NUMA node"]
    assert errs["spec.roles.decode.membind"] == ["NUMA node 5 does not exist on node seed-8gpu (it has 0,1)"]
    assert errs["spec.roles.prefill.membind"][0].startswith("must be one of numa, local, none")
    spec = seed_pd_spec()
    spec["roles"]["router"].update({"cpus": "40-41", "membind": "numa"})
    assert validate(spec)["roles"]["router"]["membind"] == "numa"


def test_it_refuses_gpus_on_another_numa_node_than_the_role():
    spec = seed_pd_spec()
    spec["roles"]["decode"]["numa_node"] = 0
    errs = errors_of(spec)
    assert errs == {"spec.roles.decode.numa_node": [
        "GPUs 4,5,6,7 are on NUMA node 1, not 0; set numa_node to 1 (and cpus, if given, within it), or set "
        "allow_cross_numa: true to keep this binding (every host-GPU copy then crosses the link between NUMA nodes)"]}


def test_it_checks_gpus_against_the_numa_node_of_the_cpus_or_the_membind_list():
    spec = seed_pd_spec()
    del spec["roles"]["prefill"]["numa_node"]
    spec["roles"]["prefill"]["cpus"] = "40-47"
    del spec["roles"]["decode"]["numa_node"]
    spec["roles"]["decode"]["membind"] = [0]
    errs = errors_of(spec)
    assert errs["spec.roles.prefill.cpus"] == [
        "GPUs 0,1,2,3 are on NUMA node 0, but cpus 40-47 are on NUMA node 1; pick cpus on NUMA node 0 (0-31), or set "
        "allow_cross_numa: true to keep this binding (every host-GPU copy then crosses the link between NUMA nodes)"]
    assert errs["spec.roles.decode.membind"][0].startswith(
        "GPUs 4,5,6,7 are on NUMA node 1, but membind binds memory to NUMA node 0; bind memory to NUMA node 1, or")


def test_it_names_each_foreign_gpu_of_a_role_spanning_numa_nodes():
    spec = example_recipe("seed-v4-flash-tp4")["spec"]
    spec["roles"]["single"]["gpus"] = [2, 3, 4, 5]
    errs = errors_of(spec, topology="single")
    assert errs["spec.roles.single.numa_node"][0].startswith(
        "GPUs 4,5 are on NUMA node 1, not 0; the role's GPUs span NUMA nodes 0-1: leave numa_node unset or split "
        "the GPUs into roles per NUMA node, or set allow_cross_numa: true")
    del spec["roles"]["single"]["numa_node"]
    assert validate(spec, topology="single")["roles"]["single"]["numa_node"] is None


def test_it_accepts_a_cross_numa_role_that_opts_in():
    spec = seed_pd_spec()
    spec["roles"]["decode"].update({"numa_node": 0, "allow_cross_numa": True})
    out = validate(spec)
    assert out["roles"]["decode"]["allow_cross_numa"] is True
    assert out["roles"]["decode"]["numa_node"] == 0
    assert "allow_cross_numa" not in out["roles"]["prefill"]
    assert validate(copy.deepcopy(out)) == out
    spec["roles"]["decode"]["allow_cross_numa"] = "yes"
    assert errors_of(spec) == {"spec.roles.decode.allow_cross_numa": ["must be true or false, got 'yes'"]}


def test_it_does_not_count_gpus_of_unknown_numa_node():
    node = seed_node_facts_example()
    node.gpus = [dataclasses.replace(g, numa_node=None) if g.index >= 4 else g for g in node.gpus]
    spec = seed_pd_spec()
    spec["roles"]["decode"]["numa_node"] = 0
    assert validate(spec, node=node)["roles"]["decode"]["numa_node"] == 0


def test_it_refuses_allow_cross_numa_on_cpu_engines_and_the_router():
    sim = example_recipe("local-sim-pd")["spec"]
    sim["roles"]["decode"]["allow_cross_numa"] = True
    sim["roles"]["router"]["allow_cross_numa"] = True
    errs = errors_of(sim, engine="sim", node=example_node_facts("local"))
    assert errs["spec.roles.decode.allow_cross_numa"] == [
        "sim runs on CPUs; allow_cross_numa only applies to roles with GPUs"]
    assert errs["spec.roles.router.allow_cross_numa"][0].startswith("unknown field 'allow_cross_numa'")


# --- model, names, paths -----------------------------------------------------------------

@pytest.mark.parametrize("model, path, fragment", [
    ({"path": "/etc/passwd"}, "spec.model.path", "'/etc/passwd' is not under a model root"),
    ({"path": "/models/../etc/shadow"}, "spec.model.path", "must not contain a '..' segment"),
    ({"path": "models/x"}, "spec.model.path", "must be an absolute path"),
    ({"path": "--help"}, "spec.model.path", "must not start with '-'"),
    ({"path": "/models"}, "spec.model.path", "'/models' is a model root itself; give a model file or directory under it"),
    ({"path": "/modelsX/y"}, "spec.model.path", "is not under a model root"),
    ({"name": "-rf/x"}, "spec.model.name", "must not start with '-'"),
    ({"name": "no-org"}, "spec.model.name", "must look like org/name"),
    ({"path": "/models/a", "name": "o/n"}, "spec.model", "give exactly one of path or name"),
    ("DeepSeek", "spec.model", 'must be an object ({"path": ...} or {"name": ...}), got \'DeepSeek\''),
])
def test_it_rejects_bad_model_references(model, path, fragment):
    spec = seed_pd_spec()
    spec["model"] = model
    errs = errors_of(spec)
    assert fragment in " ".join(errs[path])


def test_it_accepts_a_model_name_and_paths_under_any_root(settings, tmp_path):
    spec = seed_pd_spec()
    spec["model"] = {"name": "deepseek-ai/DeepSeek-V4-Flash"}
    del spec["served_model_name"]
    assert validate(spec)["served_model_name"] == "deepseek-ai/DeepSeek-V4-Flash"
    spec["model"] = {"path": str(tmp_path / "models" / "m")}
    assert validate(spec)["model"]["path"] == str(tmp_path / "models" / "m")


def test_it_requires_a_gguf_path_for_llamacpp():
    spec = example_recipe("local-llamacpp")["spec"]
    spec["model"] = {"path": "/models/llama.bin"}
    errs = errors_of(spec, engine="llamacpp", topology="single", node=example_node_facts("local"))
    assert errs["spec.model.path"] == ["llama.cpp needs a .gguf file, got '/models/llama.bin'"]


@pytest.mark.parametrize("field, value", [("served_model_name", "-x"), ("served_model_name", "a b")])
def test_it_rejects_bad_served_model_names(field, value):
    spec = seed_pd_spec()
    spec[field] = value
    assert list(errors_of(spec)) == [f"spec.{field}"]


@pytest.mark.parametrize("host", ["-h", "a b", "", 127001, "x" * 300])
def test_it_rejects_bad_hosts(host):
    spec = seed_pd_spec()
    spec["roles"]["prefill"]["host"] = host
    assert list(errors_of(spec)) == ["spec.roles.prefill.host"]


# --- flags -------------------------------------------------------------------------------

def test_it_refuses_a_flag_given_twice_under_two_spellings():
    # Both spellings name one flag; keeping either value silently would drop the other.
    spec = seed_pd_spec()
    spec["roles"]["prefill"]["flags"] = {"mem-fraction-static": 0.5, "--mem-fraction-static": 0.6}
    assert errors_of(spec) == {"spec.roles.prefill.flags.--mem-fraction-static": [
        "--mem-fraction-static is given twice ('mem-fraction-static' and '--mem-fraction-static'); give it once"]}


def test_it_rejects_unknown_flags_naming_them():
    spec = seed_pd_spec()
    spec["roles"]["prefill"]["flags"] = {"mem-fraction-statik": 0.8, "enable-everything": True}
    errs = errors_of(spec)
    assert errs["spec.roles.prefill.flags.mem-fraction-statik"] == [
        "unknown sglang flag 'mem-fraction-statik': not in the allowlist; did you mean 'mem-fraction-static'? "
        "(see docs/recipes.md, section 'sglang flags', for every allowed flag and its type)"]
    assert errs["spec.roles.prefill.flags.enable-everything"][0].startswith("unknown sglang flag 'enable-everything'")


def test_it_lists_every_allowed_flag_when_nothing_is_close():
    spec = seed_pd_spec()
    spec["roles"]["prefill"]["flags"] = {"zzz": 1}
    spec["roles"]["router"]["flags"] = {"polcy": "random"}
    errs = errors_of(spec)
    message = errs["spec.roles.prefill.flags.zzz"][0]
    assert message.startswith("unknown sglang flag 'zzz': not in the allowlist; allowed: attention-backend, chat-template, chunked-prefill-size, ")
    assert all(name in message for name in ENGINES["sglang"].worker_flags)
    assert message.endswith("(see docs/recipes.md, section 'sglang flags', for every allowed flag and its type)")
    assert errs["spec.roles.router.flags.polcy"][0].startswith(
        "unknown sglang router flag 'polcy': not in the allowlist; did you mean 'policy'")
    assert "section 'sglang router flags'" in errs["spec.roles.router.flags.polcy"][0]


def test_it_points_renderer_owned_flags_at_their_recipe_field():
    spec = seed_pd_spec()
    spec["roles"]["prefill"]["flags"] = {"port": 1, "--tp-size": 8, "base-gpu-id": 4, "model-path": "/x",
                                         "disaggregation-mode": "decode", "api-key": "k"}
    spec["roles"]["router"]["flags"] = {"prefill": "http://x"}
    errs = errors_of(spec)
    assert errs["spec.roles.prefill.flags.port"] == ["--port is set by Ceiling from spec.roles.prefill.port; set that instead"]
    assert errs["spec.roles.prefill.flags.--tp-size"] == ["--tp-size is set by Ceiling from spec.roles.prefill.tp; set that instead"]
    assert errs["spec.roles.prefill.flags.base-gpu-id"] == [
        "--base-gpu-id is set by Ceiling from spec.roles.prefill.gpus; set that instead"]
    assert errs["spec.roles.prefill.flags.model-path"] == ["--model-path is set by Ceiling from spec.model; set that instead"]
    assert errs["spec.roles.prefill.flags.api-key"] == ["--api-key is set by Ceiling from spec.secrets; set that instead"]
    assert "spec.roles.prefill.flags.disaggregation-mode" in errs
    assert errs["spec.roles.router.flags.prefill"] == [
        "--prefill is set by Ceiling from spec.roles.prefill; set that instead"]


@pytest.mark.parametrize("flag, value, message", [
    ("mem-fraction-static", "0.8", "--mem-fraction-static must be a number, got '0.8'"),
    ("mem-fraction-static", 1.5, "--mem-fraction-static must be between 0.01 and 1, got 1.5"),
    ("mem-fraction-static", float("nan"), "--mem-fraction-static must be a finite number, got NaN"),
    ("max-running-requests", 0, "--max-running-requests must be between 1 and 1000000, got 0"),
    ("max-running-requests", True, "--max-running-requests must be an integer, got true"),
    ("trust-remote-code", "yes", "--trust-remote-code must be true or false, got 'yes'"),
    ("kv-cache-dtype", "fp16", "--kv-cache-dtype must be one of auto, fp8_e5m2, fp8_e4m3, mxfp8, bf16, bfloat16, nvfp4, "
     "fp4_mx_block16, fp4_e2m1; got 'fp16'"),
    ("attention-backend", "--evil", "--attention-backend must be one of triton, torch_native, flex_attention, nsa, dsa, "
     "dsv4, compressed, cutlass_mla, fa3, fa4, flashinfer, flashmla, trtllm_mla, trtllm_mha, cutedsl_mla, tokenspeed_mla, "
     "dual_chunk_flash_attn, hpc_ops, minicpm_flashattn, minicpm_flashinfer, aiter, wave, intel_amx, ascend, intel_xpu; "
     "got '--evil'"),
    ("chat-template", "/models/../etc/passwd", "--chat-template must not contain a '..' segment, got '/models/../etc/passwd'"),
    ("chat-template", "-t", "--chat-template must not start with '-', got '-t'"),
    ("chat-template", "/etc/shadow", "--chat-template '/etc/shadow' is not under a model root (/models, {tmp}/models)"),
    ("chat-template", "templates/x.jinja", "--chat-template must be a built-in template name (letters, digits, _ . + -) "
     "or an absolute path under a model root, got 'templates/x.jinja'"),
    ("tokenizer-path", "/root/tok", "--tokenizer-path '/root/tok' is not under a model root (/models, {tmp}/models)"),
    ("tokenizer-path", "just-a-name", "--tokenizer-path must be an absolute path under a model root or a repository id "
     "like org/name, got 'just-a-name'"),
    ("reasoning-parser", "../x", "--reasoning-parser must be a name of 1-64 letters, digits or _ . + - characters, got '../x'"),
    ("tool-call-parser", "http://x", "--tool-call-parser must be a name of 1-64 letters, digits or _ . + - characters, "
     "got 'http://x'"),
    ("quantization", "fp8 --trust-remote-code", "--quantization must be a name of 1-64 letters, digits or _ . + - "
     "characters, got 'fp8 --trust-remote-code'"),
    ("disaggregation-ib-device", "mlx5_0;reboot", "--disaggregation-ib-device must be up to 32 comma-separated names "
     "(letters, digits, _ . + -), got 'mlx5_0;reboot'"),
    ("load-format", "remote", "--load-format must be one of auto, pt, safetensors, npcache, dummy, sharded_state, "
     "presharded, gguf, bitsandbytes, layered, mistral, fastsafetensors; got 'remote'"),
])
def test_it_type_checks_flag_values(flag, value, message, tmp_path):
    spec = seed_pd_spec()
    spec["roles"]["decode"]["flags"] = {flag: value}
    assert errors_of(spec) == {f"spec.roles.decode.flags.{flag}": [message.format(tmp=tmp_path)]}


def test_it_accepts_real_choices_names_and_paths_under_the_model_roots():
    spec = seed_pd_spec()
    spec["roles"]["decode"]["flags"] = {
        "attention-backend": "flashmla", "nsa-decode-backend": "flashmla_kv", "kv-cache-dtype": "fp8_e4m3",
        "chat-template": "chatml", "tokenizer-path": "deepseek-ai/DeepSeek-V4-Flash", "reasoning-parser": "deepseek-r1",
        "disaggregation-ib-device": "mlx5_0,mlx5_1", "quantization": "modelopt_fp4",
    }
    spec["roles"]["prefill"]["flags"] = {"chat-template": "/models//DeepSeek-V4-Flash/tmpl.jinja",
                                         "tokenizer-path": "/models/DeepSeek-V4-Flash"}
    out = validate(spec)
    assert out["roles"]["decode"]["flags"]["chat-template"] == "chatml"
    assert out["roles"]["decode"]["flags"]["disaggregation-ib-device"] == "mlx5_0,mlx5_1"
    assert out["roles"]["prefill"]["flags"] == {"chat-template": "/models/DeepSeek-V4-Flash/tmpl.jinja",
                                                "tokenizer-path": "/models/DeepSeek-V4-Flash"}


def test_it_takes_vllm_chat_templates_as_files_only_and_its_own_backend_names():
    spec = seed_pd_spec()
    spec["roles"]["prefill"].pop("bootstrap_port")
    spec["roles"]["decode"]["flags"] = {"chat-template": "chatml", "attention-backend": "flashinfer"}
    errs = errors_of(spec, engine="vllm")
    assert errs["spec.roles.decode.flags.chat-template"] == ["--chat-template must be an absolute path, got 'chatml'"]
    assert errs["spec.roles.decode.flags.attention-backend"][0].startswith(
        "--attention-backend must be one of FLASH_ATTN, FLASH_ATTN_DIFFKV, TRITON_ATTN,")
    spec["roles"]["decode"]["flags"] = {"chat-template": "/models/t/chat.jinja", "attention-backend": "FLASHINFER",
                                        "tokenizer": "/models/t"}
    assert validate(spec, engine="vllm")["roles"]["decode"]["flags"]["attention-backend"] == "FLASHINFER"


HOSTILE_STRINGS = ["/etc/shadow", "../../etc/passwd", "evil value", "-x", "http://evil.example/x", "a" * 300, ""]


@pytest.mark.parametrize("engine", ["sglang", "vllm", "llamacpp", "sim"])
def test_it_types_every_string_flag_of_every_allowlist(engine):
    """No flag of any allowlist takes a path outside the model roots, a relative path, free
    text, an option-looking value or a URL; every choice list is a list of plain values."""
    adapter = ENGINES[engine]
    for allow in (adapter.worker_flags, adapter.router_flags):
        for name, spec in allow.items():
            for value in HOSTILE_STRINGS:
                clean, message = flag_value_check(spec, value, model_roots=["/models"])
                assert message and clean is None, f"{engine} --{name} ({spec.kind}) accepted {value!r}"
            if spec.kind == "choice":
                assert spec.choices and all(NAME_RE.match(c) for c in spec.choices), name


def test_it_limits_role_specific_flags_to_their_roles():
    spec = example_recipe("seed-v4-flash-tp4")["spec"]
    spec["roles"]["single"]["flags"] = {"num-reserved-decode-tokens": 512}
    errs = errors_of(spec, topology="single")
    assert errs == {"spec.roles.single.flags.num-reserved-decode-tokens": ["--num-reserved-decode-tokens only applies to role decode"]}


# --- env and secrets ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["CEILING_SIM_FAIL_GENERATE", "NCCL_DEBUG", "TZ", "OMP_NUM_THREADS"])
def test_a_secret_fills_only_a_variable_named_like_a_credential(name):
    spec = seed_pd_spec()
    spec["secrets"] = {name: "hf-token"}
    errs = errors_of(spec, secret_names={"hf-token"})
    assert list(errs) == [f"spec.secrets.{name}"]
    assert errs[f"spec.secrets.{name}"][0].startswith(f"{name} is not named like a credential")
    for ok in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "SGLANG_API_KEY", "VLLM_SECRET", "NCCL_PASSWORD"):
        spec["secrets"] = {ok: "hf-token"}
        assert validate(spec, secret_names={"hf-token"})["secrets"] == {ok: "hf-token"}

@pytest.mark.parametrize("name, fragment", [
    ("LD_PRELOAD", "not allowed: it changes which code or libraries the process loads"),
    ("ld_preload", "not allowed"),
    ("LD_LIBRARY_PATH", "not allowed"),
    ("PYTHONPATH", "not allowed"),
    ("PYTHONSTARTUP", "not allowed"),
    ("PATH", "not allowed"),
    ("BASH_ENV", "not allowed"),
    ("DYLD_INSERT_LIBRARIES", "not allowed"),
    ("NCCL_NET_PLUGIN", "not allowed"),
    ("UCX_MODULE_DIR", "not allowed"),
    ("CUDA_VISIBLE_DEVICES", "set by Ceiling from spec.roles.<role>.gpus"),
    ("VLLM_NIXL_SIDE_CHANNEL_PORT", "set by Ceiling from spec.roles.<role>.side_channel_port"),
    ("FOO", "FOO is not in the allowlist"),
])
def test_it_refuses_env_names_outside_the_allowlist_or_on_the_deny_list(name, fragment):
    spec = seed_pd_spec()
    spec["env"] = {name: "1"}
    errs = errors_of(spec)
    assert fragment in errs[f"spec.env.{name}"][0]


def test_it_accepts_allowlisted_env_and_checks_values():
    spec = seed_pd_spec()
    spec["env"] = {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": 8, "HF_HUB_OFFLINE": "1"}
    spec["roles"]["decode"]["env"] = {"UCX_TLS": "rc,cuda_copy"}
    out = validate(spec)
    assert out["env"] == {"HF_HUB_OFFLINE": "1", "NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "8"}
    assert out["roles"]["decode"]["env"] == {"UCX_TLS": "rc,cuda_copy"}
    spec["env"] = {"NCCL_DEBUG": "INFO\nLD_PRELOAD=/tmp/x.so", "NCCL_ALGO": "x" * 5000, "SGLANG_X": None, "1BAD": "1"}
    errs = errors_of(spec)
    assert errs["spec.env.NCCL_DEBUG"] == [
        "value must not contain NUL, line breaks (any that str.splitlines() splits at: \\n, \\r, \\v, \\f, "
        "\\x1c-\\x1e, \\x85, U+2028, U+2029) or other control characters"]
    for sneaky in ("INFO\u2028x", "INFO\x85x", "INFO\x1bx", "INFO\x0bx"):
        spec["env"] = {"NCCL_DEBUG": sneaky}
        assert list(errors_of(spec)) == ["spec.env.NCCL_DEBUG"], repr(sneaky)
    spec["env"] = {"NCCL_DEBUG": "INFO\tWARN", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    validate(spec)  # a tab is text; a switch that lifts a limit is no unsafe mode
    for unsafe in ("VLLM_SERVER_DEV_MODE", "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "VLLM_ALLOW_INSECURE_SERIALIZATION"):
        spec["env"] = {unsafe: "1"}
        (message,) = errors_of(spec)[f"spec.env.{unsafe}"]
        assert message.startswith(f"{unsafe} is not allowed: it switches on an unsafe mode"), message
    spec["env"] = {"NCCL_DEBUG": "INFO\nLD_PRELOAD=/tmp/x.so", "NCCL_ALGO": "x" * 5000, "SGLANG_X": None, "1BAD": "1"}
    errs = errors_of(spec)
    assert errs["spec.env.NCCL_ALGO"] == ["value is 5000 characters; at most 4096"]
    assert errs["spec.env.SGLANG_X"] == ["value must be a string, got null"]
    assert errs["spec.env"][0].startswith("'1BAD' is not a valid variable name")


def test_it_checks_secret_references():
    spec = seed_pd_spec()
    spec["secrets"] = {"HF_TOKEN": "hf-token"}
    assert validate(spec)["secrets"] == {"HF_TOKEN": "hf-token"}
    assert validate(spec, secret_names={"hf-token"})["secrets"] == {"HF_TOKEN": "hf-token"}
    assert errors_of(spec, secret_names={"other"}) == {"spec.secrets.HF_TOKEN": ["secret 'hf-token' does not exist"]}
    spec["secrets"] = {"HF_TOKEN": "Bad Name", "LD_PRELOAD": "x", "SGLANG_KEY": "k"}
    spec["roles"]["prefill"]["env"] = {"SGLANG_KEY": "plain"}
    errs = errors_of(spec)
    assert errs["spec.secrets.HF_TOKEN"][0].startswith("must name a secret")
    assert "not allowed" in errs["spec.secrets.LD_PRELOAD"][0]
    # The secret is fine; the plain value of the same variable is what is refused.
    assert "spec.secrets.SGLANG_KEY" not in errs
    assert errs["spec.roles.prefill.env.SGLANG_KEY"][0].startswith("SGLANG_KEY is named like a credential")


def test_a_variable_named_like_a_credential_is_only_filled_from_a_secret():
    # A plain env value is stored in the recipe and returned by the API and pages in clear, so a
    # credential there would leak to every viewer; spec.secrets keeps it encrypted and masked.
    spec = seed_pd_spec()
    spec["env"] = {"HF_TOKEN": "hf_plaintexttoken123", "NCCL_DEBUG": "INFO"}
    spec["roles"]["decode"]["env"] = {"SGLANG_API_KEY": "SuperSecretValue", "SGLANG_PASSWORD": "x"}
    errs = errors_of(spec)
    assert errs["spec.env.HF_TOKEN"] == [
        'HF_TOKEN is named like a credential: store its value as a secret and reference it from spec.secrets '
        '({"HF_TOKEN": "<secret name>"}); a plain env value is stored and shown in clear']
    assert errs["spec.roles.decode.env.SGLANG_API_KEY"][0].startswith("SGLANG_API_KEY is named like a credential")
    assert errs["spec.roles.decode.env.SGLANG_PASSWORD"][0].startswith("SGLANG_PASSWORD is named like a credential")
    assert "spec.env.NCCL_DEBUG" not in errs
    assert "hf_plaintexttoken123" not in json.dumps(errs) and "SuperSecretValue" not in json.dumps(errs)


# --- scalars, engine-specific sections ---------------------------------------------------

def test_it_checks_timeouts_restart_and_transfer_backend():
    spec = seed_pd_spec()
    spec.update({"startup_timeout_s": 0, "stop_grace_s": "30", "transfer_backend": "rdma",
                 "restart": {"policy": "always", "backoff_initial_s": 10, "backoff_max_s": 5}})
    errs = errors_of(spec)
    assert errs["spec.startup_timeout_s"] == ["must be between 1 and 86400, got 0"]
    assert errs["spec.stop_grace_s"] == ["must be an integer, got '30'"]
    assert errs["spec.transfer_backend"] == ["'rdma' is not a sglang transfer backend; choose one of nixl, mooncake"]
    assert errs["spec.restart.policy"] == ["must be never or on-failure, got 'always'"]
    assert errs["spec.restart.backoff_max_s"] == ["must be at least backoff_initial_s (10), got 5"]
    spec = seed_pd_spec()
    spec["transfer_backend"] = "mooncake"
    assert errors_of(spec, engine="vllm")["spec.transfer_backend"] == [
        "'mooncake' is not a vllm transfer backend; choose one of nixl"]
    single = example_recipe("seed-v4-flash-tp4")["spec"]
    single["transfer_backend"] = "nixl"
    assert errors_of(single, topology="single") == {"spec.transfer_backend": ["only applies to topology pd"]}


def test_it_keeps_the_sim_section_to_the_sim_engine():
    spec = seed_pd_spec()
    spec["sim"] = {"profile": "x"}
    assert errors_of(spec) == {"spec.sim": ["only applies to engine sim"]}
    sim = example_recipe("local-sim-pd")["spec"]
    sim["sim"] = {"profile": "../etc"}
    errs = errors_of(sim, engine="sim", node=example_node_facts("local"))
    assert errs["spec.sim.profile"][0].startswith("must be a profile name")
    del sim["sim"]
    out = validate(sim, engine="sim", node=example_node_facts("local"))
    assert out["sim"] == {"profile": "seed-sm120-fallback"}


def test_an_unknown_sim_profile_is_refused_when_the_recipe_is_saved_not_when_the_engine_starts():
    sim = example_recipe("local-sim-pd")["spec"]
    sim["sim"] = {"profile": "nope"}
    errs = errors_of(sim, engine="sim", node=example_node_facts("local"))
    assert errs == {"spec.sim.profile": [
        "unknown profile 'nope'; known: demo-fast, seed-sm120-fallback, seed-sm120-fallback-tp4"]}
    sim["sim"] = {"profile": "demo-fast"}
    assert validate(sim, engine="sim", node=example_node_facts("local"))["sim"] == {"profile": "demo-fast"}


def test_it_collects_every_error_at_once():
    spec = seed_pd_spec()
    spec["roles"]["prefill"]["numa_node"] = 9
    spec["roles"]["decode"]["port"] = 80
    spec["env"] = {"LD_PRELOAD": "/x.so"}
    spec["model"] = {"path": "/tmp/m"}
    assert set(errors_of(spec)) == {"spec.roles.prefill.numa_node", "spec.roles.decode.port", "spec.env.LD_PRELOAD", "spec.model.path"}


# --- fuzz --------------------------------------------------------------------------------

class _Hostile:
    def __repr__(self):
        raise RuntimeError("no repr for you")


GARBAGE = [None, True, False, 0, -1, 10**30, 10**5000, 1.5, float("nan"), float("inf"), "", "-", "--x",
           "../../x", "\x00", "a" * 10_000, [], [None], [[[]]], {}, {"a": {"b": {"c": []}}}, {1: 2}, {None: None},
           ("t",), _Hostile(), b"bytes", {"gpus": {"0": 1}}]


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _replace(obj, path, value):
    if not path:
        return value
    obj = copy.deepcopy(obj)
    cur = obj
    for key in path[:-1]:
        cur = cur[key]
    cur[path[-1]] = value
    return obj


@pytest.mark.parametrize("name", ["seed-v4-flash-pd", "seed-v4-flash-tp4", "local-sim-pd", "local-llamacpp"])
def test_it_raises_only_invalid_input_for_garbage_anywhere(name):
    recipe = example_recipe(name)
    node = example_node_facts(recipe["node"])
    rng = random.Random(20240601)
    paths = list(_paths(recipe["spec"]))
    for path in paths:
        for value in GARBAGE:
            spec = _replace(recipe["spec"], path, value)
            try:
                recipe_validate(engine=recipe["engine"], topology=recipe["topology"], spec=spec, node=node)
            except InvalidInput as exc:
                assert exc.errors and all(isinstance(k, str) and v for k, v in exc.errors.items())
    for _ in range(200):
        spec = recipe["spec"]
        for _ in range(3):
            spec = _replace(spec, rng.choice(list(_paths(spec))), rng.choice(GARBAGE))
        try:
            recipe_validate(engine=recipe["engine"], topology=recipe["topology"], spec=spec, node=node)
        except InvalidInput:
            pass
    for engine, topology in [(None, None), (1, "pd"), ("sglang", ["pd"]), ({}, {})]:
        with pytest.raises(InvalidInput):
            recipe_validate(engine=engine, topology=topology, spec=recipe["spec"], node=node)


# --- the reference document --------------------------------------------------------------

DOC = Path(__file__).resolve().parents[2] / RECIPE_DOC_PATH


def _doc_block(text: str, engine: str, kind: str) -> str:
    begin, end = f"<!-- BEGIN flags {engine} {kind} -->", f"<!-- END flags {engine} {kind} -->"
    assert begin in text and end in text, f"{RECIPE_DOC_PATH} lacks the {engine} {kind} flag table"
    return text[text.index(begin):text.index(end)]


def test_it_documents_every_allowed_flag():
    text = DOC.read_text()
    for engine, adapter in ENGINES.items():
        for kind, allow in (("worker", adapter.worker_flags), ("router", adapter.router_flags)):
            if not allow:
                continue
            assert f"### {engine} {'router ' if kind == 'router' else ''}flags" in text
            block = _doc_block(text, engine, kind)
            for name, spec in allow.items():
                assert f"| `--{name}` | {flag_type_text(spec)} |" in block, f"{engine} {kind} --{name}"


def test_it_keeps_the_generated_flag_tables_in_sync_with_the_allowlists():
    text = DOC.read_text()
    assert recipe_doc_render(text) == text, (
        f"{RECIPE_DOC_PATH} is out of date; regenerate it with the command at the end of the document")


def _doc_recipe_examples() -> list[dict]:
    """Every recipe example of the reference: each ```json block, and each ```yaml (or ```yml)
    block, that holds an object with an ``engine`` and a ``spec``."""
    text = DOC.read_text()
    blocks = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.DOTALL)]
    yaml_blocks = re.findall(r"```ya?ml\n(.*?)```", text, re.DOTALL)
    if yaml_blocks:
        import yaml
        blocks += [yaml.safe_load(block) for block in yaml_blocks]
    return [block for block in blocks if isinstance(block, dict) and "engine" in block and "spec" in block]


def test_it_validates_every_example_in_the_reference():
    combos = set()
    for recipe in _doc_recipe_examples():
        out = recipe_validate(engine=recipe["engine"], topology=recipe["topology"], spec=recipe["spec"],
                              node=example_node_facts(recipe["node"]))
        assert out["roles"], recipe["name"]
        combos.add((recipe["engine"], recipe["topology"]))
    assert combos == {(name, topology) for name, adapter in ENGINES.items() for topology in adapter.topologies}


def test_every_sim_example_in_the_reference_counts_its_gpus_as_the_seeded_one_does():
    # Without gpus_modelled a recipe made from the example gives its sweeps no GPU count (num_gpus
    # null, "GPUs —", no per-GPU figures), unlike the seeded recipe of the same profile.
    seeded = {(r["topology"], r["spec"]["sim"]["profile"]): r["spec"]["sim"].get("gpus_modelled")
              for r in example_recipes() if r["engine"] == "sim"}
    sims = [recipe for recipe in _doc_recipe_examples() if recipe["engine"] == "sim"]
    assert {recipe["topology"] for recipe in sims} == {"single", "pd"}
    for recipe in sims:
        out = recipe_validate(engine="sim", topology=recipe["topology"], spec=recipe["spec"],
                              node=example_node_facts(recipe["node"]))
        assert out["sim"].get("gpus_modelled"), f"{recipe['name']}: spec.sim.gpus_modelled is left out"
        key = (recipe["topology"], out["sim"]["profile"])
        if key in seeded:
            assert out["sim"]["gpus_modelled"] == seeded[key], recipe["name"]


def test_it_renders_a_flag_table_per_allowlist():
    table = flag_table_render(engine="sim", kind="worker")
    assert table.splitlines()[:3] == [
        "| Flag | Type | Roles | What it sets |",
        "|---|---|---|---|",
        "| `--health-busy-s` | float in [0, 3600] | all | wall seconds /health computes before it answers while a "
        "generation is in flight, serving nothing else meanwhile, as a server that serves one request at a time "
        "(default 0: it answers at once) |",
    ]
    assert "| `--seed` | int in [0, 2147483647] | all | RNG seed for service-time jitter |" in table
    assert "| `--profile` | `spec.sim.profile` |" in table


@pytest.mark.parametrize(("cpus", "message"), [
    ([0, 0, 1], "CPU 0 is listed twice"),
    ([0, 1, 1, 0, 2], "CPUs 0-1 are listed more than once"),
    ("0-3,2", "CPU 2 is listed more than once in '0-3,2'"),
    ("0,0", "CPU 0 is listed more than once in '0,0'"),
])
def test_a_cpu_named_twice_is_refused_not_merged(cpus, message):
    spec = seed_pd_spec()
    spec["roles"]["prefill"]["cpus"] = cpus
    assert errors_of(spec)["spec.roles.prefill.cpus"] == [message]


def test_a_number_given_as_null_is_refused_not_read_as_its_default():
    spec = seed_pd_spec()
    spec.update({"stop_grace_s": None, "startup_timeout_s": None,
                 "restart": {"policy": "on-failure", "max_failures": None, "backoff_max_s": None}})
    spec["roles"]["decode"]["tp"] = None
    errors = errors_of(spec)
    assert errors["spec.stop_grace_s"] == ["must be an integer, got null"]
    assert errors["spec.startup_timeout_s"] == ["must be an integer, got null"]
    assert errors["spec.restart.max_failures"] == ["must be an integer, got null"]
    assert errors["spec.restart.backoff_max_s"] == ["must be a number, got null"]
    assert errors["spec.roles.decode.tp"] == ["must be an integer, got null"]
    # left out, each takes its default
    for key in ("stop_grace_s", "startup_timeout_s", "restart"):
        spec.pop(key)
    del spec["roles"]["decode"]["tp"]
    assert validate(spec)["stop_grace_s"] == 30


def test_an_unknown_flag_is_named_at_its_key_as_written():
    # llama.cpp's flags are written without dashes; one written "--evil" is named so, path and message
    spec = {"model": {"path": "/models/tiny.gguf"},
            "roles": {"single": {"cpus": "0", "port": 31090, "flags": {"--evil": 1, "n_ctxx": 512}}}}
    errs = errors_of(spec, engine="llamacpp", topology="single", node=example_node_facts("local"))
    assert set(errs) == {"spec.roles.single.flags.--evil", "spec.roles.single.flags.n_ctxx"}
    assert errs["spec.roles.single.flags.--evil"] == [
        "unknown llamacpp flag '--evil': not in the allowlist; allowed: " + ", ".join(sorted(ENGINES["llamacpp"].worker_flags))
        + " (see docs/recipes.md, section 'llamacpp flags', for every allowed flag and its type)"]
    assert errs["spec.roles.single.flags.n_ctxx"][0].startswith(
        "unknown llamacpp flag 'n_ctxx': not in the allowlist; did you mean 'n_ctx'")


def test_the_closest_flags_are_offered_with_the_dashes_the_recipe_wrote():
    spec = seed_pd_spec()
    spec["roles"]["prefill"]["flags"] = {"--mem-fraction-statik": 0.8}
    errs = errors_of(spec)
    assert errs == {"spec.roles.prefill.flags.--mem-fraction-statik": [
        "unknown sglang flag '--mem-fraction-statik': not in the allowlist; did you mean '--mem-fraction-static'? "
        "(see docs/recipes.md, section 'sglang flags', for every allowed flag and its type)"]}
