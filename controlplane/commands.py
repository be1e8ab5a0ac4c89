"""The base of Ceiling's management commands: an option given twice is refused, and input a
command refuses exits with status 2, as argparse's refusal of a bad option does (:func:`refused`).

argparse keeps the last value of an option given more than once, so ``sweep x --concurrency 1
--concurrency 2`` would quietly start a sweep at c=2. The API and the page forms refuse a field
given twice; :class:`CeilingCommand` makes the command line do the same for every option that
takes one value (flags such as ``--wait`` may repeat: saying them twice means the same).
"""
from __future__ import annotations

import argparse

from django.core.management.base import BaseCommand, CommandError

from controlplane.jsonsafe import json_spelled

#: The exit status of input a command refuses (argparse's, for a bad option); 1 stays for work that
#: was started and failed (a sweep that ran and failed).
REFUSED_STATUS = 2


def refused(text: str) -> CommandError:
    """The ``CommandError`` of input a command refuses (no such record, a value out of range, a
    request the service refuses): ``text`` on one line (its line breaks become spaces), exit status
    :data:`REFUSED_STATUS`."""
    return CommandError(" ".join(text.split("\n")), returncode=REFUSED_STATUS)


def refused_list(head: str, lines: list[str]) -> CommandError:
    """The ``CommandError`` of input refused for several problems: ``head`` and then each of
    ``lines`` on its own line (each problem one line), exit status :data:`REFUSED_STATUS`."""
    return CommandError("\n".join([head, *(" ".join(line.split("\n")) for line in lines)]),
                        returncode=REFUSED_STATUS)


class _StoreOnce(argparse._StoreAction):
    """``store`` that refuses a second occurrence within one parse (the namespace of that parse
    is remembered, so the same parser can parse again), quoting both values as typed, each in
    quotes whatever the option's type (``--version is given twice ('1', then '2')``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        # the text before the option's type read it (an option of several values: those values)
        typed = values if isinstance(values, list) else getattr(self, "_typed", values)
        if option_string and getattr(self, "_parsed_into", None) is namespace:
            parser.error(f"{option_string} is given twice ({_quoted(self._first_typed)}, then {_quoted(typed)}): "
                         "give it once")
        self._parsed_into = namespace
        self._first_typed = typed
        super().__call__(parser, namespace, values, option_string)


def _quoted(value) -> str:
    """An option's value as typed, in quotes as messages quote input (``'1'``, ``'a b'``:
    :func:`controlplane.jsonsafe.json_spelled`)."""
    return json_spelled(str(value))


def _remembering(action: _StoreOnce, convert):
    """The option's type function, which also keeps the text it was given on ``action``, so a
    refusal of the option given twice quotes what was typed (``'1'``, not ``1`` or ``1.0``)."""
    def read(text):
        action._typed = text
        return convert(text)
    read.__name__ = getattr(convert, "__name__", "value")   # argparse names it in "invalid int value"
    return read


class CeilingCommand(BaseCommand):
    """:class:`BaseCommand` whose single-valued options may be given once only: from the command
    line, the usage and the refusal naming the option and both values, exit status 2 (argparse's);
    from ``call_command``, :class:`CommandError`."""

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parse_error = parser.error

        def error(message):
            # From call_command, a refused option (a bad value, one given twice) exits as it does
            # from the command line: status 2, not the 1 of work that failed.
            if parser.called_from_command_line:
                parse_error(message)
            raise CommandError(f"Error: {message}", returncode=REFUSED_STATUS)

        parser.error = error
        for action in parser._actions:
            if type(action) is argparse._StoreAction and action.option_strings:
                action.__class__ = _StoreOnce
                if action.type is not None:
                    action.type = _remembering(action, action.type)
        return parser
