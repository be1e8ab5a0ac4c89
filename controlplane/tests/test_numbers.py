"""controlplane.numbers: a whole number typed into a request is read only when int() can read it
and it fits a 64-bit integer column; a longer one is never handed to int()."""
from __future__ import annotations

import pytest

from controlplane.numbers import MAX_DIGITS, number_shown, too_many_digits, whole_number


@pytest.mark.parametrize("text, number", [
    ("0", 0), ("7", 7), ("007", 7), ("9" * MAX_DIGITS, int("9" * MAX_DIGITS)),
    ("0" * 5000 + "42", 42), ("0" * 5000, 0),
])
def test_digits_of_at_most_eighteen_are_read(text, number):
    assert whole_number(text) == number
    assert not too_many_digits(text)


@pytest.mark.parametrize("text", ["9" * (MAX_DIGITS + 1), "9" * 5000, "1" + "0" * 4400])
def test_more_digits_are_not_read(text):
    assert whole_number(text) is None
    assert too_many_digits(text)


@pytest.mark.parametrize("text", ["", " 1", "1 ", "+1", "-1", "1.5", "1e3", "1_000", "\uff11", "\u00b2", "abc", None, 3])
def test_anything_but_ascii_digits_is_not_a_number(text):
    assert whole_number(text) is None
    assert not too_many_digits(text)


def test_a_sign_is_read_only_when_asked_for():
    assert whole_number("-12", signed=True) == -12
    assert whole_number("-" + "9" * 5000, signed=True) is None
    assert too_many_digits("-" + "9" * 5000, signed=True)
    assert whole_number("--1", signed=True) is None


def test_a_bound_of_its_own():
    assert whole_number("123", max_digits=2) is None and whole_number("12", max_digits=2) == 12


def test_a_number_is_shown_without_leading_zeros_and_cut():
    assert number_shown("0042") == "42"
    assert number_shown("9" * 5000) == "9" * 39 + "…"
    assert number_shown("-" + "9" * 5000) == "-" + "9" * 38 + "…"
    assert number_shown("000") == "0"
