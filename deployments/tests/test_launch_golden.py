"""Golden launch plans on the seed topology (prefill GPU0-3 on NUMA node 0, decode GPU4-7 on
NUMA node 1, router on 30080) for SGLang and vLLM: the full argv lists are written out
literally, with the executables pinned through settings so the expectations are stable."""
from __future__ import annotations

import pytest

from deployments.examples import example_recipe, seed_node_facts_example
from deployments.launch import launch_plan_render

PY = "/opt/ceiling/venv/bin/python"
NUMACTL = "/usr/bin/numactl"
VLLM = "/opt/ceiling/venv/bin/vllm"
VLLM_ROUTER = "/opt/ceiling/venv/bin/vllm-router"


@pytest.fixture(autouse=True)
def _pinned_settings(settings):
    settings.CEILING_EXECUTABLES = {"python": PY, "numactl": NUMACTL, "vllm": VLLM, "vllm-router": VLLM_ROUTER}
    settings.CEILING_MODEL_ROOTS = ["/models"]


def render(name: str, *, engine: str | None = None, spec: dict | None = None):
    recipe = example_recipe(name)
    return launch_plan_render(engine=engine or recipe["engine"], topology=recipe["topology"],
                              spec=spec or recipe["spec"], node=seed_node_facts_example())


def vllm_pd_spec() -> dict:
    """The seed PD recipe moved to vLLM: same GPUs and NUMA nodes, vLLM's worker ports."""
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    spec["roles"]["prefill"] = {"gpus": [0, 1, 2, 3], "tp": 4, "numa_node": 0, "port": 8100, "side_channel_port": 5600}
    spec["roles"]["decode"] = {"gpus": [4, 5, 6, 7], "tp": 4, "numa_node": 1, "port": 8200, "side_channel_port": 5700}
    spec["env"] = {"VLLM_LOGGING_LEVEL": "INFO"}
    return spec


def test_it_renders_the_seed_sglang_pd_plan():
    plan = render("seed-v4-flash-pd")
    assert [p.role for p in plan.processes] == ["prefill", "decode", "router"]
    prefill, decode, router = plan.processes
    assert prefill.argv == [
        NUMACTL, "--cpunodebind=0", "--membind=0", "--",
        PY, "-m", "sglang.launch_server",
        "--model-path", "/models/DeepSeek-V4-Flash",
        "--served-model-name", "DeepSeek-V4-Flash",
        "--host", "127.0.0.1", "--port", "30000",
        "--tp-size", "4", "--base-gpu-id", "0",
        "--disaggregation-mode", "prefill",
        "--disaggregation-transfer-backend", "nixl",
        "--disaggregation-bootstrap-port", "8998",
    ]
    assert decode.argv == [
        NUMACTL, "--cpunodebind=1", "--membind=1", "--",
        PY, "-m", "sglang.launch_server",
        "--model-path", "/models/DeepSeek-V4-Flash",
        "--served-model-name", "DeepSeek-V4-Flash",
        "--host", "127.0.0.1", "--port", "30001",
        "--tp-size", "4", "--base-gpu-id", "0",
        "--disaggregation-mode", "decode",
        "--disaggregation-transfer-backend", "nixl",
    ]
    assert router.argv == [
        PY, "-m", "sglang_router.launch_router", "--pd-disaggregation",
        "--prefill", "http://127.0.0.1:30000", "8998",
        "--decode", "http://127.0.0.1:30001",
        "--host", "0.0.0.0", "--port", "30080",
        # the metrics port by default: the first free port above the router's own
        "--prometheus-port", "30081",
        "--prometheus-host", "0.0.0.0",  # where the router binds: the recipe put it on every interface
    ]
    assert prefill.env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0,1,2,3",
                           "SGLANG_FP8_PAGED_MQA_LOGITS_TORCH": "1"}
    assert decode.env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "4,5,6,7",
                          "SGLANG_FP8_PAGED_MQA_LOGITS_TORCH": "1"}
    assert router.env == {}
    assert (prefill.cpus, prefill.mem_nodes, prefill.numa_node, prefill.pin_method) == ("0-31", "0", 0, "numactl")
    assert (decode.cpus, decode.mem_nodes, decode.numa_node, decode.pin_method) == ("32-63", "1", 1, "numactl")
    assert (router.cpus, router.pin_method, router.gpu_ids) == ("", "none", [])
    assert (prefill.gpu_ids, decode.gpu_ids) == ([0, 1, 2, 3], [4, 5, 6, 7])
    assert (prefill.ports, decode.ports, router.ports) == ({"http": 30000, "bootstrap": 8998}, {"http": 30001}, {"http": 30080, "metrics": 30081})
    # clients reach the router (bound to 0.0.0.0 on seed-8gpu, not this host) at the node's address;
    # the node agent probes it on the node, through loopback
    assert plan.entry_url == "http://seed-8gpu:30080"
    assert [c["kind"] for c in router.readiness] == ["process_alive", "http", "router_workers", "generate"]
    assert router.readiness[2]["url"] == "http://127.0.0.1:30080/workers"
    assert router.readiness[2]["expect"] == {"prefill": 1, "decode": 1}
    assert router.readiness[3]["url"] == "http://127.0.0.1:30080/generate"
    assert prefill.health_url == "http://127.0.0.1:30000/health"
    assert prefill.generate_url == ""
    assert plan.warnings == []


def test_it_renders_the_seed_sglang_single_tp4_plan():
    plan = render("seed-v4-flash-tp4")
    (single,) = plan.processes
    assert single.argv == [
        NUMACTL, "--cpunodebind=0", "--membind=0", "--",
        PY, "-m", "sglang.launch_server",
        "--model-path", "/models/DeepSeek-V4-Flash",
        "--served-model-name", "DeepSeek-V4-Flash",
        "--host", "0.0.0.0", "--port", "30000",
        "--tp-size", "4", "--base-gpu-id", "0",
    ]
    assert single.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert single.health_url == "http://127.0.0.1:30000/health"
    assert single.generate_url == "http://127.0.0.1:30000/generate"
    assert single.readiness[-1]["json"] == {"text": "Hello", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}


def test_it_renders_the_seed_vllm_pd_plan():
    plan = render("seed-v4-flash-pd", engine="vllm", spec=vllm_pd_spec())
    prefill, decode, router = plan.processes
    assert prefill.argv == [
        NUMACTL, "--cpunodebind=0", "--membind=0", "--",
        VLLM, "serve", "/models/DeepSeek-V4-Flash",
        "--served-model-name", "DeepSeek-V4-Flash",
        "--host", "127.0.0.1", "--port", "8100",
        "--tensor-parallel-size", "4",
        "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}',
    ]
    assert decode.argv == [
        NUMACTL, "--cpunodebind=1", "--membind=1", "--",
        VLLM, "serve", "/models/DeepSeek-V4-Flash",
        "--served-model-name", "DeepSeek-V4-Flash",
        "--host", "127.0.0.1", "--port", "8200",
        "--tensor-parallel-size", "4",
        "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}',
    ]
    assert router.argv == [
        VLLM_ROUTER, "--pd-disaggregation",
        "--prefill", "http://127.0.0.1:8100",
        "--decode", "http://127.0.0.1:8200",
        "--host", "0.0.0.0", "--port", "30080", "--prometheus-port", "30081",
    ]
    assert prefill.env == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0,1,2,3",
        "VLLM_LOGGING_LEVEL": "INFO",
        "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1", "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600",
    }
    assert decode.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5700"
    assert decode.env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert prefill.ports == {"http": 8100, "side_channel": 5600}
    assert router.generate_url == "http://127.0.0.1:30080/v1/completions"
    assert router.readiness[-1]["json"] == {"model": "DeepSeek-V4-Flash", "prompt": "Hello", "max_tokens": 1, "temperature": 0}


def test_it_renders_the_seed_vllm_single_tp4_plan():
    spec = example_recipe("seed-v4-flash-tp4")["spec"]
    spec["roles"]["single"]["port"] = 8000
    spec["env"] = {}
    (single,) = render("seed-v4-flash-tp4", engine="vllm", spec=spec).processes
    assert single.argv == [
        NUMACTL, "--cpunodebind=0", "--membind=0", "--",
        VLLM, "serve", "/models/DeepSeek-V4-Flash",
        "--served-model-name", "DeepSeek-V4-Flash",
        "--host", "0.0.0.0", "--port", "8000",
        "--tensor-parallel-size", "4",
    ]
    assert single.env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert single.health_url == "http://127.0.0.1:8000/health"
    assert single.generate_url == "http://127.0.0.1:8000/v1/completions"


def test_it_renders_parallelism_and_flags_in_a_stable_order():
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    spec["transfer_backend"] = "mooncake"
    spec["roles"]["decode"].update({"dp": 4, "ep": 4, "flags": {
        "enable-dp-attention": True, "mem-fraction-static": 0.85, "disable-radix-cache": False,
        "cuda-graph-max-bs": 64, "disaggregation-ib-device": "mlx5_0"}})
    spec["roles"]["router"]["flags"] = {"policy": "round_robin", "prometheus-port": 29000}
    plan = render("seed-v4-flash-pd", spec=spec)
    decode, router = plan.process("decode"), plan.process("router")
    assert decode.argv[4:] == [
        PY, "-m", "sglang.launch_server",
        "--model-path", "/models/DeepSeek-V4-Flash",
        "--served-model-name", "DeepSeek-V4-Flash",
        "--host", "127.0.0.1", "--port", "30001",
        "--tp-size", "4", "--dp-size", "4", "--ep-size", "4", "--base-gpu-id", "0",
        "--disaggregation-mode", "decode",
        "--disaggregation-transfer-backend", "mooncake",
        "--cuda-graph-max-bs", "64",
        "--disaggregation-ib-device", "mlx5_0",
        "--enable-dp-attention",
        "--mem-fraction-static", "0.85",
    ]
    host = spec["roles"]["router"]["host"]
    assert router.argv[-6:] == ["--policy", "round_robin", "--prometheus-port", "29000", "--prometheus-host", host]
    assert router.ports == {"http": 30080, "metrics": 29000}
