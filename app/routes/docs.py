"""GET /docs: Swagger UI over /openapi.json, served from static/vendor (no CDN: the
dashboard works offline). "Authorize" takes the control token as the bearer token."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

router = APIRouter(include_in_schema=False)
SWAGGER_UI = "5.35.0"


@router.get("/docs")
async def docs() -> HTMLResponse:
    vendor = "/static/vendor"
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="batchscope API",
        swagger_js_url=f"{vendor}/swagger-ui-bundle-{SWAGGER_UI}.js",
        swagger_css_url=f"{vendor}/swagger-ui-{SWAGGER_UI}.css",
        swagger_favicon_url=f"{vendor}/swagger-ui-favicon-{SWAGGER_UI}.png",
        swagger_ui_parameters={"persistAuthorization": True, "tryItOutEnabled": True},
    )
