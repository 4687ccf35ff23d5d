"""``create_app(settings)``: the only way a Litestar app is made."""

from __future__ import annotations

from typing import Any

from litestar import Litestar, Request, Response
from litestar.config.cors import CORSConfig
from litestar.contrib.jinja import JinjaTemplateEngine
from litestar.datastructures import State
from litestar.exceptions import NotFoundException
from litestar.middleware import DefineMiddleware
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig
from litestar.types import ControllerRouterHandler, Message, Scope

from app.auth.guards import csrf_token, may_write, require_principal
from app.auth.hosts import AllowedHosts
from app.chat.rendering import render_answer, render_streaming
from app.config.settings import Settings
from app.documents.intake import MAX_PARTS_PER_REQUEST
from app.errors import handle_error
from app.lifespan import services_lifespan
from app.mcp_door.door import mcp_lifespan
from app.openai.errors import openai_error_handler
from app.ops.drain import Drain, DrainGate
from app.sources.scheduler import sources_lifespan
from app.web.admin_pages import AccountPages, AdminPages
from app.web.api import ChatApi, DocumentsApi, PrefetchApi, SearchApi
from app.web.api_accounts import GroupsApi, KeysApi, UsersApi
from app.web.api_library import CollectionsApi, ConversationsApi
from app.web.api_shares import ConversationSharesApi, SharedApi, SharesAdminApi
from app.web.api_sources import SourcesApi
from app.web.auth_pages import AuthPages
from app.web.collections_ui import CollectionsUi
from app.web.completions import CompletionsApi
from app.web.conversations_ui import ConversationsUi
from app.web.eval_ui import EvalPages
from app.web.feedback_ui import FeedbackApi, FeedbackPages, FeedbackUi
from app.web.groups_ui import GroupsPages
from app.web.health import live, metrics_endpoint, ready
from app.web.mcp import mcp_endpoint
from app.web.openai import openai_router
from app.web.pages import Pages, Partials
from app.web.shares_ui import SharesUi
from app.web.sources_ui import SourcesPages
from app.web.sso_pages import sso_routes
from app.web.ui_format import register_filters
from app.web.usage_ui import UsageApi, UsageCsv, UsagePages
from app.web.workspaces_ui import WorkspacesUi
from retrieval.parsers import SUPPORTED_EXTENSIONS

# No inline script or style, nothing from other origins; htmx's SSE uses connect-src 'self'.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: under no-referrer browsers send "Origin: null" with form
    # posts, and the CSRF defence checks the Origin of those that lack Sec-Fetch-Site.
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}

MAX_FILE_NAME_BYTES = 255  # one path part, on every common file system


# Browsers that reached us over HTTPS (directly, or through a trusted proxy that says so)
# use nothing else for a year; never sent over plain HTTP, where it would mean nothing.
HSTS = (b"strict-transport-security", b"max-age=31536000")


def _add_security_headers(response: Response[Any]) -> Response[Any]:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


async def _add_hsts(message: Message, scope: Scope) -> None:
    if message["type"] == "http.response.start" and scope.get("scheme") == "https":
        headers = list(message.get("headers", []))
        if not any(name.lower() == HSTS[0] for name, _ in headers):
            message["headers"] = [*headers, HSTS]


def _handle_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """``/v1`` answers in OpenAI's shape even before routing (404, 405); the rest as the
    app does (JSON for the API, a partial for htmx, a page otherwise)."""
    if request.url.path.startswith("/v1/"):
        return openai_error_handler(request, exc)
    return handle_error(request, exc)


def _configure_templates(engine: JinjaTemplateEngine) -> None:
    engine.engine.globals["render_answer"] = render_answer
    engine.engine.globals["render_streaming"] = render_streaming
    engine.engine.globals["csrf_token"] = csrf_token
    engine.engine.globals["may_write"] = may_write
    engine.engine.globals["upload_accept"] = ",".join(sorted(SUPPORTED_EXTENSIONS))
    register_filters(engine.engine.filters)


def create_app(settings: Settings | None = None) -> Litestar:
    settings = settings or Settings()
    drain = Drain(settings.server.drain_s)  # SIGTERM's graceful drain (app/ops/drain.py)
    # syncs and the MCP door stop before the services
    lifespans = [services_lifespan, sources_lifespan, mcp_lifespan]
    handlers: list[ControllerRouterHandler] = [live, ready, metrics_endpoint]
    if settings.server.role == "worker":  # ingestion and syncs: only probes and metrics
        lifespans.remove(mcp_lifespan)
    else:
        handlers = _web_handlers(settings)
    return Litestar(
        route_handlers=handlers,
        state=State({"settings": settings, "drain": drain}),
        guards=[require_principal],  # every route; opt={"public": True} is the allowlist
        lifespan=lifespans,
        template_config=TemplateConfig(
            directory=settings.templates_dir,
            engine=JinjaTemplateEngine,
            engine_callback=_configure_templates,
        ),
        exception_handlers={Exception: _handle_error},
        after_request=_add_security_headers,
        before_send=[_add_hsts],
        request_max_body_size=settings.server.max_upload_bytes,
        multipart_form_part_limit=MAX_PARTS_PER_REQUEST,
        cors_config=_cors(settings),
        middleware=[
            DefineMiddleware(AllowedHosts, allowed=settings.served_hosts),
            DefineMiddleware(DrainGate, drain=drain),
        ],
    )


def _web_handlers(settings: Settings) -> list[ControllerRouterHandler]:
    """Every page and API (the ``web`` and ``all`` roles)."""
    return [
        live,
        ready,
        AuthPages,
        *sso_routes(settings),
        AccountPages,
        AdminPages,
        EvalPages,
        FeedbackPages,
        UsagePages,
        SourcesPages,
        GroupsPages,
        FeedbackUi,
        FeedbackApi,
        UsageApi,
        UsageCsv,
        Pages,
        Partials,
        ConversationsUi,
        SharesUi,
        CollectionsUi,
        WorkspacesUi,
        DocumentsApi,
        SearchApi,
        ChatApi,
        PrefetchApi,
        CollectionsApi,
        ConversationsApi,
        ConversationSharesApi,
        SharedApi,
        SharesAdminApi,
        SourcesApi,
        UsersApi,
        KeysApi,
        GroupsApi,
        CompletionsApi,
        openai_router,
        metrics_endpoint,
        mcp_endpoint,
        create_static_files_router(
            path="/static",
            directories=[settings.static_dir],
            opt={"public": True, "storeless": True},  # served while the database is away
            before_request=_refuse_impossible_file_names,
        ),
    ]


def _cors(settings: Settings) -> CORSConfig | None:
    """Scripts on the listed origins may call the API with a key (never with cookies)."""
    if not settings.server.cors_origins:
        return None
    return CORSConfig(
        allow_origins=settings.server.cors_origins,
        allow_methods=["GET", "POST", "DELETE"],
        allow_headers=["Authorization", "Content-Type"],
        allow_credentials=False,
    )


def _refuse_impossible_file_names(request: Request[Any, Any, Any]) -> None:
    """A name no file system can hold (a part over 255 bytes, a NUL) is a 404 here, not
    the OSError (500) the static router would meet opening it."""
    parts = request.url.path.split("/")
    if any(len(part.encode()) > MAX_FILE_NAME_BYTES or "\0" in part for part in parts):
        raise NotFoundException("no such file")
