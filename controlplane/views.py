"""Project-level pages."""
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect


@login_required
def home(request):
    """The landing page is the recipe list."""
    return redirect("recipe-list")
