"""The ASGI application for servers: ``uvicorn app.asgi:app`` (settings from RAGDESK_*)."""

from app.factory import create_app

app = create_app()
