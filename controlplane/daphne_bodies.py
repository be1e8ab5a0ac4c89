"""Request bodies under daphne reach Django unread.

Twisted's ``Request.requestReceived`` parses the body of every POST of a form content type into
``request.args`` before daphne sees the request, and answers a ``multipart/form-data`` body that
Python's email parser cannot split (no boundary, a boundary that no part starts with) with its
own bare ``400 Bad Request``: no body, no ``Content-Type``, no log line, and neither Django nor
the API ever hears of it. daphne never reads ``request.args``: it hands the raw body to the ASGI
application, where Django's multipart parser judges it and the API (or the page's ``handler400``)
names the problem. :func:`twisted_form_parsing_off` makes daphne's requests skip that parse
(Twisted's ``parsePOSTFormSubmission=False``), which also spares a second in-memory copy of
every upload.
"""
from __future__ import annotations


def twisted_form_parsing_off() -> bool:
    """Make daphne build its requests with Twisted's form parsing off (see the module
    docstring). Returns whether it changed anything (False once done, or when daphne is not
    installed)."""
    try:
        from daphne import http_protocol
    except ImportError:
        return False
    if getattr(http_protocol.WebRequest, "body_left_to_django", False):
        return False
    import inspect

    from twisted.web.http import Request
    if "parsePOSTFormSubmission" not in inspect.signature(Request.__init__).parameters:
        return False  # a Twisted older than the switch: its own parse and its bare 400 stay

    class WebRequest(http_protocol.WebRequest):
        """daphne's request, its body left unparsed by Twisted."""

        body_left_to_django = True

        def __init__(self, *args, **kwargs):
            kwargs["parsePOSTFormSubmission"] = False
            super().__init__(*args, **kwargs)

    # HTTPFactory.buildProtocol looks the class up in the module for every connection.
    http_protocol.WebRequest = WebRequest
    return True
