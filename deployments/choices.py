"""Status enums and fixed vocabularies of the deployments app."""
from django.db import models


class Engine(models.TextChoices):
    SGLANG = "sglang", "SGLang"
    VLLM = "vllm", "vLLM"
    LLAMACPP = "llamacpp", "llama.cpp"
    SIM = "sim", "sim (built-in simulator)"


class Topology(models.TextChoices):
    SINGLE = "single", "single server"
    PD = "pd", "prefill-decode (PD)"


class Role(models.TextChoices):
    PREFILL = "prefill", "prefill"
    DECODE = "decode", "decode"
    SINGLE = "single", "single"
    ROUTER = "router", "router"


class DeploymentStatus(models.TextChoices):
    PENDING = "pending", "pending"
    STARTING = "starting", "starting"
    READY = "ready", "ready"
    STOPPING = "stopping", "stopping"
    STOPPED = "stopped", "stopped"
    FAILED = "failed", "failed"


DEPLOYMENT_TERMINAL = {DeploymentStatus.STOPPED, DeploymentStatus.FAILED}
DEPLOYMENT_ACTIVE = {
    DeploymentStatus.PENDING,
    DeploymentStatus.STARTING,
    DeploymentStatus.READY,
    DeploymentStatus.STOPPING,
}


class ProcessStatus(models.TextChoices):
    PENDING = "pending", "pending"
    SPAWNED = "spawned", "spawned"
    READY = "ready", "ready"
    EXITED = "exited", "exited"
    KILLED = "killed", "killed"
    FAILED = "failed", "failed"


PROCESS_TERMINAL = {ProcessStatus.EXITED, ProcessStatus.KILLED, ProcessStatus.FAILED}

# How a process's ``reason`` starts when the agent stopped it because a sibling's failure failed
# the whole deployment (not because anyone asked): the pages read it instead of "stopped on request".
STOPPED_FOR_FAILURE = "stopped because the deployment failed"

# ``end_reason`` of a process row whose process was never spawned: the launch failed before it
# (another process's port is held); its ``reason`` starts with the same words and says why.
NOT_STARTED = "not started"


class RestartPolicy(models.TextChoices):
    NEVER = "never", "never"
    ON_FAILURE = "on-failure", "on failure (capped exponential back-off)"


class PinMethod(models.TextChoices):
    NUMACTL = "numactl", "numactl"
    AFFINITY = "sched_setaffinity", "sched_setaffinity"
    NONE = "none", "none"
