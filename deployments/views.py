"""Server-rendered pages of the deployments app."""
from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from deployments.models import Recipe


@login_required
def recipe_list(request):
    return render(request, "deployments/recipe_list.html", {"recipes": Recipe.objects.select_related("node")})
