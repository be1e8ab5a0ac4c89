"""A recipe's references to chosen kernel builds (``spec.kernels``), validated for
:mod:`deployments.recipes` and applied by :mod:`deployments.launch`.

Shape in a recipe spec (optional; at most :data:`MAX_REFS` entries)::

    "kernels": [{"package": "sparse_mla_decode",
                 "config": "/abs/path/device_name=NVIDIA_H200,shape=v4-flash,dtype=bf16.json" | <KernelBest id>,
                 "roles": ["decode"]}]          (optional: default every worker role)

Normalised entry: ``{"package", "config": <absolute path>, "best": <KernelBest id> | None, "env",
"flag", "roles"}``. ``env`` and ``flag`` come from the package's manifest (``[engine]``), never from
the recipe (a recipe that repeats them must repeat the manifest's values). A KernelBest id is
resolved to the config file that id was exported to, once, so re-validating a normalised spec
needs only the package row. Rules:

* the package must be registered (a :class:`kernels.models.KernelPackage` row);
* its env variable must pass the manifest rule (:func:`kernels.manifest.engine_env_problem`) and
  the recipe env denylist (:func:`deployments.recipes.env_name_problem` is not used as is: the
  ``CEILING_<NAME>_CONFIG`` names are allowed here and only here), and must not also be set in
  ``spec.env`` or a role's env;
* its flag, when it has one, must be one of the engine's worker flags and not set in the role's
  flags;
* a config path is absolute, normalised, a ``.json`` file, under the export directory
  (:func:`kernels.services.configs_dir`; there, under the referenced package's own directory) or
  one of ``settings.CEILING_MODEL_ROOTS``; the file is
  read by the engine on its node, so its presence is not checked here;
* a config the export directory names by device (``compiler=…,cc=9.0/device_name=NVIDIA_H200,…``,
  or a best-variant id) was tuned on that device: a role it goes to whose GPUs have another
  compute capability is an error (the variant was built for its target: an ``sm_90a`` cubin does
  not run on ``sm_120``); GPUs of the same compute capability under another name are a plan
  warning (:func:`kernel_refs_warnings`), and so is a sim recipe whose profile models another
  ``sm_XX``;
* a role without GPUs that a reference goes to (outside sim) is a plan warning: its engine runs
  no GPU kernel, so the config variable set for it does nothing.
"""
from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from django.conf import settings

from controlplane.jsonsafe import json_spelled
from controlplane.numbers import number_shown, whole_number

MAX_REFS = 8
REF_KEYS = ("package", "config", "best", "roles", "env", "flag")
# The id of ``config = "best:<id>"``: ASCII digits only (``str.isdigit`` also takes "²").
BEST_ID_RE = re.compile(r"[0-9]+")


def _roots() -> list[str]:
    from kernels.services import configs_dir

    roots = [str(configs_dir().resolve())]
    roots += [str(Path(r).resolve()) for r in getattr(settings, "CEILING_MODEL_ROOTS", [])]
    return roots


def _path_problem(path: str) -> str | None:
    shown = json_spelled(path, 400)  # a whole path, as long as a config path may be
    if not path.startswith("/"):
        return f"{shown} must be an absolute path"
    if posixpath.normpath(path) != path or "/../" in path + "/":
        return f"{shown} must be a normalised path (no '..', no '//', no trailing '/')"
    if not path.endswith(".json"):
        return f"{shown} must be a .json config file"
    roots = _roots()
    if not any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots):
        return f"{shown} is not under the kernel config directory or a model root ({', '.join(roots)})"
    return None


# ``compiler=nvcc_13.0,cc=9.0/device_name=NVIDIA_H200,shape=v4-flash,dtype=bf16.json``
# (kernels.services.results.config_dirname / config_filename)
_CONFIG_CC_RE = re.compile(r"(?:^|,)cc=([0-9]{1,2}\.[0-9])(?:,|$)")
_CONFIG_DEVICE_RE = re.compile(r"^device_name=([^,]+),")
_SM_RE = re.compile(r"\bsm_?([0-9]{2,3})a?\b", re.IGNORECASE)


def config_tuned_on(path: str) -> tuple[str | None, str | None]:
    """``(device name, compute capability)`` an exported config's path names, e.g.
    ``("NVIDIA H200", "9.0")`` for ``…/compiler=nvcc_13.0,cc=9.0/device_name=NVIDIA_H200,shape=…json``
    (the file name's underscores stand for the device name's spaces); None for a part the path
    does not name (a file under a model root may be called anything)."""
    parent, name = posixpath.split(path)
    cc = _CONFIG_CC_RE.search(posixpath.basename(parent))
    dev = _CONFIG_DEVICE_RE.match(name)
    return (dev.group(1).replace("_", " ") if dev else None), (cc.group(1) if cc else None)


def sm_numbers(text: str) -> set[str]:
    """The ``sm_XX`` architectures a hardware description names, as digits: ``{"120"}`` for
    "8x sm_120 GPUs, TP4 per role", ``{"90"}`` for "NVIDIA H200 (sm_90a)"."""
    return {m.group(1) for m in _SM_RE.finditer(text or "")}


def _sm_of(cc: str) -> str:
    """``"9.0"`` → ``"sm_90"``."""
    return "sm_" + cc.replace(".", "")


def _ref_gpus(ref: dict, roles: dict, node) -> list[tuple[str, Any]]:
    """``(role, GpuFacts)`` of every GPU a reference's roles run on (known to ``node``)."""
    by_index = {g.index: g for g in getattr(node, "gpus", None) or []}
    return [(r, by_index[i]) for r in ref.get("roles") or [] for i in (roles.get(r) or {}).get("gpus") or []
            if i in by_index]


def kernel_refs_device_errors(refs: list[dict], *, roles: dict, node) -> dict[str, list[str]]:
    """``{spec.kernels.<i>.config: [message]}`` for each normalised reference whose config was
    tuned for another compute capability than a GPU (of ``node``, a
    :class:`deployments.topology.NodeFacts`) of a role it goes to. Pure."""
    errors: dict[str, list[str]] = {}
    for i, ref in enumerate(refs):
        device, cc = config_tuned_on(ref.get("config") or "")
        if cc is None:
            continue
        wrong = [(r, g) for r, g in _ref_gpus(ref, roles, node) if g.compute_capability and g.compute_capability != cc]
        if wrong:
            runs = []
            for role in dict.fromkeys(r for r, _ in wrong):
                gpus = [g for r, g in wrong if r == role]
                kinds = sorted({(g.name, g.compute_capability) for g in gpus})
                what = ", ".join(f"{n} (compute capability {c})" if n else f"compute capability {c}" for n, c in kinds)
                runs.append(f"{role} runs on GPU{'s' if len(gpus) > 1 else ''} "
                            f"{', '.join(str(g.index) for g in gpus)} of node {node.name}: {what}")
            errors[f"spec.kernels.{i}.config"] = [
                f"tuned on {device or 'a GPU'} (compute capability {cc}); {'; '.join(runs)}. A variant built for "
                f"{_sm_of(cc)} does not run there: reference a config tuned on that GPU"]
    return errors


def kernel_refs_warnings(refs: list[dict], *, roles: dict, node, sim_hardware: str = "",
                         simulated: bool = False) -> list[str]:
    """Plan warnings for normalised references whose config was tuned on another device than the
    one they are used with: GPUs of the same compute capability under another name (the tuned
    parameters are valid there and may not be the best), or a sim profile whose ``hardware``
    names another ``sm_XX`` than the config's (the sim stands for that GPU). Outside a sim recipe
    (``simulated``: the sim's roles take no GPU and its profile stands for them), a role the
    config goes to that has no GPU is warned about too: its engine gets the config variable but
    runs no GPU kernel, so the tuned config does nothing there. Pure."""
    out: list[str] = []
    for ref in refs:
        gpuless = [r for r in ref.get("roles") or [] if not (roles.get(r) or {}).get("gpus")]
        if gpuless and not simulated:
            one = len(gpuless) == 1
            out.append(f"kernel {ref['package']}: {', '.join(gpuless)} {'has' if one else 'have'} no GPU (no gpus in "
                       f"the role), yet {ref.get('env') or 'its config variable'} is set for {'it' if one else 'them'}: "
                       "a GPU kernel's config does nothing for an engine on the CPU; list only roles with GPUs in "
                       "the reference's roles")
        device, cc = config_tuned_on(ref.get("config") or "")
        if device is None and cc is None:
            continue
        names = sorted({g.name for _, g in _ref_gpus(ref, roles, node)
                        if g.name and g.name != device and (cc is None or g.compute_capability in ("", cc))})
        if device and names:
            out.append(f"kernel {ref['package']}: its config was tuned on {device}; {', '.join(ref['roles'])} run on "
                       f"{', '.join(names)}: the parameters are valid there and may not be the fastest")
        sms = sm_numbers(sim_hardware)
        if cc is not None and sms and cc.replace(".", "") not in sms:
            out.append(f"kernel {ref['package']}: its config was tuned on {device or 'a GPU'} ({_sm_of(cc)}); the sim "
                       f"profile models {sim_hardware}: a variant built for {_sm_of(cc)} does not run there")
    return out


def _other_package_problem(path: str, package: str) -> str | None:
    """A file in a package's directory of the export directory (``<root>/<package>/...``) must be
    the referenced package's (another package's tuned parameters mean nothing to its kernel)."""
    from kernels.services import configs_dir

    root = str(configs_dir().resolve()).rstrip("/") + "/"
    if path.startswith(root):
        parts = path[len(root):].split("/", 1)
        owner = parts[0]
        if len(parts) == 2 and owner != package:
            return f"{json_spelled(path, 400)} is in the config directory of package {json_spelled(owner)}, not {json_spelled(package)}"
    return None


def _config_resolved(ref: dict, pkg, path: str, add) -> tuple[str | None, int | None]:
    """``(config path, best-variant id or None)`` of a reference: its ``config`` path, or the file a
    best variant (``config`` an integer or ``"best:<id>"``, or a normalised entry's ``best``) was
    exported to; ``(None, None)`` after adding at ``path`` why it cannot be had. The best variant
    must belong to ``pkg`` (the package row; None when the reference names none, which is told at
    its own path)."""
    from kernels.models import KernelBest

    config, best_id = ref.get("config"), ref.get("best")
    if isinstance(config, str) and config.startswith("best:"):
        if not BEST_ID_RE.fullmatch(config[5:]):
            add(path, f"{json_spelled(config)}: 'best:<id>' needs a best-variant id, an integer")
            return None, None
        best_id = whole_number(config[5:])
        if best_id is None:
            # more digits than any id has (and int() refuses more than 4300): no row's, never read
            add(path, f"no best kernel variant with id {number_shown(config[5:])}")
            return None, None
        config = None
    elif isinstance(config, int) and not isinstance(config, bool):
        best_id, config = config, None
    if config is None and best_id is not None:
        is_id = isinstance(best_id, int) and not isinstance(best_id, bool)
        best = KernelBest.objects.filter(pk=best_id).first() if is_id else None
        if best is None:
            add(path, f"no best kernel variant with id {json_spelled(best_id)}")
            return None, None
        if pkg is not None and best.package_id != pkg.pk:
            add(path, f"best variant #{best_id} belongs to package {best.package.name}, not {pkg.name}")
            return None, None
        if not best.config_path:
            add(path, f"best variant #{best_id} has no exported config file yet")
            return None, None
        return best.config_path, best_id
    if not isinstance(config, str) or not config:
        given = f", got {json_spelled(config)}" if "config" in ref else ""
        add(path, f"give the exported config's path or a best-variant id (an integer or 'best:<id>'){given}")
        return None, None
    return config, best_id


def kernel_refs_validate(value: Any, *, adapter, roles: dict, spec_env: dict) -> tuple[list[dict], dict[str, list[str]]]:
    """Check ``spec.kernels`` for a recipe of engine ``adapter`` whose normalised ``roles`` and
    ``spec_env`` are given. Returns ``(normalised entries, errors)``; errors map
    ``spec.kernels.<i>.<field>`` paths to messages naming the bad value (in JSON's spelling,
    ``got true``), every field of every reference judged whatever another holds: an unknown package
    does not hide a bad config or role of its reference (what depends on the package, its hand-over
    and whether a best variant or a config directory is its own, is judged once it is known). Reads
    :class:`kernels.models.KernelPackage` (and :class:`KernelBest` for an id reference)."""
    from deployments.recipes import ENV_DENIED_NAMES, ENV_DENIED_PREFIXES, ENV_DENIED_SUFFIXES, ENV_RENDERER_OWNED
    from kernels.manifest import engine_env_problem
    from kernels.models import KernelPackage

    errors: dict[str, list[str]] = {}

    def add(path: str, msg: str) -> None:
        errors.setdefault(path, []).append(msg)

    if not isinstance(value, list):
        add("spec.kernels", f"must be a list of {{package, config}} objects, got {json_spelled(value)}")
        return [], errors
    if len(value) > MAX_REFS:
        add("spec.kernels", f"{len(value)} entries; at most {MAX_REFS}")
        return [], errors
    worker_roles = [r for r in roles if r != "router"]
    out: list[dict] = []
    seen_packages: set[str] = set()
    seen_env: set[str] = set()
    for i, ref in enumerate(value):
        path = f"spec.kernels.{i}"
        if not isinstance(ref, dict):
            add(path, f"must be an object {{package, config}}, got {json_spelled(ref, 160)}")
            continue
        # Every field of the reference is judged, whatever another holds (an unknown package does
        # not hide a bad config or role).
        for key in ref:
            if key not in REF_KEYS:
                add(f"{path}.{key}", f"unknown field {json_spelled(key)}; allowed: package, config, roles (and best, env, "
                                     "flag as a normalised spec carries them)")
        name = ref.get("package")
        pkg = KernelPackage.objects.filter(name=name).first() if isinstance(name, str) else None
        if pkg is None:
            known = ", ".join(KernelPackage.objects.values_list("name", flat=True)) or "none registered"
            add(f"{path}.package", f"{json_spelled(name)} is not a registered kernel package (known: {known})"
                if "package" in ref else f"give the name of a registered kernel package (known: {known})")
        elif name in seen_packages:
            add(f"{path}.package", f"{json_spelled(name)} is referenced twice")
        if pkg is not None:
            seen_packages.add(name)
        engine = (pkg.manifest or {}).get("engine") or {} if pkg is not None else {}
        env, flag = engine.get("env") or "", engine.get("flag") or ""
        for key, actual in (("env", env), ("flag", flag)):
            if pkg is not None and key in ref and ref[key] != actual:
                add(f"{path}.{key}", f"is set by package {name}'s manifest ({json_spelled(actual)}); leave it out")
        config, best_id = _config_resolved(ref, pkg, f"{path}.config", add)
        if config is not None:
            problem = _path_problem(config) or (_other_package_problem(config, name) if pkg is not None else None)
            if problem:
                add(f"{path}.config", problem)
        # Roles.
        wanted = ref.get("roles", worker_roles)
        if not isinstance(wanted, list) or not wanted or not all(isinstance(r, str) for r in wanted):
            add(f"{path}.roles", f"must be a non-empty list of worker roles ({', '.join(worker_roles)})")
            wanted = []
        for r in wanted:
            if r not in worker_roles:
                add(f"{path}.roles", f"{json_spelled(r)} is not a worker role of this recipe ({', '.join(worker_roles)})")
        wanted = [r for r in worker_roles if r in wanted]
        # Hand-over: env variable and flag (the package's; none known without it).
        if env:
            problem = engine_env_problem(env)
            upper = env.upper()
            if problem:
                add(f"{path}.package", f"package {name}: {problem}")
            elif (upper in ENV_DENIED_NAMES or upper.startswith(ENV_DENIED_PREFIXES)
                  or upper.endswith(ENV_DENIED_SUFFIXES) or upper in ENV_RENDERER_OWNED):
                add(f"{path}.package", f"package {name} names {env}, which a recipe may not set")
            if env in spec_env or any(env in (roles[r].get("env") or {}) for r in wanted):
                add(f"{path}.package", f"{env} is set by this kernel reference; remove it from the recipe's env")
            if env in seen_env:
                add(f"{path}.package", f"{env} is set by two kernel references")
            seen_env.add(env)
        if flag:
            bare = flag[2:]
            if bare not in adapter.worker_flags:
                add(f"{path}.package", f"package {name} hands its config over with {flag}, which engine "
                                       f"{adapter.name} does not take")
            for r in wanted:
                if bare in (roles[r].get("flags") or {}):
                    add(f"spec.roles.{r}.flags.{bare}", f"is set by the kernel reference spec.kernels.{i}; remove it")
        if pkg is not None and config is not None:
            out.append({"package": name, "config": config, "best": best_id, "env": env, "flag": flag,
                        "roles": wanted})
    return out, errors


def kernel_refs_apply(refs: list[dict], *, role_name: str) -> tuple[dict[str, str], list[str]]:
    """What normalised ``refs`` add to one worker process: ``(env, argv tail)``; the env maps each
    package's variable to the config path, the argv tail is ``[flag, path]`` per package with a
    flag. Pure (no database)."""
    env: dict[str, str] = {}
    argv: list[str] = []
    for ref in refs:
        if role_name not in ref.get("roles", []):
            continue
        if ref.get("env"):
            env[ref["env"]] = ref["config"]
        if ref.get("flag"):
            argv += [ref["flag"], ref["config"]]
    return env, argv
