"""Secret redaction shared by every place a person or a log can see text.

Three layers, applied by :func:`redact_text`:

* stored secret values: every value of the secret store (:data:`SECRET_MODEL`) is read from the
  database by whichever process redacts, so a freshly started web server masks the secrets of
  engines started long before it. The read is cached: a save or deletion of a secret in this
  process invalidates the cache at once (model signals), and a change made by another process
  is seen within :data:`STORED_VALUES_MAX_AGE_S`. Places that serve process log text call
  :func:`stored_secret_values_load` first, so they never rely on a stale cache;
* values registered at run time (:func:`register_secret_value`, e.g. a secret the node agent
  has just resolved for a launch), and values this process has just stored, changed or deleted
  (:func:`note_stored_secret_value`), masked before the write commits;
* patterns for well-known token shapes (Hugging Face ``hf_...``, ``Bearer ...``,
  ``token=...``, and the credential formats of :data:`CREDENTIAL_PATTERNS`: OpenAI-style
  ``sk-...``, GitHub ``ghp_...`` / ``github_pat_...``, AWS access key ids ``AKIA...``, Slack
  ``xoxb-...``, PEM private keys) that catch a secret pasted where it should not be.

:func:`credential_find` and :func:`credential_mask` use the same credential formats to refuse
such a value in a recipe (:mod:`deployments.recipes`) and to show a stored one only in a
shortened form (``hf_…(37 chars)``) that never holds the value.

A value is masked in every spelling :func:`value_forms` lists, not only as typed: JSON-escaped,
base64, and line by line for a multi-line value; and each of those spellings in every valid
percent-encoding (:func:`form_pattern`: any character as typed or as ``%XX`` in either hex case, a
space also as ``+``), as in a URL's query or a form body.

Redaction runs on every log tail served, so it avoids scanning the text once per pattern: a value's
patterns run only around ``%XX`` (and ``+``) in the text, all at once, its spelling as typed is
found by substring search, and the token-shaped patterns that name a word start only where the
word is (:func:`_token_matches`). What is masked is exactly what scanning the whole text with
every pattern masks; ``controlplane/scripts/redaction_bench.py`` (``make bench-redaction``) times
both.

A value stays masked after its secret was rotated or deleted: old logs may still hold it. Earlier
values are kept in the database (:data:`RETIRED_MODEL`, written when a secret is changed or
deleted) and read like the current ones, so a process started after the rotation masks them too.
An operator who no longer wants an earlier value masked forgets it (``manage.py
forget_retired_secret_values``, which deletes its row): every process stops masking it at its next
read of the stored values, within :data:`STORED_VALUES_MAX_AGE_S`, except a process that
registered the value itself (:func:`register_secret_value`: a node agent that launched an engine
with it masks it until it restarts) or stored, changed or deleted it in the last
:data:`NOTED_VALUE_KEEP_S` seconds.

Only a value of at least :data:`MIN_VALUE_LENGTH` characters (once stripped) is masked, in any
spelling: a shorter one is too likely to be ordinary text. No secret is stored with a shorter
value any more; one stored before that minimum is still given to its engines, unmasked, and a
warning in the log names its secret.

Stored values are encrypted at rest (:mod:`controlplane.secretbox`) and decrypted here through
:func:`controlplane.secretbox.secret_plaintext`. A value this process cannot decrypt (its key
is not the one the value was stored with) cannot be masked: it is skipped, and an error naming
the secret and the key source is logged once per value and process.
"""
from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import threading
import time
import urllib.parse

from controlplane.errors import CeilingError
from controlplane.jsonsafe import json_spelled

REDACTED = "***redacted***"

#: The model (``app_label.ModelName``) whose ``value`` field holds the stored secrets.
SECRET_MODEL = "deployments.Secret"
#: The model holding earlier values of changed or deleted secrets (``value`` field), masked too.
RETIRED_MODEL = "deployments.RetiredSecretValue"
#: Seconds a read of the stored values is reused before :func:`redact_text` reads them again.
STORED_VALUES_MAX_AGE_S = 2.0
#: Seconds a value this process has just stored, changed or deleted is masked whatever the database
#: read says (:func:`note_stored_secret_value`), longer than the transaction that writes it.
NOTED_VALUE_KEEP_S = 60.0
#: The shortest secret value, in characters once leading and trailing whitespace is left out: the
#: one rule of every place that judges a secret's value. A secret is stored only with at least
#: this many (``deployments.services.secret_value_problem``: the API, the admin form, the
#: services); only a value this long is masked (:func:`value_forms`, :func:`redact_text`) and
#: refused where it is found in free text or a recipe's plain values (:func:`secret_value_found`).
#:
#: Why 8: a shorter value is too likely to be an ordinary word of the text it would be masked in
#: (the log levels ``INFO``, ``DEBUG``, ``ERROR``, ``WARNING``, a TZ rule such as ``EST5EDT``):
#: masking it hides every such word of every log line, and refusing it in a recipe's description
#: refuses ordinary sentences. 8 is what the free-text refusal already used, and the shortest
#: secret a person may choose under NIST SP 800-63B (section 5.1.1.2: "at least 8 characters in
#: length"); the tokens and keys secrets hold are far longer. A value stored before this minimum
#: (it was 4) is still given to the engines that reference it, but neither masked nor looked for:
#: the first read of the stored values in a process logs a warning naming each such secret
#: (:func:`stored_secret_values_load`); give it a new value of this length to have it masked.
MIN_VALUE_LENGTH = 8
# A line of a multi-line value is masked on its own only from this length: a PEM key's base64
# lines are 64 characters, while short lines ("-----END-----", blank) are too common.
MIN_LINE_LENGTH = 16

log = logging.getLogger(__name__)

_lock = threading.Lock()
# Every form masked now: the union of the three below, kept as one set for the patterns.
_known_values: set[str] = set()
# The forms of values registered at run time (:func:`register_secret_value`): masked for the life
# of the process.
_registered_forms: set[str] = set()
# The forms of the values the last complete read of the database found (:func:`stored_secret_values_load`):
# a form that a later read no longer finds (its retired value was forgotten) stops being masked.
_stored_forms: set[str] = set()
# The forms of values this process has just written or deleted (:func:`note_stored_secret_value`), to
# time.monotonic() until which they are kept whatever the database holds: a read from another
# thread before the write commits must not drop them.
_noted_forms: dict[str, float] = {}
# Names of stored secrets whose value is shorter than MIN_VALUE_LENGTH, already warned about.
_short_reported: set[str] = set()
# Tokens of stored values this process could not decrypt and has already logged an error for.
_unreadable_reported: set[str] = set()
# time.monotonic() of the last read (or failed attempt) of the stored values; None = read next time.
_stored_read_at: float | None = None
_local = threading.local()

#: Well-known credential formats, as ``(name, pattern)``. A match is refused in a recipe's plain
#: fields and masked wherever text is shown.
CREDENTIAL_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    # Each starts with its fixed prefix and only then looks behind it (the same condition as a
    # look-behind in front), so the regex engine skips ahead to the prefix instead of trying every
    # position of the text.
    ("Hugging Face token", re.compile(r"hf_(?<![A-Za-z0-9]hf_)[A-Za-z0-9]{30,}")),
    ("GitHub token", re.compile(r"github_pat_(?<![A-Za-z0-9_]github_pat_)[A-Za-z0-9_]{20,}")),
    ("GitHub token", re.compile(r"gh[pousr]_(?<![A-Za-z0-9_]gh[pousr]_)[A-Za-z0-9]{20,}")),
    ("OpenAI-style API key", re.compile(r"sk-(?<![A-Za-z0-9_-]sk-)[A-Za-z0-9_-]{20,}")),
    ("AWS access key id", re.compile(r"AKIA(?<![A-Za-z0-9]AKIA)[0-9A-Z]{16}(?![A-Za-z0-9])")),
    ("Slack token", re.compile(r"xox[baprs]-(?<![A-Za-z0-9]xox[baprs]-)[A-Za-z0-9-]{10,}")),
    # The whole block when its end is in the text, else the BEGIN line and the base64 lines after it.
    ("PEM private key", re.compile(r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----"
                                   r"(?:[\s\S]*?-----END[A-Z0-9 ]*PRIVATE KEY-----|[^\n]*(?:\r?\n[A-Za-z0-9+/=]{16,})*)")),
]
# The fixed prefixes of the credential formats, the visible head of a shortened credential.
_CREDENTIAL_HEADS = r"hf_|github_pat_|gh[pousr]_|sk-|AKIA|xox[baprs]-|-----BEGIN"
_CREDENTIAL_HEAD = re.compile(rf"^(?:{_CREDENTIAL_HEADS})")
#: What is shown in place of a secret: :data:`REDACTED` for a stored secret's value, or a
#: shortened credential (:func:`credential_shortened`, ``hf_…(37 chars)``). A recipe form or an
#: API read sent back unchanged carries it; recipe validation refuses it in a plain value, so it
#: never becomes what an engine is given.
PLACEHOLDER_RE = re.compile(rf"{re.escape(REDACTED)}|(?:{_CREDENTIAL_HEADS})?…\(\d+ chars\)")


def credential_shortened(token: str) -> str:
    """``token`` as it may be shown: its format's prefix and its length only, e.g.
    ``hf_…(37 chars)``, never any part of the secret itself."""
    head = _CREDENTIAL_HEAD.match(token)
    return f"{head.group(0) if head else ''}…({len(token)} chars)"


def credential_kind_said(kind: str) -> str:
    """``kind`` (a format name of :data:`CREDENTIAL_PATTERNS`) with its indefinite article, as the
    messages say it: ``a Hugging Face token``, ``an OpenAI-style API key``, ``an AWS access key id``.
    Every name there starts with a consonant sound unless its first letter is a vowel (AWS is said
    letter by letter, "ay"), so the first letter decides."""
    return f"{'an' if kind[:1] in 'AEIOU' else 'a'} {kind}"


def credential_find(text: str) -> tuple[str, str] | None:
    """The first well-known credential format (:data:`CREDENTIAL_PATTERNS`) in ``text``, as
    ``(format name, shortened form)``, or None."""
    if not isinstance(text, str):
        return None
    for name, pattern in CREDENTIAL_PATTERNS:
        match = pattern.search(text)
        if match:
            return name, credential_shortened(match.group(0))
    return None


def credential_mask(text: str) -> str:
    """``text`` with every well-known credential replaced by its shortened form
    (:func:`credential_shortened`); nothing else changes."""
    if not isinstance(text, str) or not text:
        return text
    for _name, pattern in CREDENTIAL_PATTERNS:
        text = pattern.sub(lambda m: credential_shortened(m.group(0)), text)
    return text


def credential_mask_json(value):
    """A copy of the JSON ``value`` (a recipe spec) with :func:`credential_mask` and
    :func:`secret_values_mask` applied to every string, keys included: how a stored spec holding
    a pasted credential or a stored secret's value (saved before such values were refused) is
    shown."""
    if isinstance(value, str):
        return secret_values_mask(credential_mask(value))
    if isinstance(value, dict):
        return {credential_mask(k) if isinstance(k, str) else k: credential_mask_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [credential_mask_json(v) for v in value]
    return value


# Hugging Face access tokens: ``hf_`` and a run of letters and digits, or a run that also holds
# ``_`` or ``-`` and then must hold an upper-case letter or a digit, so snake_case vocabulary such
# as ``hf_quantization_config`` in an engine's argument dump is left alone. ``(?<!\whf_)`` after
# the prefix is ``\b`` before it.
_HF_TOKEN_PATTERNS = [
    re.compile(r"hf_(?<!\whf_)(?=[A-Za-z0-9_-]*[A-Z0-9])[A-Za-z0-9_-]{16,}"),
    re.compile(r"hf_(?<!\whf_)[A-Za-z0-9]{16,}\b"),
]
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
# A key name standing alone (``token=...``, ``HF_TOKEN: ...``, ``api-key ...``), not the tail of a
# longer identifier: ``eos_token: <|endoftext|>`` in an engine log is vocabulary, not a secret.
# Environment-style names (upper case) ending in a secret word: HF_TOKEN=, DB_PASSWORD=.
_ENV_KEY = re.compile(r"(\b[A-Z0-9_]*(?:TOKEN|PASSWORD|SECRET|API_KEY)\s*[=:]\s*)[^\s,;'\"]{4,}")
_ENV_KEY_WORDS = ("TOKEN", "PASSWORD", "SECRET", "API_KEY")
_ENV_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_ANY_KEY = re.compile(r"(?i)(\b(?:(?:hf|access|auth|api)[_-])?(?:api[_-]?key|token|password|secret)\s*[=:]\s*)[^\s,;'\"]{4,}")
# Lower-case words one of which every match of _ANY_KEY holds, at most _ANY_KEY_REACH characters
# after the match's start (``access_`` and ``api_`` before ``key``).
_ANY_KEY_WORDS = ("key", "token", "password", "secret")
_ANY_KEY_REACH = 11
_ASCII_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")

#: Every token-shaped pattern :func:`redact_text` masks. The last three are case-insensitive or
#: start with a word boundary, which the regex engine can only try at every position of the text:
#: :func:`_token_matches` finds their matches from the positions of the words they hold instead.
_PATTERNS = [
    *(pattern for _name, pattern in CREDENTIAL_PATTERNS),
    *_HF_TOKEN_PATTERNS,
    _BEARER,
    _ENV_KEY,
    _ANY_KEY,
]


def _finds(text: str, word: str):
    """Every start of ``word`` in ``text``, overlapping ones included."""
    at = text.find(word)
    while at != -1:
        yield at
        at = text.find(word, at + 1)


def _lowered(text: str) -> str | None:
    """``text`` lower-cased character by character, for finding ASCII words as a case-insensitive
    pattern would; None when that cannot be done position for position (a character that
    lower-cases to two) or would miss a match (``ſ`` and ``ı`` match ``s`` and ``i`` under
    ``(?i)`` but stay as they are)."""
    lowered = text.lower()
    if len(lowered) != len(text) or (not text.isascii() and ("\u017f" in text or "\u0131" in text)):
        return None
    return lowered


def _matches_from(pattern: re.Pattern[str], text: str, starts) -> list[re.Match[str]]:
    """What ``pattern.finditer(text)`` yields, given (sorted) every position a match can start at
    and possibly more: the first match at or after the end of the previous one, in turn."""
    found, pos = [], 0
    for start in starts:
        if start < pos:
            continue
        m = pattern.match(text, start)
        if m:
            found.append(m)
            pos = max(m.end(), start + 1)
    return found


def _env_key_starts(text: str) -> list[int]:
    """Every position a match of :data:`_ENV_KEY` can start at: for each secret word, the start of
    the run of upper-case letters, digits and ``_`` it ends (one position per run), where a word
    boundary can be."""
    words = sorted({at for word in _ENV_KEY_WORDS for at in _finds(text, word)})
    starts: set[int] = set()
    prev_at, prev_start = -1, -1
    for at in words:
        begin = at
        while begin > 0 and begin != prev_at and text[begin - 1] in _ENV_NAME_CHARS:
            begin -= 1
        start = prev_start if begin == prev_at else begin
        prev_at, prev_start = at, start
        if start == 0 or text[start - 1] not in _ASCII_WORD_CHARS:
            starts.add(start)
    return sorted(starts)


def _any_key_starts(text: str, lowered: str) -> list[int]:
    """Every position a match of :data:`_ANY_KEY` can start at: the word-boundary positions at
    most :data:`_ANY_KEY_REACH` characters before one of :data:`_ANY_KEY_WORDS`."""
    starts: set[int] = set()
    for word in _ANY_KEY_WORDS:
        for at in _finds(lowered, word):
            for start in range(max(0, at - _ANY_KEY_REACH), at + 1):
                if lowered[start] in "hatps" and (start == 0 or text[start - 1] not in _ASCII_WORD_CHARS):
                    starts.add(start)
    return sorted(starts)


def _token_matches(text: str) -> list[re.Match[str]]:
    """The matches of every pattern of :data:`_PATTERNS` in ``text``: exactly those of each
    pattern's ``finditer``, found faster for the patterns that name a word."""
    found: list[re.Match[str]] = []
    for pattern in (*(pattern for _name, pattern in CREDENTIAL_PATTERNS), *_HF_TOKEN_PATTERNS):
        found += pattern.finditer(text)
    found += _matches_from(_ENV_KEY, text, _env_key_starts(text))
    lowered = _lowered(text)
    if lowered is None:
        found += _BEARER.finditer(text)
        found += _ANY_KEY.finditer(text)
    else:
        found += _matches_from(_BEARER, text, _finds(lowered, "bearer"))
        found += _matches_from(_ANY_KEY, text, _any_key_starts(text, lowered))
    return found


def value_forms(value: str) -> set[str]:
    """The spellings of one secret ``value`` that text may carry, each masked like the value:

    * the value itself, and stripped of surrounding whitespace (a log shows it without the pasted
      newline);
    * percent-encoded (``urllib.parse.quote`` with nothing safe, and ``quote_plus``), as in a URL's
      query (``?token=a%2Fb``) or a form body; :func:`redact_text` also masks every other
      percent-encoding of each form (:func:`form_pattern`), these two are listed for callers that
      replace forms literally;
    * JSON-escaped (the inside of ``json.dumps(value)``), as in a JSON log line or an API dump;
      :func:`redact_text` also masks each slash of a form written ``\\/`` (:func:`form_pattern`),
      as encoders other than Python's escape it;
    * base64 (standard and URL-safe alphabet, with and without ``=`` padding), as in a
      ``Basic`` header or a Kubernetes secret;
    * each line of a multi-line value (a PEM key) of at least :data:`MIN_LINE_LENGTH` characters,
      as a log that prints it line by line shows it.

    A value shorter than :data:`MIN_VALUE_LENGTH` characters once stripped is not masked in any
    form (too likely to be ordinary text), nor is a shorter form of a longer value. Returns an
    empty set for such a value and for one that is not a ``str``."""
    if not isinstance(value, str) or len(value.strip()) < MIN_VALUE_LENGTH:
        return set()
    forms = {value, value.strip()}
    core = value.strip()
    forms.add(urllib.parse.quote(core, safe=""))
    forms.add(urllib.parse.quote_plus(core, safe=""))
    forms.add(json.dumps(core)[1:-1])
    raw = core.encode("utf-8")
    for encoded in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        text = encoded.decode("ascii")
        forms.update({text, text.rstrip("=")})
    lines = [line.strip() for line in core.splitlines()]
    if len(lines) > 1:
        forms.update(line for line in lines if len(line) >= MIN_LINE_LENGTH)
    return {form for form in forms if len(form) >= MIN_VALUE_LENGTH}


def register_secret_value(value: str) -> None:
    """Remember ``value`` so every later :func:`redact_text` in this process masks it, in every
    spelling :func:`value_forms` lists, for the life of the process (values shorter than
    :data:`MIN_VALUE_LENGTH` characters are ignored): for a value this process uses, such as a
    secret the node agent has just resolved for a launch."""
    forms = value_forms(value)
    if not forms:
        return
    with _lock:
        _registered_forms.update(forms)
        _known_values.update(forms)


def note_stored_secret_value(value: str) -> None:
    """Mask ``value``, a secret value this process has just stored, changed or deleted, at once
    and for :data:`NOTED_VALUE_KEEP_S` seconds whatever the database says; after that it is masked
    as long as the database holds it (a secret's value, or a retired value until
    ``manage.py forget_retired_secret_values`` forgets it), as every other process masks it."""
    forms = value_forms(value)
    if not forms:
        return
    until = time.monotonic() + NOTED_VALUE_KEEP_S
    with _lock:
        for form in forms:
            _noted_forms[form] = until
        _known_values.update(forms)


def _stored_forms_replace(forms: set[str]) -> None:
    """Make ``forms`` (every form of every value a complete read of the database found) the
    stored ones: each form an earlier read found, or noted longer ago than
    :data:`NOTED_VALUE_KEEP_S` (:func:`note_stored_secret_value`), that this read does not find
    stops being masked, unless it was registered (:func:`register_secret_value`) or noted since."""
    global _stored_forms
    now = time.monotonic()
    with _lock:
        expired = {f for f, until in _noted_forms.items() if until <= now}
        for form in expired:
            del _noted_forms[form]
        gone = (_stored_forms | expired) - forms - _registered_forms - _noted_forms.keys()
        _known_values.difference_update(gone)
        _known_values.update(forms)
        _stored_forms = set(forms)


def _char_pattern(char: str) -> str:
    """The regex for one character of a form: as typed, or each of its UTF-8 bytes as ``%XX`` with
    either hex case (browsers and curl differ: ``%2f`` and ``%2F`` are the same byte), and a space
    also as ``+`` (a form body)."""
    return "(?:" + "|".join(_char_alternatives(char)) + ")"


def _char_alternatives(char: str) -> list[str]:
    """The regexes of :func:`_char_pattern`, one per spelling; each starts with a literal
    character. A slash is also matched as ``\\/`` (its JSON escape), in any percent-encoding."""
    hexed = "".join(f"%{b >> 4:X}{b & 15:X}" for b in char.encode("utf-8", "surrogatepass"))
    encoded = re.sub(r"[A-F]", lambda m: f"[{m.group(0)}{m.group(0).lower()}]", hexed)
    # ``\/`` is how JSON may escape a slash (``json.dumps`` does not, other encoders do): the
    # JSON-escaped spelling of a value holding one.
    if char == "/":
        # either character of the escape may itself be percent-encoded (``%5C%2F``)
        return [re.escape(char), encoded, r"\\(?:/|%2[Ff])", r"%5[Cc](?:/|%2[Ff])"]
    return [re.escape(char), encoded] + ([r"\+"] if char == " " else [])


def form_pattern(form: str, *, padded: bool = False) -> re.Pattern[str]:
    """A compiled regex matching ``form`` in every valid percent-encoding: each character as typed
    or as its percent-encoded UTF-8 bytes (either hex case), a space also as ``+``, a slash also
    as its JSON escape ``\\/``. So ``a b/c``
    matches ``a b/c``, ``a%20b%2Fc``, ``a+b%2fc`` and ``a%20b/c`` (only the space encoded, as curl
    and browsers send it). With ``padded`` the match also takes up to two ``=`` after the form
    (base64 padding), so one pattern serves a base64 form with and without its padding."""
    padding = _char_pattern("=") + "{0,2}" if padded else ""
    return re.compile("".join(_char_pattern(char) for char in form) + padding)


def _forms_kept(forms: frozenset[str]) -> list[tuple[str, bool]]:
    """The forms that need a pattern of their own, longest first, each with whether its pattern
    takes base64 padding. A form is left out when another form's pattern matches it already: a
    percent-encoding of another form (``quote(value)``), or a padded base64 form whose unpadded one
    is also known (that one's pattern takes the padding). Each pattern costs a scan, so fewer is
    faster."""
    def covered(form: str) -> bool:
        decoded = urllib.parse.unquote_plus(form)
        return (decoded != form and decoded in forms) or (form.endswith("=") and form.rstrip("=") in forms)

    kept = sorted((f for f in forms if f and not covered(f)), key=lambda f: (-len(f), f))
    return [(f, any(f + pad in forms for pad in ("=", "=="))) for f in kept]


def _patterns_for(forms: frozenset[str]) -> list[re.Pattern[str]]:
    """The :func:`form_pattern` of each of ``forms`` that needs one (:func:`_forms_kept`)."""
    return [form_pattern(f, padded=padded) for f, padded in _forms_kept(forms)]


# Where a spelling of a form other than the form itself can differ from it: a percent-encoded
# byte, ``+`` for a space, and ``\/`` for a slash (added where a form holds one).
_PERCENT_BYTE = re.compile(r"%[0-9A-Fa-f]{2}")
_PERCENT_BYTE_OR_PLUS = re.compile(r"%[0-9A-Fa-f]{2}|\+")


class _KnownPatterns:
    """The compiled patterns of a set of forms, and what :func:`_value_spans` needs to run them
    only where they can match.

    A match of a form's pattern is either the form as typed (with any padding), found by a plain
    substring search, or holds at least one percent-encoded byte (or ``+`` for a space): it then
    lies within :attr:`reach` characters of that spot, and the pattern runs only on the text
    around such spots (:attr:`spots`). Log text seldom holds them, so most text is never scanned
    by a pattern at all."""

    def __init__(self, forms: frozenset[str]):
        self.forms = forms
        kept = _forms_kept(forms)
        self.kept = [(f, form_pattern(f, padded=padded)) for f, padded in kept]
        # One pattern finding where any of them matches, written as one alternative per spelling
        # of each form's first character so that every alternative starts with a literal: the
        # regex engine then rejects most alternatives at a position by that character alone, and
        # one scan costs a fraction of one scan per form.
        self.any = re.compile("|".join(
            first + "".join(_char_pattern(c) for c in f[1:]) + (_char_pattern("=") + "{0,2}" if padded else "")
            for f, padded in kept for first in _char_alternatives(f[0])
        )) if kept else None
        self.spots = _PERCENT_BYTE_OR_PLUS if any(" " in f for f, _p in self.kept) else _PERCENT_BYTE
        if any("/" in f for f, _p in self.kept):
            self.spots = re.compile(self.spots.pattern + r"|\\/")
        # The longest text one pattern can match: each character as its percent-encoded bytes (a
        # slash as ``%5C%2F``), and two ``%3D`` of padding.
        self.reach = max((sum(6 if c == "/" else 3 * len(c.encode("utf-8", "surrogatepass")) for c in f) + 6
                          for f, _p in self.kept),
                         default=0)


# The patterns of the last redaction: compiled again only when the forms change.
_patterns_cache = _KnownPatterns(frozenset())


def _known_patterns() -> _KnownPatterns:
    """The patterns of every known form (:data:`_known_values`), from the cache when the forms are
    those it was built for. Every form is at least :data:`MIN_VALUE_LENGTH` characters
    (:func:`value_forms`), so log redaction and the refusals of free text look for the same."""
    global _patterns_cache
    with _lock:
        forms = frozenset(_known_values)
    known = _patterns_cache
    if known.forms != forms:
        known = _patterns_cache = _KnownPatterns(forms)
    return known


def _value_spans(text: str, known: _KnownPatterns) -> list[tuple[int, int]]:
    """The span of every match of every pattern of ``known`` in ``text``, at every position one
    starts at (overlapping occurrences, ``aaaa`` twice in ``aaaaa``, are all found): the same
    spans as searching the whole text with each pattern, found as :class:`_KnownPatterns` says."""
    spans: list[tuple[int, int]] = []
    if not known.kept:
        return spans
    for form, pattern in known.kept:
        for at in _finds(text, form):
            m = pattern.match(text, at)
            if m:
                spans.append(m.span())
    windows: list[list[int]] = []
    for spot in known.spots.finditer(text):
        lo, hi = max(0, spot.start() - known.reach), min(len(text), spot.end() + known.reach)
        if windows and lo <= windows[-1][1]:
            windows[-1][1] = hi
        else:
            windows.append([lo, hi])
    for lo, hi in windows:
        # every position where some pattern matches, then each pattern's match there; search on
        # from the character after that position, not after the match's end: overlapping
        # occurrences (``aaaa`` twice in ``aaaaa``) are all masked
        found = known.any.search(text, lo, hi)
        while found:
            at = found.start()
            for _form, pattern in known.kept:
                m = pattern.match(text, at, hi)
                if m:
                    spans.append(m.span())
            found = known.any.search(text, at + 1, hi)
    return spans


class SecretsUnmaskable(CeilingError):
    """Text that may hold secret values cannot be served because a stored value cannot be
    decrypted by this process (so nothing could mask it): HTTP 503. ``names`` lists the
    secrets."""

    code = "secrets_unmaskable"
    http_status = 503

    def __init__(self, names: list[str]):
        self.names = sorted(set(names))
        super().__init__(
            "not shown: the stored value of secret(s) " + ", ".join(json_spelled(n) for n in self.names)
            + " cannot be decrypted with this server's secrets key (CEILING_SECRETS_KEY or its key file), "
            "so it could not be masked; run the server with the key the secrets were stored with"
        )


def stored_secret_values_load(*, strict: bool = False) -> int:
    """Read every stored secret value (``value`` of :data:`SECRET_MODEL` and of
    :data:`RETIRED_MODEL`) from the database, decrypt it
    (:func:`controlplane.secretbox.secret_plaintext`) and mask it from now on. A value an earlier read
    found and this one does not (a retired value forgotten since) stops being masked, unless it was
    registered (:func:`register_secret_value`) or noted a moment ago (:func:`note_stored_secret_value`);
    nothing stops being masked after a read that met a value it could not decrypt. A secret whose
    value is shorter than :data:`MIN_VALUE_LENGTH` (stored before that minimum) is not masked, and
    a warning naming it is logged once per process. Returns how many values were read and decrypted.

    Inside a transaction the read runs in a savepoint, so a failed read leaves the caller's
    transaction usable. A value that cannot be decrypted is skipped (nothing could mask it) and
    logged once per process as an error naming the secret and the key source. With ``strict``
    (callers about to serve engine output, which may hold the value: log tails and downloads)
    it then raises :class:`SecretsUnmaskable` instead of returning, so such text is never served
    unmasked; otherwise the read does not fail on it.

    Raises:
        LookupError: the secret model is not installed (``django.apps`` lookup).
        django.core.exceptions.AppRegistryNotReady: Django's apps are not loaded yet.
        django.db.DatabaseError: the database could not be read.
        django.core.exceptions.SynchronousOnlyOperation: called from a running event loop.
    """
    global _stored_read_at
    from django.apps import apps
    from django.db import connections, router, transaction

    from controlplane.secretbox import SecretUnreadable, secret_plaintext

    rows: list[tuple[str, object, bool]] = []
    for label in (SECRET_MODEL, RETIRED_MODEL):
        model = apps.get_model(label)
        alias = router.db_for_read(model)
        query = model._default_manager.using(alias).values_list("name", "value")
        if connections[alias].in_atomic_block:
            with transaction.atomic(using=alias):
                found = list(query)
        else:
            # No transaction of our own outside one: with SQLite's IMMEDIATE mode it would take
            # the write lock for a read.
            found = list(query)
        rows += [(name, value, label == SECRET_MODEL) for name, value in found]
    read = 0
    forms: set[str] = set()
    short: list[str] = []
    unreadable: list[SecretUnreadable] = []
    unreadable_names: list[str] = []
    for name, value, current in rows:
        try:
            plain = secret_plaintext(value, name=name)
            read += 1
        except SecretUnreadable as exc:
            unreadable_names.append(name)
            token = getattr(value, "token", "")
            with _lock:
                if token in _unreadable_reported:
                    continue
                _unreadable_reported.add(token)
            unreadable.append(exc)
            continue
        forms |= value_forms(plain)
        if current and isinstance(plain, str) and plain and len(plain.strip()) < MIN_VALUE_LENGTH:
            with _lock:
                if name not in _short_reported:
                    _short_reported.add(name)
                    short.append(name)
    if unreadable_names:
        # A value this process cannot open is not known to be gone: forget nothing this time.
        with _lock:
            _known_values.update(forms)
            _stored_forms.update(forms)
    else:
        _stored_forms_replace(forms)
    with _lock:
        _stored_read_at = time.monotonic()
    # Logged only once the read is recorded: the log filter redacts, and must not read again.
    for exc in unreadable:
        log.error("redaction cannot mask a stored value: %s", exc.errors["secrets"][0])
    for name in short:
        log.warning("secret %s has a value shorter than %d characters, stored before that minimum: engines are "
                    "still given it, but it is not masked in logs nor refused in recipes; give the secret a new "
                    "value of at least %d characters", json_spelled(name), MIN_VALUE_LENGTH, MIN_VALUE_LENGTH)
    if strict and unreadable_names:
        raise SecretsUnmaskable(unreadable_names)
    return read


def stored_secret_values_invalidate() -> None:
    """Make the next :func:`redact_text` read the stored values again."""
    global _stored_read_at
    with _lock:
        _stored_read_at = None


def _stored_values_refresh() -> None:
    """Read the stored values when the last read is older than :data:`STORED_VALUES_MAX_AGE_S`.

    Never raises and never blocks an event loop: inside one, while the apps are not loaded, or
    when the read itself logs (this module redacts log records), the cached values are used;
    a failed read is retried after the same age."""
    global _stored_read_at
    with _lock:
        read_at = _stored_read_at
    now = time.monotonic()
    if read_at is not None and now - read_at < STORED_VALUES_MAX_AGE_S:
        return
    if getattr(_local, "reading", False):
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return
    try:
        from django.apps import apps

        if not apps.ready:
            return
    except Exception:  # noqa: BLE001 - Django not configured: registered values and patterns only
        return
    _local.reading = True
    try:
        stored_secret_values_load()
    except Exception:  # noqa: BLE001 - keep masking what is known; retried after the max age
        with _lock:
            _stored_read_at = now
    finally:
        _local.reading = False


def _on_secret_change(sender, instance, **kwargs) -> None:
    # The value of a saved or deleted secret is masked at once (a deleted secret's value may still
    # be in old logs, and is kept as a retired value); the cache is re-read on the next redaction.
    from controlplane.secretbox import SecretUnreadable, secret_plaintext

    try:
        note_stored_secret_value(secret_plaintext(getattr(instance, "value", None), name=getattr(instance, "name", "")))
    except SecretUnreadable:
        pass  # the re-read below logs it; a save or delete must not fail on it
    stored_secret_values_invalidate()


def _connect_signals() -> None:
    from django.db.models.signals import post_delete, post_save

    for name, signal in (("save", post_save), ("delete", post_delete)):
        signal.connect(_on_secret_change, sender=SECRET_MODEL, weak=False, dispatch_uid=f"controlplane.redaction.{name}")


try:
    _connect_signals()
except Exception:  # noqa: BLE001 - used without Django: the max-age re-read still applies
    pass


def _spans_masked(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each of ``spans`` replaced by :data:`REDACTED`, overlapping or touching spans
    as one."""
    if not spans:
        return text
    spans.sort()
    out, at, (lo, hi) = [], 0, spans[0]
    for begin, end in spans[1:]:
        if begin <= hi:
            hi = max(hi, end)
            continue
        out += [text[at:lo], REDACTED]
        at, lo, hi = hi, begin, end
    out += [text[at:lo], REDACTED, text[hi:]]
    return "".join(out)


def secret_values_mask(text: str) -> str:
    """``text`` with stored and registered secret values masked as :data:`REDACTED`, in every
    spelling :func:`redact_text` finds them in, and nothing else changed (no token-shaped
    pattern): for text a person wrote, such as a recipe's plain values."""
    if not isinstance(text, str) or not text:
        return text
    _stored_values_refresh()
    return _spans_masked(text, _value_spans(text, _known_patterns()))


def redact_text(text: str) -> str:
    """Return ``text`` with stored and registered secret values and token-shaped substrings
    masked as :data:`REDACTED`. A value is found in each of its :func:`value_forms`, each in any
    percent-encoding (:func:`form_pattern`). Every match is found in the text as given, and overlapping or
    touching matches are masked as one: a stored value that is part of a longer token-shaped
    string (``hf_…2345`` inside ``hf_…23456789``) masks the whole token, never leaving its tail
    shown, and a token-shaped part of a stored value masks the whole value. A pattern with a group
    keeps that group (``Bearer ``) and masks what follows it."""
    if not text:
        return text
    return _spans_masked(text, _redaction_spans(text)[0])


def _redaction_spans(text: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """What :func:`redact_text` masks in ``text``: the spans it replaces, and the span of each
    whole match they come from (a pattern's kept group, ``Bearer `` or ``TOKEN=``, included),
    which a text cut in pieces must not be cut inside (:class:`RedactingStream`)."""
    _stored_values_refresh()
    spans = _value_spans(text, _known_patterns())
    matches = list(spans)
    for m in _token_matches(text):
        begin = m.end(1) if m.re.groups else m.start()
        if m.end() > begin:
            spans.append((begin, m.end()))
            matches.append((m.start(), m.end()))
    return spans, matches


#: Characters a :class:`RedactingStream` holds back after the place it cuts its text at, at least:
#: enough for every token-shaped pattern to see a token that starts before the cut (the longest
#: prefix any needs is far shorter) and for a PEM key's block to be found from its BEGIN line.
STREAM_LOOKAHEAD = 4096
#: The most text a :class:`RedactingStream` holds while one match runs on past it (a token
#: longer than this, with no end in sight, is masked as far as seen and the stream moves on).
STREAM_HOLD_MAX = 1024 * 1024


class RedactingStream:
    """:func:`redact_text` of a text that arrives in pieces (a log file read chunk by chunk, its
    rotated part and then the current one), masking what masking the whole text at once masks,
    whichever way the pieces cut it: a secret split between two reads or two files is masked.

    :meth:`feed` takes the next piece and returns the masked text that can be given out now,
    :meth:`end` the rest once there is no more. What is given out ends at a line end where there
    is one (lines are masked whole), never inside a match, and at least :data:`STREAM_LOOKAHEAD`
    characters (or the reach of the longest spelling of a stored value, when longer) before the
    end of what has arrived, so a secret that starts before the cut is seen whole before anything
    of it is given out. At most about :data:`STREAM_HOLD_MAX` characters are held."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, text: str) -> str:
        """Take ``text`` (the next piece) and return what can be given out, masked (maybe "")."""
        self._held += text
        held = self._held
        limit = len(held) - max(STREAM_LOOKAHEAD, _known_patterns().reach)
        if limit <= 0:
            return ""
        line_end = held.rfind("\n", 0, limit)
        cut = line_end + 1 if line_end >= 0 else limit
        masked, matches = _redaction_spans(held)
        for begin, end in _spans_merged(matches):
            if begin < cut < end:
                # the whole match waits for the next round; one that started at the front and
                # still runs on past what may be held is given out masked as far as it goes
                cut = begin if begin > 0 or len(held) <= STREAM_HOLD_MAX else end
                break
        if cut == 0:
            return ""
        self._held = held[cut:]
        return _spans_masked(held[:cut], [(b, e) for b, e in masked if e <= cut])

    def end(self) -> str:
        """Everything still held, masked: the text is over."""
        held, self._held = self._held, ""
        return redact_text(held)


def _spans_merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` sorted, overlapping or touching ones joined."""
    merged: list[list[int]] = []
    for begin, end in sorted(spans):
        if merged and begin <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([begin, end])
    return [(b, e) for b, e in merged]


# The patterns of each given value's spellings (:func:`secret_value_found`), by those spellings.
_given_patterns_cache: dict[frozenset[str], _KnownPatterns] = {}


def _given_patterns(value: str) -> _KnownPatterns:
    """The patterns of the spellings of ``value`` that :func:`secret_values_mask` masks: its
    :func:`value_forms` (none for a value shorter than :data:`MIN_VALUE_LENGTH`)."""
    forms = frozenset(value_forms(value))
    known = _given_patterns_cache.get(forms)
    if known is None:
        if len(_given_patterns_cache) > 256:
            _given_patterns_cache.clear()
        known = _given_patterns_cache[forms] = _KnownPatterns(forms)
    return known


def secret_value_found(text: str, value: str) -> bool:
    """Whether ``text`` holds ``value`` (a secret's value) in a spelling :func:`secret_values_mask`
    masks: the value as typed, base64, JSON-escaped, any percent-encoding of these, ...; never for a
    value shorter than :data:`MIN_VALUE_LENGTH` characters, which is not masked either. What a
    write refuses, so that text a page would show masked is never accepted."""
    if not isinstance(text, str) or not text or not isinstance(value, str):
        return False
    return bool(_value_spans(text, _given_patterns(value)))


def secret_value_masked(text: str, values) -> str:
    """``text`` with every spelling :func:`secret_value_found` finds of each of ``values``
    replaced by :data:`REDACTED`: what a refusal message shows in place of what was typed."""
    if not isinstance(text, str) or not text:
        return text
    spans: list[tuple[int, int]] = []
    for value in values:
        if isinstance(value, str):
            spans += _value_spans(text, _given_patterns(value))
    return _spans_masked(text, spans)
