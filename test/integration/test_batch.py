"""add_batch: many jobs in one request, each validated, stored and answered on its own, each with
the guarantees of a single add."""

import json
import uuid

from harness import Delayqd, Reader, lateness, now_ms, wait_until

BATCH = "/delay-queue/api/jobs/add_batch"


def delivered_once_on_time(reader, ids, timeout=60):
    got = reader.wait_ids(ids, timeout)
    for i in ids:
        assert len(got[i]) == 1, (i, got[i])
        sent_late, _ = lateness(got[i][0])
        assert sent_late >= 0, (i, got[i][0]["headers"])   # never early
    return got


def test_batch_answers_each_job_in_order(stack):
    d = Delayqd(stack).start()
    topic = "batch-" + uuid.uuid4().hex[:6]
    reader = Reader(stack, topic)
    taken = d.add_ok(id="taken-1", topic=topic, delay=60, body="first")
    jobs = [
        {"topic": topic, "delay": 1, "body": "a"},
        {"delay": 1, "body": "no topic"},
        {"id": "b-2", "topic": topic, "delay_ms": 2500, "body": {"n": 2}, "headers": {"h": "v"}},
        {"topic": topic, "delay": -5},
        {"id": "taken-1", "topic": topic, "delay": 1, "body": "another body"},
        "not an object",
        {"id": "b-6", "topic": topic, "deliver_at_ms": now_ms() + 1500, "key": "k6"},
    ]
    status, doc = d.http("POST", BATCH, {"jobs": jobs})
    assert status == 200 and doc["code"] == 0, (status, doc)
    answers = doc["data"]["jobs"]
    assert [(a["status"], a["code"]) for a in answers] == [
        (200, 0), (400, 400), (200, 0), (400, 10001), (409, 409), (400, 400), (200, 0)], answers
    assert doc["data"]["added"] == 3 and doc["data"]["failed"] == 4, doc["data"]
    assert doc["data"]["already"] == 0, doc["data"]
    assert "topic" in answers[1]["message"] and "negative" in answers[3]["message"], answers
    assert answers[2]["job_id"] == "b-2" and answers[6]["job_id"] == "b-6", answers
    assert answers[4]["job_id"] == "taken-1" and answers[1]["job_id"] is None, answers
    first = answers[0]["job_id"]
    assert len(first) == 36, answers[0]

    assert d.get("b-2")["headers"] == {"h": "v"} and d.get("b-2")["delay_ms"] == 2500
    assert d.get("taken-1")["body"] == "first"   # the conflicting job changed nothing
    got = delivered_once_on_time(reader, [first, "b-2", "b-6"])
    assert got["b-6"][0]["key"] == "k6" and json.loads(got["b-2"][0]["payload"]) == {"n": 2}
    assert d.metric("delayq_jobs_added_total") == 4   # taken-1, and three of the batch


def test_batch_over_the_limits_stores_nothing(stack):
    d = Delayqd(stack, extra={"max_batch_jobs": 5, "max_body_bytes": 4096}).start()
    jobs = [{"id": f"over-{i}", "topic": "orders", "delay": 1} for i in range(6)]
    status, doc = d.http("POST", BATCH, {"jobs": jobs})
    assert status == 413 and doc["code"] == 413 and "max_batch_jobs" in doc["message"], doc
    big = [{"id": f"big-{i}", "topic": "orders", "delay": 1, "body": "x" * 1000} for i in range(5)]
    status, doc = d.http("POST", BATCH, {"jobs": big})
    assert status == 413 and doc["code"] == 413, doc
    for body in ({"jobs": []}, {"jobs": {"topic": "orders"}}, {"job": []}):
        status, doc = d.http("POST", BATCH, body)
        assert status == 400 and doc["code"] == 400, (body, doc)
    status, doc = d.http("GET", BATCH)
    assert status == 405, doc
    assert stack.redis("KEYS", f"{d.prefix}job:*") == ""
    assert all(stack.end_offset(d.delay_topic(lv), p) == 0 for lv in d.levels for p in range(2))


def test_batch_jobs_kafka_refuses_are_answered_503_and_never_delivered(stack):
    """The 5s delay topic takes no message of the size of a job reference: the jobs of the
    batch routed there fail, the others are delivered."""
    d = Delayqd(stack, extra={"produce_timeout_ms": 3000}).start()
    stack.topic_config(d.delay_topic("5s"), "max.message.bytes=64")
    topic = "refused-" + uuid.uuid4().hex[:6]
    reader = Reader(stack, topic)
    jobs = [{"id": f"r-{i}", "topic": topic, "delay": 7 if i % 2 else 2, "body": str(i)}
            for i in range(10)]

    def refused():   # the broker applies a topic config within a moment
        status, doc = d.add(topic=topic, delay=8, body="probe")
        if status == 200:
            d.remove(doc["data"]["job_id"])   # not delivered: it is due in 8 s
        return status == 503
    wait_until(refused, 30, "the 5s delay topic to refuse job references", step=0.5)
    status, doc = d.http("POST", BATCH, {"jobs": jobs})
    assert status == 200, doc
    assert [a["status"] for a in doc["data"]["jobs"]] == [200, 503] * 5, doc
    for a in doc["data"]["jobs"][1::2]:
        assert a["code"] == 10002 and "kafka" in a["message"], a
    delivered_once_on_time(reader, [f"r-{i}" for i in range(0, 10, 2)])
    for i in range(1, 10, 2):   # nothing of a refused job stays to deliver it later
        assert d.get(f"r-{i}") is None, d.get(f"r-{i}")
    stack.topic_config(d.delay_topic("5s"), "max.message.bytes=1048588")
    assert all(len(v) == 1 for v in reader.by_id().values())
    assert not any(m["headers"].get("dq-id") in {f"r-{i}" for i in range(1, 10, 2)}
                   for m in reader.all())


def test_the_same_job_added_again_is_not_counted_as_added(stack):
    """A batch of A, B (A's id, another body) and A again: one job made, one conflict, one found
    added already; the added-jobs counter moves by one however often a job is added again."""
    d = Delayqd(stack).start()
    topic = "again-" + uuid.uuid4().hex[:6]
    before = d.metric("delayq_jobs_added_total")
    a = {"id": "again-a", "topic": topic, "delay": 60, "body": "a"}
    status, doc = d.http("POST", BATCH, {"jobs": [a, dict(a, body="b"), a]})
    assert status == 200, (status, doc)
    assert [j["status"] for j in doc["data"]["jobs"]] == [200, 409, 200], doc["data"]
    assert (doc["data"]["added"], doc["data"]["already"], doc["data"]["failed"]) == (1, 1, 1), doc["data"]
    for _ in range(3):
        assert d.add_ok(**a) == "again-a"
    assert d.metric("delayq_jobs_added_total") == before + 1
