"""Project-level pages."""
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The landing page is the recipe list (anonymous visitors go to the login page first)."""
    return redirect("deployments:recipe-list")
