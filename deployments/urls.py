"""Pages of the deployments app."""
from django.urls import path

from deployments import views

urlpatterns = [
    path("recipes/", views.recipe_list, name="recipe-list"),
]
