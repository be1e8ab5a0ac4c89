"""Test program: prints ``ready``, optionally writes a volume of numbered lines, then sleeps.

``--ignore-term`` ignores SIGTERM (an engine that does not shut down on request);
``--bytes N`` writes about N bytes of ``line <i>`` output first, ending with ``last line``;
``--exit-code C`` exits with C after the output instead of sleeping;
``--pipe-bytes P`` first grows its stdout pipe to P bytes (``F_SETPIPE_SZ``, Linux) and then writes
the whole output at once, so it can end with all of it still unread in the pipe;
``--after PATH`` waits for PATH to exist before writing that output.
"""
import argparse
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--ignore-term", action="store_true")
parser.add_argument("--bytes", type=int, default=0)
parser.add_argument("--pipe-bytes", type=int, default=0)
parser.add_argument("--after", default=None)
parser.add_argument("--exit-code", type=int, default=None)
parser.add_argument("--seconds", type=float, default=120.0)
opts = parser.parse_args()

if opts.ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
if opts.after:
    import os

    while not os.path.exists(opts.after):
        time.sleep(0.01)
if opts.pipe_bytes:
    import fcntl

    fcntl.fcntl(sys.stdout.fileno(), 1031, opts.pipe_bytes)   # F_SETPIPE_SZ (linux/fcntl.h)
written, i, lines = 0, 0, []
while written < opts.bytes:
    line = f"line {i:08d} " + "x" * 48 + "\n"
    lines.append(line)
    written += len(line)
    i += 1
if opts.bytes:
    sys.stdout.write("".join(lines) + "last line\n")
    sys.stdout.flush()
if opts.exit_code is not None:
    sys.exit(opts.exit_code)
time.sleep(opts.seconds)
