"""The HTTP API, driven with curl: go-delayqueue compatibility, the extensions, and every kind of
bad request answered with a clear code while the process keeps serving."""

import json
import re
import time
import uuid

from harness import Delayqd, Reader, now_ms, record, run, wait_until

ADD = "/delay-queue/api/jobs/add"
GET = "/delay-queue/api/jobs/get"
REMOVE = "/delay-queue/api/jobs/remove"


def test_go_delayqueue_add_get_remove(stack):
    d = Delayqd(stack).start()
    status, doc = d.add(topic="orders", delay=60, body="close order 42")
    assert status == 200 and doc["code"] == 0 and doc["message"] == "ok", doc
    job_id = doc["data"]["job_id"]
    assert len(job_id) == 36, job_id

    job = d.get(job_id)
    assert job["id"] == job_id and job["topic"] == "orders" and job["body"] == "close order 42"
    assert job["delay"] == 60 and job["state"] == "pending"
    assert abs(job["exec_time"] - (time.time() + 60)) < 5, job
    assert job["exec_time_ms"] // 1000 == job["exec_time"]

    status, doc = d.http("POST", GET, {"job_id": job_id})
    assert status == 200 and doc["data"]["id"] == job_id, doc

    status, doc = d.remove(job_id)
    assert status == 200 and doc["code"] == 0, doc
    assert d.get(job_id)["state"] == "cancelled"
    status, doc = d.http("POST", REMOVE, {"job_id": job_id})
    assert status == 200 and doc["code"] == 0, doc

    status, doc = d.http("GET", f"{GET}?job_id=no-such-job")
    assert status == 200 and doc["code"] == 0 and doc["data"] is None, doc
    status, doc = d.http("GET", f"{REMOVE}?job_id=no-such-job")
    assert status == 200 and doc["code"] == 0, doc


def test_add_extensions_are_stored(stack):
    d = Delayqd(stack).start()
    due = now_ms() + 120000
    job_id = d.add_ok(id="order:77", topic="orders", deliver_at_ms=due, key="customer-9",
                      headers={"trace": "t-1", "tenant": "acme"}, body={"order": 77, "items": [1, 2]})
    assert job_id == "order:77"
    job = d.get(job_id)
    assert job["exec_time_ms"] == due and job["key"] == "customer-9", job
    assert job["headers"] == {"trace": "t-1", "tenant": "acme"}, job
    assert json.loads(job["body"]) == {"order": 77, "items": [1, 2]}, job
    assert d.get(d.add_ok(topic="orders", delay_ms=90500, body="x"))["delay_ms"] == 90500

    head, tail, size = record(stack, d, job_id)
    # pending, due, no stamp, the job's tag (its messages carry it) where a claim will go
    assert re.fullmatch(rf"p{due}\|\|[A-Za-z0-9_-]{{13}}\|", head), head
    assert tail[0] == "orders" and tail[3] == "customer-9" and tail[4]["tenant"] == "acme", tail
    assert json.loads(tail[1]) == {"order": 77, "items": [1, 2]} and tail[2] == job["delay_ms"], tail
    # Compact: no id and no field names inside, so Redis holds little besides what was sent.
    sent = len(job["body"]) + len("orders") + len("customer-9") + len("tracet-1tenantacme")
    assert size <= sent + len(head) + 16, (size, sent)
    ttl = int(stack.redis("PTTL", f"{d.prefix}job:{job_id}"))
    assert 120000 + 3600000 - 10000 < ttl <= 120000 + 3600000, ttl   # due + retention


def test_add_writes_a_reference_to_the_right_delay_topic(stack):
    d = Delayqd(stack).start()
    job_id = d.add_ok(topic="orders", delay=7, body="big body stays in redis")
    p = run(["kcat", "-b", stack.brokers, "-C", "-t", d.delay_topic("5s"), "-o", "beginning", "-e",
             "-J", "-q"])
    msgs = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(msgs) == 1, msgs
    h = msgs[0]["headers"]
    h = {h[i]: h[i + 1] for i in range(0, len(h), 2)}
    assert h["dq-topic"] == "orders" and h["dq-id"] == job_id, h
    assert int(h["dq-due-ms"]) == d.get(job_id)["exec_time_ms"], h
    assert msgs[0]["payload"] is None, msgs[0]   # the body is only in Redis


def test_bad_requests_get_clear_errors(stack):
    d = Delayqd(stack, extra={"max_delay_s": 3600}).start()
    long_topic = "t" * 250
    cases = [
        ("{not json", 400, 400, "malformed JSON"),
        ("[1,2]", 400, 400, "must be a JSON object"),
        ('{"delay": 5, "body": "x"}', 400, 400, "topic is required"),
        ('{"topic": "bad topic!", "delay": 5}', 400, 400, "invalid topic"),
        ('{"topic": "%s", "delay": 5}' % long_topic, 400, 400, "longer than 249"),
        ('{"topic": "%s", "delay": 5}' % d.delay_topic("5s"), 400, 400, "is a delay topic"),
        ('{"topic": "%s", "delay": 5}' % d.dlq, 400, 400, "is the dead-letter topic"),
        ('{"topic": "orders", "body": "x"}', 400, 400, "one of delay"),
        ('{"topic": "orders", "delay": 5, "delay_ms": 5000}', 400, 400, "only one of"),
        ('{"topic": "orders", "delay": -1}', 400, 10001, "must not be negative"),
        ('{"topic": "orders", "delay": 3601}', 400, 10001, "at most 3600 seconds"),
        ('{"topic": "orders", "delay_ms": 3600001}', 400, 10001, "at most"),
        ('{"topic": "orders", "delay": "5"}', 400, 10001, "must be an integer"),
        ('{"topic": "orders", "delay": 1.5}', 400, 10001, "must be an integer"),
        ('{"topic": "orders", "delay": 5, "id": "has space"}', 400, 400, "visible ASCII"),
        ('{"topic": "orders", "delay": 5, "id": "%s"}' % ("x" * 129), 400, 400, "longer than 128"),
        ('{"topic": "orders", "delay": 5, "body": 12}', 400, 400, "body must be"),
        ('{"topic": "orders", "delay": 5, "headers": {"dq-topic": "x"}}', 400, 400, "reserved"),
        ('{"topic": "orders", "delay": 5, "headers": {"DQ-Trace": "x"}}', 400, 400, "reserved"),
        ('{"topic": "orders", "delay": 5, "headers": {"a": 1}}', 400, 400, "must be a string"),
        ('{"topic": "orders", "delay": 5, "key": ""}', 400, 400, "key must be"),
        ('{"topic": "orders", "topic": "x", "delay": 5}', 400, 400, "malformed JSON"),
    ]
    for body, status, code, text in cases:
        st, doc = d.http("POST", ADD, raw=body)
        assert (st, doc["code"]) == (status, code) and text in doc["message"], (body, st, doc)
        assert doc["data"] is None
    for path, text in [(GET, "job_id is required"), (f"{GET}?job_id=a%20b", "visible ASCII"),
                       (f"{REMOVE}?job_id=", "job_id is required")]:
        st, doc = d.http("GET", path)
        assert st == 400 and doc["code"] == 400 and text in doc["message"], (path, doc)
    st, doc = d.http("POST", GET, raw='{"job_id": 5}')
    assert st == 400 and "must be a string" in doc["message"], doc
    assert d.alive()
    assert d.add_ok(topic="orders", delay=5, body="still serving")


def test_unknown_path_and_wrong_method(stack):
    d = Delayqd(stack).start()
    st, doc = d.http("GET", "/delay-queue/api/jobs/nope")
    assert st == 404 and doc["code"] == 404, doc
    st, doc = d.http("GET", "/")
    assert st == 404, doc
    st, doc = d.http("GET", ADD)
    assert st == 405 and "POST" in doc["message"], doc
    st, doc = d.http("DELETE", GET)
    assert st == 405, doc


def test_body_over_limit_is_413(stack):
    d = Delayqd(stack, extra={"max_body_bytes": 4096}).start()
    big = json.dumps({"topic": "orders", "delay": 5, "body": "x" * 5000})
    st, doc = d.http("POST", ADD, raw=big)
    assert st == 413 and doc["code"] == 413, (st, doc)
    # Without a Content-Length (chunked), the limit holds while reading.
    st, doc = d.http("POST", ADD, raw=big, headers={"Transfer-Encoding": "chunked"})
    assert st == 413 and doc["code"] == 413, (st, doc)
    ok = json.dumps({"topic": "orders", "delay": 5, "body": "x" * 3000})
    st, doc = d.http("POST", ADD, raw=ok, headers={"Transfer-Encoding": "chunked"})
    assert st == 200 and doc["code"] == 0, (st, doc)
    # Large request headers (tokens, cookies) still fit a connection's memory.
    st, doc = d.http("POST", ADD, raw=ok, headers={"X-Trace": "t" * 12000})
    assert st == 200 and doc["code"] == 0, (st, doc)


def test_repeated_id_same_content_is_idempotent_other_content_conflicts(stack):
    d = Delayqd(stack).start()
    assert d.add_ok(id="pay-1", topic="payments", delay=60, body="charge") == "pay-1"
    assert d.add_ok(id="pay-1", topic="payments", delay=60, body="charge") == "pay-1"
    st, doc = d.add(id="pay-1", topic="payments", delay=60, body="other")
    assert st == 409 and doc["code"] == 409 and "already used" in doc["message"], doc


def test_go_delayqueue_compat_delivers_the_job_id(stack):
    """compat.go_delayqueue: consumers written for go-delayqueue get the job id as the message
    and read the job with get, which still answers after the delivery."""
    d = Delayqd(stack, extra={"go_delayqueue": True}).start()
    topic = "compat-" + uuid.uuid4().hex[:6]
    reader = Reader(stack, topic)
    job_id = d.add_ok(topic=topic, delay=1, body="close order 9", headers={"trace": "t9"})
    m = reader.wait_ids([job_id], 30)[job_id][0]
    assert m["payload"] == job_id and m["key"] == job_id, m
    assert m["headers"]["dq-id"] == job_id and m["headers"]["trace"] == "t9", m
    wait_until(lambda: d.get(m["payload"])["state"] == "delivered", 20, "the job to be marked")
    assert d.get(m["payload"])["body"] == "close order 9"
