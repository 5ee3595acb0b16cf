"""The HTTP side of the gateway: FastAPI, served by Mangum on Lambda and mounted directly by the local gateway."""

from __future__ import annotations

import functools
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse


def create_app() -> FastAPI:
    app = FastAPI(title="Orbital", version="0.1.0", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "healthy"}

    @app.exception_handler(404)
    def not_found(_request: Any, _exc: Any) -> JSONResponse:
        return JSONResponse({"error": "Not Found"}, status_code=404)

    return app


@functools.cache
def lambda_adapter() -> Any:
    from mangum import Mangum

    return Mangum(create_app(), lifespan="off")
