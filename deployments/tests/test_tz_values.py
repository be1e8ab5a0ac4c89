"""A role's ``TZ`` is a zone of the IANA tz database (``zoneinfo``, and ``UTC``), the same after
``:``, or a POSIX TZ rule (tzset(3), POSIX.1-2024 XBD 8.3); anything else, which glibc would
silently read as UTC, is refused with the reason and, where a zone name is close, a suggestion."""
from __future__ import annotations

import pytest

from deployments.examples import example_recipe
from deployments.recipes import env_value_problem, posix_tz_problem, tz_value_problem
from deployments.tests.factories import seed_node_create

NEITHER = ("is neither a time zone of the IANA tz database (Europe/Paris, UTC) nor a POSIX TZ rule "
           "(CET-1CEST,M3.5.0,M10.5.0/3): ")


@pytest.mark.parametrize("value", [
    "UTC", "EST5EDT", "Europe/Paris", "Asia/Kolkata", "America/Argentina/Buenos_Aires", ":Europe/Paris", ":UTC",
    "CET-1CEST,M3.5.0,M10.5.0/3", "<+0330>-3:30", "EST5", "UTC0", "IST-5:30", "CET-1CEST", "EST+5EDT,M3.2.0/2,M11.1.0",
    "NZST-12NZDT,J60,J300", "EST5EDT4,M3.2.0/-1:30:15,M11.1.0/26", "<-03>3", "AAA0BBB,0,365/167", "<UTC+14>-14",
])
def test_tz_takes_a_zone_its_file_form_and_posix_rules(value):
    assert tz_value_problem(value) is None
    assert env_value_problem("TZ", value) is None


@pytest.mark.parametrize(("value", "problem"), [
    ("garbage", f"TZ's value 'garbage' {NEITHER}'garbage' has no offset from UTC after its zone abbreviation (EST5: 5 "
                "hours west of Greenwich; CET-1: 1 hour east)"),
    ("x", f"TZ's value 'x' {NEITHER}the standard time zone abbreviation needs 3 or more letters (EST) or angle "
          "brackets (<+0330>), got 'x'"),
    ("   ", "TZ's value '   ' holds white space, which no zone name or POSIX TZ rule has (give one such as "
           "Europe/Paris, UTC or CET-1CEST,M3.5.0,M10.5.0/3)"),
    ("", "TZ's value is empty: give a time zone such as Europe/Paris, UTC or CET-1CEST,M3.5.0,M10.5.0/3, or leave TZ "
         "out for the host's zone"),
    ("$(reboot)", f"TZ's value '$(reboot)' {NEITHER}the standard time zone abbreviation needs 3 or more letters (EST) "
                  "or angle brackets (<+0330>), got '$(reboot)'"),
    ("`id`", f"TZ's value '`id`' {NEITHER}the standard time zone abbreviation needs 3 or more letters (EST) or angle "
             "brackets (<+0330>), got '`id`'"),
    ("Europe/Pariss", "TZ's value 'Europe/Pariss' is not a time zone of the IANA tz database; did you mean "
                      "Europe/Paris?"),
    (":Europe/Pariss", "TZ's value ':Europe/Pariss' names a zone file of the tz database, and 'Europe/Pariss' is not "
                       "a time zone of the IANA tz database; did you mean :Europe/Paris?"),
    (":", "TZ's value ':' names no zone: give one after the ':' (:Europe/Paris), or leave the ':' out"),
    ("utc", f"TZ's value 'utc' {NEITHER}'utc' has no offset from UTC after its zone abbreviation (EST5: 5 hours west "
            "of Greenwich; CET-1: 1 hour east); did you mean UTC?"),
    ("Pariss", f"TZ's value 'Pariss' {NEITHER}'Pariss' has no offset from UTC after its zone abbreviation (EST5: 5 "
               "hours west of Greenwich; CET-1: 1 hour east); did you mean Europe/Paris?"),
    ("Europe/Paris ", "TZ's value 'Europe/Paris ' holds white space, which no zone name or POSIX TZ rule has; did you "
                      "mean Europe/Paris?"),
    ("EST25", f"TZ's value 'EST25' {NEITHER}the offset from UTC after the standard time abbreviation '25' is out of "
              "range (hours 0 to 24, minutes and seconds 0 to 59)"),
    ("EST5,M3.2.0,M11.1.0", f"TZ's value 'EST5,M3.2.0,M11.1.0' {NEITHER}a summer time rule (,start,end) needs the "
                            "summer time abbreviation before it (CET-1CEST,M3.5.0,M10.5.0/3)"),
    ("EST5EDT,M3.2.0", f"TZ's value 'EST5EDT,M3.2.0' {NEITHER}the summer time rule needs its end after a ',' "
                       "(,start,end), got nothing"),
    ("CET-1CEST,M13.5.0,M10.5.0", f"TZ's value 'CET-1CEST,M13.5.0,M10.5.0' {NEITHER}the day 'M13.5.0' is out of "
                                  "range (Jn: 1 to 365, n: 0 to 365, Mm.w.d: month 1 to 12, week 1 to 5, weekday 0 "
                                  "to 6)"),
    ("CET-1CEST,M3.5.0,M10.5.0/168", f"TZ's value 'CET-1CEST,M3.5.0,M10.5.0/168' {NEITHER}the time of day of the "
                                     "summer time end '168' is out of range (hours 0 to 167, minutes and seconds 0 "
                                     "to 59)"),
    ("CET-1CEST,M3.5.0,M10.5.0/3x", f"TZ's value 'CET-1CEST,M3.5.0,M10.5.0/3x' {NEITHER}'x' follows the end of the "
                                    "summer time rule"),
    ("<ab>5", f"TZ's value '<ab>5' {NEITHER}the standard time zone abbreviation '<ab>' needs 3 or more letters, "
              "digits, '+' or '-' between '<' and '>'"),
    ("<+0330-3:30", f"TZ's value '<+0330-3:30' {NEITHER}the standard time zone abbreviation '<+0330-3:30' has no "
                    "closing '>'"),
    ("Nowhere/Atlantis", "TZ's value 'Nowhere/Atlantis' is not a time zone of the IANA tz database (such as "
                         "Europe/Paris or America/New_York)"),
    ("/etc/localtime", "TZ's value '/etc/localtime' is a path: TZ takes a time zone name such as Europe/Paris, never "
                       "a file or folder"),
])
def test_tz_refuses_anything_else_with_the_reason(value, problem):
    assert tz_value_problem(value) == problem
    assert env_value_problem("TZ", value) == problem


def test_a_posix_rule_is_judged_on_its_own():
    assert posix_tz_problem("EST5EDT") is None and posix_tz_problem("<+0330>-3:30") is None
    assert posix_tz_problem("UTC") is not None  # a zone name, not a rule: it has no offset
    assert posix_tz_problem("Europe/Paris") is not None


def _recipe_posted(operator_api, settings, tz):
    """POST /api/recipes/ of the seed PD recipe whose decode role's env is ``{"TZ": tz}``."""
    settings.CEILING_MODEL_ROOTS = ["/models"]
    seed_node_create()
    payload = example_recipe("seed-v4-flash-pd")
    payload["spec"]["roles"]["decode"]["env"] = {"TZ": tz}
    return operator_api.post("/api/recipes/", payload, format="json")


@pytest.mark.parametrize("value", ["garbage", "x", "   ", "", "$(reboot)", "`id`", 0, "localtime"])
def test_a_role_s_tz_is_refused_in_the_api(operator_api, db, settings, value):
    response = _recipe_posted(operator_api, settings, value)

    assert response.status_code == 400, response.json()
    assert list(response.json()) == ["spec.roles.decode.env.TZ"]
    assert response.json()["spec.roles.decode.env.TZ"] == [tz_value_problem(str(value))]


@pytest.mark.parametrize("value", ["EST5EDT", "UTC", "CET-1CEST,M3.5.0,M10.5.0/3", "<+0330>-3:30", ":Europe/Paris"])
def test_a_role_s_tz_is_saved_in_the_api(operator_api, db, settings, value):
    response = _recipe_posted(operator_api, settings, value)

    assert response.status_code == 201, response.json()
    assert response.json()["spec"]["roles"]["decode"]["env"] == {"TZ": value}
