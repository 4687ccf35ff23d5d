"""The sharing UI: the Share dialog of a conversation's header (who it is shared with, add
a user or group, revoke), the read-only view a reader opens at ``/shared/{id}``, the
sidebar's "Shared with me" and the ``/shared`` page (shared with me, shared by me, and
for admins every share)."""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Any

from litestar import Controller, Request, Response, delete, get, post
from litestar.di import Provide
from litestar.enums import RequestEncodingType
from litestar.params import Body, Parameter
from litestar.response import Template
from msgspec import Struct

from app.chat.redaction import render_shared_answer
from app.errors import UnprocessableInput
from app.schemas import RowId
from app.state import Services
from app.web.admin_pages import ADMIN
from app.web.deps import provide_services
from app.web.share_actions import (
    MAX_NAME_CHARS,
    caller,
    resolve,
    revoke,
    share,
    shared_view,
    shares_of,
)
from app.web.ui_context import shell_context

Form = Body(media_type=RequestEncodingType.URL_ENCODED)
SIDEBAR_LIMIT = 8  # the sidebar lists this many; the /shared page lists them all
_SHARED_PAGE = re.compile(r"/shared/([0-9]{1,18})(?:[?#]|$)")


class ShareForm(Struct):
    kind: str = "user"
    name: str = ""


def panel_context(services: Services, conversation_id: int) -> dict[str, Any]:
    """The Share dialog's body: the shares, and the names to pick from (users other than
    the caller, groups)."""
    me = caller().user.id
    users = [u for u in services.auth.users.list() if u.id != me and not u.disabled]
    return {
        "conversation_id": conversation_id,
        "shares": shares_of(services).of_conversation(conversation_id),
        "share_users": users,
        "share_groups": services.auth.groups.list(),
        "max_name": MAX_NAME_CHARS,
    }


def _page_shell(services: Services) -> dict[str, Any]:
    """The window around a sharing page: the shell of the home page, no answer selected."""
    return {**shell_context(services, None), "latest_answer": None, "suggestions": []}


class SharesUi(Controller):
    dependencies = {"services": Provide(provide_services, sync_to_thread=False)}

    @get("/ui/conversations/{conversation_id:int}/shares")
    async def share_panel(self, conversation_id: RowId, services: Services) -> Template:
        context = await asyncio.to_thread(panel_context, services, conversation_id)
        return Template("_share_panel.html", context=context)

    @post("/ui/conversations/{conversation_id:int}/shares", status_code=200)
    async def add_share(
        self, conversation_id: RowId, data: Annotated[ShareForm, Form], services: Services
    ) -> Template:
        """Share with the user or group named in the dialog (422 in the dialog otherwise)."""
        if len(data.name) > 4 * MAX_NAME_CHARS:
            raise UnprocessableInput(f"a name is at most {MAX_NAME_CHARS} characters")

        def run() -> dict[str, Any]:
            target = resolve(services, caller(), data.kind, data.name)
            share(services, conversation_id, [target])
            return {**panel_context(services, conversation_id), "added": target}

        return Template("_share_panel.html", context=await asyncio.to_thread(run))

    @delete("/ui/conversations/{conversation_id:int}/shares/{share_id:int}", status_code=200)
    async def revoke_share(
        self,
        conversation_id: RowId,
        share_id: RowId,
        services: Services,
        view: Annotated[str, Parameter(max_length=8)] = "panel",
    ) -> Response[str] | Template:
        """Revoke from the dialog (its body again) or from the /shared page (``view=row``:
        the row goes)."""
        await asyncio.to_thread(revoke, services, conversation_id, share_id)
        if view == "row":
            return Response("")
        context = await asyncio.to_thread(panel_context, services, conversation_id)
        return Template("_share_panel.html", context=context)

    @delete("/ui/shares/{share_id:int}", status_code=200, opt=ADMIN)
    async def admin_revoke(self, share_id: RowId, services: Services) -> Response[str]:
        """An admin revokes any share from the /shared page's overview."""
        await asyncio.to_thread(revoke, services, None, share_id)
        return Response("")

    @get("/ui/shared")
    async def sidebar_list(self, request: Request[Any, Any, Any], services: Services) -> Template:
        """The sidebar's "Shared with me", the one on show marked (htmx sends the page's
        address)."""
        on_show = _SHARED_PAGE.search(request.headers.get("hx-current-url", ""))

        def context() -> dict[str, Any]:
            return {
                "shared": _shared_with_caller(services)[:SIDEBAR_LIMIT],
                "current": int(on_show.group(1)) if on_show else None,
            }

        return Template("_shared_list.html", context=await asyncio.to_thread(context))

    @get("/shared")
    async def shared_page(self, services: Services) -> Template:
        def context() -> dict[str, Any]:
            principal = caller()
            shares = shares_of(services)
            every = shares.every() if principal.is_admin and not principal.restricted else None
            return {
                **_page_shell(services),
                "shared": _shared_with_caller(services),
                "mine": [] if principal.restricted else shares.by_owner(principal.user.id),
                "every": every,
            }

        return Template("shared.html", context=await asyncio.to_thread(context))

    @get("/shared/{shared_id:int}")
    async def shared_conversation(self, shared_id: RowId, services: Services) -> Template:
        """The read-only view: no composer, no regenerate, feedback, edit or pin; a
        citation's passage only for a reader who may read its collection."""

        def context() -> dict[str, Any]:
            view = shared_view(services, shared_id)
            rendered = {
                m.id: render_shared_answer(m) for m in view.messages if m.role == "assistant"
            }
            return {**_page_shell(services), "view": view, "rendered": rendered}

        return Template("shared_conversation.html", context=await asyncio.to_thread(context))


def _shared_with_caller(services: Services) -> list[Any]:
    principal = caller()
    if principal.restricted:
        return []
    return list(shares_of(services).with_user(principal.user.id))
