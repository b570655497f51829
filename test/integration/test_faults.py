"""Never lost, never early, never twice from Redis: crashes at random instants, remove racing
delivery, Redis and Kafka outages, poison input, refused deliveries, HTTP abuse."""

import json
import os
import random
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor

from harness import DELAYQD, Delayqd, Reader, lateness, now_ms, record, run, wait_until

ADD = "/delay-queue/api/jobs/add"


def assert_never_early(messages):
    for m in messages:
        sent_late, recv_late = lateness(m)
        assert sent_late >= 0 and recv_late >= 0, ("early", m)


def assert_no_delivered_record_resent(d, by_id):
    """A job delivered twice is allowed only while its record was not yet marked delivered:
    every send must come before the mark."""
    dups = {j: ms for j, ms in by_id.items() if len(ms) > 1}
    for job_id, ms in dups.items():
        job = d.get(job_id)
        assert job["state"] == "delivered", job
        last_sent = max(int(m["headers"]["dq-sent-ms"]) for m in ms)
        assert last_sent <= job["delivered_ms"], (job_id, last_sent, job["delivered_ms"])
    return len(dups)


def test_bearer_token(stack):
    d = Delayqd(stack, extra={"auth_token": "s3cret-token"}).start()
    st, doc = d.add(topic="orders", delay=5, body="x")
    assert st == 401 and doc["code"] == 401, doc
    st, doc = d.http("POST", ADD, {"topic": "orders", "delay": 5},
                     headers={"Authorization": "Bearer s3cret-tokeN"})
    assert st == 401, doc
    st, doc = d.http("POST", ADD, {"topic": "orders", "delay": 5},
                     headers={"Authorization": "Bearer s3cret"})
    assert st == 401, doc
    st, doc = d.http("POST", ADD, {"topic": "orders", "delay": 5, "body": "x"},
                     headers={"Authorization": "Bearer s3cret-token"})
    assert st == 200 and doc["code"] == 0, doc
    st, doc = d.http("GET", f"/delay-queue/api/jobs/get?job_id={doc['data']['job_id']}",
                     headers={"Authorization": "Bearer s3cret-token"})
    assert st == 200 and doc["data"]["state"] == "pending", doc
    for scheme in ("bearer", "BEARER"):   # RFC 9110: the scheme is case-insensitive
        st, doc = d.http("POST", ADD, {"topic": "orders", "delay": 5, "body": "x"},
                         headers={"Authorization": f"{scheme} s3cret-token"})
        assert st == 200 and doc["code"] == 0, (scheme, doc)
    st, doc = d.http("GET", "/healthz")
    assert st == 200, doc


def test_slow_clients_do_not_starve_others(stack):
    d = Delayqd(stack, extra={"connection_timeout_s": 2}).start()
    stalled = []
    for _ in range(200):
        s = socket.create_connection(("127.0.0.1", d.port))
        s.sendall(b"POST /delay-queue/api/jobs/add HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{")
        stalled.append(s)
    for i in range(20):   # others are served while 200 clients stall mid-request
        assert d.add_ok(topic="orders", delay=60, body=str(i))
    # The stalled connections are closed by the server once connection_timeout_s has passed.
    for s in stalled:
        s.settimeout(10)
        try:
            assert s.recv(100) == b"", "a stalled client got an answer instead of being closed"
        except ConnectionResetError:
            pass
        s.close()
    assert d.alive()


def read_http_response(s):
    """Reads one HTTP/1.1 response with a Content-Length from socket s: (status, body)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(4096)
        assert chunk, "connection closed before an answer"
        buf += chunk
    head, body = buf.split(b"\r\n\r\n", 1)
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(body) < length:
        chunk = s.recv(4096)
        assert chunk, "connection closed inside an answer"
        body += chunk
    return int(head.split(b" ", 2)[1]), body[:length]


def test_requests_arriving_on_128_connections_at_once_are_all_answered(stack):
    # 128 keep-alive clients on one HTTP thread whose requests all arrive while delayqd is
    # paused: they become readable together. (libmicrohttpd 0.9.75's epoll loop then waited
    # again for more events before serving them, up to connection_timeout_s.)
    d = Delayqd(stack, extra={"http_threads": 1, "connection_timeout_s": 300}).start()
    conns = []
    for _ in range(128):
        s = socket.create_connection(("127.0.0.1", d.port))
        s.settimeout(30)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_http_response(s)[0] == 200
        conns.append(s)
    os.kill(d.proc.pid, signal.SIGSTOP)
    try:
        for i, s in enumerate(conns):
            body = json.dumps({"topic": "orders", "delay": 600, "body": f"burst {i}"}).encode()
            s.sendall(b"POST " + ADD.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        time.sleep(0.5)
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
    ids = []
    for s in conns:
        try:
            status, body = read_http_response(s)
        except socket.timeout:
            raise AssertionError("a request of the burst was not answered in 30 s")
        doc = json.loads(body)
        assert status == 200 and doc["code"] == 0, (status, doc)
        ids.append(doc["data"]["job_id"])
        s.close()
    assert len(set(ids)) == 128
    assert all(d.get(i)["state"] == "pending" for i in ids[::16])


def test_record_that_does_not_decode_goes_to_dead_letter(stack):
    d = Delayqd(stack, partitions=1).start()
    good = Reader(stack, f"{d.name}_good")
    bad_id = d.add_ok(topic=good.topic, delay=2, body="will be corrupted")
    alien_id = d.add_ok(topic=good.topic, delay=2, body="will be replaced by a hash")
    ok_id = d.add_ok(topic=good.topic, delay=2, body="fine")
    # A readable head with a tail that is not msgpack; a key of another type altogether.
    stack.redis("EVAL", "local v = redis.call('GET', KEYS[1])\n"
                "local at = string.match(v, '^%l%d+|[^|]*|[^|]*|()')\n"
                "return redis.call('SET', KEYS[1], string.sub(v, 1, at - 1) .. ARGV[1], 'KEEPTTL')",
                "1", f"{d.prefix}job:{bad_id}", "\x01not msgpack")
    alien = f"{d.prefix}job:{alien_id}"
    stack.redis("DEL", alien)
    stack.redis("HSET", alien, "someone", "else")
    # The API names the problem instead of failing the connection or the process.
    st, doc = d.http("GET", f"/delay-queue/api/jobs/get?job_id={alien_id}")
    assert st == 500 and "unreadable record" in doc["message"], doc
    st, doc = d.http("GET", f"/delay-queue/api/jobs/remove?job_id={alien_id}")
    assert st == 500 and "unreadable record" in doc["message"], doc
    st, doc = d.add(id=alien_id, topic=good.topic, delay=2, body="x")
    assert st == 409 and "not a job record" in doc["message"], doc
    st, doc = d.http("GET", f"/delay-queue/api/jobs/get?job_id={bad_id}")
    assert st == 500 and "unreadable record" in doc["message"], doc

    dlq = Reader(stack, d.dlq)
    dead = dlq.wait_count(2, 15)
    assert {m["headers"]["dq-id"] for m in dead} == {bad_id, alien_id}, dead
    for m in dead:
        assert "does not decode" in m["headers"]["dq-error"], m
    (m,) = good.wait_count(1, 10)
    assert m["headers"]["dq-id"] == ok_id and m["payload"] == "fine", m
    assert_never_early([m])
    assert stack.redis("HGET", alien, "someone") == "else"   # another's key is left alone
    good.close()
    dlq.close()


def test_redis_losing_its_scripts_is_survived(stack):
    """delayqd calls its record scripts by SHA; a SCRIPT FLUSH (or a failover to a server that
    never loaded them) must not fail adds, removes or deliveries."""
    d = Delayqd(stack, partitions=1).start()
    biz = Reader(stack, f"{d.name}_biz")
    first = d.add_ok(topic=biz.topic, delay=2, body="before the flush")
    stack.redis("SCRIPT", "FLUSH")
    second = d.add_ok(topic=biz.topic, delay=2, body="after the flush")
    stack.redis("SCRIPT", "FLUSH")
    gone = d.add_ok(topic=biz.topic, delay=2, body="removed")
    stack.redis("SCRIPT", "FLUSH")
    st, doc = d.remove(gone)
    assert st == 200 and doc["code"] == 0 and doc["message"] == "ok", doc
    stack.redis("SCRIPT", "FLUSH")   # before the claims and marks of the deliveries
    got = biz.wait_count(2, 15)
    assert sorted(m["headers"]["dq-id"] for m in got) == sorted([first, second]), got
    assert_never_early(got)
    wait_until(lambda: d.get(first)["state"] == "delivered" and d.get(second)["state"] == "delivered",
               10, "both marked delivered")
    assert d.get(gone)["state"] == "cancelled"
    biz.close()


def test_redis_out_of_memory_refuses_adds_and_leaves_no_record(stack):
    """Adds that Redis refuses (OOM) are answered 503 with its reason and leave no record, so a
    retry with the same id is a new add and is delivered, not an "already added" that never
    comes. Adds reach Redis in batches, many to a script call; each is answered for itself."""
    d = Delayqd(stack).start().wait_groups_owned()
    biz = Reader(stack, f"{d.name}_oom")
    ids = [f"{d.name}-oom-{i}" for i in range(40)]
    add = lambda i: d.add(id=i, topic=biz.topic, delay_ms=1500, body=i)  # noqa: E731
    policy = stack.redis("CONFIG", "GET", "maxmemory-policy").split()[1]
    stack.redis("CONFIG", "SET", "maxmemory-policy", "noeviction")
    stack.redis("CONFIG", "SET", "maxmemory", "1")
    try:
        with ThreadPoolExecutor(20) as ex:
            refused = list(ex.map(add, ids))
    finally:
        stack.redis("CONFIG", "SET", "maxmemory", "0")
        stack.redis("CONFIG", "SET", "maxmemory-policy", policy)
    for st, doc in refused:
        assert st == 503 and "OOM" in doc["message"], (st, doc)
    assert all(d.get(i) is None for i in ids)
    with ThreadPoolExecutor(20) as ex:
        for st, doc in ex.map(add, ids):
            assert st == 200 and doc["message"] == "ok", (st, doc)
    got = biz.wait_count(len(ids), 20)
    assert sorted(m["headers"]["dq-id"] for m in got) == sorted(ids)
    biz.close()


def test_refused_delivery_is_retried_then_dead_lettered(stack):
    # The broker refuses messages over 1 MB (its default); the client is allowed to send 3 MB.
    d = Delayqd(stack, partitions=1, extra={
        "max_body_bytes": 3 << 20, "refused_retry_s": 2,
        "properties": ["message.max.bytes=3000000"]}).start()
    good = Reader(stack, f"{d.name}_biz")
    big_id = d.add_ok(topic=good.topic, delay=1, body="b" * 1500000, headers={"h": "v"})
    ok_id = d.add_ok(topic=good.topic, delay=2, body="small")
    (m,) = good.wait_count(1, 15)   # the partition moves on while the big one is retried
    assert m["headers"]["dq-id"] == ok_id, m
    assert_never_early([m])
    dlq = Reader(stack, d.dlq)
    (dead,) = dlq.wait_count(1, 30)
    assert dead["headers"]["dq-id"] == big_id and dead["headers"]["dq-topic"] == good.topic, dead
    assert "refused" in dead["headers"]["dq-error"] and "too large" in dead["headers"]["dq-error"], dead
    assert dead["headers"]["h"] == "v", dead
    # The dead-letter topic has the same 1 MB limit: the letter comes without the body, which
    # the record keeps.
    assert dead["payload"] is None and "omitted" in dead["headers"]["dq-body"], dead["headers"]
    wait_until(lambda: d.get(big_id)["state"] == "failed", 10, "state failed")
    assert len(d.get(big_id)["body"]) == 1500000
    st, doc = d.remove(big_id)
    assert st == 409 and "failed" in doc["message"], doc
    good.close()
    dlq.close()


def test_job_whose_message_could_not_fit_is_refused_at_add(stack):
    """The delivered message must fit the producer's message.max.bytes: a larger job is refused
    with 413 naming the limit, where it was once accepted and then never delivered."""
    d = Delayqd(stack, extra={"max_body_bytes": 1 << 20,
                              "properties": ["message.max.bytes=100000"]}).start()
    st, doc = d.add(topic="orders", delay=60, body="x" * 150000)
    assert st == 413 and doc["code"] == 413, (st, doc)
    assert "over kafka message.max.bytes (100000)" in doc["message"], doc
    st, doc = d.add(topic="orders", delay=60, body="x" * 99500, headers={"h": "v" * 500})
    assert st == 413, (st, doc)   # the headers count too
    job_id = d.add_ok(topic="orders", delay=60, body="x" * 99000)
    assert d.get(job_id)["state"] == "pending"


def test_message_kafka_never_accepts_is_dead_lettered_at_once_and_the_partition_moves_on(stack):
    """A job accepted under a larger message.max.bytes, and a direct message larger than it, can
    never be delivered: each goes to the dead-letter topic at once (not after
    job.refused_retry_s, which is for refusals an operator can fix), without its body when that
    does not fit either, the job's record says failed and why, and the partition's later
    messages are delivered and committed, so a restart sends none of them again."""
    d = Delayqd(stack, partitions=1, extra={"max_body_bytes": 1 << 20, "refused_retry_s": 600})
    d.start().wait_groups_owned()
    biz = Reader(stack, f"{d.name}_biz")
    big_id = d.add_ok(topic=biz.topic, delay=3, body="b" * 600000)
    ok_id = d.add_ok(topic=biz.topic, delay=4, body="small")
    assert d.stop() == 0
    small = Delayqd(stack, cluster=d, extra={"properties": ["message.max.bytes=300000"]})
    small.start()
    stack.produce(d.delay_topic("1s"), "d" * 400000, key="direct", headers={"dq-topic": biz.topic})
    stack.produce(d.delay_topic("1s"), "after", headers={"dq-topic": biz.topic})
    dlq = Reader(stack, d.dlq)
    letters = dlq.wait_count(2, 30)
    job_letter = next(m for m in letters if m["headers"].get("dq-id") == big_id)
    direct = next(m for m in letters if m["key"] == "direct")
    for m in (job_letter, direct):
        assert "refused" in m["headers"]["dq-error"] and "too large" in m["headers"]["dq-error"], m
        assert m["payload"] is None and "omitted" in m["headers"]["dq-body"], m["headers"]
    assert direct["headers"]["dq-source"].startswith(d.delay_topic("1s") + "/0/"), direct
    job = small.get(big_id)
    assert job["state"] == "failed" and "too large" in job["error"], job
    assert len(job["body"]) == 600000
    wait_until(lambda: {ok_id, None} <= set(biz.by_id()) and
               any(m["payload"] == "after" for m in biz.all()), 30, "the later messages")
    assert small.stop() == 0
    small.start().wait_groups_owned()
    time.sleep(3)
    assert len(dlq.all()) == 2, [m["headers"] for m in dlq.all()]
    assert len(biz.all()) == 2, [(m["payload"], m["headers"]) for m in biz.all()]
    biz.close()
    dlq.close()


def test_message_naming_a_job_it_does_not_belong_to_cannot_claim_it(stack):
    """Any producer can write a dq-id into a delay topic: a message that is not the job's own
    (no dq-tag, or another) leaves the job pending, so remove still cancels it, and it is not
    delivered through that message."""
    d = Delayqd(stack, partitions=1).start().wait_groups_owned()
    biz = Reader(stack, f"{d.name}_biz")
    job_id = d.add_ok(topic=biz.topic, delay=60, body="mine")
    for tag in (None, "AAAAAAAAAAAAA"):
        headers = {"dq-topic": biz.topic, "dq-id": job_id}
        if tag:
            headers["dq-tag"] = tag
        stack.produce(d.delay_topic("1s"), "forged", headers=headers)
    stack.produce(d.delay_topic("1s"), "after them", headers={"dq-topic": biz.topic})
    biz.wait_count(1, 20)   # the partition went past both
    time.sleep(0.5)
    assert d.get(job_id)["state"] == "pending"
    st, doc = d.remove(job_id)
    assert st == 200 and doc["message"] == "ok", (st, doc)
    time.sleep(1)
    assert [m["payload"] for m in biz.all()] == ["after them"], biz.all()
    assert d.log_text().count("is not the record's") == 2
    assert d.metric('delayq_jobs_skipped_total{reason="not_its_message"}') == 2
    biz.close()


def test_adds_not_handed_to_redis_in_time_are_answered_503_and_not_written(stack):
    """While Redis hangs, adds queue behind the one it holds; one that waited longer than
    kafka.produce_timeout_ms is answered 503 and dropped rather than written late for a client
    that has given up."""
    d = Delayqd(stack, extra={"redis_timeout_ms": 5000, "produce_timeout_ms": 1000}).start()
    d.add_ok(topic=f"{d.name}_late", delay=60, body="warm")   # the intake's connection is up
    with open(os.path.join(stack.redis_dir, "redis.pid")) as f:
        pid = int(f.read())
    os.kill(pid, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(d.add, id="held-by-redis", topic=f"{d.name}_late", delay=60)
            time.sleep(0.5)
            queued = pool.submit(d.add, id="queued-behind", topic=f"{d.name}_late", delay=60)
            time.sleep(2)
            os.kill(pid, signal.SIGCONT)
            first, queued = first.result(), queued.result()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert first[0] == 200, first   # Redis answered it within redis.timeout_ms
    st, doc = queued
    assert st == 503 and "not handed to Redis within kafka.produce_timeout_ms (1000 ms)" in doc["message"], queued
    assert d.get("queued-behind") is None


def test_retry_of_an_add_whose_record_outlived_its_failure_is_delivered(stack):
    """An add answered 503 may still have left its record (Redis ran it after delayqd gave up
    waiting), with no delay message behind it. The client's retry with the same id and content
    must schedule the job, not answer "already added" for a job that would never come."""
    d = Delayqd(stack, partitions=1, extra={"redis_timeout_ms": 500}).start().wait_groups_owned()
    biz = Reader(stack, f"{d.name}_retry")
    d.add_ok(topic=biz.topic, delay=60, body="warm")   # the intake's connection is up
    with open(os.path.join(stack.redis_dir, "redis.pid")) as f:
        pid = int(f.read())
    os.kill(pid, signal.SIGSTOP)
    try:
        st, doc = d.add(id="order-9", topic=biz.topic, delay=2, body="close it")
    finally:
        os.kill(pid, signal.SIGCONT)
    assert st == 503, (st, doc)
    wait_until(lambda: d.get("order-9"), 10, "the record Redis wrote after all")
    assert d.add_ok(id="order-9", topic=biz.topic, delay=2, body="close it") == "order-9"
    by_id = biz.wait_ids(["order-9"], 20)
    assert [m["payload"] for m in by_id["order-9"]] == ["close it"], by_id["order-9"]
    assert_never_early(by_id["order-9"])
    biz.close()


def test_a_lost_record_is_told_from_a_removed_one(stack):
    """A due message whose record is gone although it should still be kept (lost in Redis: a
    crash, a failover without the replica) is skipped with a warning naming the job and where
    its message is, and counted apart from removed jobs."""
    d = Delayqd(stack, partitions=1).start().wait_groups_owned()
    biz = Reader(stack, f"{d.name}_lost")
    lost = d.add_ok(topic=biz.topic, delay=2, body="lost")
    removed = d.add_ok(topic=biz.topic, delay=2, body="removed")
    assert d.remove(removed)[0] == 200
    stack.redis("DEL", f"{d.prefix}job:{lost}")
    wait_until(lambda: d.metric('delayq_jobs_skipped_total{reason="record_missing"}') == 1, 20,
               "the lost job skipped")
    wait_until(lambda: d.metric('delayq_jobs_skipped_total{reason="removed"}') == 1, 10,
               "the removed job skipped")
    warning = next(l for l in d.log_text().splitlines() if f"skip job={lost}" in l)
    assert "warn" in warning and f"topic={d.delay_topic('1s')} partition=0 offset=" in warning, warning
    assert "lost in Redis" in warning, warning
    assert biz.all() == []
    biz.close()


def race_removes_against_delivery(d, reader, n):
    """Adds n jobs due at one instant and removes each of them around it: every job is either
    removed (code 0) and never delivered, or refused 409 and delivered; none early."""
    due = now_ms() + 4000
    ids = d.bulk_add([{"topic": reader.topic, "deliver_at_ms": due, "body": str(i)}
                      for i in range(n)])
    time.sleep(max(0, (due - now_ms() - 150) / 1000))   # removes straddle the due instant
    res = d.bulk([("GET", f"/delay-queue/api/jobs/remove?job_id={j}", None) for j in ids], threads=8)
    time.sleep(3)
    delivered = reader.by_id()
    removed = conflicts = 0
    for job_id, (st, doc) in zip(ids, res):
        if st == 200 and doc["code"] == 0:
            removed += 1
            assert job_id not in delivered, ("removed and delivered", job_id)
        else:
            conflicts += 1
            assert st == 409 and doc["code"] == 409, (st, doc)
            assert job_id in delivered, ("remove refused and not delivered", job_id)
    print(f"    race: {removed} removed, {conflicts} delivered first")
    assert removed + conflicts == n
    assert_never_early(reader.all())


def test_remove_racing_delivery_has_one_winner(stack):
    d = Delayqd(stack, partitions=2).start()
    reader = Reader(stack, f"{d.name}_race")
    race_removes_against_delivery(d, reader, 1000)
    reader.close()


def test_kill9_three_times_loses_nothing(stack):
    d = Delayqd(stack, partitions=4).start()
    reader = Reader(stack, f"{d.name}_kill")
    rnd = random.Random(7)
    jobs = [{"topic": reader.topic, "delay_ms": rnd.randint(2000, 20000), "body": str(i)}
            for i in range(5000)]
    t0 = time.time()
    ids = d.bulk_add(jobs, threads=4)
    kills = sorted(rnd.uniform(1, 17) for _ in range(3))
    for at in kills:
        time.sleep(max(0, t0 + at - time.time()))
        d.kill()
        d.start()
    try:
        reader.wait_ids(ids, 90)
    except AssertionError:
        raise AssertionError(f"{len(set(ids) - set(reader.by_id()))} jobs lost")
    time.sleep(1)
    by_id = reader.by_id()
    assert_never_early(reader.all())
    dups = assert_no_delivered_record_resent(d, by_id)
    print(f"    kill -9 at {['%.1fs' % k for k in kills]}: 5000 delivered, {dups} duplicates")
    reader.close()


def outage(stack, d, stop, start, seconds, why=""):
    """Pending jobs due before, during and after an outage of `seconds`; an add during it gets
    503 within its timeout, its message saying `why`; once the server is back every accepted job
    arrives, none early and none skipped as "removed". The business topic is read from the
    beginning afterwards."""
    topic = f"{d.name}_outage"
    stack.ensure_topic(topic)
    ids = d.bulk_add([{"topic": topic, "delay_ms": 500 + i * ((seconds + 8) * 1000 // 60),
                       "body": str(i)} for i in range(60)])
    time.sleep(1)
    stop()
    try:
        t_end = time.time() + seconds
        t0 = time.time()
        st, doc = d.add(topic=topic, delay=1, body="during")
        assert st == 503 and doc["code"] == 10002 and why in doc["message"], (st, doc)
        assert time.time() - t0 < 10, "an add hung past its timeout"
        time.sleep(max(0, t_end - time.time()))
    finally:
        start()
    reader = Reader(stack, topic)
    try:
        reader.wait_ids(ids, 90)
    except AssertionError:
        raise AssertionError(f"{len(set(ids) - set(reader.by_id()))} jobs skipped or lost")
    time.sleep(1)
    assert "during" not in [m["payload"] for m in reader.all()]
    assert_never_early(reader.all())
    assert all(d.get(j)["state"] == "delivered" for j in ids)
    reader.close()


def test_redis_stopped_10s(stack):
    d = Delayqd(stack, extra={"redis_timeout_ms": 500}).start()
    outage(stack, d, stack.stop_redis, stack.start_redis, 10)


def test_redis_frozen_10s(stack):
    d = Delayqd(stack, extra={"redis_timeout_ms": 500}).start()
    with open(os.path.join(stack.redis_dir, "redis.pid")) as f:
        pid = int(f.read())
    outage(stack, d, lambda: os.kill(pid, signal.SIGSTOP), lambda: os.kill(pid, signal.SIGCONT), 10,
           why="no answer within redis.timeout_ms (500 ms)")


def test_kafka_stopped_20s(stack):
    d = Delayqd(stack, extra={"produce_timeout_ms": 3000}).start()
    outage(stack, d, stack.stop_kafka, stack.start_kafka, 20)


def test_kafka_unreachable_adds_are_answered_by_their_deadline_then_at_once(stack):
    """A broker that hangs (SIGSTOP: connections stay open, nothing answers): an add is answered
    503 by kafka.produce_timeout_ms plus at most 500 ms and leaves no record; while no add has
    been acknowledged for longer than that, adds are refused at once saying Kafka is
    unreachable, and /readyz says so; when the broker is back, /readyz says so by itself, adds
    succeed again and every job accepted before the outage is delivered, none of the refused
    ones."""
    timeout_ms = 2000
    d = Delayqd(stack, extra={"produce_timeout_ms": timeout_ms}).start().wait_groups_owned()
    reader = Reader(stack, f"{d.name}_unreachable")
    before = [d.add_ok(topic=reader.topic, delay_ms=1000 + 100 * i, body=f"before {i}") for i in range(20)]
    with open(os.path.join(stack.kafka_dir, "kafka.pid")) as f:
        pid = int(f.read())
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.time()
        st, doc = d.add(id="unacknowledged", topic=reader.topic, delay=1, body="during")
        waited_ms = (time.time() - t0) * 1000
        assert st == 503 and "within kafka.produce_timeout_ms" in doc["message"], (st, doc)
        # the promise is timeout + 500 ms; the margin here is for a loaded or sanitized build
        assert waited_ms < timeout_ms + 1500, f"answered after {waited_ms:.0f} ms"
        assert d.get("unacknowledged") is None
        # No add is spent finding out whether Kafka is back: one every 1.5 s is refused at once
        # every time, and /readyz answers at once from the background probes.
        took = []
        for i in range(4):
            t0 = time.time()
            st, doc = d.add(id=f"refused-{i}", topic=reader.topic, delay=1, body="during")
            took.append(time.time() - t0)
            assert st == 503 and "kafka unreachable" in doc["message"], (st, doc)
            t0 = time.time()
            st, doc = d.http("GET", "/readyz")
            took.append(time.time() - t0)
            assert st == 503 and "kafka unreachable" in doc["message"], (st, doc)
            time.sleep(1.5)
        print(f"    while Kafka hangs: adds and /readyz answered within {max(took) * 1000:.0f} ms")
        assert max(took) < 1, "an add or /readyz waited although Kafka was known unreachable"
    finally:
        os.kill(pid, signal.SIGCONT)
    # ready again without an add to try Kafka: a load balancer sends none to an instance it took
    # out of service for its 503s
    t_back = time.time()
    wait_until(lambda: d.http("GET", "/readyz")[0] == 200, 60, "/readyz to answer 200 again")
    after = []

    def add_after():
        st, doc = d.add(topic=reader.topic, delay_ms=500, body="after")
        after.extend([doc["data"]["job_id"]] if st == 200 else [])
        return st == 200
    wait_until(add_after, 60, "an add to succeed after the broker is back")
    print(f"    adds accepted again {time.time() - t_back:.1f}s after the broker was resumed")
    got = reader.wait_ids(before + after, 90)
    late = [lateness(m) for m in got[after[0]]]
    print(f"    the add after it sent {late[0][0]} ms after its due time, seen {late[0][1]} ms after")
    time.sleep(1)   # a refused add's message, were it sent, would have come with the others
    payloads = [m["payload"] for m in reader.all()]
    assert "during" not in payloads, payloads
    assert_never_early(reader.all())
    reader.close()


def test_readyz_recovers_after_a_kafka_outage_without_any_add(stack):
    """Kafka stopped long enough for librdkafka to give up the messages of the adds it had: no
    late acknowledgement can tell delayqd that Kafka is back. /readyz asks the broker itself and
    answers 200 again once it is back, although no add came meanwhile (a load balancer sends
    none to an instance it took out of service for its 503s)."""
    d = Delayqd(stack, extra={"produce_timeout_ms": 2000}).start().wait_groups_owned()
    stack.stop_kafka()
    try:
        st, doc = d.add(topic=f"{d.name}_readyz", delay=1, body="during")
        assert st == 503, (st, doc)
        time.sleep(3)   # librdkafka times the message out meanwhile
        st, doc = d.http("GET", "/readyz")
        assert st == 503 and "kafka unreachable" in doc["message"], (st, doc)
    finally:
        stack.start_kafka()
    wait_until(lambda: d.http("GET", "/readyz")[0] == 200, 60, "/readyz to answer 200 again")


def test_stop_while_redis_is_frozen_answers_every_add_and_exits_cleanly(stack):
    """SIGTERM while adds wait on a frozen Redis for longer than the drain window (produce
    timeout + 1 s): every add still gets an answer, and delayqd exits 0. Before, the HTTP
    server was stopped with adds still suspended, and libmicrohttpd aborts the process then."""
    d = Delayqd(stack, extra={"redis_timeout_ms": 4000, "produce_timeout_ms": 1000}).start()
    d.wait_groups_owned()
    with open(os.path.join(stack.redis_dir, "redis.pid")) as f:
        pid = int(f.read())
    deadline = time.time() + 60

    def client(i):
        answers = []   # adds keep coming until the port closes at the drain
        while time.time() < deadline:
            try:
                answers.append(d.add(topic=f"{d.name}_frozen", delay=60, body=str(i))[0])
            except RuntimeError as e:   # once the port is closed
                answers.append(str(e))
                break
        return answers

    os.kill(pid, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(client, i) for i in range(4)]
            time.sleep(1)
            rc = d.stop(timeout=60)
            answers = [a for f in futures for a in f.result()]
    finally:
        os.kill(pid, signal.SIGCONT)
    assert rc == 0, (rc, d.log_text()[-2000:])
    # every add begun was answered; the rest found the port closed (curl's exit 7)
    assert all(a == 503 or str(a).startswith("curl failed (7)") for a in answers), answers
    assert 503 in answers, answers


def test_copies_of_a_job_message_deliver_it_once(stack):
    """A crash between moving a message down a level and committing leaves two copies of it in
    the lower level; both fall due together and must deliver the job once."""
    d = Delayqd(stack, partitions=1).start()
    reader = Reader(stack, f"{d.name}_copies")
    job_id = d.add_ok(topic=reader.topic, delay=3, body="once")
    due = d.get(job_id)["exec_time_ms"]
    tag = record(stack, d, job_id)[0].split("|")[2]   # a copy carries the tag of the original
    copy = {"dq-topic": reader.topic, "dq-id": job_id, "dq-tag": tag, "dq-due-ms": str(due),
            "dq-hops": "1"}
    for _ in range(2):
        stack.produce(d.delay_topic("1s"), "copy", key=job_id, headers=copy)
    reader.wait_ids([job_id], 15)
    time.sleep(2)
    assert len(reader.by_id()[job_id]) == 1, reader.by_id()[job_id]
    assert "another copy" in d.log_text()
    reader.close()


def test_an_evicting_redis_is_told_and_refused_when_asked(stack):
    """A Redis whose maxmemory-policy may evict keys would drop job records at maxmemory: delayqd
    warns in its log and in /readyz's answer, and with redis.require_noeviction refuses to
    start, naming the policy."""
    stack.redis("CONFIG", "SET", "maxmemory-policy", "volatile-lru")
    try:
        d = Delayqd(stack).start().wait_groups_owned()
        st, doc = wait_until(lambda: (lambda r: r if "warning" in r[1].get("message", "") else None)(
            d.http("GET", "/readyz")), 5, "/readyz to warn")
        assert st == 200 and "maxmemory-policy is volatile-lru" in doc["message"], doc
        assert "maxmemory-policy is volatile-lru" in d.log_text()
        st, doc = d.http("GET", "/delay-queue/api/stats")   # what the console warns of
        assert doc["data"]["redis"] == {"maxmemory_policy": "volatile-lru", "evicts": True}, doc
        d.stop()
        strict = Delayqd(stack, extra={"require_noeviction": True})
        p = run([DELAYQD, "-c", strict.conf_path], check=False, timeout=60)
        out = p.stdout + p.stderr
        assert p.returncode == 1 and "redis.require_noeviction" in out and "volatile-lru" in out, out
    finally:
        stack.redis("CONFIG", "SET", "maxmemory-policy", "noeviction")
    d = Delayqd(stack, extra={"require_noeviction": True}).start()
    assert d.http("GET", "/readyz")[0] in (200, 503)   # started: the policy is right again
    assert d.alive()


def test_first_calls_after_a_redis_restart_are_answered(stack):
    """Redis restarted between two adds: the connections delayqd kept were closed under it. The
    first add, get and remove afterwards go once more on a new connection instead of failing
    with "Server closed the connection"."""
    d = Delayqd(stack).start().wait_groups_owned()
    topic = f"{d.name}_restart"
    before = d.add_ok(topic=topic, delay=60, body="before")
    assert d.get(before)["state"] == "pending"
    stack.stop_redis()
    stack.start_redis()
    wait_until(lambda: d.http("GET", "/readyz")[0] == 200, 30, "/readyz to see Redis back")
    st, doc = d.add(topic=topic, delay=60, body="after")
    assert st == 200 and doc["code"] == 0, (st, doc)
    assert d.get(before)["state"] == "pending"
    st, doc = d.remove(before)
    assert st == 200 and doc["code"] == 0, (st, doc)
