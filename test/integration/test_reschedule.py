"""reschedule: a pending job moves to another due time, earlier or later, and is delivered once,
at the new time and not at the old one; racing its delivery, it has exactly one outcome."""

import time
import uuid

from harness import Delayqd, Reader, lateness, now_ms, wait_until

RESCHEDULE = "/delay-queue/api/jobs/reschedule"


def one_delivery(reader, job_id, timeout=60):
    got = reader.wait_ids([job_id], timeout)[job_id]
    assert len(got) == 1, got
    return got[0]


def test_reschedule_later_and_earlier_deliver_once_at_the_new_time(stack):
    d = Delayqd(stack).start()
    topic = "resched-" + uuid.uuid4().hex[:6]
    reader = Reader(stack, topic)
    later = d.add_ok(topic=topic, delay=5, body="later")
    earlier = d.add_ok(topic=topic, delay=600, body="earlier")
    twice = d.add_ok(topic=topic, delay=600, body="twice")
    old_due = d.get(later)["exec_time_ms"]

    status, doc = d.http("POST", RESCHEDULE, {"job_id": later, "delay_ms": 9000})
    assert status == 200 and doc["code"] == 0, doc
    new_due = doc["data"]["exec_time_ms"]
    assert new_due >= old_due + 4000 and d.get(later)["exec_time_ms"] == new_due, doc
    job = d.get(later)
    assert job["state"] == "pending" and job["created_ms"] + job["delay_ms"] == new_due, job

    status, doc = d.http("GET", f"{RESCHEDULE}?job_id={earlier}&delay=2")
    assert status == 200 and doc["code"] == 0, doc
    early_due = doc["data"]["exec_time_ms"]
    # down, up and down again: the last one counts, whatever messages the others left
    for delay in (3, 20, 4):
        status, doc = d.http("POST", RESCHEDULE, {"job_id": twice, "delay": delay})
        assert status == 200, doc
    twice_due = doc["data"]["exec_time_ms"]

    m = one_delivery(reader, earlier)
    assert int(m["headers"]["dq-due-ms"]) == early_due and lateness(m)[0] >= 0, m
    assert m["recv_ms"] < early_due + 5000, m   # not at its old time, ten minutes on
    m = one_delivery(reader, later)
    assert int(m["headers"]["dq-due-ms"]) == new_due and int(m["headers"]["dq-sent-ms"]) >= new_due, m
    m = one_delivery(reader, twice)
    assert int(m["headers"]["dq-due-ms"]) == twice_due and lateness(m)[0] >= 0, m
    assert d.get(earlier)["state"] == "delivered"
    time.sleep(3)   # the old messages of later and twice have come and gone since: no copies
    assert all(len(reader.by_id()[i]) == 1 for i in (later, earlier, twice)), reader.by_id()
    assert d.metric("delayq_jobs_rescheduled_total") == 5


def test_reschedule_outcomes(stack):
    d = Delayqd(stack).start()
    gone = d.add_ok(topic="orders", delay=600)
    assert d.remove(gone)[0] == 200
    status, doc = d.http("POST", RESCHEDULE, {"job_id": gone, "delay": 5})
    assert status == 404 and doc["code"] == 404 and "removed" in doc["message"], doc
    status, doc = d.http("GET", f"{RESCHEDULE}?job_id=no-such-job&delay_ms=5")
    assert status == 404 and doc["code"] == 404, doc
    done = d.add_ok(topic="orders", delay=0)
    deadline = time.time() + 30
    while d.get(done)["state"] != "delivered" and time.time() < deadline:
        time.sleep(0.1)
    status, doc = d.http("POST", RESCHEDULE, {"job_id": done, "delay": 5})
    assert status == 409 and doc["code"] == 409 and "delivered" in doc["message"], doc
    pending = d.add_ok(topic="orders", delay=600)
    for body, code in (({"job_id": pending}, 400), ({"job_id": pending, "delay": -1}, 10001),
                       ({"job_id": pending, "delay": 5, "delay_ms": 5}, 400),
                       ({"delay": 5}, 400), ({"job_id": pending, "delay": "soon"}, 10001),
                       ({"job_id": pending, "delay": 10 ** 9}, 10001)):
        status, doc = d.http("POST", RESCHEDULE, body)
        assert status == 400 and doc["code"] == code, (body, doc)
    status, doc = d.http("GET", f"{RESCHEDULE}?job_id={pending}&delay=abc")
    assert status == 400 and doc["code"] == 10001 and "delay" in doc["message"], doc
    status, doc = d.http("GET", f"{RESCHEDULE}?job_id={pending}&delay=5%00")
    assert status == 400, doc
    assert d.get(pending)["delay"] == 600   # none of these changed it


def test_reschedules_racing_the_due_instant_have_one_outcome_each(stack):
    """1,000 jobs falling due over 2 s, each rescheduled 4 s later at its due instant: a
    reschedule answered 200 means delivered once at the new time; 409 means delivered once at
    the old time."""
    d = Delayqd(stack, extra={"http_threads": 2}).start().wait_groups_owned()
    topic = "race-" + uuid.uuid4().hex[:6]
    reader = Reader(stack, topic)
    base = now_ms() + 8000
    dues = [base + 2 * i for i in range(1000)]
    ids = d.bulk_add([{"id": f"race-{i}", "topic": topic, "deliver_at_ms": due}
                      for i, due in enumerate(dues)])
    res = d.bulk([("GET", f"{RESCHEDULE}?job_id={i}&deliver_at_ms={due + 4000}", None, due)
                  for i, due in zip(ids, dues)], threads=8)
    statuses = [r[0] for r in res]
    assert set(statuses) <= {200, 409}, [r for r in res if r[0] not in (200, 409)][:5]
    reader.wait_ids(ids, 60)
    time.sleep(1)
    got = reader.by_id()
    for job_id, due, (status, doc) in zip(ids, dues, res):
        msgs = got[job_id]
        assert len(msgs) == 1, (job_id, status, msgs)
        want = due + 4000 if status == 200 else due
        assert int(msgs[0]["headers"]["dq-due-ms"]) == want, (job_id, status, doc, msgs[0]["headers"])
        assert int(msgs[0]["headers"]["dq-sent-ms"]) >= want, (job_id, msgs[0]["headers"])
    print(f"    {statuses.count(200)} rescheduled, {statuses.count(409)} too late")


def test_earlier_move_kafka_refuses_keeps_the_old_due_time(stack):
    """The 5s delay topic takes no job reference: a move to 7 s from now fails, the job keeps
    its due time and is delivered once, then."""
    d = Delayqd(stack, extra={"produce_timeout_ms": 3000}).start()
    topic = "undo-" + uuid.uuid4().hex[:6]
    reader = Reader(stack, topic)
    job_id = d.add_ok(topic=topic, delay=20, body="keeps its time")   # 10s level, two hops
    due = d.get(job_id)["exec_time_ms"]
    stack.topic_config(d.delay_topic("5s"), "max.message.bytes=64")

    def refused():   # the broker applies a topic config within a moment
        status, doc = d.http("POST", RESCHEDULE, {"job_id": job_id, "delay": 7})
        assert status in (200, 503), doc
        if status == 200:   # taken before the config applied: put it back, try again
            assert d.http("POST", RESCHEDULE, {"job_id": job_id, "deliver_at_ms": due})[0] == 200
            return False
        assert doc["code"] == 10005 and "keeps its due time" in doc["message"], doc
        return True
    wait_until(refused, 20, "a move to the 5s topic to be refused", step=0.5)
    job = d.get(job_id)
    assert job["exec_time_ms"] == due and job["state"] == "pending", job
    stack.topic_config(d.delay_topic("5s"), "max.message.bytes=1048588")
    m = one_delivery(reader, job_id, timeout=60)
    assert int(m["headers"]["dq-due-ms"]) == due and lateness(m)[0] >= 0, m


def test_rescheduled_job_claimed_then_crashed_is_delivered_by_the_restart(stack):
    """A job moved later by less than the smallest level waits in memory for its new time; it is
    claimed there while Kafka is down, and the process is killed before it could deliver. Its
    message, read again by the restarted process, still says the old due time: the restart takes
    the claim over and delivers the job at the new time."""
    d = Delayqd(stack, levels=["10s", "1m"], extra={"claim_ttl_ms": 3000}).start().wait_groups_owned()
    topic = "crash-" + uuid.uuid4().hex[:6]
    stack.ensure_topic(topic)
    job_id = d.add_ok(topic=topic, delay_ms=12000, body="claimed, then killed")
    status, doc = d.http("POST", RESCHEDULE, {"job_id": job_id,
                                              "deliver_at_ms": d.get(job_id)["exec_time_ms"] + 6000})
    assert status == 200, doc
    new_due = doc["data"]["exec_time_ms"]
    time.sleep(1)   # the holder has read the message ahead (the smallest level)
    stack.stop_kafka()
    try:
        wait_until(lambda: d.get(job_id)["state"] == "delivering", 40, "the job to be claimed")
        d.kill()
    finally:
        stack.start_kafka()
    d.start()
    reader = Reader(stack, topic)
    m = one_delivery(reader, job_id, timeout=60)
    assert int(m["headers"]["dq-due-ms"]) == new_due and lateness(m)[0] >= 0, m
    wait_until(lambda: d.get(job_id)["state"] == "delivered", 20, "the job to be marked")
    reader.close()


def test_override_replaces_a_pending_job_whose_old_message_is_then_skipped(stack):
    d = Delayqd(stack).start()
    topic = "override-" + uuid.uuid4().hex[:6]
    reader = Reader(stack, topic)
    d.add_ok(id="ov-1", topic=topic, delay=2, body="old")
    status, doc = d.add(id="ov-1", topic=topic, delay=3, body="new")
    assert status == 409, doc   # without override: the id is taken
    status, doc = d.add(id="ov-1", topic=topic, delay=3, body="new", override=True)
    assert status == 200 and doc["code"] == 0, doc
    assert d.get("ov-1")["body"] == "new"
    m = one_delivery(reader, "ov-1")
    assert m["payload"] == "new" and lateness(m)[0] >= 0, m
    time.sleep(1)
    assert len(reader.by_id()["ov-1"]) == 1   # the old job's message found a record not its own
    status, doc = d.add(id="ov-1", topic=topic, delay=3, body="newer", override=True)
    assert status == 409, doc   # delivered: nothing left to replace
