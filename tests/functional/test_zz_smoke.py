from typing import Any
def test_smoke(services: Any, token: str) -> None:
    from orbital.runtime.services import use_services
    from orbital.rest.app import create_app
    from starlette.testclient import TestClient
    use_services(services)
    app = create_app()
    with TestClient(app) as http:
        h = {"Authorization": f"Bearer {token}"}
        r = http.post("/api/v1/config.get", headers=h)
        print(r.status_code, r.text[:300])
        r = http.post("/api/v1/config.get")
        print(r.status_code, r.text[:300], r.headers)
        r = http.post("/api/v1/tool.result", headers=h, json={})
        print(r.status_code, r.text[:300])
        r = http.post("/api/v1/session.get", headers=h, json={"sessionKey": 5})
        print(r.status_code, r.text[:300])
        r = http.post("/api/v1/cron.add", headers=h, json=[1])
        print(r.status_code, r.text[:300])
        r = http.post("/api/v1/tool.invoke", headers=h, json={"tool": "x__y"})
        print(r.status_code, r.text[:300])
        r = http.get("/openapi.json")
        print(r.status_code, len(r.text), list(r.json()["components"]["securitySchemes"]))
    use_services(None)
