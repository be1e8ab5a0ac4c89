"""Test program: leaves a grandchild behind that has escaped the process group.

Modes (``--mode``):

* ``setsid``: a child calls ``setsid()`` and sleeps; the parent stays alive.
* ``orphan``: a middle process forks a grandchild that calls ``setsid()``, then the middle
  process exits, so the grandchild is reparented.
* ``orphan-noenv``: as ``orphan``, and the grandchild also re-execs itself with an empty
  environment, so it carries no tag either.
* ``narrow``: a child restricts its own CPU affinity to ``--child-cpus`` and sleeps.

With ``--escape-cpus LIST`` (comma-separated CPU numbers) the escaped process of ``setsid`` and
``orphan`` then moves itself onto those CPUs, outside whatever binding it inherited.

The escaped process writes its pid to ``--pidfile`` once it is in place.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

parser = argparse.ArgumentParser()
parser.add_argument("--mode", required=True, choices=["setsid", "orphan", "orphan-noenv", "narrow"])
parser.add_argument("--pidfile", required=True)
parser.add_argument("--child-cpus", default="0")
parser.add_argument("--escape-cpus", default="")
opts = parser.parse_args()


def write_pid() -> None:
    tmp = opts.pidfile + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(tmp, opts.pidfile)


def escape() -> None:
    os.setsid()
    if opts.escape_cpus:
        os.sched_setaffinity(0, {int(c) for c in opts.escape_cpus.split(",")})
    if opts.mode == "orphan-noenv":
        write_pid()
        os.execve(sys.executable, [sys.executable, os.path.join(HERE, "sleeper.py")], {})
    write_pid()
    time.sleep(120)
    os._exit(0)


if opts.mode in ("setsid", "narrow"):
    if os.fork() == 0:
        if opts.mode == "narrow":
            os.sched_setaffinity(0, {int(c) for c in opts.child_cpus.split(",")})
            write_pid()
            time.sleep(120)
            os._exit(0)
        escape()
else:
    middle = os.fork()
    if middle == 0:
        if os.fork() == 0:
            escape()
        os._exit(0)
    os.waitpid(middle, 0)
print("ready", flush=True)
time.sleep(120)
