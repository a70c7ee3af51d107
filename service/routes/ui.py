"""The web dashboard: `/` serves its page, `/static/...` its scripts, styles and vendored
libraries. Both answer without a token (they hold no data); the page then calls /v1 with
the bearer token the user pasted."""

from pathlib import Path

from fastapi import APIRouter, FastAPI
from starlette.responses import FileResponse
from starlette.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"

# Everything the page loads comes from this origin; styles may be set from script (uPlot).
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; "
    "base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@router.get("/")
def dashboard_page() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html", headers=PAGE_HEADERS)


def mount_dashboard(app: FastAPI) -> None:
    """Serve the dashboard at `/` and its assets under `/static`, beside (never over) the
    API's own paths: /v1, /metrics, /docs and /openapi.json keep their routes."""
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
