"""From kernel to deployment: a recipe references a chosen build (``spec.kernels``), validation
checks the package and its hand-over, and the launch plan puts the config path into the variable
the package's manifest names, for the roles asked."""
import copy
import dataclasses

import pytest

from controlplane.errors import InvalidInput
from deployments.examples import example_recipes, seed_node_facts_example
from deployments.launch import launch_plan_render
from deployments.recipes import recipe_validate
from kernels.models import KernelBest


def _seed_pd() -> dict:
    return copy.deepcopy(next(r for r in example_recipes() if r["name"] == "seed-v4-flash-pd"))


def _render(spec, node=None):
    recipe = _seed_pd()
    return launch_plan_render(engine=recipe["engine"], topology=recipe["topology"], spec=spec,
                              node=node or seed_node_facts_example())


def _seed_layout_with(name: str, cc: str):
    """The seed machine's layout (8 GPUs over two NUMA nodes) with GPUs ``name`` of compute
    capability ``cc`` in place of its sm_120 ones."""
    facts = seed_node_facts_example()
    return dataclasses.replace(facts, gpus=[dataclasses.replace(g, name=name, compute_capability=cc)
                                            for g in facts.gpus])


def test_a_best_variant_reference_reaches_the_decode_process_env(measured_job):
    best = KernelBest.objects.get(job=measured_job, shape="small", batch=1)
    h200s = _seed_layout_with("NVIDIA H200", "9.0")
    spec = _seed_pd()["spec"]
    spec["kernels"] = [{"package": "toy_attn", "config": best.pk, "roles": ["decode"]}]
    plan = _render(spec, h200s)
    decode, prefill = plan.process("decode"), plan.process("prefill")
    assert decode.env["CEILING_TOY_ATTN_CONFIG"] == best.config_path
    assert best.config_path.endswith("compiler=triton_3.6.0,cc=9.0/device_name=NVIDIA_H200,shape=small,dtype=bf16.json")
    assert "CEILING_TOY_ATTN_CONFIG" not in prefill.env
    assert decode.to_dict()["env"]["CEILING_TOY_ATTN_CONFIG"] == best.config_path
    assert not [w for w in plan.warnings if "kernel" in w]   # tuned on the GPUs it runs on
    norm = recipe_validate(engine="sglang", topology="pd", spec=spec, node=h200s)
    assert norm["kernels"] == [{"package": "toy_attn", "config": best.config_path, "best": best.pk,
                                "env": "CEILING_TOY_ATTN_CONFIG", "flag": "", "roles": ["decode"]}]
    # the normalised spec validates again to itself (the id was resolved once)
    again = recipe_validate(engine="sglang", topology="pd", spec=copy.deepcopy(norm), node=h200s)
    assert again["kernels"] == norm["kernels"]


def test_a_config_tuned_for_another_compute_capability_is_refused_for_the_roles_it_goes_to(measured_job):
    """The seed machine's GPUs are sm_120: a config the H200 (cc 9.0) job exported names variants
    built for sm_90a, which do not run there."""
    best = KernelBest.objects.get(job=measured_job, shape="small", batch=1)
    spec = _seed_pd()["spec"]
    spec["kernels"] = [{"package": "toy_attn", "config": best.pk, "roles": ["decode"]}]
    with pytest.raises(InvalidInput) as err:
        recipe_validate(engine="sglang", topology="pd", spec=spec, node=seed_node_facts_example())
    assert err.value.errors == {"spec.kernels.0.config": [
        "tuned on NVIDIA H200 (compute capability 9.0); decode runs on GPUs 4, 5, 6, 7 of node seed-8gpu: "
        "compute capability 12.0. A variant built for sm_90 does not run there: reference a config tuned on that GPU"]}
    # the same file given by path is read the same way
    spec["kernels"] = [{"package": "toy_attn", "config": best.config_path}]
    with pytest.raises(InvalidInput) as err:
        recipe_validate(engine="sglang", topology="pd", spec=spec, node=seed_node_facts_example())
    assert "prefill runs on GPUs 0, 1, 2, 3" in err.value.errors["spec.kernels.0.config"][0]


def test_a_config_tuned_on_another_gpu_of_the_same_compute_capability_is_a_plan_warning(measured_job):
    best = KernelBest.objects.get(job=measured_job, shape="small", batch=1)
    spec = _seed_pd()["spec"]
    spec["kernels"] = [{"package": "toy_attn", "config": best.pk, "roles": ["decode"]}]
    plan = _render(spec, _seed_layout_with("NVIDIA H100 80GB HBM3", "9.0"))
    assert plan.process("decode").env["CEILING_TOY_ATTN_CONFIG"] == best.config_path
    assert "kernel toy_attn: its config was tuned on NVIDIA H200; decode run on NVIDIA H100 80GB HBM3: the " \
           "parameters are valid there and may not be the fastest" in plan.warnings


def test_a_sim_recipe_whose_profile_models_another_gpu_warns_about_the_config(measured_job):
    from deployments.launch import launch_plan_render as render

    best = KernelBest.objects.get(job=measured_job, shape="small", batch=1)
    local = next(r for r in example_recipes() if r["name"] == "local-sim-pd")
    spec = copy.deepcopy(local["spec"])
    spec["kernels"] = [{"package": "toy_attn", "config": best.pk}]
    plan = render(engine="sim", topology="pd", spec=spec, node=seed_node_facts_example())
    assert ("kernel toy_attn: its config was tuned on NVIDIA H200 (sm_90); the sim profile models 8x sm_120 GPUs, "
            "TP4 per role: a variant built for sm_90 does not run there") in plan.warnings


def test_a_path_reference_goes_to_every_worker_role_by_default(toy_package, settings):
    path = f"{settings.CEILING_KERNEL_CONFIG_DIR}/toy_attn/device_name=NVIDIA_H200,shape=wide,dtype=bf16.json"
    spec = _seed_pd()["spec"]
    spec["kernels"] = [{"package": "toy_attn", "config": path}]
    plan = _render(spec)
    assert plan.process("prefill").env["CEILING_TOY_ATTN_CONFIG"] == path
    assert plan.process("decode").env["CEILING_TOY_ATTN_CONFIG"] == path
    assert "CEILING_TOY_ATTN_CONFIG" not in plan.process("router").env


def test_recipes_without_kernel_references_render_as_before(db):
    spec = _seed_pd()["spec"]
    assert "kernels" not in recipe_validate(engine="sglang", topology="pd", spec=spec, node=seed_node_facts_example())


@pytest.mark.parametrize("ref, path, message", [
    ({"package": "nope", "config": "/x.json"}, "spec.kernels.0.package", "'nope' is not a registered kernel package"),
    ({"package": "toy_attn", "config": "/etc/passwd"}, "spec.kernels.0.config", "must be a .json config file"),
    ({"package": "toy_attn", "config": "/tmp/x.json"}, "spec.kernels.0.config", "is not under the kernel config directory"),
    ({"package": "toy_attn", "config": "relative.json"}, "spec.kernels.0.config", "must be an absolute path"),
    ({"package": "toy_attn", "config": 999999}, "spec.kernels.0.config", "no best kernel variant with id 999999"),
    ({"package": "toy_attn", "config": "best:999999"}, "spec.kernels.0.config", "no best kernel variant"),
    ({"package": "toy_attn", "config": None}, "spec.kernels.0.config", "give the exported config's path"),
    ({"package": "toy_attn", "config": "best:abc"}, "spec.kernels.0.config", "'best:<id>' needs a best-variant id"),
    # str.isdigit() takes a superscript two, which int() refuses
    ({"package": "toy_attn", "config": "best:\u00b2"}, "spec.kernels.0.config", "'best:<id>' needs a best-variant id"),
    ({"package": "toy_attn", "config": "best:99999999999999999999"}, "spec.kernels.0.config", "no best kernel variant"),
    ({"package": "toy_attn", "config": "/x.json", "roles": ["router"]}, "spec.kernels.0.roles",
     "'router' is not a worker role"),
    ({"package": "toy_attn", "config": "/x.json", "env": "LD_PRELOAD"}, "spec.kernels.0.env",
     "is set by package toy_attn's manifest"),
    ({"package": "toy_attn", "config": "/x.json", "script": "x"}, "spec.kernels.0.script", "unknown field 'script'"),
])
def test_invalid_references_are_refused_at_their_path(toy_package, ref, path, message):
    spec = _seed_pd()["spec"]
    spec["kernels"] = [ref]
    with pytest.raises(InvalidInput) as err:
        recipe_validate(engine="sglang", topology="pd", spec=spec, node=seed_node_facts_example())
    assert path in err.value.errors, err.value.errors
    assert any(message in m for m in err.value.errors[path]), err.value.errors[path]


def test_the_config_variable_may_not_also_be_set_by_hand(toy_package, packages_root, settings):
    from kernels.services import kernel_package_register
    from kernels.tests.conftest import TEST_MANIFEST, write_package

    spec = _seed_pd()["spec"]
    spec["roles"]["decode"]["env"] = {"CEILING_TOY_ATTN_CONFIG": "/other.json"}
    spec["kernels"] = [{"package": "toy_attn", "config": f"{settings.CEILING_KERNEL_CONFIG_DIR}/a.json"}]
    with pytest.raises(InvalidInput) as err:
        recipe_validate(engine="sglang", topology="pd", spec=spec, node=seed_node_facts_example())
    # Ceiling's own CEILING_*_CONFIG names are for kernel references only, never plain env.
    assert "spec.roles.decode.env.CEILING_TOY_ATTN_CONFIG" in err.value.errors
    # A package handing over through an engine variable collides with the same name set by hand.
    write_package(packages_root, name="toy_sgl", manifest=TEST_MANIFEST.replace('name = "toy_attn"', 'name = "toy_sgl"')
                  .replace("CEILING_TOY_ATTN_CONFIG", "SGLANG_TOY_KERNEL_CONFIG"))
    kernel_package_register(path=packages_root / "toy_sgl")
    spec = _seed_pd()["spec"]
    spec["env"] = {"SGLANG_TOY_KERNEL_CONFIG": "other.json"}  # no "/": values may not name paths
    spec["kernels"] = [{"package": "toy_sgl", "config": f"{settings.CEILING_KERNEL_CONFIG_DIR}/a.json"}]
    with pytest.raises(InvalidInput) as err:
        recipe_validate(engine="sglang", topology="pd", spec=spec, node=seed_node_facts_example())
    assert err.value.errors == {"spec.kernels.0.package": [
        "SGLANG_TOY_KERNEL_CONFIG is set by this kernel reference; remove it from the recipe's env"]}


def test_a_best_variant_of_another_package_is_refused(measured_job, packages_root):
    from kernels.services import kernel_package_register
    from kernels.tests.conftest import TEST_MANIFEST, write_package

    write_package(packages_root, name="toy_two", manifest=TEST_MANIFEST.replace('name = "toy_attn"', 'name = "toy_two"')
                  .replace("CEILING_TOY_ATTN_CONFIG", "CEILING_TOY_TWO_CONFIG"))
    kernel_package_register(path=packages_root / "toy_two")
    best = KernelBest.objects.filter(job=measured_job).first()
    spec = _seed_pd()["spec"]
    spec["kernels"] = [{"package": "toy_two", "config": best.pk}]
    with pytest.raises(InvalidInput) as err:
        recipe_validate(engine="sglang", topology="pd", spec=spec, node=seed_node_facts_example())
    assert err.value.errors["spec.kernels.0.config"] == [
        f"best variant #{best.pk} belongs to package toy_attn, not toy_two"]


def test_a_recipe_with_a_kernel_reference_is_stored_through_the_recipe_service(measured_job, admin_user, db):
    from deployments.nodes import node_register
    from deployments.services import recipe_create

    node = node_register(facts=_seed_layout_with("NVIDIA H200", "9.0"))
    best = KernelBest.objects.get(job=measured_job, shape="wide", batch=4)
    recipe = _seed_pd()
    recipe["spec"]["kernels"] = [{"package": "toy_attn", "config": f"best:{best.pk}", "roles": ["decode"]}]
    stored = recipe_create(user=admin_user, name="pd-with-kernel", engine=recipe["engine"], topology=recipe["topology"],
                           node=node, spec=recipe["spec"])
    assert stored.spec["kernels"][0]["config"] == best.config_path and stored.spec["kernels"][0]["best"] == best.pk


def test_a_config_file_of_another_package_is_refused(toy_package, settings):
    """A file in another package's export directory holds that package's tuned parameters."""
    spec = _seed_pd()["spec"]
    other = f"{settings.CEILING_KERNEL_CONFIG_DIR}/sparse_mla_decode/device_name=NVIDIA_H200,shape=v32,dtype=bf16.json"
    spec["kernels"] = [{"package": "toy_attn", "config": other}]
    with pytest.raises(InvalidInput) as err:
        recipe_validate(engine="sglang", topology="pd", spec=spec, node=seed_node_facts_example())
    assert err.value.errors["spec.kernels.0.config"] == [
        f"{other!r} is in the config directory of package 'sparse_mla_decode', not 'toy_attn'"]


def test_a_flag_a_kernel_reference_hands_over_is_named_as_the_recipe_wrote_it(measured_job):
    best = KernelBest.objects.get(job=measured_job, shape="small", batch=1)
    package = best.package
    package.manifest = {**package.manifest, "engine": {**package.manifest["engine"], "flag": "--mem-fraction-static"}}
    package.save(update_fields=["manifest"])
    spec = _seed_pd()["spec"]
    spec["roles"]["decode"]["flags"] = {"--mem-fraction-static": 0.8}
    spec["kernels"] = [{"package": "toy_attn", "config": best.pk, "roles": ["decode"]}]
    with pytest.raises(InvalidInput) as err:
        recipe_validate(engine="sglang", topology="pd", spec=spec, node=_seed_layout_with("NVIDIA H200", "9.0"))
    assert err.value.errors == {"spec.roles.decode.flags.--mem-fraction-static": [
        "is set by the kernel reference spec.kernels.0; remove it"]}
