"""Admin of API tokens (``/admin/authtoken/tokenproxy/``): a token is a credential, so no admin
page shows a whole key, only :func:`token_prefix` of it; an admin sees whose token it is and
when it was made, and deletes (revokes) it.

Django REST framework's own ``TokenAdmin`` lists the key, titles the view and delete pages with
it (``str(token)`` is the key) and links the history and delete pages by it; this one replaces
each of those with the prefix and links by the user's id, as DRF's own change list does. Tokens
are not added or edited here: ``POST /api/auth/token/`` gives a user theirs, and reassigning a
credential to another user is not an operation Ceiling has.
"""
from __future__ import annotations

from dataclasses import dataclass

from django.contrib import admin
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from rest_framework.authtoken.admin import TokenAdmin as DrfTokenAdmin
from rest_framework.authtoken.models import TokenProxy

TOKEN_PREFIX_CHARS = 4


def token_prefix(key: str) -> str:
    """The first :data:`TOKEN_PREFIX_CHARS` characters of a token's key and an ellipsis
    (``"9944…"``): enough to tell a user's token from another, too little to use."""
    return f"{key[:TOKEN_PREFIX_CHARS]}…"


@dataclass(frozen=True)
class _TokenShown:
    """What the admin templates get in place of a token: its URL id (the user's id, as DRF's
    change list links it) and its prefix as its text."""

    pk: int
    text: str

    def __str__(self) -> str:
        return self.text


def _shown(obj: TokenProxy) -> _TokenShown:
    return _TokenShown(pk=obj.user_id, text=token_prefix(obj.key))


class TokenAdmin(DrfTokenAdmin):
    """API tokens: listed, viewed and deleted by their prefix, never their whole key."""

    list_display = ("key_prefix", "user", "created")
    fields = ("key_prefix", "user", "created")
    readonly_fields = ("key_prefix", "user", "created")

    @admin.display(description="key")
    def key_prefix(self, obj: TokenProxy) -> str:
        return token_prefix(obj.key)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context = {**context, "original": _shown(obj), "subtitle": token_prefix(obj.key)}
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

    def get_deleted_objects(self, objs, request):
        objs = list(objs)
        shown = [f"{self.opts.verbose_name.capitalize()}: {token_prefix(obj.key)}" for obj in objs]
        perms_needed = set() if self.has_delete_permission(request) else {self.opts.verbose_name}
        return shown, {self.opts.verbose_name_plural: len(objs)}, perms_needed, []

    def render_delete_form(self, request, context):
        obj = context.get("object")
        if isinstance(obj, TokenProxy):
            context = {**context, "object": _shown(obj)}
        return super().render_delete_form(request, context)

    def log_deletions(self, request, queryset):
        """Admin's log entries of deleted tokens, naming each by its prefix and its URL id (the
        user's id) rather than the key Django would store as both."""
        content_type = ContentType.objects.get_for_model(self.model, for_concrete_model=False)
        return [
            LogEntry.objects.create(
                user_id=request.user.pk,
                content_type=content_type,
                object_id=str(obj.user_id),
                object_repr=token_prefix(obj.key),
                action_flag=DELETION,
            )
            for obj in queryset
        ]

    def response_delete(self, request, obj_display, obj_id):
        return super().response_delete(request, token_prefix(obj_display), obj_id)

    def history_view(self, request, object_id, extra_context=None):
        obj = self.get_object(request, object_id)
        if obj is not None:
            shown = _shown(obj)
            extra_context = {**(extra_context or {}), "object": shown, "title": f"Change history: {shown}"}
        return super().history_view(request, object_id, extra_context)


admin.site.unregister(TokenProxy)
admin.site.register(TokenProxy, TokenAdmin)
