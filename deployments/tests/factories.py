"""Row factories for the deployments API tests: nodes with GPU and NUMA rows written directly,
recipes stored without going through validation (for read and permission tests), secrets,
deployments and server processes."""
from __future__ import annotations

from django.utils import timezone

from deployments.choices import DeploymentStatus, ProcessStatus, Role
from deployments.models import Deployment, Gpu, Node, NumaNode, Recipe, Secret, ServerProcess
from deployments.topology import format_cpulist

GIB = 1024**3


def seed_node_create(*, name: str = "seed-8gpu") -> Node:
    """The seed machine: 8 GPUs, GPU0-3 with CPUs 0-31 on NUMA node 0, GPU4-7 with CPUs 32-63
    on NUMA node 1, numactl present."""
    node = Node.objects.create(
        name=name,
        hostname=name,
        cpu_count=64,
        memory_total_bytes=512 * GIB,
        tools={"numactl": "/usr/bin/numactl", "nvidia-smi": "/usr/bin/nvidia-smi"},
        driver_version="580.95.05",
        cuda_version="13.0",
        discovered_at=timezone.now(),
    )
    for numa in (0, 1):
        NumaNode.objects.create(
            node=node, index=numa, cpus=format_cpulist(range(32 * numa, 32 * numa + 32)), memory_total_bytes=256 * GIB
        )
    for index in range(8):
        numa = 0 if index < 4 else 1
        Gpu.objects.create(
            node=node,
            index=index,
            uuid=f"GPU-00000000-0000-4000-8000-00000000000{index}",
            name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
            memory_total_bytes=102641958912,
            pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
            numa_node=numa,
            compute_capability="12.0",
            cpu_affinity=format_cpulist(range(32 * numa, 32 * numa + 32)),
        )
    return node


def cpu_node_create(*, name: str = "cpu-box") -> Node:
    """A CPU-only host: 8 CPUs on one NUMA node, no GPUs, no numactl."""
    node = Node.objects.create(name=name, hostname=name, cpu_count=8, memory_total_bytes=16 * GIB, tools={})
    NumaNode.objects.create(node=node, index=0, cpus="0-7", memory_total_bytes=16 * GIB)
    return node


#: A valid single-server sim spec with an explicit served_model_name, for form and admin tests.
SIM_TINY_SPEC = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
                 "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 31234}}, "sim": {"profile": "demo-fast"}}


def signed_in_client(user=None, *, raise_request_exception: bool = True):
    """A page client (django.test.Client) signed in as ``user`` (anonymous when None); with
    ``raise_request_exception`` False a view's exception comes back as the 500 a browser gets."""
    from django.test import Client

    client = Client(raise_request_exception=raise_request_exception)
    if user is not None:
        client.force_login(user)
    return client


#: A number of thousands of digits (Python's int() refuses more than 4300) and how a message names
#: it, cut to 40 characters.
LONG_DIGITS = "9" * 5000
LONG_DIGITS_SHOWN = "9" * 39 + "…"


def recipe_row_create(*, node: Node, name: str = "stored-recipe", spec: dict | None = None, **extra) -> Recipe:
    """A recipe row written straight to the database (no validation, no service), for tests
    that only read or that check refusals before any validation happens."""
    return Recipe.objects.create(
        name=name,
        engine=extra.pop("engine", "sim"),
        topology=extra.pop("topology", "single"),
        node=node,
        spec=spec if spec is not None else {},
        **extra,
    )


def secret_row_create(*, name: str = "hf-token", value: str = "hf_abcdefghijklmnopqrstuvwx") -> Secret:
    return Secret.objects.create(name=name, value=value, description="test secret")


def deployment_row_create(*, recipe: Recipe, status: str = DeploymentStatus.READY) -> Deployment:
    """A deployment of ``recipe``'s current version with one ready single-server process."""
    deployment = Deployment.objects.create(
        recipe=recipe, recipe_version=recipe.version, spec_snapshot=recipe.spec, node=recipe.node, status=status
    )
    ServerProcess.objects.create(
        deployment=deployment,
        role=Role.SINGLE,
        status=ProcessStatus.READY,
        pid=4242,
        argv=["/usr/bin/python", "-m", "sim", "--port", "30000"],
        env_redacted={"CUDA_VISIBLE_DEVICES": "0"},
        gpu_ids=[0],
        ports={"http": 30000},
        cpus="0-31",
        numa_node=0,
    )
    return deployment


def secret_api_store(api, *, name: str, value: str) -> None:
    """Store secret ``name`` with ``value`` through the API as ``api``'s user (an admin)."""
    made = api.post("/api/secrets/", {"name": name, "value": value}, format="json")
    assert made.status_code == 201, made.json()


#: The value of secret ``db-pass`` that :func:`recipe_stored_before_create` holds in plain values.
STORED_BEFORE_VALUE = "plain-Stored-Value-0042"


def recipe_stored_before_create(admin_api) -> Recipe:
    """Recipe ``stored-before`` (the seed pd example on the seed node) whose env holds secret
    ``db-pass``'s value in plain values (``TZ``, and within ``NOTE``), written straight to the table
    as a save from before the check left it; the secret is stored through the API."""
    from deployments.examples import example_recipe

    node = seed_node_create()
    secret_api_store(admin_api, name="db-pass", value=STORED_BEFORE_VALUE)
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    return recipe_row_create(node=node, name="stored-before", topology="pd", engine="sglang",
                             spec={**spec, "env": {"TZ": STORED_BEFORE_VALUE, "NOTE": f"pass={STORED_BEFORE_VALUE};"}})
