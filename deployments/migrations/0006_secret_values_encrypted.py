"""Encrypt stored secret values at rest (:mod:`controlplane.secretbox`).

Forward: every ``Secret.value`` and ``RetiredSecretValue.value`` (plain text until now) is
replaced by its Fernet token, then the columns become :class:`~controlplane.secretbox.SealedTextField`.
Backward: the columns become plain text again and every token is replaced by its plaintext;
a token the configured key cannot open stops the migration with an error naming the secret
and the key source (nothing is written then: the migration runs in one transaction where the
database allows it)."""
from django.db import migrations

import controlplane.secretbox
from controlplane.secretbox import SealedValue, seal, secret_plaintext

MODELS = ("Secret", "RetiredSecretValue")


def encrypt_values(apps, schema_editor):
    alias = schema_editor.connection.alias
    for model_name in MODELS:
        model = apps.get_model("deployments", model_name)
        for pk, value in model.objects.using(alias).values_list("pk", "value"):
            # update(), not save(): a secret's updated_at stays when its storage changes.
            model.objects.using(alias).filter(pk=pk).update(value=seal(value))


def decrypt_values(apps, schema_editor):
    alias = schema_editor.connection.alias
    for model_name in MODELS:
        model = apps.get_model("deployments", model_name)
        for pk, name, token in model.objects.using(alias).values_list("pk", "name", "value"):
            plaintext = secret_plaintext(SealedValue(token), name=name)
            model.objects.using(alias).filter(pk=pk).update(value=plaintext)


class Migration(migrations.Migration):

    dependencies = [
        ("deployments", "0005_retired_secret_values"),
    ]

    operations = [
        migrations.RunPython(encrypt_values, decrypt_values),
        migrations.AlterField(
            model_name="secret",
            name="value",
            field=controlplane.secretbox.SealedTextField(),
        ),
        migrations.AlterField(
            model_name="retiredsecretvalue",
            name="value",
            field=controlplane.secretbox.SealedTextField(),
        ),
    ]
