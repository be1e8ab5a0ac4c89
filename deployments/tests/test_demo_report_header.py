"""The demo's process table names its memory-binding column in words, aligned with its rows."""
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
    assert "NUMA mem nodes verified (CPUs and mem nodes read back from /proc/<pid>/status)" in header
    # the values sit under their headers
    assert row.index("yes") == header.index("verified")
    assert row[header.index("NUMA mem nodes"):].startswith("0 ")
