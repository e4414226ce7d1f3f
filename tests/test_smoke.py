def test_health_and_list(api):
    assert api.get("/healthz").json()["status"] == "ok"
    ready = api.get("/readyz")
    assert ready.status_code == 200, ready.text
    created = api.post(
        "/api/v1/prompts", json={"name": "hello", "template": "Hi {{ who }}", "arguments": [{"name": "who"}]}
    )
    assert created.status_code == 201, created.text
    assert created.headers["etag"] == '"v1"'
    assert [p["name"] for p in api.get("/api/v1/prompts").json()["items"]] == ["hello"]
