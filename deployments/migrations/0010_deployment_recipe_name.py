from django.db import migrations, models


def fill_recipe_names(apps, schema_editor):
    """Each existing deployment gets the recipe's name at its version, from the recipe's
    history (the latest row of that version, as the recipe pages read it); its current name
    where that history row is gone."""
    Deployment = apps.get_model("deployments", "Deployment")
    HistoricalRecipe = apps.get_model("deployments", "HistoricalRecipe")
    for deployment in Deployment.objects.select_related("recipe").iterator():
        name = (
            HistoricalRecipe.objects.filter(id=deployment.recipe_id, version=deployment.recipe_version)
            .exclude(history_type="-")
            .order_by("-history_date", "-history_id")
            .values_list("name", flat=True)
            .first()
        )
        Deployment.objects.filter(pk=deployment.pk).update(recipe_name=name or deployment.recipe.name)


class Migration(migrations.Migration):

    dependencies = [
        ('deployments', '0009_deployment_engine_limits'),
    ]

    operations = [
        migrations.AddField(
            model_name='deployment',
            name='recipe_name',
            field=models.CharField(blank=True, help_text="the recipe's name at the deployed version", max_length=63),
        ),
        migrations.RunPython(fill_recipe_names, migrations.RunPython.noop),
    ]
