"""Small ``provide_*`` dependencies through which handlers reach ``app.state``."""

from __future__ import annotations

from litestar.datastructures import State

from app.chat.service import ChatService
from app.state import Retrieval, Services


def provide_services(state: State) -> Services:
    services: Services = state.services
    return services


def provide_retrieval(state: State) -> Retrieval:
    return provide_services(state).require_retrieval()


def provide_chat(state: State) -> ChatService:
    return provide_services(state).require_chat()
