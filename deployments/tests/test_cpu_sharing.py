"""Two deployments pinned to the same CPUs: allowed (a small host has no other choice), but said
before the deploy (the dry-run's warnings) and when it happens (a ``warning`` entry on the new
deployment's timeline), since either one's benchmark numbers are skewed while both serve."""
from __future__ import annotations

import pytest

from deployments import services
from deployments.choices import ProcessStatus, Role
from deployments.models import ProcessEvent, ServerProcess
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_agent_support import sim_single_recipe


def _pinned(recipe, cpus: str):
    spec = dict(recipe.spec)
    spec["roles"] = {"single": {**spec["roles"]["single"], "cpus": cpus}}
    return services.recipe_update(recipe=recipe, user=None, spec=spec)


@pytest.mark.django_db
def test_a_deploy_onto_cpus_another_deployment_pins_is_warned_and_recorded(operator, operator_api,
                                                                            django_capture_on_commit_callbacks):
    node = cpu_node_create()
    first = sim_single_recipe(node=node, user=operator, name="first")            # CPU 0
    second = _pinned(sim_single_recipe(node=node, user=operator, name="second"), "0-1")
    apart = _pinned(sim_single_recipe(node=node, user=operator, name="apart"), "4-5")
    with django_capture_on_commit_callbacks(execute=False):  # no agent: the deployment stays pending
        held = services.deployment_create(recipe=first, user=operator)

    expected = (f"single CPU 0 is also pinned by the single of deployment #{held.pk} (recipe 'first', pending): "
                "the two share it, which skews either one's benchmark numbers while both serve")
    plan = operator_api.get(f"/api/recipes/{second.pk}/dry-run/").json()["plan"]
    assert expected in plan["warnings"]
    assert not any("also pinned" in w for w in operator_api.get(f"/api/recipes/{apart.pk}/dry-run/").json()["plan"]["warnings"])

    with django_capture_on_commit_callbacks(execute=False):
        sharing = services.deployment_create(recipe=second, user=operator)
        alone = services.deployment_create(recipe=apart, user=operator)
    def shared(deployment) -> list[str]:  # (the plan's other warnings, e.g. an ephemeral port, are there too)
        messages = ProcessEvent.objects.filter(deployment=deployment, kind="warning").values_list("message", flat=True)
        return [m for m in messages if "also pinned" in m]

    assert shared(sharing) == [expected]
    assert shared(alone) == []
    # Once the first one ended (a pending deployment is cancelled at once), only the deployment
    # of "second" itself holds CPUs 0-1, and a recipe's own deployment is not counted.
    assert services.deployment_stop(deployment=held, user=operator).status == "stopped"
    assert not any("also pinned" in w for w in services.recipe_plan(recipe=second, warn_ports=True).warnings)
    assert [w for w in services.recipe_plan(recipe=first, warn_ports=True).warnings if "also pinned" in w] == [
        f"single CPU 0 is also pinned by the single of deployment #{sharing.pk} (recipe 'second', pending): "
        "the two share it, which skews either one's benchmark numbers while both serve"]


@pytest.mark.django_db
def test_an_unpinned_process_holds_no_cpu_whatever_its_read_back_set(operator, django_capture_on_commit_callbacks):
    # A router without cpus reads back every CPU from /proc: that is the scheduler's choice, not a pin.
    node = cpu_node_create()
    first = sim_single_recipe(node=node, user=operator, name="first")
    with django_capture_on_commit_callbacks(execute=False):
        held = services.deployment_create(recipe=first, user=operator)
    ServerProcess.objects.create(deployment=held, role=Role.SINGLE, status=ProcessStatus.READY, cpus="",
                                 effective_cpus="0-7", argv=["router"])
    ServerProcess.objects.create(deployment=held, role=Role.ROUTER, status=ProcessStatus.READY, cpus="4",
                                 effective_cpus="4", argv=["router"])
    assert services.deployment_cpus_in_use(node=node) == {4: [(held, "router")]}


def test_a_plan_warns_when_two_of_its_roles_share_cpus():
    """Roles of one recipe pinned to overlapping CPUs (an explicit list against a list, or a whole
    NUMA node) get one warning per pair; disjoint pins and unpinned roles get none."""
    from deployments.launch import ProcessSpec, shared_cpu_warnings

    def proc(role, cpus):
        return ProcessSpec(role=role, ordinal=0, argv=["x"], env={}, env_redacted={}, secret_env={}, wrapper=[],
                           cpus=cpus, mem_nodes="", numa_node=None, pin_method="numactl" if cpus else "none",
                           gpu_ids=[], ports={}, host="127.0.0.1", health_url="", generate_url="", readiness=[],
                           startup_timeout_s=60, stop_grace_s=5)

    assert shared_cpu_warnings([proc("prefill", "0"), proc("decode", "1"), proc("router", "")]) == []
    lines = shared_cpu_warnings([proc("prefill", "0-3"), proc("decode", "2-5"), proc("router", "5")])
    assert lines == [
        "prefill and decode are both pinned to CPUs 2-3: they compete for them (CPU work of one delays the "
        "other's steps); give each role its own CPUs where the node has them",
        "decode and router are both pinned to CPU 5: they compete for it (CPU work of one delays the other's "
        "steps); give each role its own CPUs where the node has them"]
