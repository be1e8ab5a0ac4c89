"""What the demo says about CPU sharing before it sweeps a recipe: on the 2-CPU demo host the
llama.cpp recipe cannot avoid the sims' CPUs, and the line says so; on a bigger host it names the
CPUs nobody is pinned to."""
from __future__ import annotations

import pytest

from deployments.choices import DeploymentStatus, ProcessStatus, Role
from deployments.demo import demo_cpu_sharing
from deployments.models import Deployment, Node, NumaNode, ServerProcess
from deployments.tests.factories import recipe_row_create

pytestmark = pytest.mark.django_db


def _node(cpus: int) -> Node:
    node = Node.objects.create(name="local", hostname="local", cpu_count=cpus)
    NumaNode.objects.create(node=node, index=0, cpus=f"0-{cpus - 1}")
    return node


def _deployed(node: Node, name: str, processes: list[tuple[str, str, str]], *,
              status: str = DeploymentStatus.READY) -> Deployment:
    recipe = recipe_row_create(node=node, name=name, topology="pd" if len(processes) > 1 else "single")
    deployment = Deployment.objects.create(recipe=recipe, recipe_version=1, spec_snapshot={}, node=node,
                                           status=status)
    for ordinal, (role, cpus, effective) in enumerate(processes):
        ServerProcess.objects.create(deployment=deployment, role=role, ordinal=ordinal, status=ProcessStatus.READY,
                                     cpus=cpus, effective_cpus=effective)
    return deployment


def _demo_host(cpus: int) -> tuple[Node, object]:
    node = _node(cpus)
    _deployed(node, "local-sim-pd", [(Role.PREFILL, "0", "0"), (Role.DECODE, "1", "1"), (Role.ROUTER, "", "")])
    _deployed(node, "local-sim-single", [(Role.SINGLE, "0", "0")])
    _deployed(node, "stopped-one", [(Role.SINGLE, "2", "2")], status=DeploymentStatus.STOPPED)
    llama = recipe_row_create(node=node, name="local-llamacpp", engine="llamacpp",
                              spec={"roles": {"single": {"cpus": "0-1", "port": 31090}}})
    return node, llama


def test_it_says_llamacpp_shares_the_sims_cpus_on_the_two_cpu_demo_host() -> None:
    _, llama = _demo_host(2)
    assert demo_cpu_sharing(recipe=llama) == (
        "local-llamacpp (llama.cpp) shares CPUs 0-1 with local-sim-pd (prefill on CPU 0, decode on CPU 1) and "
        "local-sim-single (single on CPU 0): local has 2 CPUs and none is free of them, so they share; sweeps of "
        "deployments that share a CPU run one at a time (a second waits for the first to end), so no other sweep "
        "loads those CPUs while one is measured.")


def test_it_names_the_cpus_nobody_is_pinned_to_on_a_bigger_host() -> None:
    # a stopped deployment holds nothing: CPU 2 counts as free
    _, llama = _demo_host(4)
    line = demo_cpu_sharing(recipe=llama)
    assert line.endswith("; CPUs 2-3 of local are pinned to nothing: set spec.roles.single.cpus to them to "
                         "measure it alone.")


def test_it_reads_back_the_effective_pinning_and_stays_quiet_without_overlap() -> None:
    node = _node(4)
    # intended CPU 0, but the agent read back CPU 3 from /proc: the effective list is what counts
    _deployed(node, "moved", [(Role.SINGLE, "0", "3")])
    llama = recipe_row_create(node=node, name="local-llamacpp", engine="llamacpp",
                              spec={"roles": {"single": {"cpus": "0-1"}}})
    assert demo_cpu_sharing(recipe=llama) == (
        "local-llamacpp (llama.cpp) is pinned to CPUs 0-1, which no other deployment on local uses.")
    unpinned = recipe_row_create(node=node, name="free-floating", engine="llamacpp", spec={"roles": {"single": {}}})
    assert demo_cpu_sharing(recipe=unpinned) is None
