"""Project-level pages, and the answer to a request Django refuses before any view runs."""
from django.contrib.auth.decorators import login_required
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.template import loader


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The landing page is the recipe list (anonymous visitors go to the login page first)."""
    return redirect("deployments:recipe-list")


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """``handler400``: a request Django refuses as suspicious before any view runs (a ``Host``
    header outside ``ALLOWED_HOSTS``, a malformed multipart body, too many fields). Under
    ``/api/`` and at ``/api`` itself the answer is JSON like every other API error (``{"detail":
    "..."}``), elsewhere (``/apiary`` too) a plain page (``400.html``, rendered without the
    request: the request's host cannot be used). The reason names the rule, never the request's
    own values."""
    if isinstance(exception, DisallowedHost):
        reason = ("The Host header names a host this server does not answer to "
                  "(set the ALLOWED_HOSTS environment variable to add one).")
    else:
        reason = "The request is malformed or too large for this server to read."
    if request.path == "/api" or request.path.startswith("/api/"):
        return JsonResponse({"detail": reason}, status=400)
    return HttpResponse(loader.get_template("400.html").render({"reason": reason}), status=400)
