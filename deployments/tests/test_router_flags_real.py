"""Every router flag a recipe may set is one the installed sglang-router accepts: its own
``--help`` (the real launcher, run as a process) lists it."""
from __future__ import annotations

import re
import subprocess
import sys

from deployments.engines import ENGINES


def test_every_allowlisted_router_flag_is_in_the_real_routers_help():
    out = subprocess.run([sys.executable, "-m", "sglang_router.launch_router", "--help"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    offered = set(re.findall(r"--([a-z0-9][a-z0-9-]*)", out))
    for engine in ("sglang", "sim"):
        allowed = set(ENGINES[engine].router_flags)
        assert allowed - offered == set(), engine
    assert {"cb-failure-threshold", "cb-success-threshold", "cb-timeout-duration-secs",
            "cb-window-duration-secs"} <= set(ENGINES["sglang"].router_flags)
