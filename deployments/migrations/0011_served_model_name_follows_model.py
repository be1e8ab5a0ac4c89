import posixpath

from django.db import migrations


def _default(model):
    """The served model name a spec without one gets (deployments.recipes.served_name_default,
    copied: a migration does not import code that may change later)."""
    if not isinstance(model, dict):
        return ""
    if isinstance(model.get("name"), str) and model["name"]:
        return model["name"]
    if isinstance(model.get("path"), str) and model["path"]:
        base = posixpath.basename(model["path"])
        return base[:-5] if base.endswith(".gguf") else base
    return ""


def drop_stored_defaults(apps, schema_editor):
    """Recipes used to store the default ``served_model_name`` (the model's name or the path's
    last segment) filled in, so it stayed the old model's after the model changed. Where a
    stored spec (every version, in the history too) holds exactly that default, it is taken
    out and follows the model from now on; a name other than the default was given and stays."""
    for name in ("Recipe", "HistoricalRecipe"):
        model = apps.get_model("deployments", name)
        pk = "history_id" if name == "HistoricalRecipe" else "id"
        for row_pk, spec in model.objects.values_list(pk, "spec").iterator():
            if not isinstance(spec, dict) or "served_model_name" not in spec:
                continue
            if spec["served_model_name"] != _default(spec.get("model")):
                continue
            kept = {key: value for key, value in spec.items() if key != "served_model_name"}
            model.objects.filter(**{pk: row_pk}).update(spec=kept)


class Migration(migrations.Migration):

    dependencies = [
        ('deployments', '0010_deployment_recipe_name'),
    ]

    operations = [
        migrations.RunPython(drop_stored_defaults, migrations.RunPython.noop),
    ]
