"""Malformed input to the web interface: every callback answers with a message, never an
exception, and the HTTP server refuses foreign Host headers (403) and oversized bodies (413).

Each payload here failed before the hardening (OverflowError, KeyError, TypeError, or an
invalid fallback answer that Dash turned into HTTP 500).
"""

from __future__ import annotations

import http.client
import json
import math
import threading
from typing import Any, Iterator

import pytest

from orbitscope.app import AppData, Event, create_app, make_server
from orbitscope.app import callbacks as cb
from orbitscope.app import server as app_server
from orbitscope.results.store import Store

from test_app_callbacks import _start, build_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[AppData, dict[str, str]]:
    home = tmp_path_factory.mktemp("hardening-store")
    ids = build_store(home, per_class=2)
    return AppData(Store(home, create=False), ttl=0.0), ids


@pytest.fixture(scope="module")
def started(store: Any) -> tuple[Any, cb.SelectionUpdate]:
    data, ids = store
    controls, up = _start(data, [ids["ref-cnn"], ids["centroid"]])
    assert up.message == "" and up.selection["sample"] is not None
    return controls, up


# ---------------------------------------------------------------- callback functions


@pytest.mark.parametrize("value", [math.inf, -math.inf, 10**400, math.nan])
def test_huge_sample_click_is_a_message(store, started, value):
    data, _ = store
    controls, up = started
    out = cb.update_selection(data, up.selection, controls, Event("sample", 0, value))  # was: OverflowError for inf
    assert "is not among the samples shown" in out.message and len(out.message) < 200
    assert out.selection["sample"] == up.selection["sample"]


@pytest.mark.parametrize("value", [{"angle": 10**400}, {"angle": math.inf}, {"angle": "x"}, {"nope": 1}])
def test_huge_element_click_is_a_message(store, started, value):
    data, _ = store
    controls, up = started
    out = cb.update_selection(data, up.selection, controls, Event("element", None, value))  # was: OverflowError
    assert out.message.startswith("not an orbit element") and len(out.message) < 200
    assert out.selection["element"] == up.selection["element"]


@pytest.mark.parametrize("live", [10**400, math.inf, None, {"a": 1}, "x", [10**400], [math.nan], [[1, 2]]])
def test_malformed_live_values_are_harmless(store, started, live):
    data, _ = store
    _, up = started
    out = cb.live_detail(data, up.selection, live)  # was: TypeError / KeyError for a non-list
    assert out[0].id == "live-title" and out[0].children.startswith("live re-evaluation")


@pytest.mark.parametrize("sample", [10**6, -1, 10**30])
def test_unknown_sample_id_in_the_selection_is_a_message(store, started, sample):
    data, _ = store
    _, up = started
    bad = dict(up.selection, sample=sample)  # the selection comes back from the browser: anything
    for fn in (cb.aggregate_figure, cb.individual_figure):  # was: NotFoundError
        assert "not among the samples shown" in fn(data, bad)["layout"]["meta"]["message"]
    assert "not among the samples shown" in cb.stored_detail(data, bad)[0].children  # was: KeyError
    assert "not among the samples shown" in cb.live_detail(data, bad, [30])[0].children  # was: KeyError


@pytest.mark.parametrize("element", [{}, {"nope": 1.0}, {"angle": 1e300}, {"angle": 37.0}])
def test_element_off_the_grid_in_the_selection_is_a_message(store, started, element):
    data, _ = store
    _, up = started
    bad = dict(up.selection, element=element)
    for fn in (cb.aggregate_figure, cb.individual_figure):  # was: ValueError for a missing dim
        assert "not on the orbit grid" in fn(data, bad)["layout"]["meta"]["message"]
    assert "not on the orbit grid" in cb.stored_detail(data, bad)[0].children  # was: KeyError


@pytest.mark.parametrize("subset", [math.inf, -math.inf, 10**400])
def test_huge_subset_falls_back_to_all_samples(subset):
    sel = cb.parse_controls("g", ["a"], "m", subset, "pca", "mean", "worst", [])  # was: OverflowError for inf
    assert sel.subset is None


@pytest.mark.parametrize("inputs,triggered", [
    ({"scatter": None, "rank": None}, {"type": "scatter", "index": 0}),
    ({"scatter": [], "rank": []}, {"type": "scatter", "index": 2}),
    ({"scatter": [], "rank": None}, {"type": "rank", "index": 0}),
    ({}, "individual"),
])
def test_event_of_missing_wildcard_inputs(inputs, triggered):
    event = app_server._event([{"prop_id": "x.y"}], triggered, inputs)  # was: TypeError / IndexError / KeyError
    assert event.kind in ("context", "rank", "element") and event.value is None


def test_loopback_hosts():
    loopback_hosts = app_server.loopback_hosts
    assert loopback_hosts("127.0.0.1", 8050) == {"localhost:8050", "127.0.0.1:8050", "[::1]:8050"}
    assert "[::1]:9000" in loopback_hosts("::1", 9000)
    assert loopback_hosts("0.0.0.0", 8050) is None and loopback_hosts("192.168.1.5", 8050) is None


# ---------------------------------------------------------------- through Dash (test client)


def _selection_payload(store: Any, outputs_len: int = 4) -> dict[str, Any]:
    """A selection-callback request triggered by a scatter click with an infinite sample id."""
    from orbitscope.app.data import MAX_MODELS

    data, ids = store
    group = data.groups()[0].key

    def wild(kind: str, prop: str, values: list[Any]) -> list[dict[str, Any]]:
        return [{"id": {"index": i, "type": kind}, "property": prop, "value": v} for i, v in enumerate(values)]

    def out_wild(kind: str, prop: str, n: int) -> list[dict[str, Any]]:
        return [{"id": {"index": i, "type": kind}, "property": prop} for i in range(n)]

    n = MAX_MODELS
    outputs = [{"id": "selection", "property": "data"}, out_wild("rank", "value", outputs_len),
               out_wild("rank", "max", outputs_len), out_wild("rank-label", "children", outputs_len),
               out_wild("live", "value", 3), {"id": "status", "property": "children"}]
    inputs = [wild("scatter", "clickData", [{"points": [{"customdata": "__INF__"}]}] + [None] * (n - 1)),
              wild("rank", "value", [1] * n), wild("prev", "n_clicks", [0] * n), wild("next", "n_clicks", [0] * n),
              {"id": "individual", "property": "clickData", "value": None},
              {"id": "aggregate", "property": "clickData", "value": None},
              {"id": "group", "property": "value", "value": group},
              {"id": "models", "property": "value", "value": [ids["ref-cnn"]]},
              {"id": "metric", "property": "value", "value": "confidence"},
              {"id": "subset", "property": "value", "value": "all"},
              {"id": "method", "property": "value", "value": "pca"},
              {"id": "colour", "property": "value", "value": "mean"},
              {"id": "rank-by", "property": "value", "value": "worst"},
              {"id": "label-free", "property": "value", "value": []}]
    output = "..selection.data..." + "...".join(
        json.dumps({"index": ["ALL"], "type": k}, separators=(",", ":")) + "." + p
        for k, p in (("rank", "value"), ("rank", "max"), ("rank-label", "children"), ("live", "value"))) + "...status.children.."
    return {"output": output, "outputs": outputs, "inputs": inputs,
            "changedPropIds": [json.dumps({"index": 0, "type": "scatter"}, separators=(",", ":")) + ".clickData"],
            "state": [{"id": "selection", "property": "data", "value": None}]}


def _post(client: Any, payload: dict[str, Any]) -> Any:
    body = json.dumps(payload).replace('"__INF__"', "1e999")  # JSON has no inf; Python reads 1e999 as inf
    return client.post("/_dash-update-component", data=body, content_type="application/json")


def test_selection_callback_fallback_is_a_valid_answer(store, monkeypatch):
    data, _ = store
    client = create_app(data=data).server.test_client()

    def boom(*args: Any) -> Any:
        raise RuntimeError("unexpected")

    monkeypatch.setattr(cb, "update_selection", boom)
    resp = _post(client, _selection_payload(store))  # was: 500 (no_update for a wildcard output)
    assert resp.status_code == 200, resp.data[:300]
    assert b"internal error in on_event: RuntimeError" in resp.data and b"Traceback" not in resp.data


def test_selection_callback_with_an_infinite_sample_id(store):
    data, _ = store
    client = create_app(data=data).server.test_client()
    resp = _post(client, _selection_payload(store))  # was: 200 with "internal error ... OverflowError"
    assert resp.status_code == 200 and b"not among the samples shown" in resp.data and b"internal error" not in resp.data


def test_callback_request_with_wrong_outputs_is_400_not_500(store):
    data, _ = store
    client = create_app(data=data).server.test_client()
    resp = _post(client, _selection_payload(store, outputs_len=2))  # outputs the page does not have
    assert resp.status_code == 400 and b"malformed callback request" in resp.data and b"Traceback" not in resp.data
    for body in (b"{", b"[]", b'{"output": 5}', b'{"output": "status.children", "outputs": {}, "inputs": 7}'):
        resp = client.post("/_dash-update-component", data=body, content_type="application/json")
        assert resp.status_code in (400, 204), (body, resp.status_code)
        assert b"Traceback" not in resp.data


# ---------------------------------------------------------------- a live server on loopback


@pytest.fixture(scope="module")
def served(store: Any) -> Iterator[int]:
    data, _ = store
    server = make_server(create_app(data=data), "127.0.0.1", 0)  # port 0: a free loopback port
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _request(port: int, method: str, path: str, body: bytes | None = None, host: str | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=host is not None)
        if host is not None:
            conn.putheader("Host", host)
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders()
        if body is not None:
            conn.send(body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_live_server_host_check(served):
    port = served
    assert _request(port, "GET", "/")[0] == 200  # Host: 127.0.0.1:<port>
    assert _request(port, "GET", "/", host=f"localhost:{port}")[0] == 200
    for host in ("evil.example:%d" % port, "evil.example", f"127.0.0.1:{port + 1}", "localhost"):
        status, body = _request(port, "GET", "/", host=host)
        assert status == 403 and b"forbidden host" in body, host
    status, _ = _request(port, "POST", "/_dash-update-component", b"{}", host="evil.example",
                         headers={"Content-Type": "application/json"})
    assert status == 403


def test_live_server_refuses_oversized_posts(served):
    body = b'{"output": "' + b"x" * (8 * 1024 * 1024)  # over the 4 MiB limit + b'"}'
    status, _ = _request(served, "POST", "/_dash-update-component", body, headers={"Content-Type": "application/json"})
    assert status == 413


def test_live_server_malformed_callback_is_not_500(served, store):
    for body in (b"{", b'{"output": "status.children", "outputs": {}, "inputs": 7}',
                 json.dumps(_selection_payload(store, outputs_len=2)).encode()):
        status, data = _request(served, "POST", "/_dash-update-component", body, headers={"Content-Type": "application/json"})
        assert status < 500 and b"Traceback" not in data, (body[:60], status)
    status, data = _request(served, "POST", "/_dash-update-component",
                            json.dumps(_selection_payload(store)).replace('"__INF__"', "1e999").encode(),
                            headers={"Content-Type": "application/json"})
    assert status == 200 and b"not among the samples shown" in data


def test_explicit_host_binding_turns_the_check_off(store):
    data, _ = store
    app = create_app(data=data)
    server = make_server(app, "127.0.0.1", 0, allowed_hosts=None)
    try:
        assert app.server.config["ORBITSCOPE_ALLOWED_HOSTS"] is None
    finally:
        server.server_close()
    app = create_app(data=data)
    server = make_server(app, "127.0.0.1", 0, allowed_hosts=["myhost:1"])
    try:
        assert app.server.config["ORBITSCOPE_ALLOWED_HOSTS"] == {"myhost:1"}
    finally:
        server.server_close()
