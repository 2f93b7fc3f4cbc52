"""GET /metrics: Prometheus text format, vLLM metric names."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from app.deps import HubDep, MetricsDep

router = APIRouter()


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(hub: HubDep, registry: MetricsDep) -> PlainTextResponse:
    state = hub.live_state()
    model = "batchscope"
    if state is not None:
        model = str(state.meta.get("model") or state.meta.get("runner") or model)
    text = registry.render(model.replace('"', "'"))
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")
