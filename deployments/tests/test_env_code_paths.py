"""Environment names that would point an engine's libraries at code to run are refused."""
import pytest

from deployments.recipes import env_name_problem, env_value_problem


@pytest.mark.parametrize("name", [
    "TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH", "LLAMA_CPP_LIB_PATH", "DG_JIT_NVCC_COMPILER",
    "TRITON_CACHE_DIR", "SGLANG_EXTERNAL_MODEL_PACKAGE", "VLLM_SOME_BIN", "TORCH_CUDA_EXE", "GGML_LIB",
    "TRITON_CACHE_MANAGER", "TRITON_HOME", "TRITON_OVERRIDE_DIR", "TRITON_KERNEL_OVERRIDE", "VLLM_CACHE_ROOT",
    "TORCH_HOME", "VLLM_CONFIG_ROOT",
])
def test_a_name_that_points_at_code_is_refused_although_its_prefix_is_allowed(name):
    assert env_name_problem(name) == f"{name} is not allowed: it changes which code or libraries the process loads"


@pytest.mark.parametrize("name", ["SGLANG_ENABLE_JIT_DEEPGEMM", "NCCL_NET", "TRITON_PRINT_AUTOTUNING", "HF_HOME",
                                  "NCCL_IB_HCA", "VLLM_ATTENTION_BACKEND"])
def test_ordinary_tuning_names_stay_allowed(name):
    assert env_name_problem(name) is None


@pytest.mark.parametrize("name", [
    "NCCL_CONF_FILE", "NCCL_DEBUG_FILE", "FLASHINFER_JIT_DIR", "FLASHINFER_CUBIN_DIR", "FLASHINFER_WORKSPACE_BASE",
    "TORCH_LOGS_OUT", "SGLANG_TORCH_PROFILER_DIR", "VLLM_SOME_ROOT",
])
def test_a_name_that_names_a_file_folder_or_output_is_refused_as_such(name):
    suffix = next(x for x in ("_FILE", "_DIR", "_BASE", "_OUT", "_ROOT") if name.endswith(x))
    assert env_name_problem(name) == (
        f"{name} is not allowed: a name ending in {suffix} names a file or folder for a library to read or write, "
        "and no variable may point one at a path (only HF_HOME takes a folder, under the model roots; the model's "
        "own path is spec.model.path)")


@pytest.mark.parametrize(("name", "reason"), [
    ("IFS", "it changes how a shell splits the words of the commands it runs"),
    ("CDPATH", "it changes which folder a shell's cd enters"),
    ("MALLOC_ARENA_MAX", "it changes how the C library allocates memory (checks, poisoning, arena tuning)"),
    ("LLAMA_ARG_MODEL", "it is llama-server's environment spelling of a command-line flag, which would "
                               "bypass the flag allowlist; set the flag in spec.roles.<role>.flags"),
    ("PATH", "it changes which code or libraries the process loads"),
    ("LD_PRELOAD", "it changes which code or libraries the process loads"),
    ("HOME", "it changes which code or libraries the process loads"),
])
def test_each_denied_name_says_its_own_reason(name, reason):
    assert env_name_problem(name) == f"{name} is not allowed: {reason}"


def test_a_secret_named_model_dir_is_refused_for_naming_a_folder(operator_api, db, settings):
    from deployments.examples import example_recipe
    from deployments.tests.factories import seed_node_create

    settings.CEILING_MODEL_ROOTS = ["/models"]
    seed_node_create()
    payload = example_recipe("seed-v4-flash-pd")
    payload["spec"]["secrets"] = {"MODEL_DIR": "hf-token"}
    response = operator_api.post("/api/recipes/", payload, format="json")
    assert response.status_code == 400
    assert response.json()["spec.secrets.MODEL_DIR"] == [
        "MODEL_DIR is not allowed: a name ending in _DIR names a file or folder for a library to read or write, "
        "and no variable may point one at a path (only HF_HOME takes a folder, under the model roots; the model's "
        "own path is spec.model.path)"]


@pytest.mark.parametrize(("name", "value"), [
    ("TORCH_LOGS", "/etc/passwd"), ("NCCL_TOPO_DUMP", "/tmp/x"), ("SGLANG_SOMETHING", "../x/y"),
    ("VLLM_ATTENTION_BACKEND", "a/b"),
])
def test_a_value_naming_a_file_or_folder_is_refused_whatever_the_name(settings, name, value):
    settings.CEILING_MODEL_ROOTS = ["/models"]
    assert "contains '/'" in env_value_problem(name, value)


def test_hf_home_takes_a_path_inside_a_model_root_only(settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]
    assert env_value_problem("HF_HOME", "/models/hf") is None
    assert "/models" in env_value_problem("HF_HOME", "/etc/hf")
    assert env_value_problem("HF_HOME", "relative/hf") is not None
    assert env_value_problem("HF_HOME", "/models/../etc") is not None


@pytest.mark.parametrize("value", ["cuda_ipc,cuda_copy,tcp", "1", "FLASHINFER", "mlx5_0:1", "9.0"])
def test_ordinary_values_stay_allowed(value):
    assert env_value_problem("UCX_TLS", value) is None


@pytest.mark.parametrize("value", ["Europe/Paris", "America/Argentina/Buenos_Aires", "UTC", "EST5EDT", "CET-1CEST",
                                   ":UTC", "CET-1CEST,M3.5.0,M10.5.0/3"])
def test_tz_takes_a_zone_name_of_the_tz_database_or_a_posix_rule(value):
    assert env_value_problem("TZ", value) is None


@pytest.mark.parametrize(("value", "problem"), [
    ("Europe/Pariss", "TZ's value 'Europe/Pariss' is not a time zone of the IANA tz database; did you mean "
                      "Europe/Paris?"),
    ("Nowhere/Atlantis", "TZ's value 'Nowhere/Atlantis' is not a time zone of the IANA tz database (such as "
                         "Europe/Paris or America/New_York)"),
    (":/etc/localtime", "TZ's value ':/etc/localtime' is a path: TZ takes a time zone name such as Europe/Paris, "
                        "never a file or folder"),
    (":../../etc/passwd", "TZ's value ':../../etc/passwd' is a path: TZ takes a time zone name such as "
                          "Europe/Paris, never a file or folder"),
    ("/usr/share/zoneinfo/UTC", "TZ's value '/usr/share/zoneinfo/UTC' is a path: TZ takes a time zone name such "
                                "as Europe/Paris, never a file or folder"),
    ("Europe/../../etc/passwd", "TZ's value 'Europe/../../etc/passwd' is a path: TZ takes a time zone name such "
                                "as Europe/Paris, never a file or folder"),
    ("..", "TZ's value '..' is a path: TZ takes a time zone name such as Europe/Paris, never a file or folder"),
])
def test_tz_refuses_an_unknown_zone_and_any_file_form(value, problem):
    assert env_value_problem("TZ", value) == problem


def test_a_recipe_with_a_zone_name_for_tz_is_saved(operator_api, db, settings):
    from deployments.examples import example_recipe
    from deployments.tests.factories import seed_node_create

    settings.CEILING_MODEL_ROOTS = ["/models"]
    seed_node_create()
    payload = example_recipe("seed-v4-flash-pd")
    payload["spec"]["env"] = {"TZ": "Europe/Paris"}
    response = operator_api.post("/api/recipes/", payload, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["spec"]["env"] == {"TZ": "Europe/Paris"}
    payload["name"] += "-b"
    payload["spec"]["env"] = {"TZ": "Europe/Pariss"}
    response = operator_api.post("/api/recipes/", payload, format="json")
    assert response.status_code == 400
    assert response.json()["spec.env.TZ"] == [
        "TZ's value 'Europe/Pariss' is not a time zone of the IANA tz database; did you mean Europe/Paris?"]
