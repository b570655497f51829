"""callbacks: a due job calls an HTTP endpoint, signed as Standard Webhooks sign, retried with
backoff on failures that may pass, dead-lettered on the others, each endpoint held to its own
limits so that a dead one delays nobody else; the receivers here are local HTTP servers, and
every signature is checked with Python's own hmac."""

import base64
import hashlib
import hmac
import http.server
import json
import re
import socket
import ssl
import threading
import time
import uuid

from harness import LEVELS_DEFAULT, Delayqd, Reader, now_ms, wait_until
from test_security import make_cert

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
NEW_SECRET = "whsec_" + base64.b64encode(b"a newer key of thirty-two bytes!").decode()


def verify(secrets, headers, body):
    """The Standard Webhooks check: some v1 signature of "id.timestamp.body" by some secret."""
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    want = {base64.b64encode(hmac.new(base64.b64decode(s[len("whsec_"):]), signed,
                                      hashlib.sha256).digest()).decode() for s in secrets}
    got = {v.split(",", 1)[1] for v in headers.get("webhook-signature", "").split() if v.startswith("v1,")}
    return bool(want & got)


class Receiver:
    """A local HTTP endpoint: records every call (when it arrived, method, path, headers, body)
    and answers as answer(path, calls of that path so far) says: a status, (status, headers), or
    "stall" (read the request, never answer)."""

    def __init__(self, answer=None, tls=None):
        self.calls = []
        self.lock = threading.Lock()
        self.answer = answer or (lambda path, n: 200)
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def handle_call(self):
                t = now_ms()
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    n = sum(1 for c in receiver.calls if c["path"] == self.path)
                    receiver.calls.append({"ms": t, "method": self.command, "path": self.path,
                                           "headers": {k.lower(): v for k, v in self.headers.items()},
                                           "body": body})
                a = receiver.answer(self.path, n)
                if a == "stall":
                    time.sleep(60)
                    return
                status, extra = a if isinstance(a, tuple) else (a, {})
                text = json.dumps({"status": status}).encode()
                self.send_response(status)
                for k, v in extra.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            do_POST = do_PUT = handle_call

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 1024   # a thousand calls may connect at once

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, address: None   # a caller gone: its business
        self.scheme = "http"
        if tls:   # (cert, key): HTTPS
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path="/hook"):
        return f"{self.scheme}://127.0.0.1:{self.port}{path}"

    def of(self, path):
        with self.lock:
            return [c for c in self.calls if c["path"] == path]

    def by_id(self):
        out = {}
        with self.lock:
            for c in self.calls:
                out.setdefault(c["headers"]["webhook-id"], []).append(c)
        return out

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def callbacks_conf(extra=""):
    return (f'secret = "{SECRET}"; allow_private = true; direct_urls = true; '
            f'retry = {{ min_backoff_ms = 300; max_backoff_ms = 3000; max_attempts = 5; }}; {extra}')


def test_due_jobs_call_back_signed_once_and_never_early(stack):
    rx = Receiver()
    d = Delayqd(stack, extra={"callbacks": callbacks_conf()}).start()
    ids = {}
    for i in range(20):
        cb = {"url": rx.url(f"/hook/{i % 2}"), "headers": {"X-Order": str(i)}}
        if i % 4 == 3:
            cb["method"] = "PUT"
        body = {"order": i} if i % 2 == 0 else f"order {i}"
        ids[d.add_ok(delay_ms=1000 + 50 * i, body=body, callback=cb)] = (i, body)
    wait_until(lambda: len(rx.calls) >= 20, 20, "20 calls")
    time.sleep(0.5)
    calls = rx.by_id()
    assert set(calls) == set(ids), (set(calls) ^ set(ids))
    for job_id, (i, body) in ids.items():
        assert len(calls[job_id]) == 1, calls[job_id]   # once
        c = calls[job_id][0]
        got = d.get(job_id)
        assert c["ms"] >= got["exec_time_ms"], (c["ms"], got)   # never early
        assert verify([SECRET], c["headers"], c["body"]), c["headers"]
        assert abs(int(c["headers"]["webhook-timestamp"]) - time.time()) < 60
        assert c["method"] == ("PUT" if i % 4 == 3 else "POST")
        assert c["headers"]["x-order"] == str(i)
        if isinstance(body, dict):
            assert json.loads(c["body"]) == body and c["headers"]["content-type"] == "application/json"
        else:
            assert c["body"] == body.encode() and c["headers"]["content-type"].startswith("text/plain")
        assert got["state"] == "delivered", got
        assert got["callback"]["attempts"] == 1 and got["callback"]["last_status"] == 200, got
    metrics = d.metrics_text()
    assert f'delayq_callback_calls_total{{endpoint="http://127.0.0.1:{rx.port}",class="2xx"}} 20' in metrics
    assert "delayq_callback_lateness_ms_count 20" in metrics

    # Bad callbacks are refused at add, naming the field.
    status, doc = d.add(delay=1, callback={"url": "ftp://x/"})
    assert status == 400 and "callback.url" in doc["message"], doc
    status, doc = d.add(delay=1, callback={"url": rx.url(), "headers": {"webhook-id": "x"}})
    assert status == 400 and "webhook-id" in doc["message"], doc
    status, doc = d.add(delay=1, callback={"endpoint": "nope"})
    assert status == 400 and "callbacks.endpoints" in doc["message"], doc
    rx.close()


def test_failures_retry_with_backoff_or_go_to_the_dead_letters(stack):
    def answer(path, n):
        if path == "/flaky":
            return 500 if n < 2 else 200
        if path == "/later":
            return (503, {"Retry-After": "2"}) if n == 0 else 200
        if path == "/moved":
            return (302, {"Location": "/elsewhere"})
        return {"/bad": 400, "/down": 502}.get(path, 200)

    rx = Receiver(answer)
    d = Delayqd(stack, extra={"callbacks": callbacks_conf()}).start()
    dlq = Reader(stack, d.dlq)
    flaky = d.add_ok(delay=1, body="f", callback={"url": rx.url("/flaky")})
    later = d.add_ok(delay=1, body="l", callback={"url": rx.url("/later")})
    bad = d.add_ok(delay=1, body="b", callback={"url": rx.url("/bad")})
    moved = d.add_ok(delay=1, body="m", callback={"url": rx.url("/moved")})
    down = d.add_ok(delay=1, body="d", callback={"url": rx.url("/down"), "retry": {"max_attempts": 2}})

    wait_until(lambda: len(rx.of("/flaky")) >= 1, 10, "the first call")
    wait_until(lambda: d.get(flaky)["callback"]["attempts"] >= 1 and d.get(flaky)["state"] == "pending",
               5, "the retry planned")
    g = d.get(flaky)
    assert g["callback"]["last_status"] == 500 and g["callback"]["last_error"] == "HTTP 500", g
    assert g["callback"]["next_attempt_ms"] == g["exec_time_ms"] > rx.of("/flaky")[0]["ms"], g
    def waiting():   # counted at most a second ago; /later's retry waits 2 s
        st, doc = d.http("GET", "/delay-queue/api/stats")
        return st == 200 and doc["data"]["callbacks"]["waiting_for_retry"] >= 1
    wait_until(waiting, 5, "/stats to count a retry waiting")
    wait_until(lambda: d.get(flaky)["state"] == "delivered", 15, "the third call to succeed")
    calls = rx.of("/flaky")
    assert len(calls) == 3, calls
    assert {c["headers"]["webhook-id"] for c in calls} == {flaky}   # one id for every attempt
    assert [c["headers"]["webhook-attempt"] for c in calls] == ["1", "2", "3"], calls
    assert calls[1]["ms"] - calls[0]["ms"] >= 300      # min_backoff_ms at least, never less
    assert calls[2]["ms"] - calls[1]["ms"] >= 600      # doubled
    assert all(verify([SECRET], c["headers"], c["body"]) for c in calls)
    assert d.get(flaky)["callback"]["attempts"] == 3

    wait_until(lambda: d.get(later)["state"] == "delivered", 15, "the call after Retry-After")
    calls = rx.of("/later")
    assert len(calls) == 2 and calls[1]["ms"] - calls[0]["ms"] >= 2000 - 50, calls

    letters = {}
    wait_until(lambda: {bad, moved, down} <= set(letters.update(
        {m["headers"]["dq-id"]: m for m in dlq.all()}) or letters), 20, "three dead letters")
    assert len(rx.of("/bad")) == 1 and len(rx.of("/moved")) == 1 and len(rx.of("/down")) == 2
    h = letters[bad]["headers"]
    assert h["dq-status"] == "400" and h["dq-attempts"] == "1", h
    assert h["dq-error"] == "HTTP 400 (not retried)" and "dq-topic" not in h, h
    assert json.loads(h["dq-callback"]) == {"url": rx.url("/bad")}, h   # as added: it can be added again
    assert json.loads(h["dq-response"]) == {"status": 400}, h
    assert letters[bad]["payload"] == "b"
    assert letters[moved]["headers"]["dq-status"] == "302", letters[moved]
    h = letters[down]["headers"]
    assert h["dq-error"] == "gave up after 2 attempts: HTTP 502" and h["dq-attempts"] == "2", h
    g = d.get(bad)
    assert g["state"] == "failed" and "HTTP 400" in g["error"], g
    assert d.metric("delayq_callback_retries_total" + f'{{endpoint="http://127.0.0.1:{rx.port}"}}') >= 4
    rx.close()


def test_a_dead_endpoint_delays_no_other_nor_kafka(stack):
    stalled = Receiver(lambda path, n: "stall")
    healthy = Receiver()
    d = Delayqd(stack, extra={"callbacks": callbacks_conf(
        "timeout_ms = 4000; max_concurrency = 4;")}).start()
    topic = "cbk-" + uuid.uuid4().hex[:6]
    reader = Reader(stack, topic)
    due = now_ms() + 2000
    stuck = [d.add_ok(deliver_at_ms=due, body=str(i), callback={"url": stalled.url()}) for i in range(40)]
    ok = [d.add_ok(deliver_at_ms=due + 5, body=str(i), callback={"url": healthy.url()}) for i in range(40)]
    kafka = [d.add_ok(topic=topic, deliver_at_ms=due + 10, body=str(i)) for i in range(40)]
    wait_until(lambda: len(healthy.calls) >= 40, 20, "the healthy endpoint's calls")
    reader.wait_ids(kafka, 20)
    # The dead endpoint's first calls are still hanging (4 s timeout) while every other job
    # arrived: nothing waited for it.
    latest = max(c["ms"] for c in healthy.calls)
    latest_kafka = max(m["recv_ms"] for m in reader.all())
    print(f"    healthy endpoint: last call {latest - due} ms after due; Kafka: {latest_kafka - due} ms;"
          f" the dead one holds {len(stalled.calls)} calls")
    assert latest < due + 4000 and latest_kafka < due + 4000, (latest - due, latest_kafka - due)
    assert len(stalled.calls) <= 4 + 1, len(stalled.calls)    # its own max_concurrency
    assert d.get(stuck[0])["state"] in ("delivering", "pending")
    assert all(d.get(j)["state"] == "delivered" for j in ok[:5])
    stalled.close()
    healthy.close()


def test_private_addresses_are_refused_unless_allowed(stack):
    rx = Receiver()
    d = Delayqd(stack, extra={"callbacks": f'secret = "{SECRET}";'}).start()
    dlq = Reader(stack, d.dlq)
    job = d.add_ok(delay=1, body="x", callback={"url": rx.url()})
    named = d.add_ok(delay=1, body="n", callback={"url": f"http://localhost:{rx.port}/"})
    letters = {m["headers"]["dq-id"]: m for m in dlq.wait_count(2, 15)}
    m = letters[job]
    assert "127.0.0.1" in m["headers"]["dq-error"] and "not retried" in m["headers"]["dq-error"], m
    err = letters[named]["headers"]["dq-error"]   # a name is judged by the address it resolves to
    assert "localhost" in err and "loopback" in err and "not allowed" in err, err
    assert rx.calls == []
    d.stop()
    allowed = Delayqd(stack, extra={"callbacks": 'networks = [ "127.0.0.0/8" ];'}).start()
    job = allowed.add_ok(delay=1, body="y", callback={"url": rx.url()})
    wait_until(lambda: rx.by_id().get(job), 15, "the call to an allowed network")
    assert "webhook-signature" not in rx.calls[0]["headers"]   # no secret: unsigned
    rx.close()


def test_named_endpoints_rotated_secrets_and_a_topic_too(stack):
    rx = Receiver()
    conf = callbacks_conf(f'endpoints = {{ billing = {{ url = "{rx.url("/billing")}"; '
                          f'secret = [ "{NEW_SECRET}", "{SECRET}" ]; }}; }};')
    d = Delayqd(stack, extra={"callbacks": conf}).start()
    topic = "cbt-" + uuid.uuid4().hex[:6]
    reader = Reader(stack, topic)
    job = d.add_ok(delay=1, body={"invoice": 1}, callback={"endpoint": "billing"})
    both = d.add_ok(topic=topic, delay=1, body="both", callback={"url": rx.url("/also")})
    wait_until(lambda: rx.of("/billing") and rx.of("/also"), 15, "both calls")
    c = rx.of("/billing")[0]
    assert c["headers"]["webhook-id"] == job
    assert len(c["headers"]["webhook-signature"].split()) == 2   # one per secret
    assert verify([NEW_SECRET], c["headers"], c["body"]) and verify([SECRET], c["headers"], c["body"])
    got = reader.wait_ids([both], 15)[both]
    assert len(got) == 1 and got[0]["payload"] == "both", got
    assert got[0]["recv_ms"] >= rx.of("/also")[0]["ms"]   # on to its topic once called
    assert d.get(job)["callback"]["endpoint"] == "billing"
    rx.close()


def test_named_endpoints_of_one_origin_each_have_their_own_queue_and_limits(stack):
    """Two paths of one host, each a named endpoint: /reports stalls (2 calls at a time, 3 s
    timeout), /orders answers. The orders calls are made at their times: a named endpoint has
    its own queue and limits, where the URLs of one origin share theirs (sharing, the orders
    waited behind the stalled reports, 3 s and more, or were sent back as busy)."""
    rx = Receiver(lambda path, n: "stall" if path == "/reports" else 200)
    conf = callbacks_conf(f'endpoints = {{ reports = {{ url = "{rx.url("/reports")}"; max_concurrency = 2; '
                          f'timeout_ms = 3000; }}; orders = {{ url = "{rx.url("/orders")}"; }}; }};')
    d = Delayqd(stack, extra={"callbacks": conf}).start()
    for i in range(10):
        d.add_ok(delay_ms=1000, body=str(i), callback={"endpoint": "reports"})
    due = {}
    for i in range(10):
        before = now_ms()
        due[d.add_ok(delay_ms=1300, body=str(i), callback={"endpoint": "orders"})] = before + 1300
    wait_until(lambda: len(rx.of("/orders")) >= 10, 20, "the orders calls")
    late = sorted(c["ms"] - due[c["headers"]["webhook-id"]] for c in rx.of("/orders"))
    assert late[-1] <= 1500, late
    # counted by name once answered (the receiver saw each call a moment before)
    wait_until(lambda: 'delayq_callback_calls_total{endpoint="orders",class="2xx"} 10' in d.metrics_text(),
               10, "the orders calls counted")
    assert 'delayq_callback_in_flight{endpoint="reports"} 2' in d.metrics_text()
    rx.close()


def test_a_callback_then_a_pull_topic_is_popped_and_never_in_kafka(stack):
    """A job with a callback and a pull topic is called, then made ready for poppers of that
    topic: popped once with its body, and never produced to a Kafka topic of that name."""
    rx = Receiver()
    d = Delayqd(stack, extra={"callbacks": callbacks_conf(), "pull_topics": ["cbp-*"]}).start()
    topic = "cbp-" + uuid.uuid4().hex[:6]
    reader = Reader(stack, topic)
    by_name = d.add_ok(topic=topic, delay_ms=500, body="by pull.topics", callback={"url": rx.url()})
    asked = d.add_ok(topic="ask-" + topic, delay_ms=500, body="by deliver", deliver="pull",
                     ttr_ms=5000, callback={"url": rx.url()})
    popped = {}
    deadline = time.time() + 20
    while len(popped) < 2 and time.time() < deadline:
        for tp in (topic, "ask-" + topic):
            st, doc = d.http("POST", "/delay-queue/api/jobs/pop", {"topic": tp, "wait_ms": 500})
            assert st == 200, doc
            popped.update({j["id"]: j for j in doc["data"]["jobs"]})
    assert sorted(popped) == sorted([by_name, asked]), popped
    assert popped[by_name]["body"] == "by pull.topics" and popped[asked]["body"] == "by deliver"
    calls = rx.by_id()
    for job_id in (by_name, asked):
        assert len(calls[job_id]) == 1, calls
        assert popped[job_id]["due_ms"] <= calls[job_id][0]["ms"], (popped[job_id], calls[job_id])
    time.sleep(1)
    assert reader.all() == [], reader.all()
    rx.close()


def test_an_onward_delivery_that_fails_after_the_call_retries_the_delivery_not_the_call(stack):
    """Kafka stops while the endpoint answers 2xx: the delivery to the job's topic fails and is
    retried until Kafka is back, and the endpoint is called once."""
    def answer(path, n):
        if n == 0:
            stack.stop_kafka()
        return 200

    rx = Receiver(answer)
    d = Delayqd(stack, extra={"callbacks": callbacks_conf(),
                              "properties": ["message.timeout.ms=3000"]}).start()
    topic = "cbk-" + uuid.uuid4().hex[:6]
    stack.ensure_topic(topic)
    job_id = d.add_ok(topic=topic, delay_ms=500, body="onward", callback={"url": rx.url()})
    try:
        wait_until(lambda: rx.calls, 15, "the call")
        time.sleep(5)   # deliveries to the topic fail meanwhile
        assert d.get(job_id)["state"] == "delivering", d.get(job_id)
    finally:
        stack.start_kafka()
    wait_until(lambda: d.get(job_id)["state"] == "delivered", 60, "the job delivered")
    reader = Reader(stack, topic)   # a consumer of its own, from the topic's start
    got = reader.wait_ids([job_id], 30)[job_id]
    assert len(got) == 1 and got[0]["payload"] == "onward", got
    assert len(rx.calls) == 1, [c["ms"] for c in rx.calls]
    assert d.get(job_id)["callback"]["attempts"] == 1
    rx.close()


def test_kill_during_calls_calls_again_with_the_same_ids(stack):
    slow = Receiver(lambda path, n: (time.sleep(2), 200)[1])
    d = Delayqd(stack, extra={"callbacks": callbacks_conf("max_concurrency = 1000;"),
                              "max_body_bytes": 1 << 20}).start()
    due = now_ms() + 2000
    st, doc = d.http("POST", "/delay-queue/api/jobs/add_batch", {"jobs": [
        {"deliver_at_ms": due, "body": str(i), "callback": {"url": slow.url()}} for i in range(1000)]})
    assert st == 200 and doc["data"]["added"] == 1000, (st, str(doc)[:300])
    ids = [j["job_id"] for j in doc["data"]["jobs"]]
    wait_until(lambda: len(slow.calls) >= 500, 20, "calls in flight")
    d.kill()   # before any was answered: each answer takes 2 s
    before = len(slow.calls)
    d.start()
    wait_until(lambda: set(ids) <= set(slow.by_id()), 60, "every job called")
    wait_until(lambda: all(d.get(j)["state"] == "delivered" for j in ids[::10]), 30, "marked")
    calls = slow.by_id()
    again = [j for j in ids if len(calls[j]) > 1]
    print(f"    {before} calls before the kill; {len(again)} jobs called again after the restart")
    assert again, "the calls in flight at the kill were made again"
    assert set(calls) == set(ids)   # nothing lost, and the repeats carry the same webhook-id
    slow.close()


def test_direct_producers_name_a_callback_in_a_header(stack):
    rx = Receiver(lambda path, n: 503 if path == "/retry" and n == 0 else 200)
    d = Delayqd(stack, extra={"callbacks": callbacks_conf()}).start()
    dlq = Reader(stack, d.dlq)
    sent = now_ms()
    stack.produce(d.delay_topic("1s"), "direct body", key="k1",
                  headers={"dq-callback": json.dumps({"url": rx.url("/direct"), "headers": {"X-A": "1"}})})
    stack.produce(d.delay_topic("1s"), "again", headers={"dq-callback": json.dumps({"url": rx.url("/retry")})})
    stack.produce(d.delay_topic("1s"), "bad", headers={"dq-callback": "{not json"})
    wait_until(lambda: rx.of("/direct") and len(rx.of("/retry")) >= 2, 20, "the direct calls")
    c = rx.of("/direct")[0]
    assert c["body"] == b"direct body" and c["headers"]["x-a"] == "1", c
    assert c["ms"] >= sent + 1000   # never before its timestamp plus the topic's delay
    assert c["headers"]["webhook-id"].startswith(d.delay_topic("1s") + "-"), c["headers"]
    assert verify([SECRET], c["headers"], c["body"])
    first, second = rx.of("/retry")[:2]
    assert first["headers"]["webhook-id"] == second["headers"]["webhook-id"]   # its retry: one id
    assert second["ms"] - first["ms"] >= 150
    m = dlq.wait_count(1, 15)[0]
    assert m["payload"] == "bad" and "dq-callback" in m["headers"]["dq-error"], m
    time.sleep(1)
    assert len(rx.of("/retry")) == 2 and len(rx.of("/direct")) == 1
    rx.close()


def test_an_endpoint_that_stops_answering_holds_back_no_other_job(stack):
    """2,000 calls to an endpoint that takes connections and never answers (timeout 2 s), beside
    200 calls to a healthy endpoint and 200 Kafka jobs due in the same seconds and partitions,
    with delay.max_held = 4000 and the default 13 levels of 8 partitions (a share of 38 messages
    per partition): the dead endpoint's calls go back to wait in Kafka as soon as its calls in
    flight grow old, not after their timeouts fill the partitions' memory, and the 8 busy
    partitions hold what the 96 idle ones leave, not 38 each, so every other job is delivered
    within a second or two of its time (held back, they were 10 s late, or a minute)."""
    stalled = Receiver(lambda path, n: "stall")
    healthy = Receiver()
    d = Delayqd(stack, levels=LEVELS_DEFAULT, partitions=8,
                extra={"callbacks": callbacks_conf("timeout_ms = 2000;"),
                       "max_held": 4000}).start().wait_groups_owned()
    topic = f"{d.name}_biz"
    stack.ensure_topic(topic)
    reader = Reader(stack, topic)
    due_at = now_ms() + 4000
    jobs, kinds = [], ["dead"] * 10 + ["healthy", "kafka"]
    for i in range(2400):
        kind = kinds[i % len(kinds)]
        job = {"delay_ms": due_at + (i * 2000) // 2400 - now_ms(), "body": str(i)}
        if kind == "kafka":
            job["topic"] = topic
        else:
            job["callback"] = {"url": (stalled if kind == "dead" else healthy).url(f"/{kind}")}
        jobs.append(job)
    for at in range(0, len(jobs), 200):
        status, doc = d.http("POST", "/delay-queue/api/jobs/add_batch", {"jobs": jobs[at:at + 200]})
        assert status == 200 and all(j["code"] == 0 for j in doc["data"]["jobs"]), doc
    wait_until(lambda: len(healthy.of("/healthy")) >= 200, 40, "the healthy endpoint's calls")
    got = reader.wait_count(200, 40)
    late_calls = sorted(c["ms"] - int(d.get(c["headers"]["webhook-id"])["exec_time_ms"])
                        for c in healthy.of("/healthy")[:40])
    late_kafka = sorted(m["recv_ms"] - int(m["headers"]["dq-due-ms"]) for m in got)
    assert late_kafka[-1] <= 2000, late_kafka[-20:]
    assert late_calls[-1] <= 2000, late_calls[-20:]
    assert d.metric("delayq_callback_deferrals_total") > 0   # the dead endpoint's went back
    stalled.close()
    healthy.close()
    reader.close()


def test_one_429_slows_its_origin_for_seconds_never_starves_it(stack):
    """One 429 with Retry-After: 2 on one path, then 200 calls to another path of the same
    origin due 4-5 s later: every one is made within 2 s of its due time. The push-back slowed
    the origin from what it took lately, never below a few calls a second (not to the quiet
    moment's call or two), and the answers since have brought the rate back."""
    rx = Receiver(lambda path, n: (429, {"Retry-After": "2"}) if path == "/slow" and n == 0 else 200)
    d = Delayqd(stack, extra={"callbacks": callbacks_conf()}).start()
    d.add_ok(delay_ms=300, body="s", callback={"url": rx.url("/slow")})
    wait_until(lambda: rx.of("/slow"), 15, "the call answered 429")
    due = {}
    for i in range(200):
        delay_ms, before = 4000 + i * 5, now_ms()   # due at this or later: lateness at most
        job = d.add_ok(delay_ms=delay_ms, body=str(i), callback={"url": rx.url("/fast")})
        due[job] = before + delay_ms
    wait_until(lambda: len(rx.of("/fast")) >= 200, 40, "the 200 calls")
    late = sorted(c["ms"] - due[c["headers"]["webhook-id"]] for c in rx.of("/fast"))
    assert late[-1] <= 2000, late[-20:]   # a rate halved from a call or two: 5 s and more
    assert len(rx.of("/slow")) == 2 and rx.of("/slow")[1]["ms"] - rx.of("/slow")[0]["ms"] >= 2000 - 50
    rx.close()


def test_a_dead_endpoints_backlog_waits_in_the_delay_topics_not_in_memory(stack):
    stalled = Receiver(lambda path, n: "stall")
    d = Delayqd(stack, extra={"callbacks": callbacks_conf("timeout_ms = 500; max_concurrency = 2;")}).start()
    first = [d.add_ok(delay=1, body=str(i), callback={"url": stalled.url()}) for i in range(40)]
    wait_until(lambda: d.metric("delayq_callback_retries_total" + f'{{endpoint="http://127.0.0.1:{stalled.port}"}}')
               if "retries_total{" in d.metrics_text() else 0, 15, "timeouts retried")
    later = [d.add_ok(delay_ms=500, body=str(i), callback={"url": stalled.url()}) for i in range(20)]

    def sent_back():
        # a later job sent back without a call (one called before the queue grew may be too,
        # after its calls: under load the first ones' timeouts come later)
        for j in later:
            g = d.get(j)
            if "busy" in (g["callback"]["last_error"] or "") and g["callback"]["attempts"] == 0:
                return g
        return None
    g = wait_until(sent_back, 15, "a later job sent back to wait, not called")
    assert g["state"] == "pending", g
    assert g["exec_time_ms"] > g["created_ms"] + 500, g   # sent back: due later than its add said
    assert d.metric("delayq_callback_deferrals_total") >= 1
    assert any(d.get(j)["callback"]["attempts"] >= 1 for j in first[:4])
    stalled.close()


def test_a_redirect_stays_on_its_origin_unless_allowed_and_never_takes_the_jobs_headers(stack):
    """A Location on another scheme, host or port is dead-lettered (curl would have sent the
    job's headers, API keys included, to whatever host it names); allowed by
    callbacks.redirect_across_origins, the call goes there without the job's own headers."""
    other = Receiver()
    rx = Receiver(lambda path, n: (307, {"Location": other.url("/elsewhere")}) if path == "/away"
                  else 200)
    headers = {"X-Api-Key": "k-" + uuid.uuid4().hex}
    d = Delayqd(stack, extra={"callbacks": callbacks_conf("max_redirects = 2;")}).start()
    dlq = Reader(stack, d.dlq)
    away = d.add_ok(delay_ms=300, body="a", callback={"url": rx.url("/away"), "headers": headers})
    m = dlq.wait_count(1, 20)[0]
    assert m["headers"]["dq-id"] == away and "another origin" in m["headers"]["dq-error"], m
    assert other.calls == []
    d.stop()
    d = Delayqd(stack, extra={"callbacks": callbacks_conf(
        "max_redirects = 2; redirect_across_origins = true;")}).start()
    allowed = d.add_ok(delay_ms=300, body="b", callback={"url": rx.url("/away"), "headers": headers})
    wait_until(lambda: d.get(allowed)["state"] == "delivered", 20, "the call across origins")
    there = other.of("/elsewhere")[0]
    assert there["method"] == "POST" and there["body"] == b"b", there
    assert "x-api-key" not in there["headers"] and there["headers"]["webhook-id"] == allowed, there
    assert verify([SECRET], there["headers"], there["body"])
    assert rx.of("/away")[-1]["headers"]["x-api-key"] == headers["X-Api-Key"]   # its own origin's
    other.close()
    rx.close()
    dlq.close()


def test_only_named_endpoints_when_urls_are_not_allowed(stack):
    """The secret signs whatever URL a job names: callbacks.raw_urls = false keeps calls to the
    configured endpoints, and a direct producer's URL is refused unless callbacks.direct_urls."""
    rx = Receiver()
    d = Delayqd(stack, extra={"callbacks": f'secret = "{SECRET}"; allow_private = true; '
                              f'raw_urls = false; endpoints = {{ hooks = {{ '
                              f'url = "{rx.url("/named")}"; }}; }};'}).start()
    dlq = Reader(stack, d.dlq)
    status, doc = d.add(delay=1, body="x", callback={"url": rx.url("/raw")})
    assert status == 400 and "callbacks.raw_urls" in doc["message"], doc
    named = d.add_ok(delay_ms=300, body="n", callback={"endpoint": "hooks"})
    stack.produce(d.delay_topic("1s"), "direct", headers={"dq-callback": json.dumps({"url": rx.url("/direct")})})
    wait_until(lambda: d.get(named)["state"] == "delivered", 15, "the named endpoint's call")
    m = dlq.wait_count(1, 20)[0]
    assert m["payload"] == "direct" and "callbacks.direct_urls" in m["headers"]["dq-error"], m
    assert [c["path"] for c in rx.calls] == ["/named"], rx.calls
    rx.close()
    dlq.close()


def test_redirects_when_allowed_and_https_verified(stack):
    def answer(path, n):
        hops = {"/one": "/done", "/two": "/one-more", "/one-more": "/done"}
        return (307, {"Location": hops[path]}) if path in hops else 200

    rx = Receiver(answer)
    cert, key, _ = make_cert(stack.tmp, "callback")
    untrusted = Receiver(tls=(cert, key))   # signed by a CA the system does not know
    d = Delayqd(stack, extra={"callbacks": callbacks_conf("max_redirects = 1;")}).start()
    dlq = Reader(stack, d.dlq)
    one = d.add_ok(delay=1, body={"a": 1}, callback={"url": rx.url("/one")})
    two = d.add_ok(delay=1, body="b", callback={"url": rx.url("/two")})
    tls = d.add_ok(delay=1, body="c", callback={"url": untrusted.url(), "retry": {"max_attempts": 1}})
    wait_until(lambda: d.get(one)["state"] == "delivered", 15, "the redirected call")
    done = rx.of("/done")[0]
    assert done["method"] == "POST" and json.loads(done["body"]) == {"a": 1}, done   # still a POST
    assert verify([SECRET], done["headers"], done["body"])
    letters = {}
    wait_until(lambda: {two, tls} <= set(letters.update(
        {m["headers"]["dq-id"]: m for m in dlq.all()}) or letters), 20, "two dead letters")
    assert "redirect" in letters[two]["headers"]["dq-error"].lower(), letters[two]
    assert not rx.of("/done")[1:], rx.of("/done")   # the second hop was not followed
    err = letters[tls]["headers"]["dq-error"]
    assert err.startswith("gave up after 1 attempt:") and "certificate" in err.lower(), err
    assert untrusted.calls == []   # no request went over the unverified connection
    rx.close()
    untrusted.close()


def test_a_callback_url_with_credentials_is_refused_wherever_it_is_given(stack):
    """A URL's user:password@ shows wherever the URL does (get, schedules, dead letters: to the
    read token too), a header's value never: an add, a batch's job, a schedule and a direct
    producer's dq-callback that put credentials in the URL are refused, saying where they go.
    An @ after the host is no credential, and is called."""
    rx = Receiver()
    d = Delayqd(stack, extra={"callbacks": callbacks_conf()}).start()
    dlq = Reader(stack, d.dlq)
    creds = [f"http://user:s3cret@127.0.0.1:{rx.port}/hook", f"http://user@127.0.0.1:{rx.port}/hook",
             "HTTPS://:s3cret@example.com", "http://u:p@127.0.0.1@example.com/"]

    def refused(doc):
        m = doc["message"]
        return "callback.url" in m and "credentials" in m and "callback.headers" in m

    for url in creds:
        status, doc = d.add(delay=1, body="x", callback={"url": url})
        assert status == 400 and refused(doc), (url, status, doc)
        status, doc = d.http("POST", "/delay-queue/api/jobs/add_batch", {"jobs": [
            {"delay": 1, "body": "x", "callback": {"url": url}}]})
        assert status == 200 and doc["data"]["failed"] == 1, (url, doc)
        assert doc["data"]["jobs"][0]["status"] == 400 and refused(doc["data"]["jobs"][0]), doc
        status, doc = d.http("PUT", "/delay-queue/api/schedules/creds",
                             {"every_ms": 60000, "body": "x", "callback": {"url": url}})
        assert status == 400 and refused(doc), (url, status, doc)
    status, doc = d.http("GET", "/delay-queue/api/schedules/creds")
    assert status == 404, doc
    ok = d.add_ok(delay_ms=300, body="ok", callback={"url": rx.url("/hook?to=a@b")})
    stack.produce(d.delay_topic("1s"), "direct", headers={"dq-callback": json.dumps({"url": creds[0]})})
    m = dlq.wait_count(1, 20)[0]
    assert m["payload"] == "direct" and "credentials" in m["headers"]["dq-error"], m
    wait_until(lambda: d.get(ok)["state"] == "delivered", 15, "the call with an @ in its query")
    assert [c["path"] for c in rx.calls] == ["/hook?to=a@b"], rx.calls
    rx.close()
    dlq.close()


class Truncating:
    """A raw HTTP endpoint that reads each request and answers as answer(n) says for the n-th
    call: bytes written as they are before the connection is closed (an answer cut short), or
    None for a whole 200."""

    def __init__(self, answer):
        self.calls = []
        self.answer = answer
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def url(self, path="/hook"):
        return f"http://127.0.0.1:{self.port}{path}"

    def _request(self, c):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = c.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))
        while len(body) < length:
            body += c.recv(65536)
        return head

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with c:
                while (head := self._request(c)) is not None:
                    self.calls.append(now_ms())
                    cut = self.answer(len(self.calls) - 1)
                    if cut is not None:
                        c.sendall(cut)
                        break
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    def close(self):
        self.sock.close()


def test_an_answer_cut_off_is_a_failed_call_retried_never_delivered(stack):
    """An answer that ends inside its headers (the status line and half a header, then the
    connection closed) or inside the body its Content-Length announced is no answer: the call
    failed and is made again after its backoff, and a job whose every attempt is cut off is
    dead-lettered, never marked delivered."""
    head = b"HTTP/1.1 200 OK\r\nContent-Le"
    body = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"
    in_head = Truncating(lambda n: head if n < 2 else None)
    in_body = Truncating(lambda n: body if n < 1 else None)
    always = Truncating(lambda n: head)
    d = Delayqd(stack, extra={"callbacks": callbacks_conf()}).start()
    dlq = Reader(stack, d.dlq)
    a = d.add_ok(delay_ms=300, body="a", callback={"url": in_head.url()})
    b = d.add_ok(delay_ms=300, body="b", callback={"url": in_body.url()})
    c = d.add_ok(delay_ms=300, body="c", callback={"url": always.url(), "retry": {"max_attempts": 2}})
    wait_until(lambda: in_head.calls, 15, "the first call")
    g = wait_until(lambda: (lambda g: g["callback"]["attempts"] >= 1 and g)(d.get(a)), 5,
                   "the first call's outcome")
    assert g["state"] != "delivered" and g["callback"]["last_status"] != 200, g
    assert "inside the answer's headers" in g["callback"]["last_error"], g
    wait_until(lambda: d.get(a)["state"] == "delivered", 20, "the third call, answered whole")
    assert len(in_head.calls) == 3 and d.get(a)["callback"]["attempts"] == 3, in_head.calls
    assert in_head.calls[1] - in_head.calls[0] >= 300   # after the backoff, as any failure
    wait_until(lambda: d.get(b)["state"] == "delivered", 20, "the second call, answered whole")
    assert len(in_body.calls) == 2 and d.get(b)["callback"]["attempts"] == 2, in_body.calls
    m = dlq.wait_count(1, 20)[0]
    assert m["headers"]["dq-id"] == c and m["headers"]["dq-attempts"] == "2", m
    assert m["headers"]["dq-error"] == ("gave up after 2 attempts: connection closed inside the "
                                        "answer's headers"), m
    g = d.get(c)
    assert g["state"] == "failed" and len(always.calls) == 2, (g, always.calls)
    for rx in (in_head, in_body, always):
        rx.close()
    dlq.close()
