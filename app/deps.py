"""Small ``provide_*`` dependencies through which handlers reach ``app.state``."""

from __future__ import annotations

from litestar.datastructures import State

from app.services import Models, Services


def provide_services(state: State) -> Services:
    services: Services = state.services
    return services


def provide_models(state: State) -> Models:
    return provide_services(state).require_models()
