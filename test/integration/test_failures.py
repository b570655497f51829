"""Redis or Kafka down: adds are answered with 503 in time, nothing half-added is left, and
what was accepted before is delivered once the server is back."""

import time

from harness import Delayqd, Reader


def test_redis_down_add_503(stack):
    d = Delayqd(stack, extra={"redis_timeout_ms": 500}).start()
    stack.stop_redis()
    try:
        st, doc = d.add(topic="orders", delay=5, body="x")
        assert st == 503 and doc["code"] == 10002 and "redis" in doc["message"], doc
        st, doc = d.http("GET", "/delay-queue/api/jobs/get?job_id=abc")
        assert st == 503, doc
    finally:
        stack.start_redis()
    assert d.add_ok(topic="orders", delay=5, body="x")


def test_kafka_down_add_503_leaves_no_record_and_nothing_is_lost(stack):
    d = Delayqd(stack, extra={"produce_timeout_ms": 2000}).start()
    reader = Reader(stack, f"{d.name}_outage")
    before = d.add_ok(topic=reader.topic, delay=3, body="accepted before")
    reader.close()
    stack.stop_kafka()
    try:
        t0 = time.time()
        st, doc = d.add(id="during-outage", topic=reader.topic, delay=1, body="x")
        took = time.time() - t0
        assert st == 503 and doc["code"] == 10002 and "kafka" in doc["message"], doc
        assert took < 10, took   # answered within its timeout, not hung
        assert stack.redis("EXISTS", f"{d.prefix}job:during-outage") == "0"
    finally:
        stack.start_kafka()
    reader = Reader(stack, reader.topic)
    reader.wait_count(1, 60)
    assert set(reader.by_id()) == {before}
    reader.close()
