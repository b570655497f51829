"""reschedule: a pending job moves to another due time, earlier or later, and is delivered once,
at the new time and not at the old one; racing its delivery, it has exactly one outcome."""

import time
import uuid

from harness import Delayqd, Reader, lateness, now_ms

RESCHEDULE = "/delay-queue/api/jobs/reschedule"


def one_delivery(reader, job_id, timeout=60):
    got = reader.wait_ids([job_id], timeout)[job_id]
    assert len(got) == 1, got
    return got[0]


def test_reschedule_later_and_earlier_deliver_once_at_the_new_time(stack):
    d = Delayqd(stack).start()
    topic = "resched-" + uuid.uuid4().hex[:6]
    reader = Reader(stack, topic)
    later = d.add_ok(topic=topic, delay=2, body="later")
    earlier = d.add_ok(topic=topic, delay=600, body="earlier")
    twice = d.add_ok(topic=topic, delay=600, body="twice")
    old_due = d.get(later)["exec_time_ms"]

    status, doc = d.http("POST", RESCHEDULE, {"job_id": later, "delay_ms": 7000})
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
    """1,000 jobs due at one instant, each rescheduled 4 s later right then: a reschedule answered
    200 means delivered once at the new time; 409 means delivered once at the old time."""
    d = Delayqd(stack, extra={"http_threads": 2}).start().wait_groups_owned()
    topic = "race-" + uuid.uuid4().hex[:6]
    reader = Reader(stack, topic)
    due = now_ms() + 8000
    ids = d.bulk_add([{"id": f"race-{i}", "topic": topic, "deliver_at_ms": due} for i in range(1000)])
    new_due = due + 4000
    time.sleep(max(0, due - now_ms() - 150) / 1000)   # they go out around the due instant
    res = d.bulk([("GET", f"{RESCHEDULE}?job_id={i}&deliver_at_ms={new_due}", None) for i in ids],
                 threads=8)
    statuses = [r[0] for r in res]
    assert set(statuses) <= {200, 409}, [r for r in res if r[0] not in (200, 409)][:5]
    got = reader.wait_ids(ids, 60)
    time.sleep(1)
    got = reader.by_id()
    for job_id, (status, doc) in zip(ids, res):
        msgs = got[job_id]
        assert len(msgs) == 1, (job_id, status, msgs)
        m = msgs[0]
        want = new_due if status == 200 else due
        assert int(m["headers"]["dq-due-ms"]) == want, (job_id, status, doc, m["headers"])
        assert int(m["headers"]["dq-sent-ms"]) >= want, (job_id, m["headers"])
    print(f"    {statuses.count(200)} rescheduled, {statuses.count(409)} too late")
