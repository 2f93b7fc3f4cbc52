"""GET /metrics: Prometheus exposition in vLLM 0.20's metric names (app.live.metrics)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from app.deps import MetricsDep

router = APIRouter(tags=["observability"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text"}},
)
async def metrics(registry: MetricsDep) -> Response:
    return Response(registry.exposition(), media_type=CONTENT_TYPE_LATEST)
