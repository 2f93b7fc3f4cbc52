"""GET /guide/NAME: a page of docs/ (NAME.md) on the dashboard, as written (markdown shown
as preformatted text, escaped), so the page's captions can link to the explanation of
what is on screen. Only the names of the files in docs/ are served."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from app.deps import not_found_page
from app.resources import asset_path
from app.templating import templates

router = APIRouter(include_in_schema=False)
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


@router.get("/guide/{name}", response_class=HTMLResponse)
async def guide(request: Request, name: str) -> Response:
    path = asset_path("docs") / f"{name}.md"
    if not _NAME.match(name) or not path.is_file():
        return not_found_page(request, f"no guide page {name!r}")
    text = path.read_text(encoding="utf-8")
    title = text.splitlines()[0].lstrip("# ").strip() if text else name
    return templates.TemplateResponse(request, "guide.html", {"title": title, "text": text})
