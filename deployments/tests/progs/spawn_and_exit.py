"""Test program: spawns a sleeper through the supervisor, prints its handle as JSON, exits.

Stands in for a node agent that dies right after starting an engine. Arguments: the tag and
the log path.
"""
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from deployments.supervisor import process_spawn  # noqa: E402

tag, log_path = sys.argv[1], Path(sys.argv[2])
spec = {"argv": [sys.executable, str(Path(__file__).with_name("sleeper.py"))], "env": {}}
handle = process_spawn(spec=spec, log_path=log_path, log_max_bytes=65536, tag=tag)
print(json.dumps({"handle": handle.to_dict(), "spawner_pid": os.getpid()}), flush=True)
