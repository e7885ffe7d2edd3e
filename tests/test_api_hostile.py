"""What a hostile client or an unlucky trainer sends, through a real tracker: every case here once broke
the tracker for the sender or for others (a 500 forever, a wedge, a silent change), and must not again."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests._server import TrackerProcess
from tests.conftest import create_run


def post(client: httpx.Client, run_id: int, body: dict[str, Any]) -> httpx.Response:
    return client.post(f"/api/v1/runs/{run_id}/metrics", json={"batch_id": uuid.uuid4().hex, **body})


def history(client: httpx.Client, run_id: int, key: str) -> list[dict[str, Any]]:
    response = client.get(f"/api/v1/runs/{run_id}/history", params={"key": key, "limit": 10_000})
    assert response.status_code == 200, response.text
    points: list[dict[str, Any]] = response.json()["points"]
    return points


def test_a_loss_growing_to_1e300_is_stopped_by_the_default_policy_and_every_point_is_stored(
    client: httpx.Client,
) -> None:
    # It once made every later batch of its run fail with a 500: the rules overflowed, and nothing stopped.
    run = create_run(client, {"monitor": "val/loss", "mode": "min"}, planned_steps=200)
    values = [10.0 ** (20 * i) for i in range(16)]  # 1 .. 1e300
    answers = []
    for step, value in enumerate(values):
        response = post(client, run["id"], {"points": [{"key": "val/loss", "step": step, "value": value}]})
        assert response.status_code == 200, response.text
        answers.append(response.json())
    stops = [d for answer in answers for d in answer["decisions"] if d["action"] == "stop"]
    assert [s["rule"] for s in stops] == ["divergence"]
    # 1e20 and 1e40: two evaluations in a row more than ten times the run's scale (1) past its best, the
    # second no better (the default confirms a divergence since 2026-11-28: a spike that falls back is
    # recovering).
    assert stops[0]["step"] == 2
    assert stops[0]["best_step"] == 0
    assert [p["value"] for p in history(client, run["id"], "val/loss")] == values


def _series(key: str, steps: list[int], values: list[Any]) -> dict[str, Any]:
    return {"series": [{"key": key, "steps": steps, "values": values}]}


def test_a_late_nan_is_judged_and_stops_the_run(client: httpx.Client) -> None:
    # Steps 10-19, then 0-9 with a NaN at step 5: the NaN was stored and never judged.
    run = create_run(client, {"monitor": "val/loss", "mode": "min"})
    first = post(
        client, run["id"], _series("val/loss", list(range(10, 20)), [1.0 - 0.01 * s for s in range(10)])
    )
    assert first.status_code == 200
    assert first.json()["late_points"] == 0
    late_values: list[Any] = [1.0] * 10
    late_values[5] = "NaN"
    answer = post(client, run["id"], _series("val/loss", list(range(10)), late_values))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["late_points"] == 10
    stops = [d for d in body["decisions"] if d["action"] == "stop"]
    assert [(d["rule"], d["step"]) for d in stops] == [("non_finite", 5)]
    assert "a late point: it arrived after step 19 was judged" in stops[0]["reason"]
    assert stops[0]["evidence"]["late"] is True
    assert body["decision"]["action"] == "stop"


def test_late_finite_points_are_said_to_be_late_once(client: httpx.Client) -> None:
    run = create_run(client, {"monitor": "acc", "mode": "max"})
    post(client, run["id"], _series("acc", [10, 11], [0.5, 0.6]))
    answers = [post(client, run["id"], _series("acc", [s], [0.4])).json() for s in (3, 4)]
    assert [a["late_points"] for a in answers] == [1, 1]
    alerts = [d for a in answers for d in a["decisions"] if d["action"] == "alert"]
    assert [(d["rule"], d["step"]) for d in alerts] == [("late", 3)]
    assert "arrived after step 11 had been judged" in alerts[0]["reason"]
    assert "non_finite" in alerts[0]["reason"]
    decisions = client.get(f"/api/v1/runs/{run['id']}/decisions").json()["data"]
    assert [d["rule"] for d in decisions if d["action"] == "alert"] == ["late"]
    # Alerts are for people: the trainer's latest decision is still about the monitored steps.
    assert answers[-1]["decision"]["action"] != "alert"


def test_a_rate_sent_after_its_step_was_judged_is_said_once(client: httpx.Client) -> None:
    """The default reads the learning rate at each judged step; a client that sends it in a batch after the
    monitored value's judges that step with the rate before it. Said once, as an alert naming the key."""
    run = create_run(client, {"monitor": "val/acc", "mode": "max"}, planned_steps=100)
    first = post(client, run["id"], _series("val/acc", [0, 1], [0.3, 0.4])).json()
    assert first["decisions"][-1]["rule"] == "checkpoint"
    answers = [post(client, run["id"], _series("lr", [1], [0.1])).json()]
    answers.append(
        post(
            client,
            run["id"],
            {"series": [*_series("val/acc", [2], [0.5])["series"], *_series("lr", [2], [0.1])["series"]]},
        ).json()
    )
    answers.append(post(client, run["id"], _series("val/acc", [3], [0.6])).json())
    answers.append(post(client, run["id"], _series("lr", [3], [0.1])).json())  # again: not said again
    answers.append(post(client, run["id"], _series("lr", [0], [0.1])).json())  # not the step judged last
    alerts = [d for a in answers for d in a["decisions"] if d["action"] == "alert"]
    assert [(d["rule"], d["step"]) for d in alerts] == [("companion_late", 1)]
    assert alerts[0]["reason"].startswith(
        "lr at step 1 (0.1) arrived after step 1 of val/acc had been judged, so the rules read no value of it"
    )
    assert alerts[0]["evidence"] == {
        "key": "lr",
        "step": 1,
        "monitor": "val/acc",
        "value": 0.1,
        "read_instead": None,
    }
    assert answers[0]["decision"]["action"] != "alert"  # alerts are for people
    decisions = client.get(f"/api/v1/runs/{run['id']}/decisions").json()["data"]
    assert [d["rule"] for d in decisions if d["action"] == "alert"] == ["companion_late"]


def test_a_late_rate_that_the_rules_read_anyway_is_not_said(client: httpx.Client) -> None:
    """A rate logged every step whose value at the judged step arrives after it changed nothing the rules
    read (the value before it is the same to 1%): not said; one that changed is."""
    run = create_run(client, {"monitor": "val_loss", "mode": "min"}, planned_steps=100)
    post(
        client,
        run["id"],
        {"series": [_series("val_loss", [0], [2.0])["series"][0], _series("lr", [0], [0.1])["series"][0]]},
    )
    post(client, run["id"], _series("val_loss", [1], [1.5]))
    same = post(client, run["id"], _series("lr", [1], [0.0999])).json()
    post(client, run["id"], _series("val_loss", [2], [1.2]))
    changed = post(client, run["id"], _series("lr", [2], [0.01])).json()
    assert [d["rule"] for d in same["decisions"]] == []
    assert [(d["rule"], d["step"]) for d in changed["decisions"]] == [("companion_late", 2)]
    assert "so the rules read 0.0999, its value before that step" in changed["decisions"][0]["reason"]


def _together(*series: dict[str, Any]) -> dict[str, Any]:
    return {"series": [one for body in series for one in body["series"]]}


def test_a_rate_logged_in_another_step_unit_than_the_monitor_is_said_once(client: httpx.Client) -> None:
    """The rate at the global step, the validation at the epoch: the rules read the rate at or before each
    epoch's step, from the start of training, and the default's rate guards never lift. Said once."""
    run = create_run(client, {"monitor": "val/acc", "mode": "max"}, planned_steps=20)
    answers = [
        post(
            client, run["id"], _together(_series("val/acc", [0], [0.3]), _series("lr", [0, 1, 2], [0.1] * 3))
        ),
        post(
            client,
            run["id"],
            _together(_series("lr", [400, 401], [0.09] * 2), _series("val/acc", [1], [0.5])),
        ),
        post(client, run["id"], _together(_series("val/acc", [2], [0.6]), _series("lr", [800], [0.08]))),
    ]
    alerts = [d for a in answers for d in a.json()["decisions"] if d["action"] == "alert"]
    assert [(d["rule"], d["step"]) for d in alerts] == [("companion_steps", 1)]
    assert alerts[0]["reason"].startswith(
        "lr comes at steps from 400 in the batch that brings val/acc at step 1"
    )
    assert alerts[0]["evidence"] == {"key": "lr", "key_step": 400, "monitor": "val/acc", "monitor_step": 1}
    # One step unit: the rate logged over the next training steps, in the validation's batch, says nothing.
    same = create_run(client, {"monitor": "val/acc", "mode": "max"}, planned_steps=2000)
    quiet = [
        post(
            client,
            same["id"],
            _together(_series("val/acc", [s], [0.5]), _series("lr", [s + 1, s + 2], [0.1] * 2)),
        )
        for s in (0, 400, 800)
    ]
    assert [d["rule"] for a in quiet for d in a.json()["decisions"] if d["action"] == "alert"] == []


def test_a_rate_logged_on_its_own_in_another_step_unit_is_said_once(client: httpx.Client) -> None:
    """The rate logged at every training step goes in batches of its own, between two evaluations: the
    batch that brings the monitored value holds none of it, and until 2026-11-26 nothing was said. Compared
    with the step judged last, from step 1 on, and with the spacing of the last two evaluations: a loop
    evaluating at global steps 0, 100, 200 logs the rate at 1..100 between, in the same unit, and hears
    nothing, nor does one evaluating at steps 99, 399, 699."""
    run = create_run(client, {"monitor": "val/acc", "mode": "max"}, planned_steps=20)
    answers = [post(client, run["id"], _series("lr", list(range(100)), [0.1] * 100))]  # epoch 0's batches
    answers.append(post(client, run["id"], _series("val/acc", [0], [0.3])))
    answers.append(post(client, run["id"], _series("lr", list(range(100, 200)), [0.1] * 100)))  # J = 0
    answers.append(post(client, run["id"], _series("val/acc", [1], [0.4])))
    answers.append(post(client, run["id"], _series("lr", list(range(200, 300)), [0.09] * 100)))  # said
    answers.append(post(client, run["id"], _series("val/acc", [2], [0.5])))
    answers.append(post(client, run["id"], _series("lr", list(range(300, 400)), [0.08] * 100)))  # not again
    alerts = [d for a in answers for d in a.json()["decisions"] if d["action"] == "alert"]
    assert [(d["rule"], d["step"]) for d in alerts] == [("companion_steps", 1)]
    assert alerts[0]["reason"].startswith(
        "lr comes at steps from 200 after step 1 of val/acc was judged: they seem to be logged in different "
        "step units (a global step and an epoch)"
    )
    assert alerts[0]["evidence"] == {"key": "lr", "key_step": 200, "monitor": "val/acc", "monitor_step": 1}
    # One step unit, evaluated at global steps 0, 100, 200 with the rate between: nothing said.
    same = create_run(client, {"monitor": "val/acc", "mode": "max"}, planned_steps=400)
    quiet = []
    for at in (0, 100, 200):
        quiet.append(post(client, same["id"], _series("val/acc", [at], [0.5])))
        quiet.append(post(client, same["id"], _series("lr", list(range(at + 1, at + 101)), [0.1] * 100)))
    # One step unit, evaluated at the end of epoch 0 and then every 3 epochs of 100 steps (``if epoch % 3
    # == 0``: steps 99, 399, 699): 300 steps of rate after the first evaluation, in its unit. Until the
    # spacing of the last two evaluations was read, this was said at the batch from step 300.
    every_third = create_run(client, {"monitor": "val/acc", "mode": "max"}, planned_steps=1000)
    quiet.append(post(client, every_third["id"], _series("lr", list(range(100)), [0.1] * 100)))
    for at in (99, 399, 699):
        quiet.append(post(client, every_third["id"], _series("val/acc", [at], [0.5])))
        for start in range(at + 1, at + 301, 100):
            steps = list(range(start, start + 100))
            quiet.append(post(client, every_third["id"], _series("lr", steps, [0.1] * 100)))
    assert [d["rule"] for a in quiet for d in a.json()["decisions"] if d["action"] == "alert"] == []


def _raw(client: httpx.Client, method: str, path: str, text: str) -> httpx.Response:
    return client.request(method, path, content=text, headers={"content-type": "application/json"})


def _batch(points: str) -> str:
    return '{"batch_id": "%s", "points": [%s]}' % (uuid.uuid4().hex, points)  # noqa: UP031 - JSON braces


def test_numbers_float64_cannot_hold_are_refused_naming_the_field(client: httpx.Client) -> None:
    run = create_run(client)
    path = f"/api/v1/runs/{run['id']}/metrics"
    cases = {
        # an integer past float64, in either wire form
        _batch('{"key": "a", "step": 0, "value": %d}' % 10**400): ["body", "points", 0, "value"],  # noqa: UP031
        '{"batch_id": "b", "series": [{"key": "a", "steps": [0, 1], "values": [1.0, %d]}]}'  # noqa: UP031
        % 10**400: ["body", "series", 0, "values"],
        # literals that would silently become another number: inf and 0.0
        _batch('{"key": "a", "step": 0, "value": 1.5e400}'): ["body", "points", 0, "value"],
        '{"batch_id": "c", "series": [{"key": "a", "steps": [0, 1], "values": [0.5, -2e-400]}]}': [
            "body",
            "series",
            0,
            "values",
            1,
        ],
        # only the documented spellings of NaN and infinity
        _batch('{"key": "a", "step": 0, "value": "nan"}'): ["body", "points", 0, "value"],
        _batch('{"key": "a", "step": 0, "value": " NaN "}'): ["body", "points", 0, "value"],
        _batch('{"key": "a", "step": 0, "value": "-INF"}'): ["body", "points", 0, "value"],
        # a key that is not text
        _batch('{"key": "a\\ud800", "step": 0, "value": 1}'): ["body", "points", 0, "key"],
    }
    for body, loc in cases.items():
        response = _raw(client, "POST", path, body)
        assert response.status_code == 422, (body[:80], response.text)
        assert response.json()["detail"][0]["loc"] == loc, body[:80]
    assert client.get(f"/api/v1/runs/{run['id']}/keys").json()["keys"] == []  # nothing half-written
    # What float64 holds is kept exactly: the smallest subnormal, the largest finite, the documented literals.
    ok = _raw(
        client,
        "POST",
        path,
        '{"batch_id": "ok", "series": [{"key": "a", "steps": [0, 1, 2, 3, 4], '
        '"values": [5e-324, 1.7976931348623157e308, NaN, "-Infinity", 0e-500]}]}',
    )
    assert ok.status_code == 200, ok.text
    values = [p["value"] for p in history(client, run["id"], "a")]
    assert values == [5e-324, 1.7976931348623157e308, "NaN", "-Infinity", 0.0]


def test_integers_past_what_the_stores_hold_are_422_naming_the_parameter(client: httpx.Client) -> None:
    run = create_run(client)
    cases = [
        ("/api/v1/runs", {"offset": 2**63}, "offset"),
        (f"/api/v1/runs/{run['id']}/history", {"key": "a", "rank": 2**70}, "rank"),
        (f"/api/v1/runs/{run['id']}/history", {"key": "a", "start_step": 2**71}, "start_step"),
        (f"/api/v1/runs/{run['id']}/series", {"key": "a", "rank": 2**70}, "rank"),
        (f"/api/v1/runs/{run['id']}/decision", {"after": 2**70}, "after"),
        (f"/api/v1/runs/{run['id']}/decision", {"step": 2**70}, "step"),
    ]
    for path, params, name in cases:
        response = client.get(path, params=params)
        assert response.status_code == 422, (path, params, response.text)
        assert response.json()["detail"][0]["loc"] == ["query", name]


def test_stored_json_is_bounded_so_no_write_can_break_anothers_reads(client: httpx.Client) -> None:
    deep: Any = 1
    for _ in range(300):
        deep = {"a": deep}
    run = create_run(client)
    refused = [
        client.post("/api/v1/runs", json={"project": "tests", "config": deep}),
        client.patch(f"/api/v1/runs/{run['id']}/summary", json={"summary": {"x": deep}}),
        _raw(client, "POST", "/api/v1/runs", '{"project": "tests", "config": {"a": %d}}' % 10**30),  # noqa: UP031
        client.post("/api/v1/runs", json={"project": "tests", "config": {"a": "\x00"}}),
        client.post("/api/v1/runs", json={"project": "tests", "config": {"a": "b" * 300_000}}),
        client.post("/api/v1/runs", json={"project": "tests", "tags": ["t" * 201]}),
    ]
    for response in refused:
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0]["loc"][:2] in (
            ["body", "config"],
            ["body", "summary"],
            ["body", "tags"],
        )
    # Exactly the bound is accepted, NaN is kept as the API spells it, and every read still works.
    at_bound: Any = 1
    for _ in range(31):
        at_bound = {"a": at_bound}
    made = _raw(
        client,
        "POST",
        "/api/v1/runs",
        json.dumps({"project": "tests", "config": {"deep": at_bound, "lr": math.nan}}),
    )
    assert made.status_code == 201, made.text
    assert made.json()["config"]["lr"] == "NaN"
    assert (
        client.patch(f"/api/v1/runs/{run['id']}/summary", json={"summary": {"x": at_bound}}).status_code
        == 200
    )
    for path in (
        "/api/v1/runs",
        "/api/v1/runs?project=tests",
        f"/api/v1/runs/{run['id']}",
        f"/api/v1/runs/{run['id']}/summary",
        f"/api/v1/runs/{made.json()['id']}",
    ):
        assert client.get(path).status_code == 200, path


def test_idle_half_sent_requests_do_not_lock_new_clients_out(tmp_path: Path) -> None:
    # 1,100 connections that never finish their headers took every descriptor of a tracker allowed 1,024.
    tracker = TrackerProcess(tmp_path / "tracker", max_files=1024)
    idle: list[socket.socket] = []
    try:
        for _ in range(1100):
            sock = socket.create_connection(("127.0.0.1", tracker.port), timeout=5)
            sock.sendall(b"GET /api/v1/health HTTP/1.1\\r\\nHost: x\\r\\n")  # and never the blank line
            idle.append(sock)
        started = time.monotonic()
        with httpx.Client(base_url=tracker.url, timeout=5) as client:
            response = client.get("/api/v1/health")
        took = time.monotonic() - started
        print(f"health answered in {took * 1000:.1f} ms beside 1,100 idle half-sent requests")
        assert response.status_code == 200
        assert took < 2.0
        assert tracker.process.poll() is None
    finally:
        for sock in idle:
            sock.close()
        tracker.stop()


def test_the_body_limit_holds_on_every_route_without_a_content_length(client: httpx.Client) -> None:
    # A chunked 100 MiB config was read whole and stored: only ingest counted the bytes it read.
    run = create_run(client)

    def chunked(total: int) -> Any:
        yield b'{"project": "tests", "config": {"a": "'
        chunk = b"x" * (1024 * 1024)
        for _ in range(total // len(chunk)):
            yield chunk
        yield b'"}}'

    for method, path in [
        ("POST", "/api/v1/runs"),
        ("PATCH", f"/api/v1/runs/{run['id']}/summary"),
        ("POST", "/api/v1/projects/tests/webhooks"),
        ("POST", f"/api/v1/runs/{run['id']}/metrics"),
    ]:
        response = client.request(
            method, path, content=chunked(40 * 1024 * 1024), headers={"content-type": "application/json"}
        )
        assert response.status_code == 413, (path, response.text[:200])
        assert "over the limit" in response.json()["detail"]


def test_text_the_stores_cannot_hold_is_422_in_every_place(client: httpx.Client) -> None:
    # On PostgreSQL a NUL in a query parameter or a webhook secret was a 500 (its text cannot hold NUL).
    run = create_run(client)
    cases = [
        client.get(f"/api/v1/runs/{run['id']}/history", params={"key": "a\x00b"}),
        client.get(f"/api/v1/runs/{run['id']}/series", params={"key": "a\x00b"}),
        client.get("/api/v1/runs", params={"project": "p\x00"}),
        client.post(
            "/api/v1/projects/tests/webhooks",
            json={"url": "http://127.0.0.1:9/h", "events": ["stop"], "secret": "0123456789abcdef\x00"},
        ),
        client.get("/api/v1/projects/te%00sts/webhooks"),
    ]
    for response in cases:
        assert response.status_code == 422, (response.request.url, response.text)


def _health_while_posting(
    client: httpx.Client, path: str, body: str
) -> tuple[httpx.Response, list[float], float]:
    """Post ``body`` from another thread, probing /api/v1/health every 5 ms meanwhile: the answer, each
    probe's seconds, and the post's seconds."""
    answer: dict[str, httpx.Response] = {}
    took: list[float] = []

    def send() -> None:
        with httpx.Client(base_url=str(client.base_url), timeout=60) as other:
            started = time.perf_counter()
            answer["response"] = other.post(path, content=body, headers={"content-type": "application/json"})
            took.append(time.perf_counter() - started)

    sender = threading.Thread(target=send)
    sender.start()
    latencies = []
    with httpx.Client(base_url=str(client.base_url), timeout=10) as probe:
        while sender.is_alive():
            started = time.perf_counter()
            assert probe.get("/api/v1/health").status_code == 200
            latencies.append(time.perf_counter() - started)
            time.sleep(0.005)
    sender.join()
    return answer["response"], latencies, took[0]


def _no_stall(slowest: float, posted: float) -> bool:
    """Whether the slowest health probe shows the event loop free while the batch was handled. A stall
    (the loop blocked by the batch: 1.5 to 2.8 s before the bounds) holds the probe for most of the post;
    a busy host (the suite's other worker, CI) delays one probe by a fraction of it, which on PostgreSQL
    under CI once reached 0.83 s."""
    return slowest < max(0.5, 0.5 * posted)


@pytest.mark.parametrize(
    ("form", "batch", "limit"),
    [
        (
            "series",
            {"series": [{"key": f"k{i}", "steps": [0], "values": [0.5]} for i in range(100_000)]},
            "at most 10000 distinct series",
        ),
        (
            "points",
            {"points": [{"key": "k", "step": i, "value": 0.5} for i in range(100_000)]},
            "the points form holds at most 10000 points",
        ),
    ],
)
def test_a_batch_past_the_limits_is_refused_at_once_and_health_stays_quick(
    client: httpx.Client, form: str, batch: dict[str, Any], limit: str
) -> None:
    # 100,000 distinct keys in one batch was a 500 (too many SQL variables), took the tracker to 1.17 GB,
    # and held health checks up for 2.8 s. Now it is refused from a count in the raw body, before anything
    # is validated, with the limit named.
    run = create_run(client)
    body = json.dumps({"batch_id": uuid.uuid4().hex, **batch})
    response, latencies, posted = _health_while_posting(client, f"/api/v1/runs/{run['id']}/metrics", body)
    assert response.status_code == 422, response.text[:300]
    assert response.json()["detail"][0]["loc"] == ["body", form]
    assert limit in response.json()["detail"][0]["msg"]
    print(f"health: {len(latencies)} probes during the {form} batch, slowest {max(latencies) * 1000:.1f} ms")
    # The stall this guards against held every probe for 2.8 s. A probe is also one HTTP round trip on a
    # host that may be busy (the suite beside a corpus run, CI), which once took past 0.1 s on its own, so the
    # bar is the one the stored-batch test below keeps for its slowest probe.
    assert _no_stall(max(latencies), posted), (max(latencies), posted)
    assert client.get(f"/api/v1/runs/{run['id']}/keys").json()["keys"] == []


def test_health_stays_quick_while_the_largest_legal_batch_is_stored(client: httpx.Client) -> None:
    run = create_run(client)
    series = [{"key": f"k{i}", "steps": list(range(10)), "values": [0.5] * 10} for i in range(10_000)]
    body = json.dumps({"batch_id": uuid.uuid4().hex, "series": series})
    response, latencies, posted = _health_while_posting(client, f"/api/v1/runs/{run['id']}/metrics", body)
    assert response.status_code == 200, response.text[:300]
    assert response.json()["accepted"] == 100_000
    latencies.sort()
    print(
        f"health: {len(latencies)} probes while 10,000 series x 10 points were stored, median "
        f"{latencies[len(latencies) // 2] * 1000:.1f} ms, slowest {latencies[-1] * 1000:.1f} ms, post "
        f"{posted * 1000:.0f} ms"
    )
    assert latencies[len(latencies) // 2] < 0.1
    assert _no_stall(latencies[-1], posted), (latencies[-1], posted)


def test_json_an_older_version_stored_past_the_bounds_still_reads(tmp_path: Path) -> None:
    # Rows written before the write-time bound (a config 300 levels deep) must not fail every read.
    from sqlalchemy import create_engine, text

    tracker = TrackerProcess(tmp_path / "tracker")
    try:
        with httpx.Client(base_url=tracker.url, timeout=30) as client:
            run = create_run(client)
            deep: Any = 1
            for _ in range(300):
                deep = {"a": deep}
            engine = create_engine(f"sqlite:///{tmp_path / 'tracker' / 'plateau.db'}")
            with engine.begin() as connection:
                connection.execute(
                    text("UPDATE run SET config = :c, summary = :c WHERE id = :id"),
                    {"c": json.dumps({"deep": deep, "lr": 0.1}), "id": run["id"]},
                )
            engine.dispose()
            for path in ("/api/v1/runs", f"/api/v1/runs/{run['id']}", f"/api/v1/runs/{run['id']}/summary"):
                response = client.get(path)
                assert response.status_code == 200, (path, response.text[:200])
            config = client.get(f"/api/v1/runs/{run['id']}").json()["config"]
            assert config["lr"] == 0.1
            shown = config["deep"]
            for _ in range(31):
                shown = shown["a"]
            assert shown == "(nested deeper than 32 levels: not shown)"
    finally:
        tracker.stop()
