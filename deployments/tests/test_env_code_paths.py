"""Environment names that would point an engine's libraries at code to run are refused."""
import pytest

from deployments.recipes import env_name_problem


@pytest.mark.parametrize("name", [
    "TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH", "LLAMA_CPP_LIB_PATH", "DG_JIT_NVCC_COMPILER",
    "TRITON_CACHE_DIR", "SGLANG_EXTERNAL_MODEL_PACKAGE", "VLLM_SOME_BIN", "TORCH_CUDA_EXE", "GGML_LIB",
    "TRITON_CACHE_MANAGER", "TRITON_HOME", "TRITON_OVERRIDE_DIR", "TRITON_KERNEL_OVERRIDE", "VLLM_CACHE_ROOT",
    "TORCH_HOME", "VLLM_CONFIG_ROOT", "LLAMA_ARG_MODEL",
])
def test_a_name_that_points_at_code_is_refused_although_its_prefix_is_allowed(name):
    assert env_name_problem(name) == f"{name} is not allowed: it changes which code or libraries the process loads"


@pytest.mark.parametrize("name", ["SGLANG_ENABLE_JIT_DEEPGEMM", "NCCL_NET", "TRITON_PRINT_AUTOTUNING", "HF_HOME",
                                  "NCCL_IB_HCA", "VLLM_ATTENTION_BACKEND"])
def test_ordinary_tuning_names_stay_allowed(name):
    assert env_name_problem(name) is None
