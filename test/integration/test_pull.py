"""pull topics: due jobs wait in Redis for workers that pop them over HTTP, each reserved for its
time to run, finished, released, touched or buried by its receipt; a reservation that runs out
makes the job ready again, and after pull.max_attempts a dead letter."""

import base64
import re
import http.client
import json
import threading
import time
import uuid

from harness import Delayqd, Reader, now_ms, wait_until

API = "/delay-queue/api/jobs/"


class Client:
    """A worker's keep-alive HTTP connection to one delayqd, as a PHP or Go client holds one."""

    def __init__(self, d, timeout=30):
        self.conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=timeout)

    def call(self, verb, body):
        self.conn.request("POST", API + verb, json.dumps(body),
                          {"Content-Type": "application/json"})
        r = self.conn.getresponse()
        return r.status, json.loads(r.read())

    def pop(self, topic, **kw):
        status, doc = self.call("pop", dict(kw, **({"topic": topic} if topic else {})))
        assert status == 200 and doc["code"] == 0, (status, doc)
        return doc["data"]["jobs"]

    def close(self):
        self.conn.close()


def pull_topic():
    return "pull-" + uuid.uuid4().hex[:6]


def op(d, verb, job, **kw):
    return d.http("POST", API + verb, dict(job_id=job["id"], receipt=job["receipt"], **kw))


def test_pop_hands_out_a_due_job_reserved_then_finished(stack):
    topic = pull_topic()
    d = Delayqd(stack, extra={"pull_topics": ["pull-*"]}).start()
    reader = Reader(stack, topic)
    c = Client(d)
    assert c.pop(topic) == []   # nothing ready: answered at once
    job_id = d.add_ok(topic=topic, delay=1, body={"order": 7}, key="k7", headers={"h": "v"})
    assert d.get(job_id)["state"] == "pending"
    jobs = c.pop(topic, wait_ms=10000, ttr=30)
    popped_ms = now_ms()
    assert len(jobs) == 1, jobs
    j = jobs[0]
    assert j["id"] == job_id and j["topic"] == topic and json.loads(j["body"]) == {"order": 7}, j
    assert j["key"] == "k7" and j["headers"] == {"h": "v"} and j["attempt"] == 1, j
    assert popped_ms >= j["due_ms"], j   # never early
    assert j["reserved_until_ms"] >= j["due_ms"] + 30000 - 1000, j
    got = d.get(job_id)
    assert got["state"] == "reserved" and got["pull"]["attempt"] == 1, got
    assert got["pull"]["reserved_until_ms"] == j["reserved_until_ms"], got
    assert c.pop(topic) == []   # reserved: nobody else gets it

    status, doc = op(d, "finish", j)
    assert status == 200 and doc["data"]["state"] == "finished", doc
    status, doc = op(d, "finish", j)   # a retry of a finish whose answer was lost
    assert status == 200 and doc["data"]["state"] == "finished", doc
    assert d.get(job_id)["state"] == "finished"
    status, doc = op(d, "release", j)
    assert status == 409 and "finished" in doc["message"], doc
    status, doc = d.http("POST", API + "finish", {"job_id": "nope", "receipt": j["receipt"]})
    assert status == 404, doc
    time.sleep(1)
    assert reader.all() == []   # a pull job never goes to its Kafka topic
    assert d.metric("delayq_pull_finishes_total") == 1
    assert d.metric("delayq_pull_jobs_popped_total") == 1


def test_pull_requests_are_checked_field_by_field(stack):
    d = Delayqd(stack, extra={"pull_topics": ["pull-*"]}).start()
    bad = [
        ("pop", {"wait_ms": 10}, "topic"),
        ("pop", {"topic": "pull-x", "ttr": 0}, "ttr"),
        ("pop", {"topic": "pull-x", "ttr": 86401}, "ttr"),
        ("pop", {"topic": "pull-x", "wait_ms": 180001}, "wait_ms"),
        ("pop", {"topic": "pull-x", "max": 101}, "max"),
        ("pop", {"topic": d.delay_topic("1s")}, "delay topic"),
        ("finish", {"job_id": "a"}, "receipt is required"),
        ("finish", {"job_id": "a", "receipt": "x" * 400 + ":pull-x"}, "receipt is not one a pop"),
        ("finish", {"job_id": "a", "receipt": 5}, "receipt is not one a pop"),
        ("finish", {"receipt": "x:pull-x"}, "job_id"),
        ("touch", {"job_id": "a", "receipt": "x:pull-x", "ttr_ms": 5}, "ttr_ms"),
        ("release", {"job_id": "a", "receipt": "x:pull-x", "delay": -1}, "delay"),
        ("bury", {"job_id": "a", "receipt": "x:pull-x", "reason": 5}, "reason"),
        # a misspelt member is named, never left to its default
        ("pop", {"topic": "pull-x", "wait": 10000}, "wait is not a member of a pop"),
        ("finish", {"job_id": "a", "receipt": "x:pull-x", "force": True},
         "force is not a member of a finish"),
        ("touch", {"job_id": "a", "receipt": "x:pull-x", "ttl": 60}, "ttl is not a member of a touch"),
        ("release", {"job_id": "a", "receipt": "x:pull-x", "delay_s": 5},
         "delay_s is not a member of a release (job_id, receipt, delay, delay_ms)"),
        ("finish", {"jobs": [{"job_id": "a", "receipt": "x:pull-x"}], "all": True},
         "all is not a member of a request of many jobs"),
    ]
    for verb, body, word in bad:
        status, doc = d.http("POST", API + verb, body)
        assert status == 400 and doc["code"] == 400 and word in doc["message"], (verb, body, doc)
    status, doc = d.add(topic="orders", delay=1, deliver="later")
    assert status == 400 and "deliver" in doc["message"], doc
    status, doc = d.http("GET", API + "pop")
    assert status == 405, doc


def test_a_reservation_that_runs_out_comes_back_then_goes_to_the_dead_letters(stack):
    topic = pull_topic()
    d = Delayqd(stack, extra={"max_attempts": 2}).start()
    dlq = Reader(stack, d.dlq)
    c = Client(d)
    job_id = d.add_ok(topic=topic, delay_ms=500, deliver="pull", ttr_ms=1500, body="slow")
    first = c.pop(topic, wait_ms=10000)[0]
    assert first["attempt"] == 1 and first["reserved_until_ms"] - first["due_ms"] >= 1500, first
    again = c.pop(topic, wait_ms=10000)   # the worker never finishes: back after its ttr
    back_ms = now_ms()
    assert len(again) == 1 and again[0]["id"] == job_id and again[0]["attempt"] == 2, again
    assert back_ms >= first["reserved_until_ms"], (back_ms, first)   # not before
    status, doc = op(d, "finish", first)   # the slow worker's receipt is stale now
    assert status == 409 and "reserved" in doc["message"], doc
    status, doc = op(d, "touch", again[0], ttr_ms=1000)
    assert status == 200 and doc["data"]["reserved_until_ms"] >= now_ms() + 500, doc
    letters = dlq.wait_count(1, 30)
    m = letters[0]
    assert m["headers"]["dq-id"] == job_id and m["headers"]["dq-topic"] == topic, m
    assert "2 times" in m["headers"]["dq-error"] and m["payload"] == "slow", m
    assert m["headers"]["dq-attempts"] == "2", m
    wait_until(lambda: d.get(job_id)["state"] == "dead", 10, "the record to say dead")
    assert c.pop(topic) == []
    assert d.metric("delayq_pull_expiries_total") == 1
    assert d.metric("delayq_pull_dead_letters_total") == 1


def test_release_touch_and_bury(stack):
    topic = pull_topic()
    d = Delayqd(stack, extra={"pull_topics": [topic]}).start()
    dlq = Reader(stack, d.dlq)
    c = Client(d)
    ids = [d.add_ok(topic=topic, delay_ms=200, body=f"b{i}") for i in range(3)]
    jobs = c.pop(topic, wait_ms=10000, max=10)
    while len(jobs) < 3:
        jobs += c.pop(topic, wait_ms=5000, max=10)
    by_id = {j["id"]: j for j in jobs}
    assert sorted(by_id) == sorted(ids), jobs

    status, doc = op(d, "release", by_id[ids[0]], delay_ms=1500)   # a retry after 1.5 s
    released_ms = now_ms()
    assert status == 200 and doc["data"]["state"] == "ready", doc
    assert c.pop(topic) == []   # not before its delay
    back = c.pop(topic, wait_ms=10000)
    assert back[0]["id"] == ids[0] and back[0]["attempt"] == 2, back
    assert now_ms() >= released_ms + 1500 - 50, back
    assert op(d, "finish", back[0])[0] == 200

    status, doc = op(d, "touch", by_id[ids[1]], ttr=600)
    assert status == 200 and doc["data"]["reserved_until_ms"] >= now_ms() + 590000, doc
    assert d.get(ids[1])["pull"]["reserved_until_ms"] == doc["data"]["reserved_until_ms"]

    status, doc = op(d, "bury", by_id[ids[2]], reason="cannot parse the order")
    assert status == 200 and doc["data"]["state"] == "dead-letter", doc
    m = dlq.wait_count(1, 30)[0]
    assert m["headers"]["dq-id"] == ids[2] and m["headers"]["dq-error"] == "cannot parse the order", m
    assert op(d, "finish", by_id[ids[2]])[0] == 409


def test_a_pull_letter_carries_its_target_and_goes_bare_once_when_refused(stack):
    """A buried pull job's dead letter names what a redrive needs (dq-topic, dq-deliver,
    dq-ttr-ms, dq-attempts); one the dead-letter topic refuses for its size goes again without
    its body, once, and the job is marked dead."""
    topic = pull_topic()
    d = Delayqd(stack, extra={"max_body_bytes": 1 << 20}).start()
    stack.topic_config(d.dlq, "max.message.bytes=2000")
    dlq = Reader(stack, d.dlq)
    c = Client(d)
    big = d.add_ok(topic=topic, delay_ms=200, deliver="pull", ttr_ms=7000, body="b" * 5000)
    small = d.add_ok(topic=topic, delay_ms=200, deliver="pull", ttr_ms=7000, body="s")
    jobs = c.pop(topic, wait_ms=10000, max=10)
    while len(jobs) < 2:
        jobs += c.pop(topic, wait_ms=5000, max=10)
    by_id = {j["id"]: j for j in jobs}
    assert op(d, "bury", by_id[big], reason="too big to parse")[0] == 200
    (bare,) = dlq.wait_count(1, 30)
    assert bare["headers"]["dq-id"] == big and bare["payload"] is None, bare
    assert "omitted" in bare["headers"]["dq-body"], bare["headers"]
    assert op(d, "bury", by_id[small], reason="cannot parse")[0] == 200
    letters = dlq.wait_count(2, 30)
    whole = next(m for m in letters if m["headers"]["dq-id"] == small)
    assert whole["payload"] == "s" and "dq-body" not in whole["headers"], whole
    for m in (bare, whole):
        h = m["headers"]
        assert h["dq-topic"] == topic and h["dq-deliver"] == "pull", h
        assert h["dq-ttr-ms"] == "7000" and h["dq-attempts"] == "1", h
    wait_until(lambda: d.get(big)["state"] == "dead", 10, "the big job marked dead")
    time.sleep(1)
    assert len([m for m in dlq.all() if m["headers"]["dq-id"] == big]) == 1, dlq.all()


def test_a_pull_letter_over_the_producers_own_limit_goes_bare_at_once(stack):
    """A letter librdkafka itself refuses (over kafka message.max.bytes, before any broker sees
    it) goes without its body at once, and the job is marked dead."""
    topic = pull_topic()
    d = Delayqd(stack, extra={"properties": ["message.max.bytes=3000"]}).start()
    c = Client(d)
    stack.produce(d.delay_topic("1s"), "p" * 5000, key="big",
                  headers={"dq-topic": topic, "dq-deliver": "pull"})
    (j,) = c.pop(topic, wait_ms=15000)
    assert op(d, "bury", j, reason="too big")[0] == 200

    def letters():
        return d.http("GET", f"/delay-queue/api/dead?topic={topic}")[1]["data"]["dead"]
    wait_until(letters, 15, "the bare letter")
    (letter,) = letters()
    status, doc = d.http("GET", f"/delay-queue/api/dead/{letter['partition']}/{letter['offset']}")
    assert status == 200 and doc["data"]["body"] == "", doc
    assert "omitted" in doc["data"]["headers"]["dq-body"], doc


def test_a_buried_pull_job_redriven_by_filter_is_popped_again_with_its_ttr(stack):
    """A buried job's record says failed, as any job its target gave up on: a redrive by filter
    makes it poppable again from its pull topic, with its own ttr, once."""
    topic = pull_topic()
    d = Delayqd(stack).start()
    dlq = Reader(stack, d.dlq)
    c = Client(d)
    job_id = d.add_ok(topic=topic, delay_ms=200, deliver="pull", ttr_ms=4000, body="order 1")
    (j,) = c.pop(topic, wait_ms=10000)
    assert op(d, "bury", j, reason="bad order")[0] == 200
    dlq.wait_count(1, 30)
    wait_until(lambda: d.get(job_id)["state"] == "dead", 10, "the job dead-lettered")
    status, doc = d.http("POST", "/delay-queue/api/dead/redrive", {"filter": {"topic": topic}})
    assert status == 200 and doc["data"]["redriven"] == 1, doc
    again = c.pop(topic, wait_ms=15000)
    popped_ms = now_ms()
    assert [x["id"] for x in again] == [job_id] and again[0]["body"] == "order 1", again
    assert 3000 <= again[0]["reserved_until_ms"] - popped_ms <= 4000, again
    assert op(d, "finish", again[0])[0] == 200
    status, doc = d.http("POST", "/delay-queue/api/dead/redrive", {"filter": {"topic": topic}})
    assert status == 200 and doc["data"]["redriven"] == 0, doc


def test_a_binary_direct_message_is_popped_and_redriven_with_its_exact_bytes(stack):
    """A direct producer's value that is not text (here protobuf-like bytes with a NUL and
    0xff) reaches poppers byte for byte, as base64 with body_encoding, and so does its redrive
    from the dead-letter topic."""
    topic = pull_topic()
    d = Delayqd(stack).start()
    c = Client(d)
    value = bytes([0x08, 0x96, 0x01, 0x00, 0xff, 0x0a, 0x80]) + "é".encode()
    stack.produce(d.delay_topic("1s"), value, key="bin",
                  headers={"dq-topic": topic, "dq-deliver": "pull", "dq-ttr-ms": "5000"})
    (j,) = c.pop(topic, wait_ms=15000)
    assert j["body_encoding"] == "base64" and base64.b64decode(j["body"]) == value, j
    assert op(d, "bury", j, reason="cannot parse")[0] == 200
    wait_until(lambda: d.http("GET", f"/delay-queue/api/dead?topic={topic}")[1]["data"]["dead"], 30,
               "the letter sent")
    status, doc = d.http("POST", "/delay-queue/api/dead/redrive", {"filter": {"topic": topic}})
    assert status == 200 and doc["data"]["redriven"] == 1, doc
    again = c.pop(topic, wait_ms=15000)
    assert len(again) == 1 and again[0]["body_encoding"] == "base64", again
    assert base64.b64decode(again[0]["body"]) == value, again
    got = d.get(again[0]["id"])
    assert base64.b64decode(got["body"]) == value and got["body_encoding"] == "base64", got
    assert op(d, "finish", again[0])[0] == 200
    # an add may carry bytes the same way
    job_id = d.add_ok(topic=topic, delay_ms=100, deliver="pull",
                      body=base64.b64encode(value).decode(), body_encoding="base64")
    (added,) = c.pop(topic, wait_ms=15000)
    assert added["id"] == job_id and base64.b64decode(added["body"]) == value, added


def test_direct_messages_and_removes_of_pull_jobs(stack):
    topic = pull_topic()
    d = Delayqd(stack).start()
    c = Client(d)
    stack.produce(d.delay_topic("1s"), "direct body", key="dk",
                  headers={"dq-topic": topic, "dq-deliver": "pull", "dq-ttr-ms": "5000", "x": "y"})
    jobs = c.pop(topic, wait_ms=15000)
    assert len(jobs) == 1 and jobs[0]["body"] == "direct body" and jobs[0]["key"] == "dk", jobs
    assert jobs[0]["headers"] == {"x": "y"}, jobs
    assert jobs[0]["reserved_until_ms"] - now_ms() <= 5000, jobs
    assert op(d, "finish", jobs[0])[0] == 200

    gone = d.add_ok(topic=topic, delay_ms=300, deliver="pull")
    kept = d.add_ok(topic=topic, delay_ms=300, deliver="pull")
    wait_until(lambda: d.get(gone)["state"] == "ready", 15, "the jobs to be ready")
    wait_until(lambda: d.get(kept)["state"] == "ready", 15, "the jobs to be ready")
    status, doc = d.remove(gone)
    assert status == 200 and doc["code"] == 0, doc
    assert d.get(gone)["state"] == "removed"
    jobs = c.pop(topic, max=10)
    assert [j["id"] for j in jobs] == [kept], jobs
    status, doc = d.remove(kept)   # reserved: a remove takes it too
    assert status == 200, doc
    assert op(d, "finish", jobs[0])[0] == 409
    status, doc = d.remove(kept)
    assert status == 200 and "already" in doc["message"], doc


def test_a_pull_job_and_its_record_live_and_die_together(stack):
    """A job ready longer than job.retention_s (no worker came) is still seen by get, still
    taken out by remove, its id still taken for a new add; once it ends its record expires
    after job.retention_s as any job's."""
    topic = pull_topic()
    d = Delayqd(stack, extra={"pull_topics": [topic], "retention_s": 2}).start()
    c = Client(d)
    waits = d.add_ok(topic=topic, delay_ms=200, body="waits for a worker")
    removed = d.add_ok(topic=topic, delay_ms=200, body="removed while it waits")
    wait_until(lambda: d.get(removed)["state"] == "ready", 15, "the jobs to be ready")
    time.sleep(3.5)   # past job.retention_s since they were made ready
    assert d.get(waits)["state"] == "ready"
    assert int(stack.redis("PTTL", f"{d.prefix}job:{waits}")) == -1
    status, doc = d.add(id=waits, topic=topic, delay_ms=200, body="another job")
    assert status == 409 or doc["code"] != 0, doc   # the id is still taken: no stall behind it
    status, doc = d.remove(removed)
    assert status == 200 and doc["code"] == 0, doc
    jobs = c.pop(topic, max=10)
    assert [j["id"] for j in jobs] == [waits], jobs
    assert op(d, "finish", jobs[0])[0] == 200
    assert 0 < int(stack.redis("PTTL", f"{d.prefix}job:{waits}")) <= 2000
    wait_until(lambda: d.get(waits) is None, 10, "the finished job's record to expire")
    again = d.add_ok(id=waits, topic=topic, delay_ms=200, body="the id is free again")
    got = c.pop(topic, wait_ms=10000)
    assert [j["id"] for j in got] == [again] and got[0]["body"] == "the id is free again", got


def test_a_waiting_pop_is_answered_when_a_job_becomes_ready_on_another_instance(stack):
    topic = pull_topic()
    a = Delayqd(stack, extra={"pull_topics": [topic]}).start()
    a.wait_groups_owned()   # a holds the only group: b hears of the job only through Redis
    waiter = Delayqd(stack, cluster=a).start()
    results = []

    def pop():
        results.append((Client(waiter).pop(topic, wait_ms=20000), now_ms()))

    t = threading.Thread(target=pop)
    t.start()
    time.sleep(0.5)
    job_id = a.add_ok(topic=topic, delay=2)
    t.join(30)
    jobs, at = results[0]
    assert len(jobs) == 1 and jobs[0]["id"] == job_id and at >= jobs[0]["due_ms"], results
    wait_until(lambda: waiter.http("GET", "/delay-queue/api/stats")[1]["data"].get("pull", {})
               .get(topic, {}).get("reserved") == 1, 10, "/stats to count the reserved job")
    # counted while /metrics is scraped: the first scrape asks for the counts
    wait_until(lambda: 'delayq_pull_reserved_jobs{topic="%s"} 1' % topic
               in waiter.http("GET", "/metrics")[1], 10, "the gauge to count the reserved job")


def test_shutdown_answers_a_waiting_pop(stack):
    topic = pull_topic()
    d = Delayqd(stack, extra={"pull_topics": [topic]}).start()
    results = []
    t = threading.Thread(target=lambda: results.append(Client(d).pop(topic, wait_ms=60000)))
    t.start()
    time.sleep(1)
    t0 = time.time()
    d.stop()
    t.join(30)
    assert results == [[]], results   # answered, with no job, as the instance stopped
    assert time.time() - t0 < 30


def test_two_instances_hand_each_job_to_one_popper_and_lose_none_to_a_kill(stack):
    topic = pull_topic()
    a = Delayqd(stack, extra={"pull_topics": [topic], "ttr_s": 3}).start()
    b = Delayqd(stack, cluster=a).start()
    n = 400
    due0 = now_ms() + 2000
    ids = [f"j{i}" for i in range(n)]
    status, doc = a.http("POST", API + "add_batch", {"jobs": [
        {"id": i, "topic": topic, "deliver_at_ms": due0 + k * 5} for k, i in enumerate(ids)]})
    assert status == 200 and doc["data"]["added"] == n, doc
    finished, popped, early = [], [], []
    held = {}
    lock = threading.Lock()
    stop = threading.Event()

    errors = []

    def worker(d, k):
        try:
            work(d, k)
        except Exception as e:   # shown by the wait below, not lost with the thread
            with lock:
                errors.append(f"worker {k} of {'a' if d is a else 'b'}: {e!r}")

    def work(d, k):
        c = Client(d)
        while not stop.is_set():
            try:
                jobs = c.pop(topic, wait_ms=1000, max=5)
            except (OSError, http.client.HTTPException):
                return   # its instance was killed
            at = now_ms()
            for j in jobs:
                with lock:
                    popped.append(j["id"])
                    if at < j["due_ms"]:
                        early.append(j)
                    if j["id"] in held and held[j["id"]] > at:
                        raise AssertionError(f"{j['id']} handed out twice at once")
                    held[j["id"]] = j["reserved_until_ms"]
                if d is a and k == 0 and len(finished) > n // 4:
                    continue   # this worker dies with what it holds
                try:
                    status, _ = c.call("finish", {"job_id": j["id"], "receipt": j["receipt"]})
                except (OSError, http.client.HTTPException):
                    return
                if status == 200:
                    with lock:
                        finished.append(j["id"])

    threads = [threading.Thread(target=worker, args=(d, k)) for d in (a, b) for k in range(4)]
    for t in threads:
        t.start()
    def done(count):
        assert not errors, errors
        return len(set(finished)) >= count
    wait_until(lambda: done(n // 2 + 1), 60, "half the jobs finished")
    a.kill()   # kill -9: what a holds reserved and what is ready stays in Redis
    wait_until(lambda: done(n), 90, "every job finished")
    stop.set()
    for t in threads:
        t.join(30)
    assert sorted(set(finished)) == sorted(ids) and len(finished) == n, \
        (len(finished), len(set(finished)))
    assert early == [], early[:3]
    assert len(popped) >= n


def test_also_kafka_sends_a_pull_job_to_its_topic_as_well(stack):
    topic = pull_topic()
    d = Delayqd(stack, extra={"pull_topics": [topic], "also_kafka": True}).start()
    reader = Reader(stack, topic)
    job_id = d.add_ok(topic=topic, delay=1, body="both")
    stack.produce(d.delay_topic("1s"), "direct", headers={"dq-topic": topic})
    jobs = Client(d).pop(topic, wait_ms=15000, max=10)
    while len(jobs) < 2:
        jobs += Client(d).pop(topic, wait_ms=15000, max=10)
    assert sorted(j["body"] for j in jobs) == ["both", "direct"], jobs
    got = reader.wait_count(2, 30)
    assert sorted(m["payload"] for m in got) == ["both", "direct"], got
    assert d.get(job_id)["state"] == "reserved"


def pop_and_finish_all(d, topics, ids, timeout=60):
    """Pops every job of ids from topics (max 10 a pop) and finishes it; returns how many times
    each id was handed out."""
    c, seen = Client(d), {}
    end = time.time() + timeout
    while len([i for i in ids if i in seen]) < len(ids) and time.time() < end:
        for t in topics:
            for j in c.pop(t, wait_ms=200, max=10):
                seen[j["id"]] = seen.get(j["id"], 0) + 1
                assert now_ms() >= j["due_ms"], j
                assert op(d, "finish", j)[0] == 200, j
    return seen


def check_pull_round(d, n=300, ntopics=3):
    """n pull jobs over ntopics topics (so over several Redis Cluster slots), each popped and
    finished once."""
    topics = [pull_topic() for _ in range(ntopics)]
    ids = d.bulk_add([{"topic": topics[i % ntopics], "delay_ms": 500 + i * 3, "deliver": "pull"}
                      for i in range(n)])
    seen = pop_and_finish_all(d, topics, ids)
    assert sorted(seen) == sorted(ids) and set(seen.values()) == {1}, \
        (len(seen), [k for k, v in seen.items() if v > 1][:5])
    return topics


def park_and_leave(d, topic, wait_ms=60000, after_s=1.0):
    """A pop that waits, whose client gives up and closes its connection after after_s."""
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
    conn.request("POST", API + "pop", json.dumps({"topic": topic, "wait_ms": wait_ms}),
                 {"Content-Type": "application/json"})
    time.sleep(after_s)
    conn.close()


def test_a_waiting_pop_whose_client_left_takes_nothing(stack):
    """A proxy's idle timeout or a worker that gave up: its parked pop is dropped, and the job
    that falls due next goes to a popper that is still there, a once job included."""
    topic = pull_topic()
    d = Delayqd(stack, extra={"pull_topics": [topic]}).start()
    for once in (True, False):
        park_and_leave(d, topic)
        time.sleep(0.3)   # the pull thread notices within 100 ms
        extra = {"once": True} if once else {"ttr": 30}
        job_id = d.add_ok(topic=topic, delay_ms=300, body="b", **extra)
        got = Client(d).pop(topic, wait_ms=10000)
        assert [j["id"] for j in got] == [job_id], (once, got)
        assert got[0]["attempt"] == 1, got
        if not once:
            assert op(d, "finish", got[0])[0] == 200
    assert d.metric("delayq_pull_pops_left_total") >= 2
    assert d.metric("delayq_pull_jobs_popped_total") == 2


def test_abandoned_long_polls_free_their_address_s_connections(stack):
    """64 pops waiting 60 s whose clients closed their connections, with
    http.max_connections_per_ip = 64: their connections are let go within a second of their
    clients' leaving, so the address is not locked out until the waits run out (every new
    connection was reset, /healthz included, for up to pull.max_wait_ms)."""
    topic = pull_topic()
    d = Delayqd(stack, extra={"pull_topics": [topic], "max_connections_per_ip": 64}).start()
    conns = []
    for _ in range(64):
        c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
        c.request("POST", API + "pop", json.dumps({"topic": topic, "wait_ms": 60000}),
                  {"Content-Type": "application/json"})
        conns.append(c)
    time.sleep(1)
    for c in conns:
        c.close()

    def served():
        try:
            return d.http("GET", "/healthz")[0] == 200
        except RuntimeError:   # reset: the address still has its 64 connections
            return False
    wait_until(served, 1, "/healthz served to the address within 1 s of its pops' leaving")
    job_id = d.add_ok(topic=topic, delay_ms=200, body="b", ttr=30)
    assert [j["id"] for j in Client(d).pop(topic, wait_ms=10000)] == [job_id]
    assert d.metric("delayq_pull_pops_left_total") >= 60


def test_a_pop_waits_pull_max_wait_ms_at_most(stack):
    topic = pull_topic()
    d = Delayqd(stack, extra={"pull_topics": [topic], "max_wait_ms": 1000}).start()
    start = time.monotonic()
    assert Client(d).pop(topic, wait_ms=60000) == []
    waited = time.monotonic() - start
    assert 0.9 <= waited < 20, waited


def test_once_and_ttr_hold_for_a_topic_of_pull_topics(stack):
    """A topic that is a pull topic by configuration keeps what the add said of the pull job,
    as "deliver": "pull" would."""
    topic = pull_topic()
    d = Delayqd(stack, extra={"pull_topics": [topic], "ttr_s": 60}).start()
    c = Client(d)
    once = d.add_ok(topic=topic, delay_ms=200, body="once", once=True)
    got = c.pop(topic, wait_ms=10000)
    assert [j["id"] for j in got] == [once] and got[0]["receipt"] in ("", None), got
    assert d.get(once)["state"] == "finished"
    quick = d.add_ok(topic=topic, delay_ms=200, body="quick", ttr_ms=1500)
    first = c.pop(topic, wait_ms=10000)[0]
    assert first["id"] == quick and first["reserved_until_ms"] - first["due_ms"] < 5000, first
    again = c.pop(topic, wait_ms=10000)   # back after its own 1.5 s, not pull.ttr_s
    assert [j["id"] for j in again] == [quick] and again[0]["attempt"] == 2, again
    assert now_ms() >= first["reserved_until_ms"], first
    assert c.pop(topic, wait_ms=500) == []   # the once job never came back


def test_touch_without_a_ttr_renews_the_jobs_own(stack):
    topic = pull_topic()
    d = Delayqd(stack, extra={"pull_topics": [topic], "ttr_s": 5}).start()
    c = Client(d)
    d.add_ok(topic=topic, delay_ms=200, body="long", ttr=20)
    j = c.pop(topic, wait_ms=10000)[0]
    status, doc = op(d, "touch", j)
    assert status == 200, doc
    assert doc["data"]["reserved_until_ms"] >= now_ms() + 19000, doc   # 20 s, not pull.ttr_s
    d.add_ok(topic=topic, delay_ms=200, body="popped with a ttr")
    k = c.pop(topic, wait_ms=10000, ttr=30)[0]
    status, doc = op(d, "touch", k)   # no ttr of its own: the one its pop gave
    assert status == 200 and doc["data"]["reserved_until_ms"] >= now_ms() + 29000, doc


def test_max_attempts_counts_receives_released_ones_too(stack):
    """As SQS's maxReceiveCount: a worker that pops and releases a poison job gets it
    pull.max_attempts times, then it is a dead letter that says why."""
    topic = pull_topic()
    d = Delayqd(stack, extra={"pull_topics": [topic], "max_attempts": 3}).start()
    dlq = Reader(stack, d.dlq)
    c = Client(d)
    job_id = d.add_ok(topic=topic, delay_ms=200, body="poison")
    attempts = []
    for _ in range(3):
        j = c.pop(topic, wait_ms=10000)[0]
        attempts.append(j["attempt"])
        assert op(d, "release", j)[0] == 200
    assert attempts == [1, 2, 3], attempts
    assert c.pop(topic, wait_ms=1500) == []   # the 4th receive never happens
    m = dlq.wait_count(1, 30)[0]
    assert m["headers"]["dq-id"] == job_id and m["headers"]["dq-attempts"] == "3", m
    assert "received 3 times" in m["headers"]["dq-error"], m
    wait_until(lambda: d.get(job_id)["state"] == "dead", 10, "the record to say dead")


def test_every_pull_topic_is_swept_however_many(stack):
    """1,100 pull topics, one job each, reserved and never finished: every one is ready again
    after its ttr, and /stats counts every topic."""
    d = Delayqd(stack, extra={"pull_topics": ["many-*"]}).start()
    run = uuid.uuid4().hex[:6]
    topics = [f"many-{run}-{i}" for i in range(1100)]
    for at in range(0, len(topics), 550):
        status, doc = d.http("POST", "/delay-queue/api/jobs/add_batch",
                             {"jobs": [{"topic": t, "delay_ms": 500, "body": t, "ttr": 2}
                                       for t in topics[at:at + 550]]})
        assert status == 200 and all(a["code"] == 0 for a in doc["data"]["jobs"]), doc
    c = Client(d)
    first = {}
    deadline = time.monotonic() + 60
    while len(first) < len(topics) and time.monotonic() < deadline:
        for t in topics:
            if t not in first:
                got = c.pop(t)
                if got:
                    first[t] = got[0]
    assert len(first) == len(topics), len(first)
    deadline = time.monotonic() + 60
    left = set(topics)
    while left and time.monotonic() < deadline:
        for t in list(left):
            got = c.pop(t)
            if got:
                assert got[0]["attempt"] == 2, got
                left.discard(t)
        time.sleep(0.2)
    assert not left, f"{len(left)} of {len(topics)} never came back, e.g. {sorted(left)[:3]}"
    stats = d.http("GET", "/delay-queue/api/stats")[1]["data"]["pull"]
    assert sum(1 for t in topics if t in stats) == len(topics), len(stats)
    assert "many-" not in d.log_text(), "a pull topic was looked up in Kafka"


def test_an_empty_pull_topic_leaves_the_registry(stack):
    topic = pull_topic()
    d = Delayqd(stack, extra={"pull_topics": [topic]}).start()
    registry = d.prefix + "pull:registry"
    d.add_ok(topic=topic, delay_ms=200, body="x")
    j = Client(d).pop(topic, wait_ms=10000)[0]
    assert stack.redis("ZSCORE", registry, topic) != ""
    assert op(d, "finish", j)[0] == 200
    time.sleep(1)
    assert stack.redis("ZSCORE", registry, topic) != ""   # registered lately: kept
    stack.redis("ZADD", registry, "1", topic)   # as if no job came for a long time
    wait_until(lambda: stack.redis("ZSCORE", registry, topic) == "", 10,
               "the empty topic to leave the registry")


def test_an_instance_whose_clock_runs_ahead_ends_no_reservation_early(stack):
    """Reservations end by Redis's clock: an instance whose own clock is 5 s ahead sweeps the
    topic without handing out again a job another instance's worker still holds."""
    topic = pull_topic()
    a = Delayqd(stack, extra={"pull_topics": [topic]}).start()
    ahead = Delayqd(stack, cluster=a, extra={"faketime": "+5s"}).start()
    assert abs(ahead.get(ahead.add_ok(topic="orders", delay=3600))["exec_time_ms"] - now_ms()
               - 3600000 - 5000) < 2000   # its clock is ahead indeed
    job_id = a.add_ok(topic=topic, delay_ms=200, body="held")
    j = Client(a).pop(topic, wait_ms=10000, ttr=4)[0]
    assert j["id"] == job_id, j
    a.add_ok(topic=topic, delay_ms=100, body="makes the instance ahead sweep the topic")
    # a reservation of its own, whose end its clock puts in the past: it sweeps the topic now
    other = Client(ahead).pop(topic, wait_ms=10000, ttr=1)
    assert [o["body"] for o in other] == ["makes the instance ahead sweep the topic"], other
    assert op(ahead, "finish", other[0])[0] == 200
    time.sleep(1)   # swept: by the clock of the instance ahead, j's reservation ended
    assert Client(ahead).pop(topic, wait_ms=500) == []
    got = a.get(job_id)
    assert got["state"] == "reserved" and got["pull"]["attempt"] == 1, got
    status, doc = op(ahead, "touch", j, ttr=5)
    assert status == 200 and doc["data"]["reserved_until_ms"] < now_ms() + 7000, doc
    assert op(a, "finish", j)[0] == 200


def redis_commands(stack):
    info = stack.redis("INFO", "stats")
    return int(re.search(r"total_commands_processed:(\d+)", info).group(1))


def test_idle_pull_topics_cost_redis_next_to_nothing(stack):
    """Three instances, 100 pops waiting on 50 topics that had jobs and have none now: Redis
    hears about 100 commands a second from all of them together (leases and schedules
    included), and a job made ready still reaches a waiting pop at once."""
    run = uuid.uuid4().hex[:6]
    topics = [f"idle-{run}-{i}" for i in range(50)]
    a = Delayqd(stack, extra={"pull_topics": ["idle-*"]}).start()
    others = [Delayqd(stack, cluster=a).start() for _ in range(2)]
    c = Client(a)
    for t in topics:   # each topic had a job, done now: it stays registered
        a.add_ok(topic=t, delay_ms=100, body="once")
    for t in topics:
        got = c.pop(t, wait_ms=10000)
        assert got and op(a, "finish", got[0])[0] == 200, got
    results = []

    def wait(d, t):
        results.append((t, Client(d, timeout=90).pop(t, wait_ms=40000), now_ms()))

    threads = [threading.Thread(target=wait, args=((a, *others)[i % 3], topics[i % 50]))
               for i in range(100)]
    for th in threads:
        th.start()
    time.sleep(3)   # every pop parked, every instance settled
    before, start = redis_commands(stack), time.monotonic()
    time.sleep(10)
    rate = (redis_commands(stack) - before) / (time.monotonic() - start)
    job_id = a.add_ok(topic=topics[7], delay_ms=100, body="now")
    deadline = time.monotonic() + 10
    while not any(r[1] for r in results) and time.monotonic() < deadline:
        time.sleep(0.05)
    got = [r for r in results if r[1]]
    assert len(got) == 1 and got[0][1][0]["id"] == job_id, results
    assert got[0][2] - got[0][1][0]["due_ms"] < 1000, got   # heard of, not polled for
    assert rate <= 100, f"{rate:.0f} Redis commands a second with nothing to do"
    for d in (a, *others):
        d.stop()
    for th in threads:
        th.join(60)


def test_a_pop_of_several_topics_is_served_by_the_first_with_a_job(stack):
    first, second = pull_topic(), pull_topic()
    d = Delayqd(stack, extra={"pull_topics": ["pull-*"]}).start()
    c = Client(d)
    later = d.add_ok(topic=second, delay_ms=200, body="second")
    got = c.pop(None, topics=[first, second], wait_ms=10000)   # waits on both
    assert [j["id"] for j in got] == [later] and got[0]["topic"] == second, got
    a = d.add_ok(topic=first, delay_ms=100, body="a")
    b = d.add_ok(topic=second, delay_ms=100, body="b")
    time.sleep(0.5)
    got = c.pop(None, topics=[first, second], max=10)
    assert [j["id"] for j in got] == [a], got   # the first topic with a job serves it
    assert [j["id"] for j in c.pop(None, topics=[first, second])] == [b]
    for body, word in (({"topics": []}, "topics"), ({"topics": [first], "topic": first}, "either"),
                       ({"topics": [d.delay_topic("1s")]}, "delay topic")):
        status, doc = d.http("POST", API + "pop", body)
        assert status == 400 and word in doc["message"], (body, doc)


def test_finish_touch_and_release_many_jobs_in_one_request(stack):
    """As SQS's DeleteMessageBatch: up to 100 jobs in one request, each with its own answer."""
    topic = pull_topic()
    d = Delayqd(stack, extra={"pull_topics": [topic]}).start()
    c = Client(d)
    ids = [d.add_ok(topic=topic, delay_ms=200, body=f"b{i}") for i in range(6)]
    jobs = []
    while len(jobs) < 6:
        jobs += c.pop(topic, wait_ms=10000, max=10)
    mine = lambda js: [{"job_id": j["id"], "receipt": j["receipt"]} for j in js]
    status, doc = c.call("touch", {"jobs": [dict(o, ttr=120) for o in mine(jobs[:2])]})
    assert status == 200 and [a["code"] for a in doc["data"]["jobs"]] == [0, 0], doc
    assert all(a["reserved_until_ms"] > now_ms() + 110000 for a in doc["data"]["jobs"]), doc
    stale = {"job_id": ids[0], "receipt": "x" * 13 + "1:" + topic}
    status, doc = c.call("finish", {"jobs": mine(jobs[:4]) + [stale, {"job_id": "a b"}]})
    answers = doc["data"]["jobs"]
    assert status == 200 and len(answers) == 6, doc
    assert [a["code"] for a in answers[:4]] == [0] * 4 and answers[0]["state"] == "finished", doc
    assert answers[4]["code"] == 409 and answers[4]["job_id"] == ids[0], answers[4]
    assert answers[5]["code"] == 400 and "job_id" in answers[5]["message"], answers[5]
    status, doc = c.call("release", {"jobs": mine(jobs[4:])})
    assert status == 200 and [a["state"] for a in doc["data"]["jobs"]] == ["ready"] * 2, doc
    back = c.pop(topic, wait_ms=10000, max=10)
    assert sorted(j["id"] for j in back) == sorted(j["id"] for j in jobs[4:]), back
    for body, word in (({"jobs": []}, "jobs"), ({"jobs": [{}] * 101}, "jobs")):
        status, doc = c.call("finish", body)
        assert status == 400 and word in doc["message"], (body, doc)


TOPIC_API = "/delay-queue/api/pull/"


def test_a_topic_s_figures_say_ready_delayed_reserved_and_the_oldest_age(stack):
    """As SQS's queue attributes: what may be popped now, what is delayed (added and not yet
    due, or released with a delay), what is reserved, and how long the oldest ready job has
    waited, per topic, in /stats, in GET /pull/{topic} and in /metrics."""
    topic = pull_topic()
    d = Delayqd(stack, extra={"pull_topics": [topic]}).start()
    c = Client(d)
    ids = [d.add_ok(topic=topic, delay_ms=200, body=f"job {i}") for i in range(4)]
    wait_until(lambda: all(d.get(i)["state"] == "ready" for i in ids), 15, "the jobs to be ready")
    popped = c.pop(topic, max=2)
    assert len(popped) == 2, popped
    assert op(d, "release", popped[0], delay=60)[0] == 200   # delayed for a minute
    d.add_ok(topic=topic, delay=60, body="added for later")   # delayed too
    time.sleep(0.5)
    status, doc = d.http("GET", TOPIC_API + topic)
    assert status == 200 and doc["code"] == 0, doc
    f = doc["data"]
    assert (f["topic"], f["ready"], f["delayed"], f["reserved"], f["paused"]) == \
        (topic, 2, 2, 1, False), f
    assert 500 <= f["oldest_ready_age_ms"] < 60000, f
    stats = d.http("GET", "/delay-queue/api/stats")[1]["data"]["pull"][topic]
    assert (stats["ready"], stats["delayed"], stats["reserved"]) == (2, 2, 1), stats
    text = ""
    for _ in range(30):   # counted while /metrics is scraped
        text = d.http("GET", "/metrics")[1]
        if f'delayq_pull_delayed_jobs{{topic="{topic}"}} 2' in text:
            break
        time.sleep(0.5)
    assert f'delayq_pull_delayed_jobs{{topic="{topic}"}} 2' in text, text
    assert f'delayq_pull_ready_jobs{{topic="{topic}"}} 2' in text, text
    assert f'delayq_pull_reserved_jobs{{topic="{topic}"}} 1' in text, text
    status, doc = d.http("GET", TOPIC_API + "bad!topic")
    assert status == 400 and "topic" in doc["message"], doc


def test_peek_lists_a_topic_s_jobs_page_by_page_without_reserving(stack):
    topic = pull_topic()
    d = Delayqd(stack, extra={"pull_topics": [topic]}).start()
    c = Client(d)
    long_body = "é" * 200   # 400 bytes: previewed, cut where UTF-8 allows
    ids = [d.add_ok(topic=topic, delay_ms=200 + 50 * i, body=long_body if i == 0 else f"b{i}")
           for i in range(5)]
    wait_until(lambda: all(d.get(i)["state"] == "ready" for i in ids), 15, "the jobs to be ready")
    seen, after = [], None
    while True:
        q = f"?state=ready&limit=2" + (f"&after={after}" if after else "")
        status, doc = d.http("GET", TOPIC_API + topic + "/jobs" + q)
        assert status == 200 and doc["code"] == 0, doc
        seen += doc["data"]["jobs"]
        after = doc["data"]["next"]
        if not after:
            break
    assert [j["id"] for j in seen] == ids, seen   # oldest first, each once, none reserved
    first = seen[0]
    assert first["state"] == "ready" and first["attempt"] == 0, first
    assert first["body_bytes"] == 400 and first["body_truncated"] is True, first
    assert long_body.startswith(first["body"]) and len(first["body"].encode()) <= 256, first
    assert seen[1]["body"] == "b1" and seen[1]["body_truncated"] is False, seen[1]
    got = c.pop(topic, max=10)   # the peek reserved nothing
    assert [j["id"] for j in got] == ids, got
    status, doc = d.http("GET", TOPIC_API + topic + "/jobs?state=reserved&limit=100")
    listed = doc["data"]["jobs"]
    # by the end of their reservations, one pop's (one instant) by id
    assert [j["id"] for j in listed] == sorted(ids), doc
    assert all(j["state"] == "reserved" for j in listed), doc
    assert all(j["attempt"] == 1 and j["reserved_until_ms"] > now_ms() for j in listed), listed
    assert op(d, "release", got[0], delay=30)[0] == 200
    status, doc = d.http("GET", TOPIC_API + topic + "/jobs?state=delayed")
    assert [j["id"] for j in doc["data"]["jobs"]] == [ids[0]], doc
    assert doc["data"]["jobs"][0]["ready_at_ms"] > now_ms() + 20000, doc
    for bad in ("?state=gone", "?limit=0", "?limit=101", "?after=nonsense"):
        status, doc = d.http("GET", TOPIC_API + topic + "/jobs" + bad)
        assert status == 400, (bad, doc)
    status, doc = d.http("POST", TOPIC_API + topic + "/jobs", {})
    assert status == 405, doc


def test_a_paused_topic_hands_out_nothing_and_loses_nothing(stack):
    """As BullMQ's pause: pops answer empty while a topic is paused; its jobs stay ready, a
    waiting pop gets one as soon as the topic is resumed, from another instance too."""
    topic = pull_topic()
    a = Delayqd(stack, extra={"pull_topics": [topic]}).start()
    b = Delayqd(stack, cluster=a).start()
    status, doc = a.http("POST", TOPIC_API + topic + "/pause", {})
    assert status == 200 and doc["data"] == {"topic": topic, "paused": True}, doc
    status, doc = a.http("POST", TOPIC_API + topic + "/pause", {})
    assert status == 200 and doc["message"] == "already paused", doc
    job = a.add_ok(topic=topic, delay_ms=200, body="held while paused")
    wait_until(lambda: a.get(job)["state"] == "ready", 15, "the job to be ready")
    assert Client(a).pop(topic, wait_ms=1000) == []
    assert a.http("GET", TOPIC_API + topic)[1]["data"]["paused"] is True
    assert a.http("GET", "/delay-queue/api/stats")[1]["data"]["pull"][topic]["paused"] is True
    got = []
    waiter = threading.Thread(target=lambda: got.extend(Client(b).pop(topic, wait_ms=20000)))
    waiter.start()
    time.sleep(1.0)
    assert not got
    resumed_ms = now_ms()
    status, doc = a.http("POST", TOPIC_API + topic + "/resume", {})
    assert status == 200 and doc["data"]["paused"] is False, doc
    waiter.join(25)
    assert [j["id"] for j in got] == [job], got
    assert now_ms() - resumed_ms < 10000   # woken by the resume, not by its wait running out
    status, doc = a.http("GET", TOPIC_API + topic + "/pause")
    assert status == 405, doc
