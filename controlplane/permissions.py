"""Roles and the permission rule every API view, page and websocket uses.

Roles (Django groups of the same name; a superuser is always ``admin``):

* ``viewer``   read everything except secrets' values (which nobody can read back);
* ``operator`` viewer + create/edit recipes, deploy, stop, run sweeps and kernel jobs;
* ``admin``    operator + nodes, secrets, users and deleting recipes.

A signed-in user in no group has no role and is refused (403) everywhere.
"""
from __future__ import annotations

from rest_framework.exceptions import MethodNotAllowed
from rest_framework.permissions import SAFE_METHODS, BasePermission

ROLE_ORDER = {"viewer": 1, "operator": 2, "admin": 3}
ROLES = tuple(ROLE_ORDER)


def user_role(user) -> str | None:
    """Return the highest role of ``user`` (``None`` for anonymous or role-less users)."""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    if user.is_superuser:
        return "admin"
    cached = getattr(user, "_ceiling_role", "__unset__")
    if cached != "__unset__":
        return cached
    names = set(user.groups.values_list("name", flat=True))
    role = None
    for name in ROLES:
        if name in names:
            role = name
    user._ceiling_role = role
    return role


def has_role(user, needed: str) -> bool:
    """True when ``user``'s role is at least ``needed``."""
    role = user_role(user)
    return role is not None and ROLE_ORDER[role] >= ROLE_ORDER[needed]


def refusal_message(user, needed: str) -> str:
    """The 403 text of pages and API alike: the role the action needs and the user's own, and
    nothing else: ``This needs the operator role; you are a viewer.`` (``...; your account has no
    role.`` for a user in no role group)."""
    role = user_role(user)
    if role is None:
        return f"This needs the {needed} role; your account has no role."
    article = "an" if role[0] in "aeiou" else "a"
    return f"This needs the {needed} role; you are {article} {role}."


def method_allowed(request, view) -> bool:
    """True when ``view`` (an API view, for this request) answers ``request.method`` at all: a
    method it takes (``http_method_names``) that it has a handler for, or any method for a view
    whose ``answers_any_method`` is set (the 404 of a path that is no endpoint). A viewset's route
    maps only its actions' methods (``POST /api/nodes/`` has none: the nodes list is read-only)."""
    if getattr(view, "answers_any_method", False):
        return True
    method = (request.method or "").lower()
    return method in getattr(view, "http_method_names", ()) and callable(getattr(view, method, None))


class RolePermission(BasePermission):
    """Reads need ``viewer``; writes need the view's ``write_role`` (default ``operator``).

    Views may set ``read_role`` / ``write_role`` or map actions in ``action_roles``
    (e.g. ``{"revert": "operator"}``).

    A method the endpoint never answers is a 405 with its ``Allow`` header for every signed-in
    user, whatever the role (:func:`method_allowed`): ``POST /api/nodes/`` is 405 to a viewer as to
    an admin, since no role could make it. A 403 is only for a method the endpoint has that the
    role may not use (``DELETE /api/nodes/<name>/`` for a viewer). A request with no user is
    answered 401 first, as everywhere.
    """

    # Replaced per request by :func:`refusal_message` (the instance lives for one request) before
    # every refusal of a signed-in user. The one other refusal, of a request with no user, is
    # answered by DRF as not authenticated ("Authentication credentials were not provided."),
    # never with this text; it stays only as DRF's class attribute.
    message = "Your role does not allow this."

    def has_permission(self, request, view) -> bool:
        if not request.user or not request.user.is_authenticated:
            return False
        if not method_allowed(request, view):
            raise MethodNotAllowed(request.method, detail=(
                f'Method "{request.method}" not allowed; this endpoint takes {", ".join(view.allowed_methods)}.'))
        action_roles = getattr(view, "action_roles", {}) or {}
        action = getattr(view, "action", None)
        if action in action_roles:
            needed = action_roles[action]
        elif request.method in SAFE_METHODS:
            needed = getattr(view, "read_role", "viewer")
        else:
            needed = getattr(view, "write_role", "operator")
        if has_role(request.user, needed):
            return True
        self.message = refusal_message(request.user, needed)
        return False
