"""Project-level pages, and the answer to a request Django refuses before any view runs."""
from django.contrib.auth import views as auth_views
from django.core.exceptions import BadRequest, DisallowedHost
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.shortcuts import redirect, render
from django.template import loader

from controlplane.api import multipart_error_text
from controlplane.body_length import is_api_path
from controlplane.errors import BadQuery
from deployments.views.common import role_page


@role_page()
def home(request: HttpRequest) -> HttpResponse:
    """The landing page is the recipe list: anonymous visitors go to the login page first, and a
    signed-in user in no role group is refused (403) as on every page, not sent to a page that
    refuses them."""
    return redirect("deployments:recipe-list")


class LogoutView(auth_views.LogoutView):
    """Logging out is a POST (with its CSRF token), as Django's view has it. A GET (``/logout/``
    typed in the address bar) answers a page with the Log out button for a signed-in user, and
    sends a signed-out visitor to the login page, instead of a bare 405."""

    http_method_names = ["get", "head", "post", "options"]

    def get(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect("login")
        return render(request, "registration/logout.html")


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """``handler400``: a request Django refuses as suspicious before any view runs (a ``Host``
    header outside ``ALLOWED_HOSTS``, a malformed multipart body, too many fields). Under
    ``/api/`` and at ``/api`` itself the answer is JSON like every other API error (``{"detail":
    "..."}``; a multipart body Django cannot read, which a middleware's read of ``request.POST``
    meets before the view, is the API's body error, ``{"non_field_errors": ["the request body is
    not valid multipart form data: ..."]}``), elsewhere (``/apiary`` too) a plain page
    (``400.html``, rendered without the request: the request's host cannot be used) with the
    same words. The reason names the rule, never the request's own values; Django logs the one
    warning line (``Bad request (Unable to parse request body): /login/``). A page's own refusal
    of a malformed query value (:class:`controlplane.errors.BadQuery`, ``?page=abc``) is the
    site's page (``400_query.html``) with the view's reason; a view's own
    :class:`~django.core.exceptions.BadRequest` says what its message says."""
    api = is_api_path(request.path)
    if isinstance(exception, BadQuery) and not api:
        # Raised by a page's view, so the host was accepted: the page is the site's own, with the
        # view's reason (a malformed query value, quoted).
        return HttpResponse(loader.get_template("400_query.html").render({"reason": str(exception)}, request),
                            status=400)
    if isinstance(exception, DisallowedHost):
        reason = ("The Host header names a host this server does not answer to "
                  "(set the ALLOWED_HOSTS environment variable to add one).")
    elif isinstance(exception, MultiPartParserError):
        # the rule only: a message's value after the colon comes from the request's headers
        text = multipart_error_text(str(exception).split(":", 1)[0])
        if api:
            return JsonResponse({"non_field_errors": [text]}, status=400)
        reason = f"{text[0].upper()}{text[1:]}."
    elif isinstance(exception, BadRequest) and exception.args and str(exception.args[0]).strip():
        reason = f"{str(exception.args[0]).strip().rstrip('.')}."
    else:
        reason = "The request is malformed or too large for this server to read."
    if api:
        return JsonResponse({"detail": reason}, status=400)
    return HttpResponse(loader.get_template("400.html").render({"reason": reason}), status=400)
