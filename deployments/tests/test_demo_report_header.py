"""The demo's process table names its memory-binding column in words, aligned with its rows, and
says where its effective columns are read from (memory: the policy in numa_maps, else the cpuset)."""
from __future__ import annotations

from io import StringIO

from deployments.demo import DeployProof
from deployments.management.commands.demo import Command


def test_the_process_table_says_numa_mem_nodes_and_its_rows_line_up():
    out = StringIO()
    command = Command(stdout=out)
    proof = DeployProof(recipe="local-sim-pd", deployment_id=3, status="ready", ready_after_s=13.2, processes=[
        {"role": "prefill", "pid": 4242, "status": "ready", "cpus": "0", "effective_cpus": "0",
         "effective_mems": "0", "pinning_verified": True},
    ])
    command._report(proof, "http://127.0.0.1:8000")
    lines = out.getvalue().splitlines()
    header = next(line for line in lines if "effective CPUs" in line)
    row = next(line for line in lines if line.lstrip().startswith("prefill"))
    assert " mems " not in header
    # the note says what is read, as the pinning check reads it: memory from numa_maps as well
    assert header == (
        "  role         pid  status   pinned (recipe)  effective CPUs  NUMA mem nodes verified "
        "(CPUs: Cpus_allowed_list of /proc/<pid>/status; mem nodes: the bind/interleave policy in "
        "/proc/<pid>/numa_maps, else Mems_allowed_list)")
    # the values sit under their headers
    assert row.index("yes") == header.index("verified")
    assert row[header.index("NUMA mem nodes"):].startswith("0 ")
