"""Paging of the list pages (deployments, kernel jobs, benchmark runs): one rule for ``?page=N``
and one way to word a page that does not exist."""
from __future__ import annotations

import re

from django.core.paginator import Page, Paginator
from django.http import Http404

from controlplane.drf_defaults import given_more_than_once
from controlplane.errors import BadQuery
from controlplane.jsonsafe import query_text

#: Rows a list page shows at a time.
PER_PAGE = 20

_DIGITS_RE = re.compile(r"[0-9]+")


def page_of(rows, values: list[str], *, noun: str, per_page: int = PER_PAGE) -> Page:
    """The page of ``rows`` (a queryset in its display order) that ``?page=`` asks for,
    ``values`` being the parameter's values as given (``request.GET.getlist("page")``): 1-based,
    ``per_page`` rows a page; empty or absent is the first page, and page 1 of no rows is a page
    with nothing on it. ``noun`` names one row in the messages (``"run"``: "41 runs").

    Raises:
        BadQuery: ``page`` given more than once or not a whole number (the client's error: a
            400); the message says why and how many pages there are.
        Http404: a page number past the last page (or 0), saying how many there are (``no page 7
            of the runs: there are 3 pages (41 runs, 20 a page)``).
    """
    paginator = Paginator(rows, per_page, allow_empty_first_page=True)
    text = values[0].strip() if len(values) == 1 else ""
    digits = bool(_DIGITS_RE.fullmatch(text))
    number = int(text) if digits and len(text) <= 18 else None
    if len(values) <= 1 and (not text or (number is not None and 1 <= number <= paginator.num_pages)):
        return paginator.page(number or 1)
    count = paginator.count
    pages = (f"there {'is 1 page' if paginator.num_pages == 1 else f'are {paginator.num_pages} pages'} "
             f"({count} {noun}{'' if count == 1 else 's'}, {per_page} a page)")
    if len(values) > 1:
        raise BadQuery(f"the parameter page {given_more_than_once(values)}; {pages}")
    if not digits:
        raise BadQuery(f"page takes a page number (e.g. 2), got {query_text(text)}; {pages}")
    raise Http404(f"no page {text[:40]} of the {noun}s: {pages}")
