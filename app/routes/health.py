"""GET /healthz: 200 when every registered check is ok (app.live.health), else 503 with
the reasons. Open to anyone (load balancers and Docker's HEALTHCHECK carry no token)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from app.api_models import Health, HealthCheck
from app.deps import HealthDep

router = APIRouter(tags=["observability"])


@router.get(
    "/healthz",
    response_model=Health,
    responses={503: {"model": Health, "description": "A check failed: `reason` says which."}},
)
async def healthz(registry: HealthDep) -> JSONResponse:
    report = await registry.report()
    body = Health(
        status="ok" if report.ok else "unhealthy",
        reason=report.reason,
        checks={
            name: HealthCheck(ok=c.ok, detail=c.detail, info=dict(c.info))
            for name, c in report.checks.items()
        },
    )
    return JSONResponse(body.model_dump(mode="json"), status_code=200 if report.ok else 503)
