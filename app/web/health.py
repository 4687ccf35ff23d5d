"""Liveness and readiness probes, which answer without credentials, and ``/metrics``.

Anyone (a load balancer, say) gets the status and, when not ready, the kind of problem in
fixed words. The problem's own text names model files and exception messages: only an
admin's session or key (``Principal.may_monitor``) gets it.

None of them waits on the database (``storeless``/``store_free``: app/auth/guards.py):
liveness asks it nothing, readiness reports what the database watch last found, and
metrics read from it only what comes within a moment.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get
from litestar.datastructures import State
from litestar.status_codes import HTTP_200_OK, HTTP_503_SERVICE_UNAVAILABLE

from app.auth.guards import current_principal
from app.metrics import Metrics
from app.ops.drain import RETRY_AFTER_S, SHUTTING_DOWN, Drain
from app.schemas import Health, Readiness
from app.state import Services


@get("/health/live", sync_to_thread=False, opt={"public": True, "storeless": True})
def live() -> Health:
    """The process is up and serving HTTP."""
    return Health(status="ok")


@get("/health/ready", sync_to_thread=True, opt={"public": True, "store_free": True})  # waits 0.25 s
def ready(request: Request[Any, Any, Any], state: State) -> Response[Health]:
    """200 once the models and vector index are loaded; 503 with the reason until then,
    and from the moment a SIGTERM starts the drain. A full disk is reported in ``disk``
    (and ``ragdesk_disk_full``), not by a 503: reads and answers still work."""
    drain: Drain | None = getattr(state, "drain", None)
    if drain is not None and drain.draining:  # SIGTERM: take this instance out of rotation
        return Response(
            Readiness(status="draining", detail=SHUTTING_DOWN),
            status_code=HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    services: Services | None = getattr(state, "services", None)
    disk = "full" if services is not None and services.disk.full else "ok"
    if services is not None and services.ready:
        return Response(Readiness(status="ready", disk=disk), status_code=HTTP_200_OK)
    principal = current_principal(request)
    monitor = principal is not None and principal.may_monitor
    detail = services.problem_told(monitor=monitor) if services is not None else None
    return Response(
        Readiness(status="failed" if detail else "starting", detail=detail, disk=disk),
        status_code=HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": "5"},
    )


@get(
    "/metrics",
    media_type="text/plain; version=0.0.4",
    sync_to_thread=True,  # a gauge read from the database may wait a moment
    opt={"monitoring": True, "store_free": True},  # admins: Prometheus scrapes with a key
)
def metrics_endpoint(state: State) -> Response[bytes]:
    metrics: Metrics = state.services.metrics
    # Litestar adds "; charset=utf-8" to text types itself.
    return Response(metrics.render(), media_type="text/plain; version=0.0.4")
