from django.db import migrations


def _tp_default(role):
    """A worker's ``tp`` when the spec gives none: ``len(gpus) // dp``, else 1
    (deployments.recipes._worker_check, copied: a migration does not import code that may
    change later)."""
    gpus, dp = role.get("gpus"), role.get("dp", 1)
    if isinstance(gpus, list) and gpus and isinstance(dp, int) and dp > 0 and len(gpus) % dp == 0:
        return len(gpus) // dp
    return 1


def _membind_default(role):
    """A role's ``membind`` when the spec gives none: ``numa`` with a NUMA node, ``local`` with
    CPUs only, else ``none`` (deployments.recipes._pinning_check, copied)."""
    if role.get("numa_node") is not None:
        return "numa"
    return "local" if role.get("cpus") else "none"


def _ports(roles):
    """Every port the roles take (deployments.engines.sglang.recipe_ports, copied)."""
    taken = set()
    for role in roles.values():
        if not isinstance(role, dict):
            continue
        for key in ("port", "bootstrap_port"):
            if isinstance(role.get(key), int):
                taken.add(role[key])
        if isinstance(role.get("side_channel_port"), int):
            first = role["side_channel_port"]
            taken.update(range(first, first + role.get("tp", 1) * role.get("dp", 1)))
        for name, value in (role.get("flags") or {}).items():
            if name.endswith("port") and isinstance(value, int) and not isinstance(value, bool):
                taken.add(value)
    return taken


def _metrics_port_default(roles):
    """The router's ``prometheus-port`` when the spec gives none: the first port above the
    router's that the recipe's other ports leave free, else the first below it
    (deployments.engines.sglang.router_metrics_port_default over the roles without the flag,
    as deployments.recipes._router_metrics_port_fill computes it, copied); None without one."""
    router = roles.get("router")
    if not isinstance(router, dict) or not isinstance(router.get("port"), int):
        return None
    flags = {k: v for k, v in (router.get("flags") or {}).items() if k != "prometheus-port"}
    taken = _ports({**roles, "router": {**router, "flags": flags}})
    port = router["port"]
    for candidate in (*range(port + 1, 65536), *range(port - 1, 1023, -1)):
        if candidate not in taken:
            return candidate
    return None


def spec_without_derived_defaults(spec):
    """``spec`` without each stored value that equals the default derived from the same spec:
    a worker's ``tp``, a role's ``membind``, the router's ``prometheus-port`` flag. Every default
    is computed from the spec as stored, before anything is taken out."""
    roles = spec.get("roles") if isinstance(spec, dict) else None
    if not isinstance(roles, dict):
        return spec
    metrics_default = _metrics_port_default(roles)
    kept_roles = {}
    for name, role in roles.items():
        if not isinstance(role, dict):
            kept_roles[name] = role
            continue
        role = dict(role)
        if name != "router" and "tp" in role and role["tp"] == _tp_default(role) \
                and not isinstance(role["tp"], bool):
            del role["tp"]
        if "membind" in role and role["membind"] == _membind_default(role):
            del role["membind"]
        flags = role.get("flags")
        if name == "router" and isinstance(flags, dict) and metrics_default is not None \
                and flags.get("prometheus-port") == metrics_default \
                and not isinstance(flags.get("prometheus-port"), bool):
            role["flags"] = {k: v for k, v in flags.items() if k != "prometheus-port"}
        kept_roles[name] = role
    return {**spec, "roles": kept_roles}


def drop_stored_defaults(apps, schema_editor):
    """Recipes used to store a worker's ``tp``, a role's ``membind`` and the router's
    ``prometheus-port`` filled in from other fields, so each stayed what the old fields gave
    after they changed (``tp`` 2 refused once ``gpus`` grew to four). Where a stored spec (every
    version, in the history too) holds exactly the default its own fields give, the value is
    taken out and follows its field from now on; a value other than the default was given and
    stays."""
    for name in ("Recipe", "HistoricalRecipe"):
        model = apps.get_model("deployments", name)
        pk = "history_id" if name == "HistoricalRecipe" else "id"
        for row_pk, spec in model.objects.values_list(pk, "spec").iterator():
            kept = spec_without_derived_defaults(spec)
            if kept != spec:
                model.objects.filter(**{pk: row_pk}).update(spec=kept)


class Migration(migrations.Migration):

    dependencies = [
        ('deployments', '0011_served_model_name_follows_model'),
    ]

    operations = [
        migrations.RunPython(drop_stored_defaults, migrations.RunPython.noop),
    ]
