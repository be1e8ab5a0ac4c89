"""Business logic of the deployments app: recipes (versioned), secrets and deployments.

Every write goes through a function here; views, the admin, the API and management commands
only call these. Functions are keyword-only and raise domain errors from
:mod:`controlplane.errors` (``InvalidInput`` with dotted field paths, ``Conflict``, ``NotFound``),
which each edge maps to its own response in one place.

Recipe versioning
-----------------
``Recipe.version`` counts content changes from 1; each change writes exactly one
django-simple-history row carrying that version, the acting user (``history_user``) and a
change reason (``history_change_reason``). Content is the tuple of :data:`RECIPE_CONTENT_FIELDS`;
an update that changes none of them writes nothing and keeps the version. Updates lock the row
(``select_for_update``) so two concurrent edits cannot both become version N+1.

Deployments (control-plane side)
--------------------------------
:func:`deployment_create` inserts a pending row and, on commit, sends
``deployment_start_task`` to the node's queue ``node.<name>``; :func:`deployment_stop` cancels
a pending deployment on the spot or flags a running one and sends ``deployment_stop_task``;
:func:`deployment_cancel` does the same only for a deployment that has not become ready, with
conditional UPDATEs, and refuses any other (409).
Everything that touches processes runs on the node, in :mod:`deployments.agent`.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import copy
import json
import logging
import os
import re
import unicodedata
from datetime import datetime
from datetime import timezone as dt_timezone
from pathlib import Path

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, models, transaction
from django.db.models import Max, ProtectedError
from django.utils import timezone

from controlplane.errors import Conflict, InvalidInput, NotFound
from controlplane.jsonsafe import json_spelled
from controlplane.lengths import length_message
from controlplane.redaction import (
    MIN_VALUE_LENGTH, PLACEHOLDER_RE, REDACTED, credential_find, credential_kind_said, credential_mask, credential_mask_json, note_stored_secret_value, redact_text, secret_value_found,
    secret_values_mask, stored_secret_values_invalidate, stored_secret_values_load,
)
from controlplane.secretbox import SecretUnreadable
from deployments.choices import DEPLOYMENT_ACTIVE, DeploymentStatus, Engine, Topology
from deployments.launch import (  # noqa: F401  (PORT_KIND_FLAGS, port_kind_text: read from here too)
    PORT_KIND_FLAGS, LaunchPlan, launch_plan_render, port_kind_text, port_kind_words)
from deployments.logfiles import RedactedLogReader, log_file, log_parts
from deployments.models import (
    Deployment, Node, ProcessEvent, Recipe, RetiredSecretValue, Secret, ServerProcess, digits_alone_problem, name_validator,
    recipe_name_shown,
)
from deployments.supervisor import log_tail
from deployments.supervisor.procfs import port_busy_reason
from deployments.engines import ENGINES
from deployments.recipes import (
    CPU_ID_MAX, CPULIST_RE, MODEL_ONE_OF, _stored_secret_paths, engine_topology_errors, recipe_validate, spec_as_stored,
)
from deployments.topology import GpuFacts, NodeFacts, NumaFacts, format_cpulist, node_facts_from_row, parse_cpulist
from deployments.telemetry.events import deployment_roster_broadcast

# The fields that make up a recipe version; everything else (ids, timestamps, author) is
# bookkeeping and neither diffed nor reverted.
RECIPE_CONTENT_FIELDS: tuple[str, ...] = ("name", "description", "engine", "topology", "node", "spec")

# Bounds on a stored spec. Real recipes nest about five levels (spec.roles.decode.flags.x) and
# weigh a few KiB; the limits keep a hostile payload from exhausting recursion or the database.
SPEC_MAX_DEPTH = 16
SPEC_MAX_STRING = 8192
# No list or object in a spec needs more entries than the largest parallelism recipes allow
# (``deployments.recipes.MAX_PARALLEL``); beyond that it is an attack or a mistake.
SPEC_MAX_ITEMS = 1024
DESCRIPTION_MAX_LENGTH = 4000
# Versions are PositiveIntegerField; PostgreSQL's ``integer`` tops out at 2**31 - 1.
MAX_VERSION = 2**31 - 1


log = logging.getLogger(__name__)

# --- helpers -------------------------------------------------------------------------------


def json_merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with the JSON Merge Patch ``patch`` applied (RFC 7396), as a new value: an
    object merges key by key, recursively; a key whose patch value is null is removed; any other
    value (an array, a string, a number, a boolean) replaces what was there. A patch that is not
    an object replaces ``target`` whole. Neither argument is changed."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = json_merge_patch(merged.get(key), value)
    return merged


def check_json_tree(value: Any, path: str, errors: dict[str, list[str]], depth: int = 0) -> None:
    """Reject JSON no database column can hold safely: NUL characters (PostgreSQL refuses
    them in ``jsonb``), lone UTF-16 surrogates (not encodable as UTF-8), absurd depth, and
    lists or objects too large to be a recipe. Adds messages to ``errors`` under the dotted
    path where the problem sits."""
    if depth > SPEC_MAX_DEPTH:
        errors.setdefault(path, []).append(f"Nested more than {SPEC_MAX_DEPTH} levels deep.")
        return
    if isinstance(value, (dict, list)) and len(value) > SPEC_MAX_ITEMS:
        errors.setdefault(path, []).append(f"Has {len(value)} entries; at most {SPEC_MAX_ITEMS}.")
        return
    if isinstance(value, str):
        problem = _string_problem(value) or text_control_problem(value)
        if problem:
            errors.setdefault(path, []).append(problem)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and not _string_problem(key) and (problem := text_control_problem(key)):
                errors.setdefault(path, []).append(f"Key {json_spelled(key)}: {problem}")
                continue
            if not isinstance(key, str) or _string_problem(key):
                # The bad key itself cannot be echoed safely, so the error sits on its parent.
                errors.setdefault(path, []).append("Keys must be valid text without NUL characters.")
                continue
            check_json_tree(item, f"{path}.{key}", errors, depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_json_tree(item, f"{path}.{i}", errors, depth + 1)


#: Text-direction embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069): they reorder
#: how the text around them is shown, so a text holding one can read differently from what it says
#: ("RTL" shown as "LTR"). Refused in a recipe's free text and in every other text one user writes
#: and others read (:func:`text_control_validator`); the marks U+200E/U+200F (which only
#: set the direction of neutral characters, as mixed-script text needs) are taken.
DIRECTION_CONTROLS = frozenset([*range(0x202A, 0x202F), *range(0x2066, 0x206A)])

#: C0 and C1 control characters and DEL (U+0000-U+001F, U+007F-U+009F) but tab, newline and
#: carriage return: invisible, and an escape (ESC, U+001B) or a CSI (U+009B) starts a sequence
#: that recolours, moves or clears what a terminal shows, so a description holding one could
#: change the CLI output or log that prints it. Refused wherever text-direction controls are.
CONTROL_CHARACTERS = frozenset([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0)])

#: The abbreviations of the control characters (ISO 6429), by code point.
_CONTROL_NAMES = dict(zip(
    [*range(0x00, 0x20), *range(0x7F, 0xA0)],
    ("NUL SOH STX ETX EOT ENQ ACK BEL BS HT LF VT FF CR SO SI DLE DC1 DC2 DC3 DC4 NAK SYN ETB CAN EM "
     "SUB ESC FS GS RS US DEL PAD HOP BPH NBH IND NEL SSA ESA HTS HTJ VTS PLD PLU RI SS2 SS3 DCS PU1 "
     "PU2 STS CCH MW SPA EPA SOS SGC SCI CSI ST OSC PM APC").split()))


def text_control_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as free text one user writes and others read: its first
    text-direction control (:data:`DIRECTION_CONTROLS`, by code point and Unicode name) or control
    character (:data:`CONTROL_CHARACTERS`, by code point and abbreviation), with its 1-based
    position (``U+001B (ESC) at character 4``), or None."""
    for i, c in enumerate(text):
        if ord(c) in DIRECTION_CONTROLS:
            return (f"Must not contain text-direction control characters: U+{ord(c):04X} "
                    f"({unicodedata.name(c)}) at character {i + 1} would make the text display "
                    "differently from what it says.")
        if ord(c) in CONTROL_CHARACTERS:
            return (f"Must not contain control characters other than tab, newline and carriage return: "
                    f"U+{ord(c):04X} ({_CONTROL_NAMES[ord(c)]}) at character {i + 1} could change what "
                    "a terminal or log printing the text shows.")
    return None


def text_control_validator(value: object) -> None:
    """A field validator (Django forms, models and DRF serializers alike) refusing a text that
    holds a text-direction control or a control character, with :func:`text_control_problem`'s
    message: for every free text one user writes and others read (a recipe's change reason, a
    secret's description, a sweep's name), as a recipe's description and spec strings are refused."""
    problem = text_control_problem(value) if isinstance(value, str) else None
    if problem:
        raise DjangoValidationError(problem, code="text_control")


def secret_value_in_text(field: str, text: Any, values: dict[str, str] | None = None) -> str | None:
    """Why ``text``, free text stored in ``field`` (a recipe's description, a history's change
    reason, a sweep's name) and shown in clear, cannot hold what it holds: the value of a stored
    secret in any spelling a page masks it in (:func:`controlplane.redaction.secret_value_found`:
    as typed, base64, percent-encoded, ..., each spelling at least
    :data:`controlplane.redaction.MIN_VALUE_LENGTH` characters), naming the field and the
    secret, never the value; or a well-known credential format in it (:func:`credential_in_text`),
    naming its kind; or None. ``values`` is :func:`secret_values`, read here when not given."""
    if not isinstance(text, str) or len(text) < MIN_VALUE_LENGTH:
        return None
    for value, name in (secret_values() if values is None else values).items():
        if len(value.strip()) >= MIN_VALUE_LENGTH and secret_value_found(text, value):
            return (f"{field} holds the value of secret {json_spelled(name)}: refer to the secret by its name "
                    f"{json_spelled(name)} instead; {field} is stored and shown in clear")
    return credential_in_text(field, text)


def credential_in_text(field: str, text: Any) -> str | None:
    """Why ``text``, free text stored in ``field`` and shown in clear, cannot hold what it holds: a
    well-known credential format (:func:`controlplane.redaction.credential_find`: a Hugging Face
    token, a GitHub token, ...), named by its kind and its prefix only, never quoted
    (``description holds what looks like a Hugging Face token (hf_…): store it as a secret and
    reference it``); or None."""
    found = credential_find(text) if isinstance(text, str) else None
    if found is None:
        return None
    kind, shortened = found
    head = shortened.split("(", 1)[0]
    return (f"{field} holds what looks like {credential_kind_said(kind)} ({head}): store it as a secret and reference it; "
            f"{field} is stored and shown in clear")


def secret_value_validator(field: str):
    """A field validator (Django forms, models and DRF serializers alike) refusing a free text
    ``field`` that holds a stored secret's value, with :func:`secret_value_in_text`'s message."""
    def validate(value: object) -> None:
        problem = secret_value_in_text(field, value)
        if problem:
            raise DjangoValidationError(problem, code="secret_value")
    return validate


def recipe_name_validator(value: object) -> None:
    """A recipe's name judged for input (Django forms, models and DRF serializers alike): one
    holding a stored secret's value is refused first, with :func:`secret_value_in_text`'s message
    (naming the field ``name`` and the secret, never the value), since a name is shown in clear on
    every page, export and log; any other by :func:`deployments.models.name_validator`. A name of
    digits alone is refused as a node's is: ``manage.py sweep`` reads digits alone as a
    deployment's id, so such a recipe could not be swept by its name."""
    problem = secret_value_in_text("name", value)
    if problem:
        raise DjangoValidationError(problem, code="secret_value")
    name_validator(value)
    if problem := digits_alone_problem(value, read_as="`manage.py sweep` reads digits alone as a deployment's id",
                                       example_prefix="recipe"):
        raise DjangoValidationError(problem, code="digits")


def _description_placeholder(description: str) -> str | None:
    """Why a ``description`` holding a placeholder shown in place of a secret
    (:data:`controlplane.redaction.PLACEHOLDER_RE`: :data:`controlplane.redaction.REDACTED` for a
    stored secret's value, ``hf_…(37 chars)`` for a credential) cannot be saved: the edit forms
    and the API show it in place of what a description saved before such text was refused holds,
    so saving it unchanged would store the placeholder as text nobody wrote."""
    match = PLACEHOLDER_RE.search(description)
    if match is None:
        return None
    if match.group(0) == REDACTED:
        return (f"description holds the placeholder {REDACTED} shown in place of a secret's value: remove it, "
                f"or refer to the secret by its name")
    return (f"description holds {match.group(0)}, shown in place of a credential: remove it, or store the "
            f"credential as a secret and refer to it by its name")


def recipe_description_problem(description: str) -> str | None:
    """Why a recipe's ``description`` (text within its length) cannot be saved, or None: a
    character no column or page may hold, a stored secret's value or a credential
    (:func:`secret_value_in_text`), or the placeholder shown in place of a secret's value."""
    return (_string_problem(description) or text_control_problem(description)
            or secret_value_in_text("description", description) or _description_placeholder(description))


def recipe_description_validator(value: object) -> None:
    """A field validator (Django forms and DRF serializers alike) refusing a recipe's description
    with :func:`recipe_description_problem`'s message, so a form or body refused for another field
    names the description's problem in the same answer."""
    # Over its length the field's own limit speaks ("Use at most 4000 characters; got 9000."), once.
    problem = (recipe_description_problem(value)
               if isinstance(value, str) and len(value) <= DESCRIPTION_MAX_LENGTH else None)
    if problem:
        raise DjangoValidationError(problem, code="description")


def free_text_shown(text: Any) -> Any:
    """Free text one user wrote (a recipe's description, a change reason, a sweep's name) as
    pages, the API, exports and CLI output show it: a stored secret's value in it, saved before
    such values were refused (:func:`secret_value_in_text`), masked as every other read masks it
    (:func:`controlplane.redaction.secret_values_mask`), and a well-known credential shortened
    (:func:`controlplane.redaction.credential_mask`, ``hf_…(37 chars)``). Anything but text is returned as it is."""
    return secret_values_mask(credential_mask(text)) if isinstance(text, str) and text else text


#: Tab, newline and carriage return: taken in free text of several lines (a description), but not in
#: a name shown on one line (a sweep's name, in a heading, a table cell and a terminal's line).
LINE_BREAKS_AND_TAB = frozenset([0x09, 0x0A, 0x0D])


def one_line_text_validator(value: object) -> None:
    """:func:`text_control_validator` for a text shown on one line (a sweep's name, read by the API,
    the sweep form and ``manage.py sweep --name`` through one field), refusing tab, newline and
    carriage return too, in the same words: ``Must not contain control characters: U+0009 (HT) at
    character 5; a name is one line of text.``, the same for every control character (ESC
    included); a text-direction control gets :func:`text_control_problem`'s message."""
    if not isinstance(value, str):
        return
    for i, c in enumerate(value):
        if ord(c) in LINE_BREAKS_AND_TAB or ord(c) in CONTROL_CHARACTERS:
            raise DjangoValidationError(
                f"Must not contain control characters: U+{ord(c):04X} ({_CONTROL_NAMES[ord(c)]}) at character "
                f"{i + 1}; a name is one line of text.", code="text_control")
        if ord(c) in DIRECTION_CONTROLS:
            break
    text_control_validator(value)


def controls_visible(text: str) -> str:
    """``text`` with each text-direction control (:data:`DIRECTION_CONTROLS`) and control
    character (:data:`CONTROL_CHARACTERS`) written as its code point (``<U+202E>``,
    ``<U+001B>``), tab and line breaks kept: for pages and CLI output showing text stored before
    such characters were refused."""
    return "".join(f"<U+{ord(c):04X}>" if ord(c) in DIRECTION_CONTROLS or ord(c) in CONTROL_CHARACTERS else c
                   for c in text)


def _string_problem(text: str) -> str | None:
    if "\x00" in text:
        return "Must not contain NUL characters."
    if len(text) > SPEC_MAX_STRING:
        return f"Longer than {SPEC_MAX_STRING} characters."
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "Must be valid Unicode text."
    return None


def secret_names() -> set[str]:
    """Names of all stored secrets (never their values); what recipe validation checks
    ``secret`` references against."""
    return set(Secret.objects.values_list("name", flat=True))


def recipe_secret_values_held(spec: Any, values: dict[str, str] | None = None) -> list[dict[str, str]]:
    """Where a stored recipe ``spec`` holds the value of a stored secret in a plain value (env,
    flags, any string): saved before such values were refused, it is masked wherever the spec is
    shown, and its owner should reference the secret instead. Each entry is ``{"path", "secret",
    "message"}`` (``path`` without the leading ``spec.``), once per path and secret; empty for a
    clean spec. ``values`` is :func:`secret_values`, read here when not given."""
    held = _stored_secret_paths(spec, secret_values() if values is None else values)
    out = []
    for path, name in held:
        short = path.removeprefix("spec.")
        out.append({"path": short, "secret": name,
                    "message": f"holds the value of secret {json_spelled(name)} in {short}; reference it "
                               f"from spec.secrets instead"})
    return out


def secret_values() -> dict[str, str]:
    """The plain-text value of every stored secret, mapped to the secret's name: what recipe
    validation refuses to find in a recipe's plain values (env, flags), so a pasted value is never
    stored in clear. Decrypts every secret (there are few). A secret this server cannot decrypt
    (:class:`controlplane.secretbox.SecretUnreadable`) is left out: there is nothing to compare.
    Values shorter than :data:`controlplane.redaction.MIN_VALUE_LENGTH` (stored before that minimum)
    are returned but not looked for (too likely to be ordinary text)."""
    values: dict[str, str] = {}
    for secret in Secret.objects.all():
        try:
            values[secret.plaintext()] = secret.name
        except SecretUnreadable:
            continue
    return values


#: Spec paths whose rules depend on the topology: which roles there are, and what refers to them.
TOPOLOGY_SPEC_PATHS = ("spec.roles", "spec.transfer_backend", "spec.kernels", "spec.sim")


def recipe_spec_validate(*, engine: str, topology: str, spec: Any, node: Node | None,
                         stored_spec: Any = None) -> dict:
    """:func:`deployments.recipes.recipe_validate` of ``spec`` against the facts of the node row
    ``node`` and the stored secret names and values (:func:`secret_values`: a plain value holding
    one is refused): the one spec check of the service, the API and the form. Returns the
    normalised spec. A placeholder shown in place of a secret (``***redacted***``, ``hf_…(37
    chars)``) is refused in a plain value; ``stored_spec``, the spec as stored when an existing
    recipe is edited, names the secret whose value it stood for.

    Every problem that can be found is reported, also where a part the rules need is missing:

    * ``node`` None (a node that does not exist): the spec is checked against a node that has
      every GPU, NUMA node and CPU it names (:func:`_facts_of_references`), so all but its
      hardware references is checked; the caller says why there is no node.
    * an engine that does not run ``topology`` (``llamacpp`` with ``pd``): the topology error,
      plus a note that the parts of :data:`TOPOLOGY_SPEC_PATHS` were not checked, plus the
      errors of the rest of the spec, checked for a topology the engine runs.

    Raises:
        InvalidInput: with ``engine`` / ``topology`` and dotted ``spec.…`` paths.
    """
    facts = node_facts_from_row(node) if node is not None else _facts_of_references(spec)
    names = secret_names()
    values = secret_values()
    rule = engine_topology_errors(engine=engine, topology=topology)
    adapter = ENGINES.get(engine) if isinstance(engine, str) else None
    if adapter is None and isinstance(spec, dict):
        return _spec_validate_without_engine(rule=rule, topology=topology, spec=spec, facts=facts, names=names,
                                             values=values, stored_spec=stored_spec)
    if adapter is None or not rule:
        return recipe_validate(engine=engine, topology=topology, spec=spec, node=facts, secret_names=names,
                               secret_values=values, stored_spec=stored_spec)
    errors = {path: list(messages) for path, messages in rule.items()}
    errors["topology"].append(f"{', '.join(TOPOLOGY_SPEC_PATHS)} were not checked: what they may hold depends on "
                              f"the topology; the rest of the spec was checked for engine {engine}")
    try:
        recipe_validate(engine=engine, topology=adapter.topologies[0], spec=spec, node=facts, secret_names=names,
                        secret_values=values, stored_spec=stored_spec)
    except InvalidInput as exc:
        for path, messages in exc.errors.items():
            if not any(path == p or path.startswith(p + ".") for p in TOPOLOGY_SPEC_PATHS):
                errors.setdefault(path, []).extend(messages)
    raise InvalidInput(errors)


def spec_errors_beside_refused_text(*, engine: Any, topology: Any, spec: Any, node: Node | None,
                                    stored: dict[str, list[str]]) -> dict[str, list[str]]:
    """What else is wrong at the paths whose text :func:`check_json_tree` refused for its
    characters (``stored``: a NUL, a control character, a lone surrogate, a text too long), so
    that every problem is reported at once: ``spec.env`` ``{"FOO": "\\u0000bar"}`` is refused for
    its NUL and for ``FOO`` being outside the allowlist.

    The rules (:func:`recipe_spec_validate`) judge such a text once its refused characters are
    taken out (and it is cut to :data:`SPEC_MAX_STRING`): what they say about the characters
    themselves ("must not contain NUL ...") would repeat ``stored``'s message and is not said; what
    they say about anything else there is. Other paths are not looked at (the callers report the
    rules' errors there already). Returns ``{path: [messages]}``, ``{}`` when nothing more is wrong."""
    cleaned_paths: set[str] = set()
    cleaned = _refused_text_removed(spec, "spec", cleaned_paths)
    cleaned_paths &= stored.keys()
    if not cleaned_paths:
        return {}
    try:
        recipe_spec_validate(engine=engine, topology=topology, spec=cleaned, node=node)
    except InvalidInput as exc:
        return {path: list(exc.errors[path]) for path in sorted(cleaned_paths) if exc.errors.get(path)}
    return {}


def _refused_text_removed(value: Any, path: str, cleaned: set[str], depth: int = 0) -> Any:
    """``value`` with each text :func:`check_json_tree` refuses for its characters made one it
    takes (NUL, text-direction and control characters and lone surrogates taken out, cut to
    :data:`SPEC_MAX_STRING`); the path of each such text is added to ``cleaned``. Keys are kept as
    they are, and so is what lies deeper than :data:`SPEC_MAX_DEPTH` (the check stops there)."""
    if depth > SPEC_MAX_DEPTH:
        return value
    if isinstance(value, str):
        if not (_string_problem(value) or text_control_problem(value)):
            return value
        cleaned.add(path)
        text = "".join(c for c in value if c != "\x00" and ord(c) not in DIRECTION_CONTROLS
                       and ord(c) not in CONTROL_CHARACTERS)
        return text.encode("utf-8", "ignore").decode("utf-8")[:SPEC_MAX_STRING]
    if isinstance(value, dict):
        return {key: _refused_text_removed(item, f"{path}.{key}", cleaned, depth + 1)
                if isinstance(key, str) and not _string_problem(key) else item for key, item in value.items()}
    if isinstance(value, list):
        return [_refused_text_removed(item, f"{path}.{i}", cleaned, depth + 1) for i, item in enumerate(value)]
    return value


#: Engine used to check what of a spec does not depend on the engine, when the engine given is unknown.
STAND_IN_ENGINE = "sim"


def _engine_independent(path: str, *, topology_known: bool) -> bool:
    """Whether the rule behind an error at ``path`` holds whatever the engine: the spec's own
    keys, model, served name, env, secrets, timeouts and restart policy do; inside a role (GPUs,
    flags, ports), the transfer backend, kernels and the sim section are judged by the engine's
    rules; ``spec.roles`` itself (an object with the topology's roles) needs a known topology."""
    if path == "spec.roles":
        return topology_known
    return not any(path == p or path.startswith(p + ".") for p in TOPOLOGY_SPEC_PATHS)


def _spec_validate_without_engine(*, rule: dict[str, list[str]], topology: Any, spec: dict, facts: NodeFacts,
                                  names: set[str], values: dict[str, str], stored_spec: Any = None) -> dict:
    """Every problem of ``spec`` that can be judged without a known engine, with the engine's (and
    the topology's) error: the spec is checked for :data:`STAND_IN_ENGINE` and only the errors
    whose rule holds whatever the engine (:func:`_engine_independent`) are kept; ``engine`` says
    which parts were not checked. Always raises :class:`InvalidInput`."""
    errors = {path: list(messages) for path, messages in rule.items()}
    topology_known = "topology" not in rule
    but = " (but for spec.roles being an object with the topology's roles)" if topology_known else ""
    errors["engine"].append(f"{', '.join(TOPOLOGY_SPEC_PATHS)} were not checked{but}: what they may hold depends on "
                            "the engine; the rest of the spec was checked")
    try:
        recipe_validate(engine=STAND_IN_ENGINE, topology=topology if topology_known else "single", spec=spec,
                        node=facts, secret_names=names, secret_values=values, stored_spec=stored_spec)
    except InvalidInput as exc:
        for path, messages in exc.errors.items():
            if _engine_independent(path, topology_known=topology_known):
                errors.setdefault(path, []).extend(messages)
    raise InvalidInput(errors)


def _facts_of_references(spec: Any) -> NodeFacts:
    """Facts of a node that has every GPU, NUMA node and CPU the roles of ``spec`` name (GPUs
    of unknown NUMA node and compute capability, each NUMA node holding all those CPUs): a spec
    checked against them is checked for everything but its hardware. For a recipe whose node
    does not exist. Ids that are not integers, or CPU ids out of 0-``CPU_ID_MAX``, are left out
    (the rules refuse them whatever the node)."""
    gpus: set[int] = set()
    numas: set[int] = set()
    cpus: set[int] = set()

    def ints(value: Any) -> list[int]:
        items = value if isinstance(value, list) else [value]
        return [v for v in items if isinstance(v, int) and not isinstance(v, bool)]

    roles = spec.get("roles") if isinstance(spec, dict) else None
    for role in roles.values() if isinstance(roles, dict) else ():
        if not isinstance(role, dict):
            continue
        gpus.update(ints(role.get("gpus")))
        numas.update(ints(role.get("numa_node")))
        numas.update(ints(role.get("membind")))
        named = role.get("cpus")
        if isinstance(named, str):
            text = named.replace(" ", "")
            if len(text) <= 1024 and CPULIST_RE.match(text) and \
                    all(int(n) <= CPU_ID_MAX for n in re.split(r"[,-]", text)):
                try:
                    named = parse_cpulist(text)
                except ValueError:
                    named = []
        cpus.update(c for c in ints(named) if 0 <= c <= CPU_ID_MAX)
    every_cpu = tuple(sorted(cpus))
    return NodeFacts(name="(none)", cpu_count=len(every_cpu), gpus=[GpuFacts(index=g) for g in sorted(gpus)],
                     numa_nodes=[NumaFacts(index=n, cpus=every_cpu) for n in sorted(numas or {0})])


def recipe_content_validate(content: dict[str, Any], *, stored_spec: Any = None) -> dict[str, Any]:
    """Validate a full recipe content dict (see :data:`RECIPE_CONTENT_FIELDS`): every check
    Save (create, update, the API) applies, and what the form's Validate button runs.

    Returns the content with ``spec`` replaced by its normalised form. Raises
    :class:`InvalidInput` with keys ``name``, ``description``, ``engine``, ``topology``,
    ``node`` or dotted ``spec.…`` paths. Spec rules live in :func:`deployments.recipes.recipe_validate`
    and are checked against the node's facts and the existing secret names; with a bad name,
    description or node, the spec rules are reported with those errors, checked against the node
    when it is known (without a node, all but the hardware references: :func:`recipe_spec_validate`).
    ``stored_spec`` (an update's spec as stored) names the secret a placeholder stands for.
    """
    errors: dict[str, list[str]] = {}
    name = content.get("name")
    if not isinstance(name, str) or not name:
        errors["name"] = ["A name is required."]
    else:
        try:
            recipe_name_validator(name)
        except DjangoValidationError as exc:
            errors["name"] = list(exc.messages)
    description = content.get("description", "")
    if not isinstance(description, str):
        errors["description"] = ["Must be text."]
    elif len(description) > DESCRIPTION_MAX_LENGTH:
        errors["description"] = [length_message(DESCRIPTION_MAX_LENGTH, len(description))]
    elif problem := recipe_description_problem(description):
        errors["description"] = [problem]
    if content.get("engine") not in Engine.values:
        errors["engine"] = [f"Unknown engine; one of {', '.join(Engine.values)}."]
    if content.get("topology") not in Topology.values:
        errors["topology"] = [f"Unknown topology; one of {', '.join(Topology.values)}."]
    node = content.get("node")
    if not isinstance(node, Node):
        errors["node"] = ["A registered node is required."]
    spec = content.get("spec")
    if not isinstance(spec, dict):
        errors["spec"] = ["Must be a JSON object."]
    else:
        check_json_tree(spec, "spec", errors)
    if errors:
        # Spec rules need a known engine and topology and a spec object; without a node the spec
        # is checked all the same, but for its hardware references (recipe_spec_validate). Where
        # a value no column can hold sits, its message stands for the rules' about its characters;
        # what else is wrong there is said beside it (spec_errors_beside_refused_text).
        if {"engine", "topology"} & errors.keys() or not isinstance(spec, dict):
            raise InvalidInput(errors)
        stored = {p: list(m) for p, m in errors.items() if p == "spec" or p.startswith("spec.")}
        node_row = node if isinstance(node, Node) else None
        try:
            recipe_spec_validate(engine=content["engine"], topology=content["topology"], spec=spec, node=node_row,
                                 stored_spec=stored_spec)
        except InvalidInput as exc:
            for path, messages in exc.errors.items():
                if path not in stored:
                    errors.setdefault(path, []).extend(messages)
        beside = spec_errors_beside_refused_text(engine=content["engine"], topology=content["topology"], spec=spec,
                                                 node=node_row, stored=stored)
        for path, messages in beside.items():
            errors[path] = list(errors.get(path, [])) + [m for m in messages if m not in errors.get(path, [])]
        raise InvalidInput(errors)
    normalised = recipe_spec_validate(engine=content["engine"], topology=content["topology"], spec=spec, node=node,
                                      stored_spec=stored_spec)
    return {**content, "spec": normalised}


def _check_name_free(name: str, *, exclude_pk: int | None = None) -> None:
    qs = Recipe.objects.filter(name=name)
    if exclude_pk is not None:
        qs = qs.exclude(pk=exclude_pk)
    if qs.exists():
        raise InvalidInput({"name": [f"A recipe named {json_spelled(name)} already exists."]})


def _change_reason_errors(change_reason: str | None) -> dict[str, list[str]]:
    """A change reason holding a stored secret's value or a credential (:func:`secret_value_in_text`),
    which the history shows to everyone who may read the recipe, as ``{"change_reason": [why]}``;
    empty when it may be stored."""
    problem = secret_value_in_text("change_reason", change_reason)
    return {"change_reason": [problem]} if problem else {}


def _content_validate_with(reason_errors: dict[str, list[str]], content: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """:func:`recipe_content_validate`, raising :class:`InvalidInput` with ``reason_errors`` (the
    change reason's) beside the content's own, so every problem is reported at once."""
    try:
        validated = recipe_content_validate(content, **kwargs)
    except InvalidInput as exc:
        raise InvalidInput({**reason_errors, **exc.errors}) from exc
    if reason_errors:
        raise InvalidInput(reason_errors)
    return validated


def _save_with_history(recipe: Recipe, *, user, change_reason: str) -> None:
    """Save ``recipe`` so that its history row names ``user`` and ``change_reason``.

    ``_history_user`` is set explicitly because token-authenticated API requests are
    authenticated inside DRF, after simple-history's middleware has already captured an
    anonymous request user.
    """
    recipe._history_user = user if getattr(user, "is_authenticated", False) else None
    recipe._change_reason = change_reason
    try:
        recipe.save()
    except IntegrityError as exc:
        # A concurrent create/rename took the name between our check and the insert.
        raise InvalidInput({"name": ["A recipe with this name already exists."]}) from exc


def _content_of(recipe: Recipe) -> dict[str, Any]:
    return {
        "name": recipe.name,
        "description": recipe.description,
        "engine": recipe.engine,
        "topology": recipe.topology,
        "node": recipe.node,
        "spec": recipe.spec,
    }


# --- recipes -------------------------------------------------------------------------------


def recipe_create(
    *,
    user,
    name: str,
    description: str = "",
    engine: str,
    topology: str,
    node: Node,
    spec: dict,
    change_reason: str | None = None,
) -> Recipe:
    """Validate and store a new recipe as version 1.

    ``spec`` is validated (and normalised) by :func:`deployments.recipes.recipe_validate`
    against ``node``'s facts and the stored secret names, and stored with its defaults filled in
    but for those derived from another field that it leaves out (the served model name, a
    worker's ``tp``, a role's ``membind``, the router's ``prometheus-port``:
    :func:`deployments.recipes.spec_as_stored`), which follow their field when it changes. The
    history row records ``user`` and ``change_reason`` (default ``"Created"``).

    Raises :class:`InvalidInput` (keys ``name``, ``engine``, ``topology``, ``node``, ``spec.…``)
    when anything is invalid or the name is taken.
    """
    content = _content_validate_with(
        _change_reason_errors(change_reason),
        {"name": name, "description": description or "", "engine": engine, "topology": topology, "node": node, "spec": spec},
    )
    content["spec"] = spec_as_stored(content["spec"], spec)
    with transaction.atomic():
        _check_name_free(content["name"])
        recipe = Recipe(
            **content,
            version=1,
            created_by=user if getattr(user, "is_authenticated", False) else None,
        )
        _save_with_history(recipe, user=user, change_reason=change_reason or "Created")
    return recipe


def recipe_update(
    *,
    recipe: Recipe,
    user,
    change_reason: str | None = None,
    expected_version: int | None = None,
    spec_patch: dict | None = None,
    **fields: Any,
) -> Recipe:
    """Apply ``fields`` (any of :data:`RECIPE_CONTENT_FIELDS`) to ``recipe`` as a new version.

    ``spec_patch`` (an API PATCH's ``spec``; not with ``spec``) is a JSON Merge Patch
    (:func:`json_merge_patch`, RFC 7396) applied to the stored spec under the row lock: keys it
    leaves out keep their stored values, a null removes its key (a default then applies), arrays
    and other values replace. ``spec`` itself replaces the stored spec whole.

    The merged content is validated as a whole (a new ``node`` re-checks the spec against
    that node's GPUs and NUMA nodes) and stored as :func:`recipe_create` stores it: a derived
    default the merged spec does not give (``served_model_name``, a worker's ``tp``, a role's
    ``membind``, the router's ``prometheus-port``) is not stored, so it keeps following its field.
    A patch that gives one of the model's ``path`` and ``name`` while the stored spec has the other
    is refused saying that the stored one is merged in and how to clear it
    (:func:`spec_patch_errors_noted`). The row is locked for the read-modify-write, so
    concurrent edits serialise; with ``expected_version`` set, an edit based on a stale
    version raises :class:`Conflict` (HTTP 409) instead of silently overwriting.

    If nothing changes, no version is written and the recipe is returned as it is.
    Returns the refreshed recipe. Raises :class:`InvalidInput` for unknown fields or invalid
    content, :class:`NotFound` if the recipe was deleted meanwhile.
    """
    unknown = sorted(set(fields) - set(RECIPE_CONTENT_FIELDS))
    if unknown:
        raise InvalidInput({key: ["Not a recipe field."] for key in unknown})
    reason_errors = _change_reason_errors(change_reason)
    if spec_patch is not None and "spec" in fields:
        raise InvalidInput({"spec": ["Give spec (the whole spec) or spec_patch (a merge patch), not both."]})
    with transaction.atomic():
        try:
            locked = Recipe.objects.select_for_update().select_related("node").get(pk=recipe.pk)
        except Recipe.DoesNotExist as exc:
            raise NotFound(f"Recipe {recipe.pk} no longer exists.") from exc
        if expected_version is not None and locked.version != expected_version:
            raise Conflict(
                f"Recipe {json_spelled(locked.name_shown)} is at version {locked.version}, not {expected_version}; "
                "reload it and apply the change again."
            )
        current = _content_of(locked)
        if spec_patch is not None:
            fields = {**fields, "spec": json_merge_patch(current["spec"], spec_patch)}
        merged = {**current, **fields}
        if merged.get("description") is None:
            merged["description"] = ""
        try:
            content = _content_validate_with(reason_errors, merged, stored_spec=current["spec"])
        except InvalidInput as exc:
            if spec_patch is not None:
                spec_patch_errors_noted(exc.errors, stored_spec=current["spec"], spec_patch=spec_patch)
            raise
        content["spec"] = spec_as_stored(content["spec"], merged["spec"])
        if _same_content(current, content):
            return locked
        if content["name"] != locked.name:
            _check_name_free(content["name"], exclude_pk=locked.pk)
        for key, value in content.items():
            setattr(locked, key, value)
        locked.version = locked.version + 1
        _save_with_history(locked, user=user, change_reason=change_reason or "Edited")
    return locked


def spec_patch_errors_noted(errors: dict[str, list[str]], *, stored_spec: Any, spec_patch: Any) -> None:
    """Make the refusals of a merge-patched spec (``errors``, path → messages, changed in place)
    say what the merge added: a patch that gives one of ``model.path`` and ``model.name``
    (``{"model": {"path": "/models/x"}}``) while the stored spec has the other gets both, and
    "give exactly one of path or name" alone reads as if the patch had sent both. The message
    then names the stored value that was merged in and how to clear it (``send "name": null
    beside the path``). The API's check of a PATCH body and :func:`recipe_update` both use it."""
    if MODEL_ONE_OF not in errors.get("spec.model", []):
        return
    patch_model = spec_patch.get("model") if isinstance(spec_patch, dict) else None
    stored_model = stored_spec.get("model") if isinstance(stored_spec, dict) else None
    if not isinstance(patch_model, dict) or not isinstance(stored_model, dict):
        return
    for given, kept in (("path", "name"), ("name", "path")):
        if patch_model.get(given) is not None and kept not in patch_model and stored_model.get(kept) is not None:
            note = (f"{MODEL_ONE_OF}: this patch gives {given}, and the stored {kept} "
                    f"{json_spelled(stored_model[kept])} is merged in (a merge patch keeps every key it leaves "
                    f'out); send "{kept}": null beside the {given} to clear it, or send the whole spec with PUT')
            errors["spec.model"] = [note if m == MODEL_ONE_OF else m for m in errors["spec.model"]]
            return


def recipe_stale_message(*, recipe: Recipe, expected_version: int) -> str | None:
    """Why an edit of ``recipe`` opened at ``expected_version`` may not be saved, or ``None``
    when the recipe is still at that version: ``"Recipe 'x' is at version 13, not 12: it was
    changed since you opened this page (by alice at 2026-12-04 22:51:03 UTC); reload it to edit
    the current version."`` (who and when from the latest history row; a deleted recipe says so).
    Reads the row as stored now, not ``recipe``'s in-memory fields."""
    current = Recipe.objects.filter(pk=recipe.pk).values_list("name", "version").first()
    if current is None:
        return f"Recipe {json_spelled(recipe.name_shown)} no longer exists: it was deleted since you opened this page."
    name, version = current
    if version == expected_version:
        return None
    latest = recipe.history.exclude(history_type="-").order_by("-history_date", "-history_id").first()
    by = ""
    if latest is not None:
        who = f"by {latest.history_user.username} " if latest.history_user_id else ""
        by = f" ({who}at {latest.history_date.astimezone(dt_timezone.utc):%Y-%m-%d %H:%M:%S} UTC)"
    return (
        f"Recipe {json_spelled(recipe_name_shown(name))} is at version {version}, not {expected_version}: it was changed since you "
        f"opened this page{by}; reload it to edit the current version."
    )


def _same_content(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(
        (_node_key(a[k]) == _node_key(b[k])) if k == "node" else (a[k] == b[k]) for k in RECIPE_CONTENT_FIELDS
    )


def _node_key(node: Node | None) -> int | None:
    return node.pk if node is not None else None


#: How many deployments a refused recipe delete names before it gives the count of the rest.
RECIPE_DELETE_NAMED = 10


def deployment_never_started(deployment: Deployment) -> bool:
    """Whether ``deployment`` ended without ever running anything: stopped or failed, never ready,
    none of its processes ever spawned (no pid, no start time: cancelled while pending, or failed
    before its first spawn) and no benchmark sweep made against it. Such a row records no run, so
    :func:`recipe_delete` deletes it with its recipe."""
    if deployment.status not in (DeploymentStatus.STOPPED, DeploymentStatus.FAILED) or deployment.ready_at:
        return False
    if deployment.processes.filter(models.Q(pid__isnull=False) | models.Q(started_at__isnull=False)).exists():
        return False
    return not deployment.sweeps.exists()


def _deployment_kept_label(deployment: Deployment) -> str:
    """``#4 (ready)``, ``#3 (stopped; it ran)``, ``#2 (stopped; a sweep was made against it)``:
    one deployment a refused recipe delete names, with why it keeps the recipe."""
    if deployment.status in DEPLOYMENT_ACTIVE:
        return f"#{deployment.pk} ({deployment.status})"
    if deployment.sweeps.exists():
        return f"#{deployment.pk} ({deployment.status}; a benchmark sweep was made against it)"
    return f"#{deployment.pk} ({deployment.status}; it ran)"


def _deployment_ran(deployment: Deployment) -> bool:
    """Whether ``deployment`` ever ran: it became ready, or one of its processes was spawned."""
    if deployment.ready_at or deployment.status == DeploymentStatus.READY:
        return True
    return deployment.processes.filter(models.Q(pid__isnull=False) | models.Q(started_at__isnull=False)).exists()


def deployment_goes_once_ended(deployment: Deployment) -> bool:
    """Whether ``deployment`` keeps its recipe only while it is active: pending, starting or
    stopping, never ready, no process spawned and no benchmark sweep made against it. Cancelled (or
    once stopped) it is a deployment that never started (:func:`deployment_never_started`)."""
    return (
        deployment.status in (DeploymentStatus.PENDING, DeploymentStatus.STARTING, DeploymentStatus.STOPPING)
        and not _deployment_ran(deployment)
        and not deployment.sweeps.exists()
    )


def recipe_delete_refusal(*, recipe: Recipe, kept: list[Deployment]) -> str:
    """The ``detail`` of the 409 a refused :func:`recipe_delete` answers: the deployments that keep
    ``recipe`` (newest first, at most :data:`RECIPE_DELETE_NAMED`, then how many more), the rule,
    and only the ways out that can work for those deployments. When every one of them is active
    and has not started a process (:func:`deployment_goes_once_ended`), cancelling them and
    deleting again works; otherwise the recipe is kept for good (a deployment ran, or a benchmark
    sweep measured one), and the text says so and offers a new version or a new name."""
    named = ", ".join(_deployment_kept_label(d) for d in kept[:RECIPE_DELETE_NAMED])
    more = len(kept) - RECIPE_DELETE_NAMED
    if more > 0:
        named += f" and {more} more"
    noun, verb = ("deployment", "refers") if len(kept) == 1 else ("deployments", "refer")
    rule = (
        "A recipe is deleted only when none of its deployments ever started a process (each one cancelled while "
        "pending, or failed before its first process was spawned, with no benchmark sweep made against it), and "
        "those deployments go with it."
    )
    change = (
        f"change the recipe with PATCH /api/recipes/{recipe.pk}/ (each save is a new version; deployments keep "
        f"the version they ran), or create a new recipe under another name."
    )
    head = f"Recipe {json_spelled(recipe.name_shown)} cannot be deleted: {noun} {named} {verb} to it. {rule}"
    if kept and all(deployment_goes_once_ended(d) for d in kept):
        one = len(kept) == 1
        statuses = {d.status for d in kept}
        steps = []
        if statuses & {DeploymentStatus.PENDING, DeploymentStatus.STARTING}:
            steps.append(f"cancel {'it' if one else 'the pending and starting ones'} "
                         f"(POST /api/deployments/<id>/cancel/)")
        if DeploymentStatus.STOPPING in statuses:
            steps.append(f"wait until {'it' if one else 'the stopping ones'} {'is' if one else 'are'} stopped")
        which = "It has not" if one else "None of them has"
        return (
            f"{head} {which} started a process yet, so {'it goes' if one else 'they go'} with the recipe once ended: "
            f"{' and '.join(steps)}, then delete the recipe again. Or {change}"
        )
    ran = any(_deployment_ran(d) for d in kept)
    swept = any(d.sweeps.exists() for d in kept)
    why = " and ".join(
        [w for w, on in (("a deployment of it ran", ran),
                         ("measured benchmark history refers to it", swept)) if on]
    ) or "a deployment of it ran"
    return (
        f"{head} This recipe is kept for good: {why}. It is the record of what its deployments ran and what "
        f"their benchmark sweeps measured, so stopping or cancelling a deployment will not make it deletable. "
        f"Instead: {change}"
    )


def recipe_delete(*, recipe: Recipe, user) -> None:
    """Delete ``recipe``; its history keeps a deletion row naming ``user``.

    A recipe whose deployments all never started (:func:`deployment_never_started`) is deleted
    with those deployment rows (their processes and events go with them). Any other deployment
    keeps the recipe for audit (``Deployment.recipe`` is ``PROTECT``): :class:`Conflict` with
    :func:`recipe_delete_refusal`'s text, and nothing is deleted.
    """
    recipe._history_user = user if getattr(user, "is_authenticated", False) else None
    recipe._change_reason = "Deleted"

    def refused() -> Conflict:
        rows = list(Deployment.objects.filter(recipe_id=recipe.pk).order_by("-created_at", "-pk"))
        kept = [d for d in rows if not deployment_never_started(d)]
        return Conflict(recipe_delete_refusal(recipe=recipe, kept=kept or rows))

    try:
        with transaction.atomic():
            Recipe.objects.select_for_update().filter(pk=recipe.pk).first()
            rows = list(Deployment.objects.select_for_update().filter(recipe_id=recipe.pk))
            if not all(deployment_never_started(d) for d in rows):
                raise refused()
            Deployment.objects.filter(pk__in=[d.pk for d in rows]).delete()
            recipe.delete()
    except (ProtectedError, IntegrityError) as exc:
        # a deployment (or a sweep of one) made while this delete ran
        raise refused() from exc


def deployed_recipe_spelled(deployment: Deployment) -> str:
    """``deployment``'s recipe as messages name it: its name at the deployed version, quoted,
    then the current one where it was renamed since: ``'probe-sim-b' (now 'probe-renamed')``."""
    text = json_spelled(deployment.deployed_recipe_name)
    renamed = deployment.recipe_renamed_to
    return f"{text} (now {json_spelled(renamed)})" if renamed else text


def _history_row(recipe: Recipe, version: int):
    """Latest history row of ``recipe`` carrying ``version`` (ignoring the deletion row)."""
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InvalidInput({"version": ["Must be a positive integer."]})
    if version > MAX_VERSION:
        # Beyond any stored version; also keeps the query inside the database's integer range.
        raise NotFound(f"Recipe {json_spelled(recipe.name_shown)} has no version {version}.")
    row = (
        recipe.history.filter(version=version)
        .exclude(history_type="-")
        .order_by("-history_date", "-history_id")
        .first()
    )
    if row is None:
        raise NotFound(f"Recipe {json_spelled(recipe.name_shown)} has no version {version}.")
    return row


def recipe_name_at(*, recipe: Recipe, version: int | None = None) -> str:
    """``recipe``'s name at ``version`` (its current name for the current version or None): what
    a dry-run of an older version names, as a deployment of it would (``Deployment.recipe_name``).
    Raises as :func:`recipe_version_get` for a version the recipe does not have."""
    if version is None or version == recipe.version:
        return recipe.name
    return _history_row(recipe, version).name


def recipe_version_get(*, recipe: Recipe, version: int) -> dict[str, Any]:
    """Content of ``recipe`` at ``version``.

    Returns ``{"version", "name", "description", "engine", "topology", "node", "spec"}``
    where ``node`` is the node's name (``None`` if that node row is gone), plus who and when:
    ``at`` (datetime, UTC), ``user`` (username or ``None``), ``change_reason`` and ``change``
    (``created`` or ``changed``). Raises :class:`NotFound` for a version that does not
    exist, :class:`InvalidInput` for a non-positive one.
    """
    row = _history_row(recipe, version)
    node = Node.objects.filter(pk=row.node_id).first()
    return {
        "version": row.version,
        "at": row.history_date,
        "user": row.history_user.username if row.history_user_id else None,
        "change_reason": row.history_change_reason,
        "change": "created" if row.history_type == "+" else "changed",
        "name": row.name,
        "description": row.description,
        "engine": row.engine,
        "topology": row.topology,
        "node": node.name if node else None,
        "spec": row.spec,
    }


_MISSING = object()


def _diff_values(path: str, old: Any, new: Any, out: list[dict[str, Any]]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            _diff_values(f"{path}.{key}", old.get(key, _MISSING), new.get(key, _MISSING), out)
        return
    if old == new and type(old) is type(new):
        return
    if old is _MISSING:
        out.append({"path": path, "change": "added", "old": None, "new": new})
    elif new is _MISSING:
        out.append({"path": path, "change": "removed", "old": old, "new": None})
    else:
        out.append({"path": path, "change": "changed", "old": old, "new": new})


def recipe_diff(*, recipe: Recipe, a: int, b: int) -> list[dict[str, Any]]:
    """What changed from version ``a`` to version ``b`` of ``recipe``.

    Returns a list of ``{"path", "change", "old", "new"}`` sorted by path, where ``path`` is
    a top-level field (``name``, ``node``, …) or a dotted path into the spec
    (``spec.roles.decode.flags.mem-fraction-static``); objects are compared key by key, lists
    and scalars as whole values; ``change`` is ``added``, ``removed`` or ``changed`` (``old``
    or ``new`` is ``None`` for an added or removed key). ``a`` may be greater than ``b``
    (a reverse diff). Equal versions give ``[]``. Raises :class:`NotFound` for a missing
    version.
    """
    return content_diff(recipe_version_get(recipe=recipe, version=a), recipe_version_get(recipe=recipe, version=b))


def content_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """:func:`recipe_diff` of two recipe contents (mappings holding every field of
    :data:`RECIPE_CONTENT_FIELDS`, ``node`` by name): the same rows in the same order.

    The contents are compared as stored, then each row's ``old`` and ``new`` (and ``path``, which
    holds spec keys) are shown as every other read of a recipe shows them
    (:func:`controlplane.redaction.credential_mask_json`): a stored secret's value in any spelling
    and a well-known credential, saved before such values were refused, are masked on both sides."""
    out: list[dict[str, Any]] = []
    for field in RECIPE_CONTENT_FIELDS:
        _diff_values(field, old[field], new[field], out)
    for row in out:
        row.update(path=credential_mask_json(row["path"]), old=credential_mask_json(row["old"]),
                   new=credential_mask_json(row["new"]))
    return out


def recipe_revert(
    *,
    recipe: Recipe,
    user,
    version: int,
    expected_version: int | None = None,
    change_reason: str | None = None,
    keep_name: bool = False,
) -> Recipe:
    """Make ``recipe``'s content equal to ``version`` again, as a new version.

    History is never rewritten: reverting v3 to v1 writes v4 whose content equals v1, with
    change reason ``change_reason`` (default ``"Reverted to version 1"``). With ``keep_name``
    the recipe keeps its current name and takes every other field of ``version`` (default
    reason ``"Reverted to version 1 keeping the name 'x'"`` when the names differ): the way to
    restore a version whose name another recipe has taken since. The old content is
    re-validated against the node's current facts and secrets, so a version that is no longer
    deployable is refused with :class:`InvalidInput`; a version whose name another recipe now
    holds is refused under ``name`` with ``"A recipe named 'a' already exists; restore it with
    the current name 'b' instead (keep_name)."``. Raises :class:`NotFound` for a missing version
    or node, :class:`Conflict` when ``expected_version`` is stale.
    """
    content = recipe_version_get(recipe=recipe, version=version)
    node = Node.objects.filter(name=content["node"]).first() if content["node"] else None
    if node is None:
        raise InvalidInput({"node": [f"The node of version {version} no longer exists."]})
    fields = {k: content[k] for k in RECIPE_CONTENT_FIELDS if k != "node" and not (keep_name and k == "name")}
    reason = f"Reverted to version {version}"
    if keep_name and content["name"] != recipe.name:
        reason += f" keeping the name {json_spelled(recipe.name_shown)}"
    try:
        return recipe_update(
            recipe=recipe,
            user=user,
            change_reason=change_reason or reason,
            expected_version=expected_version,
            node=node,
            **fields,
        )
    except InvalidInput as exc:
        if keep_name or "name" not in exc.errors:
            raise
        current = Recipe.objects.filter(pk=recipe.pk).values_list("name", flat=True).first() or recipe.name
        if not Recipe.objects.filter(name=content["name"]).exclude(pk=recipe.pk).exists():
            raise
        taken = (f"A recipe named {json_spelled(recipe_name_shown(content['name']))} already exists; restore it with "
                 f"the current name {json_spelled(recipe_name_shown(current))} instead (keep_name).")
        raise InvalidInput({**exc.errors, "name": [taken]}) from None


def recipe_plan(*, recipe: Recipe, version: int | None = None, warn_ports: bool = False) -> LaunchPlan:
    """Render the launch plan of ``recipe`` (its current version, or ``version``) on its
    current node, without starting anything and without resolving secret values.

    Returns a :class:`deployments.launch.LaunchPlan` (``to_dict()`` is JSON-safe and
    redacted). The content is re-validated first, so an old version that no longer fits the
    node raises :class:`InvalidInput` rather than rendering a plan that would fail. With
    ``warn_ports`` (the dry-run) the plan's warnings also name ports an active deployment of
    another recipe on the node holds and GPUs such a one books (what a
    deploy now would refuse with 409), and, when the node is this host, ports a process outside
    the active deployments holds (:func:`port_holder_warnings`: the launch would fail at start).
    """
    if version is None or version == recipe.version:
        content = _content_of(recipe)
    else:
        stored = recipe_version_get(recipe=recipe, version=version)
        content = {**stored, "node": recipe.node}
    validated = recipe_content_validate(content)
    plan = launch_plan_render(
        engine=validated["engine"],
        topology=validated["topology"],
        spec=validated["spec"],
        node=node_facts_from_row(validated["node"]),
        secret_values=None,
    )
    if warn_ports:
        plan.warnings.extend(plan_warnings_now(plan=plan, node=recipe.node, spec=validated["spec"],
                                               engine=validated["engine"], recipe=recipe))
    return plan


def plan_warnings_now(*, plan: LaunchPlan, node: Node, spec: dict, engine: str,
                      recipe: Recipe | None = None) -> list[str]:
    """What a deploy of ``plan`` on ``node`` now would meet, as the dry-run's warnings after the
    plan's own: each port an active deployment of another recipe on the node holds and each GPU
    such a one books (what a deploy now would refuse with 409, :func:`deployment_ports_in_use`,
    :func:`gpu_conflicts`), CPUs such a one pins too (:func:`cpu_sharing_warnings`), a model path
    missing on this host (:func:`model_path_warnings`) and ports a process outside the active
    deployments holds on this host (:func:`port_holder_warnings`). ``spec`` is the normalised
    spec of the plan and ``engine`` its engine.

    ``recipe`` is the saved recipe the plan is of, whose own deployments are not another's; None
    for one not saved yet (the new-recipe form's Validate), for which every active deployment on
    the node counts. One function for the saved recipe's dry-run (page, API, ``manage.py
    dryrun``) and the form's preview, so the form says before Save what Deploy would refuse."""
    # ports an active deployment of another recipe on the node holds (the deploy checks again at its time)
    taken = deployment_ports_in_use(node=node, exclude_recipe=recipe)
    lines: list[str] = []
    for process in plan.processes:
        for kind, port in sorted(process.ports.items()):
            if int(port) in taken:
                other, role = taken[int(port)]
                lines.append(
                    f"port {port} ({port_kind_text(process.role, kind)}) is in use by the {role} of deployment #{other.pk} "
                    f"(recipe {deployed_recipe_spelled(other)}, {other.status}) on node {json_spelled(node.name)}: a deploy now "
                    "would be refused")
    lines.extend(f"{line}: a deploy now would be refused" for line in gpu_conflicts(plan=plan, recipe=recipe, node=node))
    lines.extend(cpu_sharing_warnings(plan=plan, recipe=recipe, node=node))
    lines.extend(model_path_warnings(spec=spec, node_name=node.name, engine=engine))
    lines.extend(port_holder_warnings(plan=plan, recipe=recipe, node=node))
    return lines


def model_path_warnings(*, spec: dict, node_name: str, engine: str) -> list[str]:
    """A line when the normalised ``spec``'s ``model.path`` names nothing on this host and the
    recipe's node is this host (``settings.CEILING_NODE_NAME``, the node the local node agent
    registers): the engine would fail at start ("Model path does not exist"). A warning, not a
    refusal: validation is lexical because a path names a file on the node, and the file may be
    put there before the deploy. Another node's files are not visible here, so nothing is said;
    nor for an engine that never reads the path (``reads_model_path`` false: the simulator)."""
    from django.conf import settings

    adapter = ENGINES.get(engine)
    if adapter is not None and not adapter.reads_model_path:
        return []
    path = (spec.get("model") or {}).get("path")
    if not path or node_name != settings.CEILING_NODE_NAME or os.path.exists(path):
        return []
    return [f"model path {path} does not exist on node {json_spelled(node_name)} (this host): the engine would fail at "
            "start; put the file there before a deploy"]


def port_holder_warnings(*, plan: LaunchPlan, recipe: Recipe | None = None, node: Node | None = None) -> list[str]:
    """One line per port of ``plan`` (http, bootstrap, side channel, metrics) that cannot be
    bound now on the address its engine binds, when the recipe's node is this host
    (``settings.CEILING_NODE_NAME``) and no active deployment on the node books the port (those
    are the port clashes a deploy refuses with 409, or the recipe's own running deployment):
    ``single http port 31000 on 127.0.0.1 is already in use by pid 4121 (python3) on node 'local'
    (this host), and no active deployment books it: a launch now would fail at start; stop that
    process or choose another port``. The holder's pid and name are given when ``/proc`` shows
    them (another user's process may hide its sockets; the port is still named). An address the
    host cannot bind at all says ``... cannot be bound: <reason>`` and to choose another host.

    The check is a real bind attempt (:func:`deployments.supervisor.procfs.port_busy_reason`,
    the one the node agent makes before each spawn). A warning, not a refusal, as with a missing
    model file: the holder may be gone by the time the node agent launches, and the agent checks
    every port again before it spawns anything. Another node's ports are not visible here, so
    nothing is said for them. ``node`` is the recipe's node (``recipe.node`` when left out; given
    alone for a recipe not saved yet)."""
    from django.conf import settings

    node = node if node is not None else recipe.node
    if node.name != settings.CEILING_NODE_NAME:
        return []
    booked = deployment_ports_in_use(node=node)
    lines: list[str] = []
    for spec in plan.processes:
        for kind, port in sorted(spec.ports.items(), key=lambda item: (item[0] != "http", item[0])):
            if int(port) in booked:
                continue
            reason = port_busy_reason(host=spec.host, port=int(port))
            if not reason:
                continue
            busy = "already in use" in reason
            flag = PORT_KIND_FLAGS.get(kind)
            lines.append(f"{spec.role} {port_kind_words(kind)} {reason} on node {json_spelled(node.name)} (this host)"
                         f"{', and no active deployment books it' if busy else ''}: a launch now would fail at "
                         f"start; {'stop that process or choose another port' if busy else 'choose another host or port'}"
                         + (f" (set it with {spec.role} flag {flag})" if flag else ""))
    return lines


# --- nodes ---------------------------------------------------------------------------------


def node_delete(*, node: Node, user) -> None:
    """Remove a node row with its GPU and NUMA rows (admin only at the edges).

    Registration and refresh belong to :func:`deployments.nodes.node_register`; deletion is
    here because it must respect what references the node. Raises :class:`Conflict` while
    recipes or deployments reference it (both ``PROTECT`` the node).
    """
    try:
        with transaction.atomic():
            node.delete()
    except ProtectedError as exc:
        raise Conflict(f"Node {json_spelled(node.name)} is used by recipes or deployments; it cannot be removed.") from exc


# --- secrets -------------------------------------------------------------------------------


# Characters a secret value may not hold besides the C0 controls (all refused but tab): the line
# breaks str.splitlines() splits at beyond C0 (NEL, LINE SEPARATOR, PARAGRAPH SEPARATOR) and DEL.
SECRET_VALUE_REFUSED_CHARS = "\x85\u2028\u2029\x7f"


def secret_value_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a secret's value, or None when it can: the one check of the API,
    the admin and the services. Refused, the first that applies: no text or empty; a control
    character other than tab (NUL, ESC, DEL), or any line break :meth:`str.splitlines` knows
    (``\\n``, ``\\r``, ``\\v``, ``\\f``, ``\\x1c``-``\\x1e``, NEL, U+2028, U+2029): a secret reaches its
    engine as an environment variable, which cannot hold a NUL and whose line breaks split it for
    whatever reads the environment line by line, and the log tail splits lines and strips colour
    codes before masking, which would change such a value past redaction; shorter than
    :data:`controlplane.redaction.MIN_VALUE_LENGTH` characters (8) once leading and trailing
    whitespace is left out (:func:`secret_value_length_problem`: too likely to be ordinary text to
    be masked in logs or looked for in free text); longer than 8192 characters, or not valid
    Unicode."""
    if not isinstance(value, str) or not value:
        return "A non-empty value is required."
    if any(c in value for c in SECRET_VALUE_REFUSED_CHARS) or any(ord(c) < 0x20 and c != "\t" for c in value):
        return ("Must not contain NUL, line breaks (any that Python's str.splitlines() splits at: \\n, \\r, "
                "\\v, \\f, \\x1c-\\x1e, \\x85, U+2028, U+2029), an escape (ESC) or another control character: "
                "a secret reaches the engine as an environment variable, which cannot carry them faithfully, and "
                "a log tail splits lines and removes terminal colour codes at them, which would change the value "
                "past masking.")
    if len(value.strip()) < MIN_VALUE_LENGTH:
        return secret_value_length_problem(value)
    return _string_problem(value)


def secret_value_length_problem(value: str) -> str:
    """The refusal of ``value``, a secret value shorter than
    :data:`controlplane.redaction.MIN_VALUE_LENGTH` once stripped: the minimum, the length it has
    (never the value) and why."""
    length = len(value.strip())
    counted = " (leading and trailing whitespace not counted)" if length != len(value) else ""
    return (f"A secret value needs at least {MIN_VALUE_LENGTH} characters; got {length}{counted}: a shorter "
            "value is too likely to be ordinary text, such as the log level INFO, to be masked in logs.")


def _validate_secret_fields(*, name: str | None = None, value: str | None = None, description: str | None = None) -> None:
    errors: dict[str, list[str]] = {}
    if name is not None:
        try:
            name_validator(name)
        except DjangoValidationError as exc:
            errors["name"] = list(exc.messages)
    if value is not None:
        problem = secret_value_problem(value)
        if problem:
            errors["value"] = [problem]
    if description is not None:
        if not isinstance(description, str):
            errors["description"] = ["Must be text."]
        elif len(description) > 255:
            errors["description"] = [length_message(255, len(description))]
        elif _string_problem(description) or text_control_problem(description):
            errors["description"] = [_string_problem(description) or text_control_problem(description)]
        elif problem := secret_description_problem(description, value=value):
            errors["description"] = [problem]
    if errors:
        raise InvalidInput(errors)


def secret_description_problem(description: Any, *, value: Any = None) -> str | None:
    """Why a secret's ``description``, listed in clear to everyone who may list the secrets, cannot
    hold what it holds: ``value``, the value the same write gives the secret, or any stored
    secret's value (the secret's own current one included), in any spelling a page masks it in, or
    a well-known credential (:func:`secret_value_in_text`); never quoting it. A placeholder
    (:data:`controlplane.redaction.REDACTED`, or a shortened credential such as ``hf_…(37 chars)``)
    is refused too (:func:`_description_placeholder`): the admin's edit form and the API show it in
    place of what a description saved before such text was refused holds, so saving it unchanged
    would store the placeholder as text nobody wrote. None when clean."""
    if (isinstance(description, str) and isinstance(value, str) and len(value.strip()) >= MIN_VALUE_LENGTH
            and secret_value_found(description, value)):
        return ("description holds the value of this secret: the value is write-only and never shown, while "
                "description is stored and shown in clear")
    return secret_value_in_text("description", description) or (
        _description_placeholder(description) if isinstance(description, str) else None)


def secret_description_validator(value: object) -> None:
    """A field validator (Django forms and DRF serializers alike) refusing a secret's description
    that holds a stored secret's value or a credential (:func:`secret_description_problem`); the
    value given in the same write is checked where the whole write is known."""
    problem = secret_description_problem(value)
    if problem:
        raise DjangoValidationError(problem, code="secret_value")


def secret_name_errors(name: str) -> list[str]:
    """Why ``name`` cannot name a new secret (not a slug, or taken), or ``[]``: what
    :func:`secret_create` refuses, for forms and serializers that report every field at once."""
    try:
        name_validator(name)
    except DjangoValidationError as exc:
        return list(exc.messages)
    if Secret.objects.filter(name=name).exists():
        return [f"A secret named {json_spelled(name)} already exists."]
    return []


def secret_create(*, user, name: str, value: str, description: str = "") -> Secret:
    """Store a new secret. ``value`` is given to the redactor at once
    (:func:`controlplane.redaction.note_stored_secret_value`), so it is masked in every later log
    line of this process; other processes read it from the database (:mod:`controlplane.redaction`).
    Raises :class:`InvalidInput` on a bad or taken name or a value :func:`secret_value_problem`
    refuses (shorter than 8 characters, ...). ``user`` is accepted for audit symmetry with recipes."""
    _validate_secret_fields(name=name, value=value, description=description or "")
    with transaction.atomic():
        if Secret.objects.filter(name=name).exists():
            raise InvalidInput({"name": [f"A secret named {json_spelled(name)} already exists."]})
        try:
            secret = Secret.objects.create(name=name, value=value, description=description or "")
        except IntegrityError as exc:
            raise InvalidInput({"name": ["A secret with this name already exists."]}) from exc
    note_stored_secret_value(value)
    return secret


def secret_update(*, secret: Secret, user, value: str | None = None, description: str | None = None) -> Secret:
    """Replace a secret's value and/or description (``None`` leaves a field as it is).
    The name is fixed because recipes reference secrets by name."""
    _validate_secret_fields(value=value, description=description)
    with transaction.atomic():
        locked = Secret.objects.select_for_update().get(pk=secret.pk)
        if value is not None:
            locked.value = value
        if description is not None:
            locked.description = description
        locked.save()
    if value is not None:
        note_stored_secret_value(value)
    return locked


def secret_delete_refusal(*, secret: Secret) -> str | None:
    """Why ``secret`` may not be deleted, or None when it may: the recipes that reference it by
    name (a recipe whose secret vanished could no longer be validated or deployed), each as reads
    show its name, and the way out. What :func:`secret_delete` refuses, and what admin's delete page
    lists as protected before anything is sent."""
    users = [r.name_shown for r in Recipe.objects.only("name", "spec") if secret.name in _secret_refs(r.spec)]
    if not users:
        return None
    return (f"Secret {json_spelled(secret.name)} is used by recipe(s): {', '.join(sorted(users))}. Remove it from "
            "their spec.secrets (each edit is a new version), then delete it.")


def secret_delete(*, secret: Secret, user) -> None:
    """Delete a secret unless a recipe still references it by name.

    Raises :class:`Conflict` with :func:`secret_delete_refusal`'s message.
    """
    refusal = secret_delete_refusal(secret=secret)
    if refusal:
        raise Conflict(refusal)
    secret.delete()


def retired_secret_values_forget(*, names: list[str] | None = None, before: datetime | None = None,
                                 dry_run: bool = False) -> list[tuple[str, datetime, bool]]:
    """Forget the kept earlier values (:class:`RetiredSecretValue`) of secrets since changed or
    deleted, so that redaction stops masking them: those of the secrets named ``names`` (every
    name when None), retired before ``before`` (any time when None). Returns ``(secret name,
    retired at, whether a secret of that name still exists)`` of each, oldest first; with
    ``dry_run`` nothing is deleted. Needs no key: a value is forgotten without being decrypted.

    Every process masks the stored values it read last (:mod:`controlplane.redaction`), so each
    stops masking a forgotten value at its next read, within
    :data:`controlplane.redaction.STORED_VALUES_MAX_AGE_S`; a node agent that launched an engine
    with the value masks it until it restarts. A value that is also a secret's current value stays
    masked as that.

    Raises :class:`InvalidInput` (``name``) naming each of ``names`` that no kept value belongs
    to, with the names that have some."""
    rows = RetiredSecretValue.objects.all()
    if names:
        kept = set(RetiredSecretValue.objects.values_list("name", flat=True))
        unknown = [name for name in dict.fromkeys(names) if name not in kept]
        if unknown:
            said = ", ".join(json_spelled(name) for name in sorted(kept)) or "none"
            raise InvalidInput({"name": [
                f"no earlier value of a secret named {json_spelled(name)} is kept (kept for: {said})"
                for name in unknown]})
        rows = rows.filter(name__in=names)
    if before is not None:
        rows = rows.filter(retired_at__lt=before)
    with transaction.atomic():
        found = list(rows.order_by("retired_at", "pk").values_list("pk", "name", "retired_at"))
        existing = set(Secret.objects.filter(name__in={name for _pk, name, _at in found}).values_list("name", flat=True))
        if not dry_run:
            RetiredSecretValue.objects.filter(pk__in=[pk for pk, _name, _at in found]).delete()
    if found and not dry_run:
        stored_secret_values_invalidate()
    return [(name, at, name in existing) for _pk, name, at in found]


def _secret_refs(spec: Any) -> set[str]:
    """Secret names a spec references: the values of ``spec.secrets`` (``{ENV_NAME: secret
    name}``, the only place :mod:`deployments.recipes` accepts a secret reference)."""
    secrets = spec.get("secrets") if isinstance(spec, dict) else None
    if not isinstance(secrets, dict):
        return set()
    return {name for name in secrets.values() if isinstance(name, str)}


# --- deployments ---------------------------------------------------------------------------

LOG_TAIL_MAX_LINES = 2000
# A log tail reads at most this many bytes from the end of the file (2 MiB): enough for
# LOG_TAIL_MAX_LINES lines of ordinary engine output, bounded whatever the lines look like.
LOG_TAIL_MAX_BYTES = 2 * 1024 * 1024


def deployment_event_add(*, deployment: Deployment, kind: str, message: str = "", process: ServerProcess | None = None,
                         at: datetime | None = None) -> ProcessEvent:
    """Append one timestamped entry (``at``, UTC, now unless given: a crash is dated when the
    process ended, as its shim recorded it) to ``deployment``'s timeline.

    ``kind`` is a short machine word (``created``, ``spawned``, ``ready``, ``crashed``,
    ``restarting``, ``stopped``...), ``message`` human text; secret values are masked
    before storing. Returns the new :class:`ProcessEvent`.
    """
    return ProcessEvent.objects.create(
        deployment=deployment, process=process, kind=kind[:32], message=redact_text(message or ""),
        at=at or timezone.now(),
    )


def _send_to_node(task, deployment: Deployment) -> None:
    """Send ``task(deployment.id)`` to the deployment's node queue once the transaction commits.

    A broker outage must not undo a committed row: the failure is logged and the node agent's
    monitor picks up the row by itself (see :mod:`deployments.agent`), so the message is only
    a prompt wake-up, never the system of record.
    """
    deployment_id, queue = deployment.pk, deployment.node.queue_name

    def send() -> None:
        try:
            task.apply_async(args=[deployment_id], queue=queue, retry=False)
        except Exception:  # noqa: BLE001 - any broker error; the row stays the truth
            log.warning("could not enqueue %s for deployment %s on %s; the agent will find the row",
                        task.name, deployment_id, queue, exc_info=True)

    transaction.on_commit(send)


def deployment_url_from_here(*, deployment: Deployment, role: str, url: str) -> tuple[str, str]:
    """``url``, a URL of ``deployment``'s ``role`` process as its node agent probes it on the node
    (a process row's health URL: loopback for a wildcard bind), as this host reaches it
    (:func:`deployments.launch.url_from_here` of the bind host the role has in the deployment's
    ``spec_snapshot``, on the deployment's node); ``("", why)`` when this host has none (a node
    without a recorded address). What the benchmark worker sends to a deployment's processes
    (the entry server's health, each server's info and ``/metrics``) goes through it, as the
    deployment's ``entry_url`` follows the same rule (:func:`deployments.launch.client_host`): a
    process of another node is asked there, not on this host's loopback."""
    from deployments.launch import url_from_here
    from deployments.recipes import DEFAULT_HOST

    roles = (deployment.spec_snapshot or {}).get("roles") if isinstance(deployment.spec_snapshot, dict) else None
    spec = roles.get(role) if isinstance(roles, dict) else None
    bind = spec.get("host") if isinstance(spec, dict) and isinstance(spec.get("host"), str) else DEFAULT_HOST
    node = deployment.node
    return url_from_here(url, bind_host=bind, node_name=node.name, address=node.hostname)


def deployment_entry_url_problem(deployment: Deployment) -> str:
    """Why ``deployment`` has no entry URL this host reaches (its entry server, the router of a
    PD deployment or the single server, binds every interface on another node that recorded no
    address: :func:`deployments.launch.client_host`), ``""`` when nothing stands in the way.
    What a sweep of it is refused with: its load would have nowhere to go."""
    from deployments.launch import client_host
    from deployments.recipes import DEFAULT_HOST

    role = "router" if deployment.recipe.topology == "pd" else "single"
    roles = (deployment.spec_snapshot or {}).get("roles") if isinstance(deployment.spec_snapshot, dict) else None
    spec = roles.get(role) if isinstance(roles, dict) else None
    bind = spec.get("host") if isinstance(spec, dict) and isinstance(spec.get("host"), str) else DEFAULT_HOST
    return client_host(bind, node_name=deployment.node.name, address=deployment.node.hostname)[1]


def deployment_ports_in_use(*, node: Node, exclude_recipe: Recipe | None = None) -> dict[int, tuple[Deployment, str]]:
    """TCP ports taken on ``node`` by its active (pending, starting, ready, stopping)
    deployments: port → (deployment, role). A deployment's ports are those its process rows
    record plus those its ``spec_snapshot`` renders to on the node now (a pending deployment
    has no rows yet); every kind counts (http, bootstrap, side channel, metrics), whatever the
    host, since a process bound to ``0.0.0.0`` clashes with one on any address.
    ``exclude_recipe``'s deployments are left out (one active deployment per recipe is already
    enforced by the unique index)."""
    return _node_bookings(node=node, statuses=DEPLOYMENT_ACTIVE, exclude_recipe=exclude_recipe, row_field="ports",
                          of_process=lambda spec: spec.ports.values())


def _node_bookings(*, node: Node, statuses, exclude_recipe: Recipe | None, row_field: str,
                   of_process) -> dict[int, tuple[Deployment, str]]:
    """What ``node``'s deployments in ``statuses`` hold of one numbered resource (ports, GPUs):
    number → (deployment, role), the first holder kept. A deployment holds what its process rows
    record in ``row_field`` (a dict's values or a list) plus what ``of_process`` gives for each
    process its ``spec_snapshot`` renders to on the node now (a pending deployment has no rows
    yet); ``exclude_recipe``'s deployments are left out."""
    booked: dict[int, tuple[Deployment, str]] = {}
    active = Deployment.objects.filter(node=node, status__in=statuses).select_related("recipe", "node")
    if exclude_recipe is not None:
        active = active.exclude(recipe=exclude_recipe)
    for other in active.order_by("pk"):
        for role, held in ServerProcess.objects.filter(deployment=other).values_list("role", row_field):
            items = held.values() if isinstance(held, dict) else held if isinstance(held, list) else ()
            for item in items:
                booked.setdefault(int(item), (other, role))
        try:
            rendered = launch_plan_render(
                engine=other.recipe.engine, topology=other.recipe.topology, spec=other.spec_snapshot,
                node=node_facts_from_row(node), secret_values=None,
            )
        except InvalidInput:
            continue  # the node changed under it; its process rows (above) still count
        for spec in rendered.processes:
            for item in of_process(spec):
                booked.setdefault(int(item), (other, spec.role))
    return booked


#: Deployment statuses whose GPUs count as booked: a deploy onto them is refused (409). Every
#: active status, stopping included: a stopping deployment's engines may hold their GPU memory
#: until SIGTERM (or SIGKILL after ``stop_grace_s``) ends them, as they hold their ports.
GPU_BOOKING_STATUSES = DEPLOYMENT_ACTIVE


def deployment_gpus_in_use(*, node: Node, exclude_recipe: Recipe | None = None) -> dict[int, tuple[Deployment, str]]:
    """GPUs booked on ``node`` by its active (pending, starting, ready, stopping) deployments:
    GPU index (NVML) → (deployment, role). A deployment's GPUs are those its process rows record
    plus those its ``spec_snapshot`` renders to on the node now (a pending deployment has no rows
    yet). ``exclude_recipe``'s deployments are left out."""
    return _node_bookings(node=node, statuses=GPU_BOOKING_STATUSES, exclude_recipe=exclude_recipe,
                          row_field="gpu_ids", of_process=lambda spec: spec.gpu_ids)


def gpu_conflicts(*, plan: LaunchPlan, recipe: Recipe | None = None, node: Node | None = None) -> list[str]:
    """One line per (process of ``plan``, deployment holding some of its GPUs): ``single GPUs
    0-3 are booked by the single of deployment #7 (recipe 'seed-v4-flash-tp4', pending) on node
    'seed-8gpu'`` (:func:`deployment_gpus_in_use`); empty when every GPU of the plan is free.
    ``recipe``'s own deployments are left out; ``node`` is its node (``recipe.node`` when left
    out; given alone for a recipe not saved yet, for which every deployment counts)."""
    return [line for line, _ in _gpu_clashes(plan=plan, recipe=recipe, node=node)]


def _gpu_clashes(*, plan: LaunchPlan, recipe: Recipe | None = None,
                 node: Node | None = None) -> list[tuple[str, Deployment]]:
    """:func:`gpu_conflicts`'s lines, each with the deployment that holds those GPUs."""
    node = node if node is not None else recipe.node
    booked = deployment_gpus_in_use(node=node, exclude_recipe=recipe)
    lines: list[tuple[str, Deployment]] = []
    for spec in plan.processes:
        holders: dict[tuple[int, str], tuple[Deployment, str, list[int]]] = {}
        for gpu in spec.gpu_ids:
            if int(gpu) in booked:
                other, role = booked[int(gpu)]
                holders.setdefault((other.pk, role), (other, role, []))[2].append(int(gpu))
        for other, role, gpus in holders.values():
            lines.append((
                f"{spec.role} GPU{'s' if len(gpus) > 1 else ''} {format_cpulist(gpus)} "
                f"{'are' if len(gpus) > 1 else 'is'} booked by the {role} of deployment #{other.pk} "
                f"(recipe {deployed_recipe_spelled(other)}, {other.status}) on node {json_spelled(node.name)}", other))
    return lines


def deployment_cpus_in_use(*, node: Node, exclude_recipe: Recipe | None = None) -> dict[int, list[tuple[Deployment, str]]]:
    """CPUs pinned on ``node`` by its active deployments: CPU → [(deployment, role), ...]. A
    process counts with what it was pinned to (``effective_cpus`` read back from ``/proc``, else
    its intended ``cpus``); a deployment with no process rows yet (pending) with the ``cpus`` of
    its ``spec_snapshot`` roles. An unpinned process (a router without ``cpus``) holds none.
    ``exclude_recipe``'s deployments are left out."""
    held: dict[int, list[tuple[Deployment, str]]] = {}
    active = Deployment.objects.filter(node=node, status__in=DEPLOYMENT_ACTIVE).select_related("recipe")
    if exclude_recipe is not None:
        active = active.exclude(recipe=exclude_recipe)
    for other in active.order_by("pk"):
        rows = list(ServerProcess.objects.filter(deployment=other).values_list("role", "effective_cpus", "cpus"))
        if not rows:
            roles = (other.spec_snapshot or {}).get("roles") or {}
            rows = [(role, "", r.get("cpus") or "") for role, r in roles.items() if isinstance(r, dict)]
        for role, effective, intended in rows:
            if not intended:
                continue  # not pinned: the scheduler moves it anywhere (its read-back set is every CPU)
            try:
                cpus = parse_cpulist(effective or intended)
            except ValueError:
                continue
            for cpu in cpus:
                if (other, role) not in held.setdefault(cpu, []):
                    held[cpu].append((other, role))
    return held


def cpu_sharing_warnings(*, plan: LaunchPlan, recipe: Recipe | None = None, node: Node | None = None) -> list[str]:
    """One line per process of ``plan`` pinned to CPUs that an active deployment of another
    recipe on the node also pins (:func:`deployment_cpus_in_use`): sharing is allowed (a small
    host has no other choice) but skews both deployments' benchmark numbers while both serve.
    ``node`` is ``recipe``'s node (``recipe.node`` when left out; given alone for a recipe not
    saved yet, for which every deployment counts)."""
    held = deployment_cpus_in_use(node=node if node is not None else recipe.node, exclude_recipe=recipe)
    lines: list[str] = []
    for spec in plan.processes:
        try:
            mine = parse_cpulist(spec.cpus) if spec.cpus else []
        except ValueError:
            continue
        users: dict[tuple[int, str], tuple[Deployment, str, list[int]]] = {}
        for cpu in mine:
            for other, role in held.get(cpu, []):
                users.setdefault((other.pk, role), (other, role, []))[2].append(cpu)
        for other, role, cpus in users.values():
            lines.append(
                f"{spec.role} CPU{'s' if len(cpus) > 1 else ''} {format_cpulist(cpus)} "
                f"{'are' if len(cpus) > 1 else 'is'} also pinned by the {role} of deployment #{other.pk} "
                f"(recipe {deployed_recipe_spelled(other)}, {other.status}): the two share {'them' if len(cpus) > 1 else 'it'}, "
                "which skews either one's benchmark numbers while both serve")
    return lines


def _port_clashes(*, plan: LaunchPlan, recipe: Recipe) -> list[tuple[str, Deployment]]:
    """Every port of ``plan`` that an active deployment of another recipe on the same node
    already uses (:func:`deployment_ports_in_use`), in process then port-kind order: (line,
    holder), the line as ``port 31080 (single http port) is already used by the router of
    deployment #7 (recipe 'local-sim-pd', pending) on node 'local'``, a port a flag sets named with
    that flag (``port 31081 (router metrics port, --prometheus-port) ...``, :func:`port_kind_text`);
    empty when all are free."""
    taken = deployment_ports_in_use(node=recipe.node, exclude_recipe=recipe)
    clashes: list[tuple[str, Deployment]] = []
    for spec in plan.processes:
        for kind, port in sorted(spec.ports.items()):
            if int(port) in taken:
                other, role = taken[int(port)]
                clashes.append((
                    f"port {port} ({port_kind_text(spec.role, kind)}) is already used by the {role} of deployment "
                    f"#{other.pk} (recipe {deployed_recipe_spelled(other)}, {other.status}) on node {json_spelled(recipe.node.name)}",
                    other))
    return clashes


def _check_ports_and_gpus_free(*, plan: LaunchPlan, recipe: Recipe) -> None:
    """Raise :class:`Conflict` naming every reason ``plan`` cannot deploy on its node now: each
    port an active deployment of another recipe there uses (:func:`_port_clashes`) and each
    process's GPUs such a deployment books (:func:`gpu_conflicts`), joined by ``; `` in that
    order and ending with what to do (``stop that deployment or choose another port and other
    GPUs.``, ``those deployments`` when several hold them). Returns None when nothing clashes."""
    ports = _port_clashes(plan=plan, recipe=recipe)
    gpus = _gpu_clashes(plan=plan, recipe=recipe)
    if not ports and not gpus:
        return
    text = "; ".join(line for line, _ in [*ports, *gpus])
    holders = "that deployment" if len({other.pk for _, other in [*ports, *gpus]}) == 1 else "those deployments"
    choices = []
    if ports:
        choices.append("another port" if len(ports) == 1 else "other ports")
    if gpus:
        choices.append("other GPUs")
    raise Conflict(f"{text[:1].upper()}{text[1:]}; stop {holders} or choose {' and '.join(choices)}.")


def deployment_create(*, recipe: Recipe, user) -> Deployment:
    """Deploy ``recipe``'s current version on its node: insert a ``pending`` deployment and,
    once the transaction commits, send ``deployment_start_task`` to ``node.<name>``.

    The recipe is re-validated and its launch plan rendered first (without secret values), so
    a recipe that no longer fits its node fails here with :class:`InvalidInput` instead of on
    the node. ``spec_snapshot`` keeps the normalised spec of this version and ``recipe_name`` its
    name (what pages and the API show after a rename); ``entry_url`` the URL
    clients use. Works whether or not the node's agent is running: the row waits as pending
    (pages show "waiting for node agent") and can be cancelled with :func:`deployment_stop`.

    Raises :class:`Conflict` (HTTP 409) when the recipe already has an active deployment on
    that node; the partial unique index ``uniq_active_deployment_per_recipe_node`` decides,
    so of two concurrent requests exactly one inserts. Also raises :class:`Conflict` when any
    port of the plan (http, bootstrap, side channel, metrics) is used by an active deployment
    of another recipe on the node (:func:`deployment_ports_in_use`); the node agent checks
    again that each port is free before it spawns. Likewise when any GPU of the plan is booked
    by an active deployment of another recipe on the node (:func:`gpu_conflicts`); one refusal
    names every clashing port and GPU (:func:`_check_ports_and_gpus_free`). The plan's warnings
    (what the dry-run shows) and the CPUs it shares with another deployment
    (:func:`cpu_sharing_warnings`), a missing model file (:func:`model_path_warnings`) and ports
    another process holds on this host (:func:`port_holder_warnings`) are recorded on the new
    deployment's timeline as ``warning`` entries.
    """
    plan = recipe_plan(recipe=recipe)
    normalised = recipe_content_validate(_content_of(recipe))["spec"]
    # Read before the row exists: once it does, the new deployment books its own ports.
    held_ports = port_holder_warnings(plan=plan, recipe=recipe)
    try:
        with transaction.atomic():
            # Serialise deploys per node (PostgreSQL row lock; SQLite serialises writers
            # anyway) so two recipes cannot both pass the port and GPU check below at once.
            Node.objects.select_for_update().filter(pk=recipe.node_id).first()
            _check_ports_and_gpus_free(plan=plan, recipe=recipe)
            deployment = Deployment.objects.create(
                recipe=recipe,
                recipe_version=recipe.version,
                recipe_name=recipe.name,
                spec_snapshot=normalised,
                node=recipe.node,
                status=DeploymentStatus.PENDING,
                entry_url=plan.entry_url,
                created_by=user if getattr(user, "is_authenticated", False) else None,
            )
    except IntegrityError as exc:
        active = (
            Deployment.objects.filter(recipe=recipe, node=recipe.node, status__in=DEPLOYMENT_ACTIVE)
            .values_list("pk", "status")
            .first()
        )
        where = f" (#{active[0]}, {active[1]})" if active else ""
        raise Conflict(
            f"Recipe {json_spelled(recipe.name_shown)} already has an active deployment on node {json_spelled(recipe.node.name)}{where}; "
            "stop it first."
        ) from exc
    with transaction.atomic():
        who = getattr(user, "username", "") or "someone"
        deployment_event_add(
            deployment=deployment, kind="created",
            message=f"{who} deployed {deployment.deployed_recipe_label(version=True)} on node {recipe.node.name}",
        )
        # What the dry-run would have warned about, on the record for whoever deployed without
        # looking (a port in the ephemeral range, GPUs across NUMA nodes, CPUs another deployment
        # pins, ...): a launch that then fails or measures slow has its likely reason next to it.
        for line in [*plan.warnings, *cpu_sharing_warnings(plan=plan, recipe=recipe),
                     *model_path_warnings(spec=recipe.spec, node_name=recipe.node.name, engine=recipe.engine),
                     *held_ports]:
            deployment_event_add(deployment=deployment, kind="warning", message=line)
        from deployments.tasks import deployment_start_task

        _send_to_node(deployment_start_task, deployment)
        deployment_roster_broadcast(deployment_id=deployment.pk, status=deployment.status, node_name=recipe.node.name)
    return deployment


def _cancel_pending(*, deployment: Deployment, who: str, now, cancel: bool = False) -> bool:
    """Cancel ``deployment`` if it is still pending, with one conditional UPDATE (pending →
    stopped, ``stop_requested`` set, ``cancel_requested`` too for a cancel (``cancel``, not a
    stop), reason ``cancelled by alice before it became ready``, naming who asked as one ended
    while starting does; a stop of a pending deployment is a cancel too) and a ``cancelled``
    event; True when it was. A start task that runs later sees
    the terminal row and does nothing. Call inside a transaction."""
    reason = f"cancelled by {who} before it became ready"
    cancelled = Deployment.objects.filter(pk=deployment.pk, status=DeploymentStatus.PENDING).update(
        status=DeploymentStatus.STOPPED, stop_requested=True, reason=reason,
        ended_at=now, updated_at=now, **({"cancel_requested": True} if cancel else {}),
    )
    if cancelled:
        deployment_event_add(deployment=deployment, kind="cancelled", message=f"{who} cancelled before start")
        deployment_roster_broadcast(deployment_id=deployment.pk, status=DeploymentStatus.STOPPED)
    return bool(cancelled)


CANCEL_REQUESTED_TEXT = " cancelled it while starting (never ready); stop requested"
STOP_REQUESTED_TEXT = " requested a stop"


def _stop_requested(*, deployment: Deployment, who: str, cancel: bool = False) -> None:
    """After ``stop_requested`` was set on a starting or ready ``deployment``: add the
    ``stop-requested`` event (``cancel-requested`` for a cancel, which says so) and send
    ``deployment_stop_task`` to the node queue on commit."""
    if cancel:
        deployment_event_add(deployment=deployment, kind="cancel-requested", message=f"{who}{CANCEL_REQUESTED_TEXT}")
    else:
        deployment_event_add(deployment=deployment, kind="stop-requested", message=f"{who}{STOP_REQUESTED_TEXT}")
    from deployments.tasks import deployment_stop_task

    _send_to_node(deployment_stop_task, Deployment.objects.select_related("node").get(pk=deployment.pk))


def stop_requester(*, deployment: Deployment, cancel: bool) -> str | None:
    """Who asked to cancel (``cancel``) or stop ``deployment``: the username (``someone`` for a
    request without one) its latest ``cancel-requested`` or ``stop-requested`` event names, as
    :func:`_stop_requested` wrote it; None when no such request is on its timeline."""
    kind, text = ("cancel-requested", CANCEL_REQUESTED_TEXT) if cancel else ("stop-requested", STOP_REQUESTED_TEXT)
    message = (ProcessEvent.objects.filter(deployment=deployment, kind=kind, process=None)
               .order_by("-at", "-id").values_list("message", flat=True).first())
    if not message or not message.endswith(text) or not message[:-len(text)]:
        return None
    return message[:-len(text)]


def _deployment_reloaded(deployment: Deployment) -> Deployment:
    """``deployment`` as stored now (recipe and node joined); :class:`NotFound` when it is gone."""
    try:
        return Deployment.objects.select_related("recipe", "node").get(pk=deployment.pk)
    except Deployment.DoesNotExist as exc:
        raise NotFound(f"Deployment {deployment.pk} no longer exists.") from exc


def deployment_stop(*, deployment: Deployment, user, requester: str | None = None) -> Deployment:
    """Stop (or cancel) ``deployment``; idempotent. The reason and the timeline name who asked:
    ``user``'s username, else ``requester`` (a command that asks with no user,
    ``"manage.py undeploy"``), else ``someone``.

    * pending: cancelled at once with one conditional UPDATE (pending → stopped, reason
      ``"cancelled by alice before it became ready"``); a start task that runs later sees the
      terminal row and does nothing. Works while the node agent is down.
    * starting or ready: ``stop_requested`` is set (so a launch in progress stops spawning;
      ``cancel_requested`` stays unset: a stop is not a cancel)
      and ``deployment_stop_task`` goes to the node queue; the agent stops the processes
      (router, then decode, then prefill; SIGTERM, the recipe's grace period, then SIGKILL)
      and sets stopped, with reason ``"stopped by alice"`` for one that had been ready.
    * stopping, stopped or failed: nothing changes.

    Returns the refreshed deployment. Raises :class:`NotFound` when the row is gone.
    """
    who = getattr(user, "username", "") or requester or "someone"
    now = timezone.now()
    with transaction.atomic():
        if not _cancel_pending(deployment=deployment, who=who, now=now):
            flagged = Deployment.objects.filter(
                pk=deployment.pk, status__in=[DeploymentStatus.STARTING, DeploymentStatus.READY],
                stop_requested=False,
            ).update(stop_requested=True, updated_at=now)
            if flagged:
                _stop_requested(deployment=deployment, who=who)
    return _deployment_reloaded(deployment)


def deployment_cancellable(deployment: Deployment) -> bool:
    """Whether a cancel acts on ``deployment`` as given: it has not become ready yet, i.e. it is
    ``pending``, or ``starting`` without ever having been ready (a ready deployment restarting a
    process is ``starting`` again, with ``ready_at`` kept: that one is live)."""
    if deployment.status == DeploymentStatus.PENDING:
        return True
    return deployment.status == DeploymentStatus.STARTING and deployment.ready_at is None


def deployment_cancel_refusal(deployment: Deployment) -> str:
    """Why ``deployment`` cannot be cancelled (see :func:`deployment_cancellable`), and what to
    do instead: the ``detail`` of the 409 a refused cancel answers."""
    pk = deployment.pk
    stop = f"Use stop (POST /api/deployments/{pk}/stop/) to stop it."
    rule = "cancel only applies to a deployment that has not become ready yet (pending or starting)."
    if deployment.status == DeploymentStatus.READY:
        return f"Deployment #{pk} is ready; {rule} {stop}"
    if deployment.status == DeploymentStatus.STARTING:
        return f"Deployment #{pk} was ready and is restarting a process; {rule} {stop}"
    return f"Deployment #{pk} is {deployment.status}; {rule} There is nothing to cancel."


def deployment_cancel(*, deployment: Deployment, user) -> Deployment:
    """Cancel ``deployment`` if it has not become ready yet; a live deployment is never touched.

    The state of the row decides, not ``deployment`` as the caller read it: each transition is
    one conditional UPDATE, so a deployment that becomes ready at the same moment is either
    cancelled first or refused, never both.

    * pending: stopped at once, as :func:`deployment_stop` does (works while the node agent is
      down);
    * starting and never ready (``ready_at`` null, no stop requested yet): ``cancel_requested``
      and ``stop_requested`` are set and ``deployment_stop_task`` goes to the node queue. The
      agent marks a deployment ready only while ``stop_requested`` is unset
      (:mod:`deployments.agent`), so a cancel that wins the race stops it before it counts as
      ready;
    * starting, never ready, cancel (or stop) already requested: nothing changes (idempotent).

    Returns the refreshed deployment. Raises :class:`Conflict` (HTTP 409) with
    :func:`deployment_cancel_refusal`'s text for a deployment that is ready, was ready and is
    restarting a process, or is stopping, stopped or failed (judged on the row as stored when
    the UPDATE matched nothing); :class:`NotFound` when the row is gone.
    """
    who = getattr(user, "username", "") or "someone"
    now = timezone.now()
    with transaction.atomic():
        if _cancel_pending(deployment=deployment, who=who, now=now, cancel=True):
            pass
        elif Deployment.objects.filter(
            pk=deployment.pk, status=DeploymentStatus.STARTING, ready_at__isnull=True, stop_requested=False,
        ).update(cancel_requested=True, stop_requested=True, updated_at=now):
            _stop_requested(deployment=deployment, who=who, cancel=True)
        else:
            current = _deployment_reloaded(deployment)
            if not deployment_cancellable(current):
                raise Conflict(deployment_cancel_refusal(current))
    return _deployment_reloaded(deployment)


def deployment_waiting_reason(*, deployment: Deployment, readable: bool = False) -> str:
    """Why a deployment is not moving, for pages and the API; "" when it is not waiting.
    ``readable``: times as the pages show them (``2026-12-06 18:00:44 UTC``) instead of ISO.

    A pending (or stop-requested) deployment whose node agent has not heartbeated within
    ``CEILING_HEARTBEAT_TIMEOUT_S``, or whose agent shut down cleanly since, reads ``"waiting for
    node agent <name> (last heartbeat <ISO time> | never)"`` (``(stopped at <ISO time>; last
    heartbeat ...)`` after a clean shutdown). A starting one (no stop requested) whose agent is
    offline reads ``"waiting for node agent <name> (last heartbeat <ISO time>): nobody watches
    the startup or enforces its 600s startup timeout until the agent is back"``. A starting deployment whose restarted worker waits
    for the router to serve through it reads the agent's words for that (its ``reason``,
    ``waiting for a streamed request through the router to yield a token ...``).
    """
    node = deployment.node

    def iso(value: datetime) -> str:
        return _utc_readable(value) if readable else value.isoformat(timespec="seconds")

    if deployment.status == DeploymentStatus.STARTING and not deployment.stop_requested and not node.agent_online:
        seen = iso(node.agent_heartbeat_at) if node.agent_heartbeat_at else "never"
        timeout = (deployment.spec_snapshot or {}).get("startup_timeout_s")
        limit = f" or enforces its {timeout}s startup timeout" if timeout else ""
        return (f"waiting for node agent {node.name} (last heartbeat {seen}): nobody watches the startup{limit} "
                f"until the agent is back")
    if deployment.status == DeploymentStatus.STARTING and deployment.reason and not deployment.stop_requested:
        return deployment.reason
    waiting = deployment.status == DeploymentStatus.PENDING or (
        deployment.stop_requested and deployment.status in (DeploymentStatus.STARTING, DeploymentStatus.READY)
    )
    if not waiting or node.agent_online:
        return ""
    seen = iso(node.agent_heartbeat_at) if node.agent_heartbeat_at else "never"
    if node.agent_stopped_cleanly:
        return (f"waiting for node agent {node.name} (stopped at "
                f"{iso(node.agent_stopped_at)}; last heartbeat {seen})")
    return f"waiting for node agent {node.name} (last heartbeat {seen})"


def deployment_as_last_seen(*, deployment: Deployment) -> datetime | None:
    """When the stored state of ``deployment`` (its status and its processes' rows) was last
    confirmed, while its node agent is offline (no heartbeat within ``CEILING_HEARTBEAT_TIMEOUT_S``,
    or shut down), for a deployment the agent had taken (starting, ready, stopping): the latest of
    the agent's last heartbeat, its clean shutdown (it watched until then) and the times it wrote
    on this deployment and its processes (taken, ready, spawned, last probed). None when the state
    is live (the agent watches) or there is nothing an agent observed (pending, ended). The rows
    are left as they are: the agent adopts or judges its engines when it comes back.

    The heartbeat alone is not that time: it is written every ``CEILING_AGENT_HEARTBEAT_S``, so
    an agent that takes a deployment a second after its last heartbeat and then stops would
    date the state before the deployment existed ("starting ... as of 10:09:20" for one created
    at 10:09:21). It is never earlier than ``created_at`` either: the agent took the deployment
    after it was created, whatever the agent's host clock says."""
    if deployment.status not in (DeploymentStatus.STARTING, DeploymentStatus.READY, DeploymentStatus.STOPPING):
        return None
    node = deployment.node
    if node.agent_online:
        return None
    written = ServerProcess.objects.filter(deployment=deployment).aggregate(
        probed=Max("last_probe_at"), spawned=Max("started_at"), ready=Max("ready_at"))
    seen = [node.agent_heartbeat_at, node.agent_stopped_at if node.agent_stopped_cleanly else None,
            deployment.started_at, deployment.ready_at, *written.values(), deployment.created_at]
    return max(at for at in seen if at is not None)


def deployment_live(*, deployment: Deployment) -> bool:
    """Whether the stored state of ``deployment`` is live: it has ended (stopped or failed: its
    rows are final), or its node agent is online (heartbeat within
    ``CEILING_HEARTBEAT_TIMEOUT_S``, not shut down since). False for any other deployment of an
    offline or never seen agent, a pending one included: nobody acts on it meanwhile."""
    return deployment.status in (DeploymentStatus.STOPPED, DeploymentStatus.FAILED) or deployment.node.agent_online


def _iso_z(value: datetime) -> str:
    """``2026-12-05T01:49:30Z``: UTC to the second, spelt as the API's times are."""
    return value.astimezone(dt_timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _utc_readable(value: datetime) -> str:
    """``2026-12-06 18:00:44 UTC``: the form the pages show a time in."""
    return value.astimezone(dt_timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def deployment_state_note(*, deployment: Deployment, readable: bool = False) -> str:
    """Why ``deployment`` is not live (:func:`deployment_live`), ``""`` when it is: ``"as last
    seen by node agent <name> at <ISO time>; not live: the agent is offline"`` for one the agent
    had taken (:func:`deployment_as_last_seen`); ``"not live: node agent <name> is offline (never
    seen)"`` when that agent never heartbeated, or ``(last heartbeat <ISO time>)`` for a pending
    deployment of an agent seen before. ``readable``: times as the pages show them
    (``2026-12-06 18:00:44 UTC``) instead of ISO."""
    when = _utc_readable if readable else _iso_z
    if deployment_live(deployment=deployment):
        return ""
    node = deployment.node
    at = deployment_as_last_seen(deployment=deployment)
    if node.agent_heartbeat_at is None:
        return f"not live: node agent {node.name} is offline (never seen)"
    if at is None:
        return (f"not live: node agent {node.name} is offline "
                f"(last heartbeat {when(node.agent_heartbeat_at)})")
    return f"as last seen by node agent {node.name} at {when(at)}; not live: the agent is offline"


def process_log_tail(*, process: ServerProcess, lines: int = 100) -> str:
    """The last ``lines`` lines (1-2000) of ``process``'s log, secrets masked.

    Reads the file on this host (the node and the control plane share a filesystem in the
    embedded setup; elsewhere an absent file gives ""), including the rotated ``.1`` file when
    the tail straddles a rotation, and at most 2 MiB. Only a recorded path inside
    ``settings.CEILING_LOG_DIR`` is read (:func:`deployments.logfiles.log_file`); any other
    gives "". Every stored secret value is read from
    the database first (:func:`controlplane.redaction.stored_secret_values_load`), so the
    tail is masked whichever process serves it and however recently it started.

    Raises:
        InvalidInput: at ``lines`` for a count out of range.
        django.db.DatabaseError: the stored secrets could not be read (nothing is shown then).
        controlplane.redaction.SecretsUnmaskable: a stored secret cannot be decrypted with this
            process's key, so the text could not be masked (nothing is shown then).
    """
    if isinstance(lines, bool) or not isinstance(lines, int) or not 1 <= lines <= LOG_TAIL_MAX_LINES:
        raise InvalidInput({"lines": [f"Must be an integer from 1 to {LOG_TAIL_MAX_LINES}."]})
    path = log_file(process.log_path)
    if path is None:
        return ""
    stored_secret_values_load(strict=True)
    return redact_text(log_tail(path, max_bytes=LOG_TAIL_MAX_BYTES, lines=lines))


def process_log_download(*, process: ServerProcess) -> tuple[str, RedactedLogReader]:
    """The whole log of ``process`` for download: ``(file name, reader)``, the reader yielding
    the rotated part then the current file with every stored secret value masked (the values
    are read from the database before the first byte, so a server started after the engine
    masks them too). The file name is ``deployment-<id>-<role>-<ordinal>.log``.

    Raises:
        NotFound: no log recorded, a recorded path outside ``settings.CEILING_LOG_DIR``, or no
            such file (any more).
        django.db.DatabaseError: the stored secrets could not be read (nothing is served then).
        controlplane.redaction.SecretsUnmaskable: a stored secret cannot be decrypted with this
            process's key, so the log could not be masked (nothing is served then).
    """
    path = log_file(process.log_path)
    parts = log_parts(path) if path is not None else []
    if not parts:
        raise NotFound("No log file for this process.")
    stored_secret_values_load(strict=True)
    return f"deployment-{process.deployment_id}-{process.role}-{process.ordinal}.log", RedactedLogReader(parts)
