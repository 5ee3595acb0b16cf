"""`/docs` in a real browser: Swagger UI, from the gateway's own files, shows the HTTP API with no request to any
other origin and nothing refused by the page's Content-Security-Policy."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from playwright.sync_api import expect

from tests.browser.conftest import DESKTOP, WAIT_MS
from tests.e2e.conftest import GatewayProcess


def test_the_docs_page_renders_from_this_origin_only(browser: Any, gateway: GatewayProcess) -> None:
    origin = urlsplit(gateway.http)
    context = browser.new_context(viewport=DESKTOP)
    context.set_default_timeout(WAIT_MS)
    requested: list[str] = []
    problems: list[str] = []
    context.on("request", lambda request: requested.append(request.url))
    try:
        page = context.new_page()
        page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: problems.append(str(error)))
        answer = page.goto(f"{gateway.http}/docs")
        assert answer is not None and answer.status == 200
        policy = answer.headers["content-security-policy"]
        assert "script-src 'self';" in policy and "frame-ancestors 'none'" in policy
        expect(page.locator(".swagger-ui .info .title")).to_contain_text("Orbital")
        expect(page.locator(".opblock-tag-section").first).to_be_visible()
        page.locator("#operations-gateway-health_health_get").click()  # the route's description opens
        expect(page.locator("#operations-gateway-health_health_get .opblock-body")).to_be_visible()
    finally:
        context.close()
    assert requested and all(urlsplit(url)[:2] == origin[:2] for url in requested), requested
    assert any(url.endswith("/openapi.json") for url in requested)
    assert not problems, problems
