"""Delivery through real Kafka: on time and never early, exact delays between levels, direct
produce with kcat, remove, restart with pending jobs, poison messages."""

import re
import time

import pytest

from harness import (SANITIZED, Delayqd, Reader, lateness, now_ms, record, rss_mib, run,
                     wait_until)

# The bound for a delivery after its due time. Real figures (a few ms) come from the
# benchmark; this only catches a job that waits for a tick or a wrong level.
LATE_MAX_MS = 1000


def assert_on_time(m):
    sent_late, recv_late = lateness(m)
    assert 0 <= sent_late < LATE_MAX_MS, (sent_late, m)
    assert 0 <= recv_late < LATE_MAX_MS + 200, (recv_late, m)


def test_jobs_arrive_on_time_with_body_key_and_headers(stack):
    d = Delayqd(stack).start().wait_groups_owned()
    reader = Reader(stack, f"{d.name}_orders")
    topic = reader.topic
    delays_ms = [0, 400, 1500, 3000, 5000, 7000, 12300]   # on, between and below the levels
    jobs = {}
    for ms in delays_ms:
        job_id = d.add_ok(topic=topic, delay_ms=ms, body=f"body-{ms}", headers={"n": str(ms)})
        jobs[job_id] = (ms, d.get(job_id)["exec_time_ms"])
    jobs[d.add_ok(topic=topic, delay=3, key="k-3", body={"go": "compatible"})] = (3000, None)
    msgs = reader.wait_count(len(jobs), 30)
    time.sleep(1)
    by_id = reader.by_id()
    assert set(by_id) == set(jobs) and len(reader.all()) == len(jobs), by_id.keys()
    for job_id, (ms, due) in jobs.items():
        (m,) = by_id[job_id]
        assert_on_time(m)
        if due is not None:
            assert int(m["headers"]["dq-due-ms"]) == due, (m, due)
            assert m["payload"] == f"body-{ms}" and m["headers"]["n"] == str(ms), m
            assert m["key"] == job_id, m
        else:
            assert m["key"] == "k-3" and m["payload"] == '{"go":"compatible"}', m
        assert not any(h.startswith("dq-") for h in m["headers"]
                       if h not in ("dq-id", "dq-due-ms", "dq-sent-ms")), m
    for job_id in jobs:
        job = d.get(job_id)
        assert job["state"] == "delivered" and job["delivered_ms"] >= job["exec_time_ms"], job
    reader.close()
    assert msgs


def test_last_stretch_below_the_smallest_level_waits_in_memory(stack):
    """A job with less than the smallest level left at a hop is held until due, not sent round
    Kafka once more: that trip can take longer than what remains. Jobs due 0.5 s after a hop
    into the 1s and 5s levels need no move; 6.5 s needs one (5s, then 1.5 s on the 1s level)."""
    d = Delayqd(stack, levels=["1s", "5s", "1m"]).start().wait_groups_owned()
    reader = Reader(stack, f"{d.name}_last")
    ids = [d.add_ok(topic=reader.topic, delay_ms=ms, body=str(ms)) for ms in (1500, 5500, 6500)]
    reader.wait_count(len(ids), 20)
    time.sleep(0.5)
    assert sorted(m["headers"]["dq-id"] for m in reader.all()) == sorted(ids)
    for m in reader.all():
        assert_on_time(m)
    moves = d.metric("delayq_moves_total")
    assert moves == 1, moves
    reader.close()


def test_held_partitions_resume_for_batches_not_for_each_job(stack):
    """Jobs falling due one after another in a level above the smallest are read ahead in
    batches: a partition resumes (and fetches) about twice a second, not once per job, which
    fetched the same messages again and again and starved a busy machine."""
    d = Delayqd(stack, levels=["1s", "5s", "1m"]).start().wait_groups_owned()
    reader = Reader(stack, f"{d.name}_batches")
    n = 60
    before = d.metric("delayq_partition_resumes_total")
    ids = [d.add_ok(topic=reader.topic, delay_ms=5000 + 20 * i, body=str(i)) for i in range(n)]
    reader.wait_count(n, 20)
    time.sleep(0.5)
    assert sorted(m["headers"]["dq-id"] for m in reader.all()) == sorted(ids)
    for m in reader.all():
        assert_on_time(m)
    resumes = d.metric("delayq_partition_resumes_total") - before
    assert resumes < n / 3, resumes
    reader.close()


def test_added_jobs_delay_messages_are_keyless_and_delivered_with_the_job_key(stack):
    """The delay-topic message of an added job carries no Kafka key, so librdkafka fills one
    partition at a time and the broker takes a few large produce requests instead of one per
    partition per linger (which cost it 40 us of CPU per add). The id is in dq-id, and the
    delivered message still has the job's key."""
    d = Delayqd(stack, levels=["1s", "5s", "1m"], partitions=4).start().wait_groups_owned()
    reader = Reader(stack, f"{d.name}_keyless")
    delay_msgs = Reader(stack, d.delay_topic("5s"))
    jobs = [{"topic": reader.topic, "delay_ms": 5000, "body": str(i)} for i in range(40)]
    jobs[0]["key"] = "customer-1"
    ids = d.bulk_add(jobs)
    held = delay_msgs.wait_count(len(ids), 20)
    assert sorted(m["headers"]["dq-id"] for m in held) == sorted(ids)
    assert all(m["key"] is None and m["headers"]["dq-topic"] == reader.topic for m in held), held[:3]
    by_id = reader.wait_ids(ids, 30)
    assert by_id[ids[0]][0]["key"] == "customer-1"
    assert all(by_id[i][0]["key"] == i for i in ids[1:]), [by_id[i][0]["key"] for i in ids[:3]]
    reader.close()
    delay_msgs.close()


def test_claims_marks_and_removes_rewrite_the_record_head_in_place(stack):
    """A record is claimed, marked delivered, or removed by writing its 30-byte head over itself
    (SETRANGE): the token goes into the room the add left for it, the stamp where the token was.
    The whole value is not written again: Redis's cost per job while a backlog drains, and what
    goes to its AOF, do not grow with the body. The record reads as before."""
    d = Delayqd(stack).start().wait_groups_owned()
    reader = Reader(stack, f"{d.name}_inplace")
    n = 20
    body = "b" * 2000
    stack.redis("CONFIG", "RESETSTAT")
    ids = d.bulk_add([{"topic": reader.topic, "delay_ms": 300, "body": body} for _ in range(n)])
    reader.wait_ids(ids, 30)
    wait_until(lambda: all(d.get(i)["state"] == "delivered" for i in ids), 20, "records marked")
    calls = dict(re.findall(r"cmdstat_(\w+):calls=(\d+)", stack.redis("INFO", "commandstats")))
    sets, setranges = int(calls.get("set", 0)), int(calls.get("setrange", 0))
    assert setranges >= 2 * n and sets < 1.5 * n, (sets, setranges)   # the add's SET; was 3 per job
    # Marked on time: each keeps the expiry its add gave it (due + retention), no PEXPIRE (the
    # group leases renew with a few).
    assert int(calls.get("pexpire", 0)) < n, calls
    for i in ids:
        head, tail, _ = record(stack, d, i)
        job = d.get(i)
        assert head == f"d{job['exec_time_ms']}|{job['delivered_ms']}||", head
        assert tail[1] == body, tail[:1]
    gone = d.add_ok(topic=reader.topic, delay=60, body=body)
    assert d.remove(gone)[0] == 200
    head, tail, size = record(stack, d, gone)
    assert re.fullmatch(r"c\d{13}\|\d{13}\|\|", head) and tail[1] == body, head
    calls = dict(re.findall(r"cmdstat_(\w+):calls=(\d+)", stack.redis("INFO", "commandstats")))
    assert int(calls["setrange"]) >= setranges + 1 and int(calls["set"]) == sets + 1, calls
    reader.close()


# A record as an older delayqd wrote it: empty claim field, tail [topic, body, key or nil,
# {headers}, delay_ms]. Built by Redis from the record this one wrote, keeping its expiry.
TO_OLD_LAYOUT = """
local v = redis.call('GET', KEYS[1])
local st, due, at = string.match(v, '^(%l)(%d+)|[^|]*|[^|]*|()')
local t = cmsgpack.unpack(string.sub(v, at))
local tail = '\\149' .. cmsgpack.pack(t[1]) .. cmsgpack.pack(t[2]) ..
             (t[4] and cmsgpack.pack(t[4]) or '\\192') .. (t[5] and cmsgpack.pack(t[5]) or '\\128') ..
             cmsgpack.pack(t[3])
return redis.call('SET', KEYS[1], st .. due .. '|||' .. tail, 'KEEPTTL')
"""


def test_records_written_before_the_claim_room_still_deliver_and_remove(stack):
    """Records an older delayqd left in Redis (no room for the claim token, delay last) are read,
    delivered with their key and headers, and removed; the claim rewrites such a record whole."""
    d = Delayqd(stack).start().wait_groups_owned()
    reader = Reader(stack, f"{d.name}_oldrec")
    ids = d.bulk_add([
        {"topic": reader.topic, "delay_ms": 4000, "body": "keyed", "key": "customer-1",
         "headers": {"trace": "t-1"}},
        {"topic": reader.topic, "delay_ms": 4000, "body": "plain"},
        {"topic": reader.topic, "delay_ms": 4000, "body": "removed"}])
    for i in ids:
        key = f"{d.prefix}job:{i}"
        ttl = int(stack.redis("PTTL", key))
        assert stack.redis("EVAL", TO_OLD_LAYOUT, "1", key) == "OK"
        head, tail, _ = record(stack, d, i)
        assert head.endswith("|||") and tail[-1] == 4000, (head, tail)
        assert abs(int(stack.redis("PTTL", key)) - ttl) < 1000
    assert d.get(ids[0])["key"] == "customer-1" and d.get(ids[1])["delay_ms"] == 4000
    assert d.remove(ids[2])[0] == 200
    by_id = reader.wait_ids(ids[:2], 30)
    keyed, plain = by_id[ids[0]][0], by_id[ids[1]][0]
    assert keyed["payload"] == "keyed" and keyed["key"] == "customer-1", keyed
    assert keyed["headers"]["trace"] == "t-1" and plain["payload"] == "plain", (keyed, plain)
    wait_until(lambda: [d.get(i)["state"] for i in ids] == ["delivered", "delivered", "cancelled"],
               20, "old records marked")
    for i in ids:
        head, tail, _ = record(stack, d, i)
        assert re.fullmatch(r"[dc]\d{13}\|\d{13}\|\|", head) and tail[-1] == 4000, (head, tail)
    time.sleep(1)
    assert ids[2] not in reader.by_id()
    reader.close()


def test_direct_produce_with_kcat(stack):
    d = Delayqd(stack).start().wait_groups_owned()
    reader = Reader(stack, f"{d.name}_direct")
    t0 = now_ms()
    stack.produce(d.delay_topic("5s"), '{"order": 1}', key="order-1",
                  headers={"dq-topic": reader.topic, "trace": "abc"})
    # dq-due-ms later than the level: moved down the levels, due exactly then.
    stack.produce(d.delay_topic("5s"), "later", key="order-2",
                  headers={"dq-topic": reader.topic, "dq-due-ms": str(t0 + 7500)})
    # dq-due-ms earlier than the level: a delay topic never delivers before its delay.
    stack.produce(d.delay_topic("5s"), "early", key="order-3",
                  headers={"dq-topic": reader.topic, "dq-due-ms": str(t0 + 1000)})
    reader.wait_count(3, 20)
    by_key = {m["key"]: m for m in reader.all()}
    m1, m2, m3 = by_key["order-1"], by_key["order-2"], by_key["order-3"]
    assert m1["payload"] == '{"order": 1}' and m1["headers"]["trace"] == "abc", m1
    assert "dq-topic" not in m1["headers"] and "dq-id" not in m1["headers"], m1
    for m in (m1, m2, m3):
        assert_on_time(m)
    assert int(m2["headers"]["dq-due-ms"]) == t0 + 7500, m2
    assert int(m1["headers"]["dq-due-ms"]) - t0 >= 5000, m1
    assert int(m3["headers"]["dq-due-ms"]) - t0 >= 5000, m3
    reader.close()


def test_removed_job_is_not_delivered(stack):
    d = Delayqd(stack).start()
    reader = Reader(stack, f"{d.name}_rm")
    keep = d.add_ok(topic=reader.topic, delay=2, body="keep")
    gone = [d.add_ok(topic=reader.topic, delay=2, body="gone"),
            d.add_ok(topic=reader.topic, delay_ms=300, body="gone")]
    for job_id in gone:
        st, doc = d.remove(job_id)
        assert st == 200 and doc["code"] == 0, doc
    later = d.add_ok(topic=reader.topic, delay=4, body="sentinel")
    reader.wait_count(2, 15)
    time.sleep(0.5)
    assert set(reader.by_id()) == {keep, later}, reader.by_id().keys()
    assert [d.get(j)["state"] for j in gone] == ["cancelled", "cancelled"]
    # Cancelled and delivered records stay queryable for job.retention_s (3600 here), then expire.
    for job_id in gone + [keep]:
        ttl = int(stack.redis("PTTL", f"{d.prefix}job:{job_id}"))
        assert 3600000 - 15000 < ttl <= 3600000, (job_id, ttl)
    st, doc = d.remove(keep)
    assert st == 409 and doc["code"] == 409 and "delivered" in doc["message"], doc
    reader.close()


def test_late_delivery_renews_the_record_expiry(stack):
    """A record stays queryable for the retention after its due time or, for a job delivered
    more than retention / 64 late (here 5 s of 320 s), after its delivery."""
    retention_ms = 320000
    d = Delayqd(stack, extra={"retention_s": retention_ms // 1000}).start().wait_groups_owned()
    reader = Reader(stack, f"{d.name}_late")
    t0 = now_ms()
    late = d.add_ok(topic=reader.topic, delay_ms=500, body="late")
    nearly = d.add_ok(topic=reader.topic, delay_ms=6000, body="nearly on time")
    assert d.stop() == 0, d.log_text()[-2000:]
    time.sleep(max(0, (t0 + 8500 - now_ms()) / 1000))
    d.start()
    reader.wait_ids([late, nearly], 30)
    wait_until(lambda: all(d.get(j)["state"] == "delivered" for j in (late, nearly)), 20, "marks")
    expires = {j: int(stack.redis("PEXPIRETIME", f"{d.prefix}job:{j}")) for j in (late, nearly)}
    job = d.get(late)
    assert job["delivered_ms"] - job["exec_time_ms"] > 6000, job
    assert abs(expires[late] - (job["delivered_ms"] + retention_ms)) < 1000, (expires, job)
    job = d.get(nearly)
    assert 1000 < job["delivered_ms"] - job["exec_time_ms"] < 5000, job
    assert abs(expires[nearly] - (job["exec_time_ms"] + retention_ms)) < 200, (expires, job)
    reader.close()


def test_restart_loses_no_pending_job(stack):
    d = Delayqd(stack).start()
    reader = Reader(stack, f"{d.name}_restart")
    jobs = {}
    for i in range(40):
        ms = 1500 + i * 200     # 1.5 s to 9.3 s, across every level
        jobs[d.add_ok(topic=reader.topic, delay_ms=ms, body=str(i))] = ms
    time.sleep(1)
    assert d.stop() == 0, d.log_text()[-2000:]   # SIGTERM: graceful, exit 0
    d.start()
    time.sleep(2)
    d.kill()                                      # and a crash
    d.start()
    reader.wait_count(len(jobs), 30)
    by_id = reader.by_id()
    assert set(by_id) == set(jobs), set(jobs) - set(by_id)
    for job_id, ms in jobs.items():
        for m in by_id[job_id]:
            sent_late, recv_late = lateness(m)
            assert sent_late >= 0 and recv_late >= 0, m   # never early, even across restarts
    reader.close()


def test_poison_goes_to_dead_letter_and_partition_moves_on(stack):
    d = Delayqd(stack, partitions=1).start().wait_groups_owned()
    good = Reader(stack, f"{d.name}_good")
    t0 = now_ms()
    topic = d.delay_topic("1s")
    stack.produce(topic, "no target", headers={"other": "x"})
    stack.produce(topic, "bad due", headers={"dq-topic": good.topic, "dq-due-ms": "soon"})
    stack.produce(topic, "loop", headers={"dq-topic": d.delay_topic("5s")})
    stack.produce(topic, "bad name", headers={"dq-topic": "no spaces allowed"})
    stack.produce(topic, "long name", headers={"dq-topic": "t" * 300})
    stack.produce(topic, "to the dlq", headers={"dq-topic": d.dlq})
    stack.produce(topic, "too far", headers={"dq-topic": good.topic,
                                             "dq-due-ms": str(t0 + 400 * 86400 * 1000)})
    stack.produce(topic, "fine", key="good", headers={"dq-topic": good.topic})
    dlq = Reader(stack, d.dlq)
    dead = dlq.wait_count(7, 20)
    reasons = {m["payload"]: m["headers"]["dq-error"] for m in dead}
    assert "dq-topic is missing" in reasons["no target"], reasons
    assert "dq-due-ms" in reasons["bad due"], reasons
    assert "delay topic" in reasons["loop"], reasons
    assert "not a valid topic" in reasons["bad name"], reasons
    # Every reason is written whole: a too-long topic once got stack memory as its tail.
    assert reasons["long name"] == ("header dq-topic is not a valid topic: topic is longer than "
                                    "249 characters"), reasons
    assert reasons["to the dlq"] == (f"header dq-topic names no business topic: topic {d.dlq} is "
                                     "the dead-letter topic; a job must target a business topic"), reasons
    assert "job.max_delay_s" in reasons["too far"], reasons
    assert all(m["headers"]["dq-source"].startswith(topic + "/0/") for m in dead), dead
    (m,) = good.wait_count(1, 10)
    assert m["payload"] == "fine" and int(m["headers"]["dq-due-ms"]) - t0 >= 1000, m
    assert_on_time(m)
    assert d.alive()
    good.close()
    dlq.close()


def test_topics_created_at_start(stack):
    d = Delayqd(stack, partitions=3).start()
    for level in d.levels:
        assert stack.partitions(d.delay_topic(level)) == 3, level
    assert stack.partitions(d.dlq) == 3


def test_memory_is_given_back_after_a_burst(stack):
    """100,000 jobs produced at once (200-byte bodies, straight into the 1s topic) are held in
    memory, then delivered; afterwards delayqd's RSS returns close to where it started (12-14
    MiB against 10 idle), where glibc kept the burst's freed memory (80 MiB, for good)."""
    if SANITIZED:
        pytest.skip("resident memory under the sanitizers' allocator says nothing of delayqd's")
    n = 100000
    d = Delayqd(stack, levels=["1s", "1m"]).start().wait_groups_owned()
    topic = f"{d.name}_burst"
    stack.ensure_topic(topic)
    time.sleep(1)
    idle = rss_mib(d.proc.pid)
    run(["kcat", "-b", stack.brokers, "-P", "-t", d.delay_topic("1s"), "-H", f"dq-topic={topic}"],
        input="".join(f"{i:08d}{'x' * 192}\n" for i in range(n)), timeout=120)
    wait_until(lambda: stack.end_offset(topic) >= n, 120, f"{n} deliveries", step=0.5)
    after = rss_mib(d.proc.pid)
    deadline = time.time() + 20
    while rss_mib(d.proc.pid) >= idle + 16 and time.time() < deadline:
        time.sleep(0.5)
    settled = rss_mib(d.proc.pid)
    assert settled < idle + 16, f"RSS idle {idle:.1f} MiB, after the burst {after:.1f}, 20 s later {settled:.1f}"
    assert stack.end_offset(topic) == n


def test_first_message_to_each_new_business_topic_is_on_time(stack):
    """The first job to each of many business topics this process never sent to, added over
    HTTP or produced straight into a delay topic: none early, and delayqd had fetched each
    topic's metadata before the job fell due (from the add, or from the delay-topic message read
    ahead), so no delivery waited for it (the lateness itself is a figure of make bench)."""
    d = Delayqd(stack).start().wait_groups_owned()
    topics = [f"{d.name}_first_{i}" for i in range(40)]
    reader = Reader(stack, topics)
    due = now_ms() + 3000
    for i, t in enumerate(topics[:20]):
        d.add_ok(topic=t, deliver_at_ms=due + 10 * i, body=t)
    for t in topics[20:]:
        stack.produce(d.delay_topic("5s"), t, headers={"dq-topic": t})
    wait_until(lambda: len(reader.all()) >= len(topics), 30, "the first jobs")
    msgs = reader.all()
    assert sorted(m["topic"] for m in msgs) == sorted(topics), [m["topic"] for m in msgs]
    late = sorted(m["recv_ms"] - int(m["headers"]["dq-due-ms"]) for m in msgs)
    print(f"    first message to {len(topics)} topics: arrival - due p50 {late[len(late) // 2]} ms, "
          f"max {late[-1]} ms")
    assert late[0] >= 0, late
    assert d.metric("delayq_forwards_total") == len(topics)
    assert d.metric("delayq_deliveries_to_cold_topics_total") == 0
