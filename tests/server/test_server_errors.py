"""Every error of the REST server is one line of JSON with the right status, also where the error
comes before any route (the key check with the journal down, a number too long to parse), and the
OpenAPI document declares each error as it is sent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import seams
from dialogmem import Memory, StoreError
from seams import create_app
from serverkit import RULES_ONLY, answering_llm, bearer, rest_server, serve

#: statuses any /v1 operation can answer
COMMON = {"401", "403", "422", "429", "500", "503"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, dict[str, str]]]:
    with rest_server(tmp_path_factory.mktemp("errors") / "store", ["alice"]) as (url, keys, _), \
            httpx.Client(base_url=url, timeout=60) as client:
        yield client, keys


def assert_json_error(r: httpx.Response, status: int, error: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    assert "\n" not in r.text and "Traceback" not in r.text
    data: dict[str, Any] = r.json()
    assert set(data) == {"error", "detail"} and data["error"] == error and data["detail"], data
    return data


def test_a_number_too_long_to_parse_is_422(server: tuple[httpx.Client, dict[str, str]]) -> None:
    client, keys = server
    alice = bearer(keys["alice"])
    for params in ({"offset": "7" * 5000}, {"offset": "1" * 10}, {"limit": "9" * 5000}, {"limit": "-" + "9" * 5000}):
        assert_json_error(client.get("/v1/memories", params=params, headers=alice), 422, "InputError")
    # the largest count accepted, and digits that are not ASCII (a cursor, not a count), are no error
    for offset in ("9" * 9, "²", "١٢"):
        r = client.get("/v1/memories", params={"offset": offset}, headers=alice)
        assert r.status_code == 200 and r.json()["memories"] == [], (offset, r.text)


def test_method_not_allowed_is_json_with_allow(server: tuple[httpx.Client, dict[str, str]]) -> None:
    client, keys = server
    r = client.delete("/v1/search", headers=bearer(keys["alice"]))
    assert_json_error(r, 405, "HTTPError")
    assert r.headers["allow"] == "POST"


def test_an_unexpected_exception_is_500_json(tmp_path_factory: pytest.TempPathFactory) -> None:
    # the scripted LLM raises AssertionError (not an LLM error) on any stage but the light answer:
    # a bug, as far as the server can tell
    with rest_server(tmp_path_factory.mktemp("crash") / "s", ["alice"], llm=answering_llm()) as (url, keys, _):
        r = httpx.post(f"{url}/v1/answer", json={"query": "what?", "mode": "deep"},
                       headers=bearer(keys["alice"]), timeout=60)
    data = assert_json_error(r, 500, "InternalError")
    assert "AssertionError" not in data["detail"]  # nothing of the inside leaks


def test_the_journal_down_is_503_json_also_in_the_key_check(tmp_path_factory: pytest.TempPathFactory) -> None:
    from pg_server import PostgresServer

    pg = PostgresServer().start()
    try:
        journal = {"url": pg.url, "schema_name": "pgdown", "connect_timeout_s": 2}
        mem = Memory(data_dir=tmp_path_factory.mktemp("pgdown") / "s", journal=journal, llm_client=answering_llm(),
                     **RULES_ONLY)
        try:
            with serve(create_app(mem)) as url, httpx.Client(base_url=url, timeout=60) as client:
                key = bearer(seams.journal(mem).create_key("user", "alice")[1])  # the CLI's own call, on PostgreSQL
                assert client.post("/v1/search", json={"query": "x"}, headers=key).status_code == 200
                pg.stop()
                for method, path, body in (("POST", "/v1/search", {"query": "x"}), ("GET", "/v1/memories", None),
                                           ("GET", "/v1/stats", None)):
                    r = client.request(method, path, json=body, headers=key)
                    assert "journal" in assert_json_error(r, 503, "StoreError")["detail"]
                assert client.get("/health").status_code == 200  # no key, no journal: still alive
        finally:
            pg.stop()
            with pytest.raises(StoreError, match="journal"):  # closing cannot write the counters either
                mem.close()
    finally:
        pg.stop()


def test_openapi_declares_the_errors_as_sent(server: tuple[httpx.Client, dict[str, str]]) -> None:
    client, _ = server
    doc = client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "ValidationError" not in schemas
    assert set(schemas["ErrorBody"]["required"]) == {"error", "detail"}
    operations = [(m, p, op) for p, item in doc["paths"].items() for m, op in item.items()]
    assert len(operations) >= 14
    for method, path, op in operations:
        for status, response in op["responses"].items():
            if status.startswith(("4", "5")):
                ref = response["content"]["application/json"]["schema"]["$ref"]
                assert ref == "#/components/schemas/ErrorBody", (method, path, status)
        if path.startswith("/v1"):
            assert set(op["responses"]) >= COMMON, (method, path)
            retry = op["responses"]["429"]["headers"]["Retry-After"]
            assert retry["required"] and retry["schema"]["type"] == "integer"
        if "requestBody" in op:
            assert {"400", "413"} <= set(op["responses"]), (method, path)
        if "{memory_id}" in path or "{job_id}" in path:
            assert "404" in op["responses"], (method, path)
    assert "409" in doc["paths"]["/v1/sleep"]["post"]["responses"]
