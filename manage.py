#!/usr/bin/env python
"""Django's command-line utility for Ceiling.

A command whose output goes to a reader that stops early (``manage.py dryrun x | head``) ends
quietly with exit status 141 (128 + SIGPIPE, what a shell reports for ``yes | head``'s ``yes``)
instead of printing a ``BrokenPipeError`` traceback."""
import os
import select
import sys


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe (or socket) whose reading end is closed: polling it reports an
    error or hang-up. A broken pipe elsewhere (a connection the command writes to) is not this."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & (select.POLLERR | select.POLLHUP) for _fd, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
        sys.stdout.flush()   # what is still buffered fails here, not in the interpreter's exit
    except BrokenPipeError:
        if not stdout_reader_gone():
            raise
        # Nothing more can be shown: point stdout at /dev/null so the flush at exit is quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)


if __name__ == "__main__":
    main()
