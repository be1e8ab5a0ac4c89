"""Test program: an engine that shuts down cleanly on request, the way llama.cpp's server does.

Prints ``ready``, then serves nothing until SIGTERM or SIGINT arrives; it then prints
``shutting down``, waits ``--shutdown-s`` seconds (draining, as a server would) and exits with
code 0. ``--exit-after S`` makes it exit 0 on its own after S seconds instead (an engine that
ended by itself).
"""
import argparse
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--shutdown-s", type=float, default=0.2)
parser.add_argument("--exit-after", type=float, default=None)
opts = parser.parse_args()
asked: list[int] = []
signal.signal(signal.SIGTERM, lambda number, frame: asked.append(number))
signal.signal(signal.SIGINT, lambda number, frame: asked.append(number))
print("ready", flush=True)
started = time.monotonic()
while not asked:
    if opts.exit_after is not None and time.monotonic() - started >= opts.exit_after:
        print("done by itself", flush=True)
        sys.exit(0)
    time.sleep(0.02)
print(f"shutting down on signal {asked[0]}", flush=True)
time.sleep(opts.shutdown_s)
sys.exit(0)
