"""Ceiling settings: one file, driven by the environment.

Embedded defaults (laptop, CI): SQLite in ``var/``, Redis on localhost, DEBUG off (``DEBUG=1``
turns Django's debug pages on: they show request data, a form's secret value included).
Production: set ``CEILING_ENV=production``; then ``SECRET_KEY``, ``ALLOWED_HOSTS`` and
``CEILING_SECRETS_KEY`` are required.

Variables
---------
DATABASE_URL        e.g. ``postgres://user@127.0.0.1:5432/ceiling`` (default: SQLite file)
REDIS_URL           Celery broker and channel layer (default ``redis://127.0.0.1:6379/0``)
CEILING_MODEL_ROOTS comma/colon-separated directories a recipe's model path must lie under
CEILING_VAR_DIR     where logs, the SQLite file and generated models live (default ``var/``)
CEILING_CACHE_URL   ``redis://...`` puts Django's cache (sign-in and API throttle counts) in Redis, shared
                    by every web process; empty (default): per process, in memory
CEILING_SECRETS_KEY Fernet key that encrypts stored secrets (default: ``<CEILING_VAR_DIR>/secrets.key``,
                    created on first use; see :mod:`controlplane.secretbox`)
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import dj_database_url

from controlplane.env import env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("CEILING_VAR_DIR", str(BASE_DIR / "var")))

CEILING_ENV = env_str("CEILING_ENV", "local")
PRODUCTION = CEILING_ENV == "production"

DEBUG = env_bool("DEBUG", default=False)
SECRET_KEY = env_str("SECRET_KEY", required=PRODUCTION) or "ceiling-local-insecure-key-change-me"
# Stored secrets are encrypted with their own key, not SECRET_KEY (rotating that must not lose
# them): CEILING_SECRETS_KEY when set, else this file, created on first use (controlplane.secretbox).
# Required in production: every process that reads secrets (web, workers, each host's node agent)
# needs the same key, and a key file in one container or host is neither shared nor kept.
CEILING_SECRETS_KEY = env_str("CEILING_SECRETS_KEY", required=PRODUCTION) or ""
CEILING_SECRETS_KEY_FILE = VAR_DIR / "secrets.key"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [] if PRODUCTION else ["127.0.0.1", "localhost", "testserver"])
if PRODUCTION and not ALLOWED_HOSTS:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("ALLOWED_HOSTS is required when CEILING_ENV=production")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "controlplane.apps.CeilingAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "simple_history",
    "channels",
    "controlplane",
    "deployments",
    "benchmarks",
    "kernels",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # A body sent with Transfer-Encoding (chunked) is refused 411 before anything reads it: Django
    # reads a body only as far as its Content-Length, and would take it for an empty one.
    "controlplane.body_length.LengthRequiredMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "simple_history.middleware.HistoryRequestMiddleware",
    # A partial (htmx) request of a signed-out user gets a 401, not the login page to swap in.
    "controlplane.middleware.PartialRequestMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
WSGI_APPLICATION = "controlplane.wsgi.application"
ASGI_APPLICATION = "controlplane.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "controlplane.context_processors.ceiling",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'ceiling.sqlite3'}"),
        conn_max_age=env_int("DB_CONN_MAX_AGE", 0),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (web, worker, node agent, beat) share the file: wait for locks instead of
    # failing. WAL journal: in the default rollback journal a reader holds a shared lock that the
    # writer must wait out, so one slow read (a 131 s list query) failed every write behind it
    # ("database is locked": heartbeats, sweep progress, telemetry rollups); in WAL readers and
    # the one writer do not block each other. The mode is stored in the file, so the first
    # connection converts it and later ones find it set. synchronous=NORMAL is the setting WAL
    # is meant for: a commit is not fsynced, the last commits may be lost on a power cut, never
    # on a process crash, and the file stays consistent.
    # The file holds secrets and tokens: directory 0700, so no other local user can read it.
    Path(DATABASES["default"]["NAME"]).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    DATABASES["default"].setdefault("OPTIONS", {}).update({
        "timeout": 20, "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
    })
    # Tests that start a real node agent share the test database with it, so the test
    # database is a file rather than SQLite's in-memory default; the pid keeps concurrent
    # test runs in one checkout apart.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-ceiling-{os.getpid()}.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "controlplane.backends.RoleBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# Third-party front-end libraries come from npm (package-lock.json) at setup time and are
# served from node_modules under a "vendor/" prefix; nothing of theirs is committed.
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("vendor/htmx", BASE_DIR / "node_modules" / "htmx.org" / "dist"),
    ("vendor/uplot", BASE_DIR / "node_modules" / "uplot" / "dist"),
]
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")

# Live data of installations sharing one Redis is kept apart by a namespace
# (controlplane.realtime.realtime_namespace): CEILING_REALTIME_PREFIX, or a hash of the
# database identity. The layer below applies it as channels_redis's ``prefix``.
CEILING_REALTIME_PREFIX = env_str("CEILING_REALTIME_PREFIX", "")
# Websocket Origins accepted besides the page's own (scheme://host:port, same-origin rule).
CEILING_WS_ALLOWED_ORIGINS = [o.strip() for o in env_str("CEILING_WS_ALLOWED_ORIGINS", "").split(",") if o.strip()]
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "controlplane.realtime.NamespacedRedisChannelLayer",
        # group_expiry: a group member not renewed for 5 minutes is dropped. The live hub of each
        # web process renews its memberships every minute (controlplane.consumers.GROUP_RENEW_S),
        # so only the members of a web process that was killed or restarted go: channels_redis's
        # default (one day) kept every broadcast to them failing "over capacity" until then.
        "CONFIG": {"hosts": [REDIS_URL], "capacity": 200, "expiry": 30, "group_expiry": 300},
    }
}

# Django's cache holds the throttle counts (failed sign-ins, API request rates). In memory it is
# per process, which is right for one web process (the default stack runs one daphne); several
# web processes must share it: CEILING_CACHE_URL=redis://... (docker-compose sets it).
CEILING_CACHE_URL = env_str("CEILING_CACHE_URL", "")
if CEILING_CACHE_URL:
    from django.core.exceptions import ImproperlyConfigured

    if not CEILING_CACHE_URL.startswith(("redis://", "rediss://", "unix://")):
        raise ImproperlyConfigured(f"CEILING_CACHE_URL must be a redis://, rediss:// or unix:// URL, "
                                   f"not {CEILING_CACHE_URL.split('://')[0]!r}")
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                          "LOCATION": CEILING_CACHE_URL,
                          "KEY_PREFIX": f"ceiling{CEILING_REALTIME_PREFIX and ':' + CEILING_REALTIME_PREFIX}"}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = "control"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_TIMEZONE = TIME_ZONE
CELERY_BEAT_SCHEDULE: dict = {
    "nodes-heartbeat": {"task": "deployments.tasks.nodes_heartbeat_fanout", "schedule": 10.0},
    # Each node agent compares its process rows with /proc on start-up and every tick; this
    # periodic pass is the backstop for anything a tick missed.
    "nodes-reconcile": {"task": "deployments.tasks.nodes_reconcile_fanout", "schedule": 60.0},
    # Telemetry rollups older than CEILING_TELEMETRY_RETENTION_DAYS are deleted hourly.
    "telemetry-prune": {"task": "deployments.telemetry.tasks.telemetry_prune_task", "schedule": 3600.0},
    # Kernel jobs whose node agent died mid-build are failed after the step timeout + 10 min.
    "kernel-jobs-reap": {"task": "kernels.tasks.kernel_jobs_reap_task", "schedule": 300.0},
    # Sweeps whose worker died (no heartbeat for 2 min, or its pid is gone) are failed; pending
    # sweeps no task looked at for 60 s while a worker slot is free get their task sent again.
    "sweeps-reconcile": {"task": "benchmarks.tasks.sweeps_reconcile_task", "schedule": 60.0},
}
# Task modules outside an app's tasks.py (autodiscovery finds only those).
CELERY_IMPORTS = ("deployments.telemetry.tasks",)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "controlplane.auth.BearerOrTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # the role first (401/403), then the rules on every request's query: a repeated parameter is a
    # 400, and so is a key a viewset's action does not take, and a list's filter given empty
    "DEFAULT_PERMISSION_CLASSES": ["controlplane.permissions.RolePermission", "controlplane.drf_defaults.SingleValuedQuery",
                                   "controlplane.drf_defaults.KnownQueryKeys"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # a ?format= no renderer answers in is a 400 naming the formats offered, not a bare 404
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "controlplane.drf_defaults.FormatNegotiation",
    "EXCEPTION_HANDLER": "controlplane.api.exception_handler",
    # ?limit= (default PAGE_SIZE, at most controlplane.drf_defaults.MAX_PAGE_LIMIT = 500) and ?offset=.
    "DEFAULT_PAGINATION_CLASS": "controlplane.drf_defaults.Pagination",
    "PAGE_SIZE": 100,
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    # Throttles key on REMOTE_ADDR; behind N reverse proxies that append to X-Forwarded-For, the
    # N-th entry from the right. Unset (None) would trust a client's own X-Forwarded-For.
    "NUM_PROXIES": env_int("CEILING_NUM_PROXIES", 0),
    # JSON through the size-limited parser everywhere; form parsers are capped by Django's
    # DATA_UPLOAD_MAX_MEMORY_SIZE.
    "DEFAULT_PARSER_CLASSES": [
        "controlplane.drf_defaults.SafeJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}
# Largest JSON request body the API parses, in bytes; a larger one is answered 413 unread.
CEILING_API_MAX_BODY_BYTES = env_int("CEILING_API_MAX_BODY_BYTES", 1024 * 1024)
SPECTACULAR_SETTINGS = {
    "TITLE": "Ceiling API",
    "DESCRIPTION": "Recipes, deployments, benchmark sweeps and kernel variants for LLM serving.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "COMPONENT_SPLIT_REQUEST": True,
    # The enum hook is drf-spectacular's default; the second lists 401/403 on every operation
    # that needs credentials; the third writes docstrings' Sphinx roles as plain words.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "controlplane.api.postprocess_auth_errors",
        "controlplane.api.postprocess_plain_descriptions",
    ],
    # Swagger UI from the sidecar wheel, served locally: the docs work on a machine without internet.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "redact": {"()": "controlplane.logging.RedactSecretsFilter"},
        "client_errors_one_line": {"()": "controlplane.logging.ClientErrorOneLineFilter"},
    },
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    # client_errors_one_line on the handler too: Django's security loggers
    # (django.security.DisallowedHost, ...) log a refused request's exception with its traceback.
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain",
                             "filters": ["client_errors_one_line", "redact"]}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # One INFO line per probe or request would drown the agent's and the demo's output.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        # Its INFO line repeats on every broadcast to a full channel (a dead web process's, until
        # group_expiry drops it): a slow live client is closed and logged by the consumer itself.
        "channels_redis": {"level": "WARNING"},
        # Django's default config gives "django" its own DEBUG-only console handler without the
        # redaction filter, and the record then reaches the root handler too: every line twice.
        # No handlers here: records go to the root console, once, redacted.
        "django": {"level": "INFO", "handlers": [], "propagate": True},
        # A 403/404 raised as an exception is logged with its traceback by Django; for 4xx
        # that is noise (web.log filled with PermissionDenied stacks). One line for 4xx,
        # tracebacks kept for 5xx.
        # redact on the loggers that carry a request's path too (not only on the handler): a
        # secret value typed into a URL, plain or percent-encoded, is masked before any handler
        # sees the record. daphne.access: the web server's access lines (controlplane.access_log);
        # uvicorn's, for a server run under uvicorn.
        "django.request": {"level": "INFO", "filters": ["client_errors_one_line", "redact"], "propagate": True},
        "django.server": {"filters": ["redact"], "propagate": True},
        "daphne.access": {"level": "INFO", "filters": ["redact"], "propagate": True},
        "daphne.server": {"filters": ["redact"], "propagate": True},
        "daphne.http_protocol": {"filters": ["redact"], "propagate": True},
        "uvicorn.access": {"filters": ["redact"], "propagate": True},
        "uvicorn.error": {"filters": ["redact"], "propagate": True},
    },
}

# --- Ceiling -------------------------------------------------------------------------------
CEILING_VERSION = "0.1.0"
CEILING_NODE_NAME = env_str("CEILING_NODE_NAME", "local")
CEILING_MODEL_ROOTS = [
    str(Path(p).resolve()) for p in env_list("CEILING_MODEL_ROOTS", ["/models", str(VAR_DIR / "models")])
]
CEILING_LOG_DIR = Path(env_str("CEILING_LOG_DIR", str(VAR_DIR / "logs")))
# The interpreter of this checkout, the same path in every process: its .venv's python as the
# checkout names it (never resolved), else sys.executable unresolved. sys.executable alone differs
# between processes: a console script (daphne, celery) runs under the path in its shebang, where
# the venv was created, while `.venv/bin/python manage.py ...` runs under the checkout's own path.
_VENV_PYTHON = BASE_DIR / ".venv" / "bin" / "python"
PROJECT_PYTHON = str(_VENV_PYTHON) if os.path.exists(_VENV_PYTHON) else sys.executable
# Executables a launch plan may put in argv[0]; nothing else is ever executed.
CEILING_EXECUTABLES = {
    "python": env_str("CEILING_ENGINE_PYTHON", PROJECT_PYTHON),
    "numactl": env_str("CEILING_NUMACTL", "/usr/bin/numactl"),
    "vllm": env_str("CEILING_VLLM", "vllm"),
    "vllm-router": env_str("CEILING_VLLM_ROUTER", "vllm-router"),
    # Fallback GPU reader of the telemetry sampler when NVML cannot be used.
    "nvidia-smi": env_str("CEILING_NVIDIA_SMI", "nvidia-smi"),
}
# The interpreter that runs the kernel runner (``python -m kernels.runner``): the engine's Python
# on a GPU node (with torch and Triton); seconds one compile or benchmark step may take.
CEILING_KERNEL_PYTHON = env_str("CEILING_KERNEL_PYTHON", PROJECT_PYTHON)
CEILING_KERNEL_STEP_TIMEOUT_S = env_float("CEILING_KERNEL_STEP_TIMEOUT_S", 3600.0)
CEILING_HEARTBEAT_TIMEOUT_S = env_float("CEILING_HEARTBEAT_TIMEOUT_S", 30.0)
# The web port scripts/services.py serves on (CEILING_PORT), and the base URL printed in links
# (demo output, notices); the URL follows the port unless given.
CEILING_PORT = env_int("CEILING_PORT", 8000)
CEILING_UI_URL = env_str("CEILING_UI_URL", f"http://127.0.0.1:{CEILING_PORT}/")

# Node agent (manage.py node_agent): seconds between monitor ticks and heartbeats, worker
# threads for deploy/stop tasks, how long a pending deployment waits for its task message
# before the agent takes it from the row (a message lost with a Redis restart), liveness
# period and the consecutive /health failures that count as a crash. A /health that times out
# while the process computes is "busy", not a failure, until /health has not answered for
# CEILING_LIVENESS_BUSY_GRACE_S seconds (counted from its last answer).
CEILING_AGENT_TICK_S = env_float("CEILING_AGENT_TICK_S", 0.5)
CEILING_AGENT_HEARTBEAT_S = env_float("CEILING_AGENT_HEARTBEAT_S", 5.0)
CEILING_AGENT_CONCURRENCY = env_int("CEILING_AGENT_CONCURRENCY", 4)
CEILING_AGENT_PENDING_GRACE_S = env_float("CEILING_AGENT_PENDING_GRACE_S", 5.0)
CEILING_LIVENESS_PERIOD_S = env_float("CEILING_LIVENESS_PERIOD_S", 10.0)
CEILING_LIVENESS_FAILURES = env_int("CEILING_LIVENESS_FAILURES", 3)
CEILING_LIVENESS_BUSY_GRACE_S = env_float("CEILING_LIVENESS_BUSY_GRACE_S", 600.0)
# Per-process log cap (bytes); one rotated ".1" file is kept next to it.
CEILING_PROCESS_LOG_MAX_BYTES = env_int("CEILING_PROCESS_LOG_MAX_BYTES", 64 * 1024 * 1024)
# Fault injection for the recovery tests: seconds the agent sleeps after an engine was spawned
# and before its pid is recorded. Always 0 outside those tests.
CEILING_FAULT_PAUSE_AFTER_SPAWN_S = env_float("CEILING_FAULT_PAUSE_AFTER_SPAWN_S", 0.0)

# Live telemetry (deployments/telemetry): whether the node agent runs the sampler, its rate in
# Hz (0.1-20; 2 by default, 10 is fine), the shortest gap between two realtime messages of one
# (group, type) in seconds (state changes are never dropped; keep it below 1 / CEILING_SAMPLER_HZ
# or samples are dropped), how long 1 s rollups are kept in days, and how often the sampler
# writes them, in seconds.
CEILING_SAMPLER_ENABLED = env_bool("CEILING_SAMPLER_ENABLED", True)
# Sweeps one control worker runs at once (its Celery --concurrency; scripts/services.py and
# docker-compose.yml start it with this many): a pending sweep behind fewer active ones than this
# is waiting for nothing but a worker to take it.
CEILING_CONTROL_CONCURRENCY = int(os.environ.get("CEILING_CONTROL_CONCURRENCY", "2"))
if CEILING_CONTROL_CONCURRENCY < 1:
    raise ImproperlyConfigured(f"CEILING_CONTROL_CONCURRENCY={CEILING_CONTROL_CONCURRENCY} must be >= 1")
CEILING_SAMPLER_HZ = env_float("CEILING_SAMPLER_HZ", 2.0)
if not 0.1 <= CEILING_SAMPLER_HZ <= 20.0:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"CEILING_SAMPLER_HZ={CEILING_SAMPLER_HZ} is outside 0.1-20 (Hz)")
CEILING_REALTIME_MIN_INTERVAL_S = env_float("CEILING_REALTIME_MIN_INTERVAL_S", 0.05)
CEILING_TELEMETRY_RETENTION_DAYS = env_float("CEILING_TELEMETRY_RETENTION_DAYS", 7.0)
if CEILING_TELEMETRY_RETENTION_DAYS <= 0:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"CEILING_TELEMETRY_RETENTION_DAYS={CEILING_TELEMETRY_RETENTION_DAYS} must be > 0 (days)")
CEILING_TELEMETRY_FLUSH_S = env_float("CEILING_TELEMETRY_FLUSH_S", 5.0)
