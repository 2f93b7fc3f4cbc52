"""Nodes (producers pushing to /ws/ingest): GET /api/nodes and its page, /nodes, with the
table partial it refreshes every 2 s."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.api_docs import VIEW_ERRORS
from app.deps import HubDep, NodesDep, View
from app.nodes.remote_node import NodeView
from app.routes.links import session_href
from app.templating import templates

router = APIRouter(dependencies=View)


@router.get(
    "/api/nodes", tags=["nodes"], responses=VIEW_ERRORS, summary="Producers and their links"
)
async def nodes(registry: NodesDep) -> list[NodeView]:
    return registry.views()


class NodeRow(NodeView):
    """A producer on the nodes page, with the link to its session."""

    href: str


def node_rows(registry: NodesDep, hub: HubDep) -> list[NodeRow]:
    rows: list[NodeRow] = []
    for view in sorted(registry.views(), key=lambda v: v["node"]):
        href = session_href(hub, view["session"], view["state"] == "live")
        rows.append({**view, "href": href})
    return rows


@router.get("/nodes", response_class=HTMLResponse, include_in_schema=False)
async def nodes_page(request: Request, registry: NodesDep, hub: HubDep) -> HTMLResponse:
    return templates.TemplateResponse(request, "nodes.html", {"rows": node_rows(registry, hub)})


@router.get("/panels/nodes", response_class=HTMLResponse, include_in_schema=False)
async def nodes_panel(request: Request, registry: NodesDep, hub: HubDep) -> HTMLResponse:
    return templates.TemplateResponse(
        request, "partials/_nodes_table.html", {"rows": node_rows(registry, hub)}
    )
