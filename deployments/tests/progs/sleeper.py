"""Test program: prints ``ready``, optionally writes a volume of numbered lines, then sleeps.

``--ignore-term`` ignores SIGTERM (an engine that does not shut down on request);
``--bytes N`` writes about N bytes of ``line <i>`` output first, ending with ``last line``;
``--exit-code C`` exits with C after the output instead of sleeping.
"""
import argparse
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--ignore-term", action="store_true")
parser.add_argument("--bytes", type=int, default=0)
parser.add_argument("--exit-code", type=int, default=None)
parser.add_argument("--seconds", type=float, default=120.0)
opts = parser.parse_args()

if opts.ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
written, i = 0, 0
while written < opts.bytes:
    line = f"line {i:08d} " + "x" * 48 + "\n"
    sys.stdout.write(line)
    written += len(line)
    i += 1
if opts.bytes:
    print("last line", flush=True)
if opts.exit_code is not None:
    sys.exit(opts.exit_code)
time.sleep(opts.seconds)
