"""schedules: recurring jobs by cron or interval. Each occurrence is an ordinary job
"<schedule id>@<fire time ms>", made when the one before comes due, by whichever instance
delivers that one; tests read the business topic with kcat, as a user's consumer would."""

import http.client
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
import uuid

from harness import FULL, Delayqd, Reader, now_ms, wait_until

SCHED = "/delay-queue/api/schedules"


def shard_key(prefix, what, sid):
    """The Redis key named what ("h:", "runs:") of schedule sid: its shard's hash tag
    "{sched:<FNV-1a of the id mod 16>}"."""
    h = 2166136261
    for b in sid.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return f"{prefix}{{sched:{h % 16}}}:{what}{sid}"


def put(d, sid, **spec):
    st, doc = d.http("PUT", f"{SCHED}/{sid}", spec)
    assert st == 200 and doc["code"] == 0, (st, doc)
    return doc["data"]


def occurrences(reader, sid):
    """{fire time: [messages]} of the schedule's occurrences delivered so far."""
    out = {}
    for m in reader.all():
        job = m["headers"].get("dq-id", "")
        if job.startswith(sid + "@"):
            out.setdefault(int(job.rsplit("@", 1)[1]), []).append(m)
    return out


def test_an_interval_runs_once_per_fire_time_never_early(stack):
    d = Delayqd(stack).start().wait_groups_owned()
    topic = f"{d.name}_ticks"
    reader = Reader(stack, topic)
    sid = "tick-" + uuid.uuid4().hex[:6]
    data = put(d, sid, every_ms=1000, topic=topic, body="tick", headers={"X-Kind": "tick"})
    assert len(data["next"]) == 5, data
    first = data["next"][0]["at_ms"]
    assert [n["at_ms"] - first for n in data["next"]] == [0, 1000, 2000, 3000, 4000], data
    assert data["next_at_ms"] == first and data["runs"] == 0 and not data["paused"], data
    wait_until(lambda: len(occurrences(reader, sid)) >= 6, 20, "6 occurrences")
    occ = occurrences(reader, sid)
    fires = sorted(occ)
    assert fires[:6] == [first + 1000 * i for i in range(6)], fires
    for fire, msgs in occ.items():
        assert len(msgs) == 1, msgs   # once
        m = msgs[0]
        assert m["payload"] == "tick" and m["headers"]["X-Kind"] == "tick", m
        assert m["recv_ms"] >= fire, (m["recv_ms"], fire)   # never early
        assert m["key"] == f"{sid}@{fire}", m
    got = d.get(f"{sid}@{first}")
    assert got["state"] == "delivered" and got["exec_time_ms"] == first, got
    st, doc = d.http("GET", f"{SCHED}/{sid}")
    assert st == 200 and doc["data"]["runs"] >= 6 and doc["data"]["last_at_ms"] >= fires[5], doc
    assert doc["data"]["every_ms"] == 1000 and doc["data"]["topic"] == topic, doc

    # pause: nothing more is delivered, the pending occurrence is removed
    st, doc = d.http("POST", f"{SCHED}/{sid}/pause")
    assert st == 200 and doc["data"]["paused"], (st, doc)
    time.sleep(0.5)
    seen = len(occurrences(reader, sid))
    time.sleep(2.5)
    assert len(occurrences(reader, sid)) == seen, "delivered while paused"
    # resume (catch_up skip): the next fire time after now, nothing missed is run
    t0 = now_ms()
    st, doc = d.http("POST", f"{SCHED}/{sid}/resume")
    assert st == 200 and not doc["data"]["paused"] and doc["data"]["next_at_ms"] > t0, (st, doc)
    wait_until(lambda: len(occurrences(reader, sid)) >= seen + 2, 10, "2 more after resume")
    later = [f for f in occurrences(reader, sid) if f > fires[5] + 1000 * (seen - 5)]
    assert all(f > t0 for f in later), (later, t0)
    # delete: no more
    st, doc = d.http("DELETE", f"{SCHED}/{sid}")
    assert st == 200, (st, doc)
    time.sleep(0.5)
    seen = len(occurrences(reader, sid))
    time.sleep(2.5)
    assert len(occurrences(reader, sid)) == seen, "delivered after delete"
    st, doc = d.http("GET", f"{SCHED}/{sid}")
    assert st == 404 and sid in doc["message"], (st, doc)
    reader.close()


def test_bad_schedules_are_refused_naming_the_field(stack):
    d = Delayqd(stack).start()
    cases = [
        ({"cron": "0 0 L * *", "topic": "t"}, "cron"),
        ({"cron": "61 * * * *", "topic": "t"}, "minute"),
        ({"cron": "0 0 30 2 *", "topic": "t"}, "never fires"),
        ({"cron": "0 * * * *", "timezone": "Mars/Olympus", "topic": "t"}, "timezone"),
        ({"every_ms": 10, "topic": "t"}, "every_ms"),
        ({"every_ms": 1000, "cron": "* * * * *", "topic": "t"}, "either cron or every_ms"),
        ({"topic": "t"}, "either cron or every_ms"),
        ({"every_ms": 1000}, "topic"),
        ({"every_ms": 1000, "topic": "t", "delay": 5}, "delay"),
        ({"every_ms": 1000, "topic": "t", "catch_up": "sometimes"}, "catch_up"),
        ({"every_ms": 1000, "topic": "t", "end_at_ms": 1000}, "never fires"),
        ({"every_ms": 1000, "topic": "t", "jitter_ms": 1000}, "jitter_ms must be less"),
        ({"every_ms": 1000, "topic": "t", "immediately": "yes"}, "immediately must be true or false"),
        ({"every_ms": 1000, "topic": "t", "immediate": True}, "immediate is not a field"),
        ({"every_ms": 1000, "topic": "t", "overlap": "sometimes"}, "overlap must be"),
        ({"every_ms": 1000, "topic": "t", "Topic": "x"}, "Topic is not a field"),
        ({"every_ms": 1000, "topic": "t", "end_at_ms": 0}, "end_at_ms must be a time"),
    ]
    for spec, word in cases:
        st, doc = d.http("PUT", f"{SCHED}/bad", spec)
        assert st == 400 and word in doc["message"], (spec, st, doc)
    st, doc = d.http("PUT", f"{SCHED}/bad", raw="{not json")
    assert st == 400, (st, doc)
    st, doc = d.http("GET", f"{SCHED}/bad")
    assert st == 404, (st, doc)
    st, doc = d.http("POST", f"{SCHED}/bad/explode")
    assert st == 404, (st, doc)
    st, doc = d.http("GET", f"{SCHED}/bad/pause")   # a route, with the wrong method
    assert st == 405 and "POST" in doc["message"], (st, doc)
    st, doc = d.http("POST", f"{SCHED}/bad/next")
    assert st == 405 and "GET" in doc["message"], (st, doc)
    st, doc = d.http("GET", f"{SCHED}//pause")
    assert st == 404, (st, doc)
    # a schedule whose stored definition does not read: 500, and the code agrees
    put(d, "garbled", every_ms=60000, topic="t")
    stack.redis("HSET", shard_key(d.prefix, "h:", "garbled"), "t", "{not json")
    for method, path in [("GET", "garbled"), ("GET", "garbled/next"), ("POST", "garbled/trigger")]:
        st, doc = d.http(method, f"{SCHED}/{path}")
        assert (st, doc["code"]) == (500, 500) and "does not read" in doc["message"], (path, doc)


def test_cron_preview_follows_berlin_daylight_saving(stack):
    d = Delayqd(stack).start()
    put(d, "berlin", cron="30 2 * * *", timezone="Europe/Berlin", topic="t")
    # from 2027-03-27T12:00Z: 02:30 on the 28th does not exist -> 03:00 CEST (01:00Z)
    st, doc = d.http("GET", f"{SCHED}/berlin/next?n=3&from_ms=1806148800000")
    assert st == 200, (st, doc)
    assert [n["at_ms"] for n in doc["data"]["next"]] == [1806195600000, 1806280200000,
                                                         1806366600000], doc
    assert doc["data"]["next"][0]["local"] == "2027-03-28T03:00:00.000+02:00", doc
    # fall back, 2027-10-31: 02:30 happens twice; it fires once, at the first (00:30Z)
    st, doc = d.http("GET", f"{SCHED}/berlin/next?n=2&from_ms=1824897600000")
    assert [n["local"] for n in doc["data"]["next"]] == ["2027-10-31T02:30:00.000+02:00",
                                                        "2027-11-01T02:30:00.000+01:00"], doc


def p99(values):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * 0.99))]


def test_two_instances_run_a_one_second_interval(stack):
    """every_ms 1000 on two instances: every fire time once, never early (for a minute with
    DELAYQ_FULL_TARGETS, 20 s in the suite)."""
    span = 60000 if FULL else 20000
    a = Delayqd(stack, extra={"groups": [[0], [1]]}).start()
    b = Delayqd(stack, cluster=a).start()
    a.wait_groups_owned()
    topic = f"{a.name}_minute"
    reader = Reader(stack, topic)
    sid = "minute"
    first = put(a, sid, every_ms=1000, topic=topic, body="m")["next_at_ms"]
    wait_until(lambda: now_ms() > first + span + 2000, span / 1000 + 10, "the span")
    occ = occurrences(reader, sid)
    window = [f for f in occ if first <= f < first + span]
    assert len(window) == span // 1000, sorted(occ)   # every fire time of the span, none missing
    assert all(len(m) == 1 for m in occ.values()), [f for f, m in occ.items() if len(m) > 1]
    late = [m[0]["recv_ms"] - f for f, m in occ.items()]
    assert min(late) >= 0, min(late)   # never early
    made = a.metric("delayq_schedule_runs_total") + b.metric("delayq_schedule_runs_total")
    assert made >= span // 1000, made
    print(f"    every_ms 1000 on two instances: {len(window)} in {span // 1000} s, lateness at the "
          f"consumer p50 {sorted(late)[len(late) // 2]} ms p99 {p99(late)} ms max {max(late)} ms")
    reader.close()


def killed_for_five_seconds(stack, catch_up):
    """A schedule of every_ms 1000 whose instance is killed (-9) for 5 s, then started again;
    the fire times delivered, when the kill was, and when it was back."""
    d = Delayqd(stack).start().wait_groups_owned()
    topic = f"{d.name}_{catch_up}"
    reader = Reader(stack, topic)
    sid = f"k-{catch_up}"
    put(d, sid, every_ms=1000, topic=topic, body=catch_up, catch_up=catch_up)
    wait_until(lambda: len(occurrences(reader, sid)) >= 3, 15, "3 occurrences")
    killed = now_ms()
    d.kill()
    time.sleep(5)
    restarted = now_ms()
    d.start()
    back = now_ms()
    wait_until(lambda: any(f > back for f in occurrences(reader, sid)), 20, "one after the restart")
    time.sleep(2)
    occ = occurrences(reader, sid)
    assert all(len(m) == 1 for m in occ.values()), {f: len(m) for f, m in occ.items()}
    reader.close()
    return occ, killed, restarted, back


def test_killed_for_five_seconds_skip_runs_no_missed_occurrence(stack):
    occ, killed, _, back = killed_for_five_seconds(stack, "skip")
    missed = [f for f in occ if killed < f < back]
    assert not missed, (missed, killed, back)
    after = sorted(f for f in occ if f >= back)
    assert len(after) >= 2 and after[1] - after[0] == 1000, after   # on at its own pace


def test_killed_for_five_seconds_once_runs_one_missed_occurrence(stack):
    occ, killed, restarted, back = killed_for_five_seconds(stack, "once")
    missed = [f for f in occ if killed < f < back]
    assert len(missed) == 1, (sorted(occ), killed, back)
    m = occ[missed[0]][0]
    assert m["recv_ms"] >= restarted, (m["recv_ms"], restarted)   # at once when back: late, not lost


def test_pause_resume_catch_up_all_runs_every_missed_one(stack):
    d = Delayqd(stack).start().wait_groups_owned()
    topic = f"{d.name}_all"
    reader = Reader(stack, topic)
    put(d, "all", every_ms=1000, topic=topic, catch_up="all", catch_up_max=3)
    wait_until(lambda: len(occurrences(reader, "all")) >= 2, 15, "2 occurrences")
    st, doc = d.http("POST", f"{SCHED}/all/pause")
    assert st == 200, doc
    last = doc["data"]["last_at_ms"]
    time.sleep(6)
    back = now_ms()
    st, doc = d.http("POST", f"{SCHED}/all/resume")
    assert st == 200, doc
    wait_until(lambda: sum(1 for f in occurrences(reader, "all") if f > back) >= 1, 10, "one after")
    time.sleep(1)
    occ = occurrences(reader, "all")
    caught = sorted(f for f in occ if last < f <= back)
    # the pause missed about six; catch_up_max 3: the last three ran, at once
    assert len(caught) == 3 and caught[-1] > back - 1000, (caught, last, back)
    assert all(occ[f][0]["recv_ms"] >= back for f in caught), caught
    assert all(len(m) == 1 for m in occ.values())
    reader.close()


def test_changes_meet_an_occurrence_whose_add_is_on_its_way(stack):
    """A pause (delete, replace) that finds no record of the pending occurrence (its add still
    queued) leaves a removed one, so that the add, when it comes, is refused: no extra run."""
    d = Delayqd(stack).start()
    data = put(d, "late", every_ms=60000, topic="t")
    fire = data["next_at_ms"]
    assert stack.redis("DEL", f"{d.prefix}job:late@{fire}") == "1"   # as if not written yet
    st, doc = d.http("POST", f"{SCHED}/late/pause")
    assert st == 200 and doc["data"]["paused"], (st, doc)
    assert d.get(f"late@{fire}")["state"] == "cancelled"
    st, doc = d.add(id=f"late@{fire}", topic="t", delay_ms=1000)
    assert st == 409, (st, doc)
    # resumed: the occurrence the pause cancelled is the one it goes on from, even before any ran
    st, doc = d.http("POST", f"{SCHED}/late/resume")
    assert st == 200 and doc["data"]["next_at_ms"] == fire, (st, doc)
    assert d.get(f"late@{fire}")["state"] == "pending"
    st, doc = d.http("POST", f"{SCHED}/late/resume")
    assert st == 200 and doc["message"] == "not paused", (st, doc)
    st, doc = d.http("POST", f"{SCHED}/none/resume")
    assert st == 404, (st, doc)


def test_a_repeated_put_keeps_the_grid_runs_and_pause(stack):
    """Putting the same timing again (a deploy that puts every schedule) keeps the interval's
    grid and its count of runs; a put never resumes a paused schedule."""
    d = Delayqd(stack).start().wait_groups_owned()
    topic = f"{d.name}_grid"
    reader = Reader(stack, topic)
    first = put(d, "grid", every_ms=2000, max_runs=3, topic=topic)
    wait_until(lambda: len(occurrences(reader, "grid")) >= 1, 10, "one run")
    again = put(d, "grid", every_ms=2000, max_runs=3, topic=topic, body="b")
    assert (again["next_at_ms"] - first["next_at_ms"]) % 2000 == 0, (first, again)
    wait_until(lambda: len(occurrences(reader, "grid")) >= 3, 15, "three runs")
    time.sleep(4.5)
    occ = occurrences(reader, "grid")
    assert len(occ) == 3 and all(len(m) == 1 for m in occ.values()), occ   # max_runs held
    assert all((f - first["next_at_ms"]) % 2000 == 0 for f in occ), occ
    put(d, "paused", every_ms=1000, topic=topic)
    st, doc = d.http("POST", f"{SCHED}/paused/pause")
    assert st == 200, doc
    st, doc = d.http("PUT", f"{SCHED}/paused", {"every_ms": 1000, "topic": topic, "body": "x"})
    assert st == 200 and doc["data"]["paused"] and "paused" in doc["message"], (st, doc)
    since = now_ms()
    time.sleep(3)
    assert not [f for f in occurrences(reader, "paused") if f > since], "ran while paused"
    reader.close()


def test_puts_of_the_same_timing_at_any_instant_lose_or_double_no_fire_time(stack):
    """A deploy puts every schedule, at any instant, from every instance: the same timing put
    every 300 ms, and a new body every 700 ms, from two instances, for a schedule every 2 s.
    Every put answers 200 and every fire time runs exactly once (a put that met the fire
    instant answered 503, and the schedule then stalled on a fire time already delivered)."""
    a = Delayqd(stack).start().wait_groups_owned()
    b = Delayqd(stack, cluster=a).start()
    topic = f"{a.name}_deploys"
    reader = Reader(stack, topic)
    first = put(a, "deploy", every_ms=2000, topic=topic, body="v0")["next_at_ms"]
    answers, bodies, k = [], {"v0"}, 0
    start = now_ms()
    offsets = [0, 3, 6, 10, 15, 25, 40, -5]   # around the fire instant, where it is claimed
    for i in range(15 if FULL else 8):   # 30 s with DELAYQ_FULL_TARGETS, 16 s in the suite
        fire = first + 2000 * (i + 1)
        for at in (fire - 1000, fire - 300, fire + offsets[i % len(offsets)]):
            time.sleep(max(0, at - now_ms()) / 1000)
            body = f"v{(now_ms() - start) // 700}"   # a new body every 700 ms, or the same
            bodies.add(body)
            st, doc = (a, b)[k % 2].http("PUT", f"{SCHED}/deploy",
                                         {"every_ms": 2000, "topic": topic, "body": body})
            answers.append((st, doc.get("message")))
            k += 1
    last = now_ms()
    wait_until(lambda: any(f > last for f in occurrences(reader, "deploy")), 10, "a run after the puts")
    occ = occurrences(reader, "deploy")
    assert all(st == 200 for st, _ in answers), [x for x in answers if x[0] != 200]
    fires = sorted(f for f in occ if f <= last)
    assert fires == [first + 2000 * i for i in range(len(fires))], fires   # none lost
    assert len(fires) >= 5, fires
    assert all(len(m) == 1 for m in occ.values()), {f: len(m) for f, m in occ.items()}   # none twice
    assert all(m[0]["payload"] in bodies for m in occ.values())
    late = sorted(int(m[0]["headers"]["dq-sent-ms"]) - f for f, m in occ.items())
    assert late[0] >= 0, late   # never early
    print(f"    {len(answers)} puts, {len(fires)} fire times, sent minus fire time "
          f"p50 {late[len(late) // 2]} ms, max {late[-1]} ms")
    st, doc = a.http("GET", f"{SCHED}/deploy")
    assert doc["data"]["next_at_ms"] > now_ms() - 2000, doc   # not stalled on a fire time gone
    reader.close()


def test_trigger_replace_cron_seconds_and_stats(stack):
    d = Delayqd(stack).start().wait_groups_owned()
    topic = f"{d.name}_cron"
    reader = Reader(stack, topic)
    data = put(d, "c", cron="*/2 * * * * *", topic=topic, body="v1")
    assert all(n["at_ms"] % 2000 == 0 for n in data["next"]), data
    st, doc = d.http("POST", f"{SCHED}/c/trigger")
    assert st == 200, doc
    job = doc["data"]["job_id"]
    reader.wait_ids([job], 10)
    got = d.get(job)
    assert got["state"] == "delivered" and got["body"] == "v1" and "schedule" not in got, got
    wait_until(lambda: len(occurrences(reader, "c")) >= 3, 15, "3 occurrences")
    # replace the job, same timing: the pending occurrence has the new body, nothing of v1 after
    # it; the generation stays (the occurrence under way still moves the schedule on)
    data = put(d, "c", cron="*/2 * * * * *", topic=topic, body="v2")
    changed = data["next_at_ms"]
    if changed <= now_ms():   # the put met that occurrence under way: it keeps v1
        changed += 2000
    assert data["generation"] == 1, data
    wait_until(lambda: any(f >= changed for f in occurrences(reader, "c")), 10, "one after the change")
    time.sleep(2.5)
    occ = occurrences(reader, "c")
    for f, msgs in occ.items():
        assert len(msgs) == 1, msgs
        if f >= changed:
            assert msgs[0]["payload"] == "v2", (f, msgs)
    fire = max(f for f in occ if f >= changed)
    got = d.get(f"c@{fire}")
    assert got["schedule"] == {"id": "c", "generation": 1}, got
    data = put(d, "c", cron="*/4 * * * * *", topic=topic, body="v2")   # another timing
    assert data["generation"] == 2, data
    st, doc = d.http("GET", f"{SCHED}?limit=1")
    assert st == 200 and [s["id"] for s in doc["data"]["schedules"]] == ["c"], doc
    wait_until(lambda: d.metric("delayq_schedules") == 1, 5, "the gauge")
    st, doc = d.http("GET", "/delay-queue/api/stats")
    assert doc["data"]["schedules"] == {"count": 1}, doc
    st, doc = d.http("DELETE", f"{SCHED}/c")
    assert st == 200, doc
    wait_until(lambda: d.metric("delayq_schedules") == 0, 5, "the gauge after the delete")
    reader.close()


def test_list_pages_and_tokens(stack):
    d = Delayqd(stack, extra={"auth_token": "w", "read_token": "r"}).start()
    w = {"Authorization": "Bearer w"}
    r = {"Authorization": "Bearer r"}
    for i in range(5):
        st, doc = d.http("PUT", f"{SCHED}/s{i}", {"cron": "0 0 * * *", "topic": "t"}, headers=w)
        assert st == 200, doc
    st, doc = d.http("PUT", f"{SCHED}/s9", {"cron": "0 0 * * *", "topic": "t"}, headers=r)
    assert st == 401, doc   # the read token may not write
    seen, after = [], ""
    while True:
        st, doc = d.http("GET", f"{SCHED}?limit=2&after={after}", headers=r)
        assert st == 200, doc
        seen += [s["id"] for s in doc["data"]["schedules"]]
        if doc["data"]["after"] is None:
            break
        after = doc["data"]["after"]
    assert seen == [f"s{i}" for i in range(5)], seen
    st, doc = d.http("DELETE", f"{SCHED}/s0", headers=r)
    assert st == 401, doc
    st, doc = d.http("DELETE", f"{SCHED}/s0", headers=w)
    assert st == 200, doc


def test_fire_times_further_off_than_max_delay_are_made_when_they_may_wait(stack):
    """A fire time further off than job.max_delay_s (a yearly cron under the 30-day default)
    is parked: the PUT answers 200, no job waits longer than max_delay_s, and the sweep makes
    the occurrence before it is due, so it runs on time and once, and so do the ones after."""
    d = Delayqd(stack, extra={"max_delay_s": 15}).start().wait_groups_owned()
    topic = f"{d.name}_far"
    yearly = put(d, "new-year", cron="0 0 1 1 *", timezone="Asia/Tokyo", topic=topic, body="y")
    assert d.get(f"new-year@{yearly['next_at_ms']}") is None, yearly
    reader = Reader(stack, topic)
    sid = "far-" + uuid.uuid4().hex[:6]
    data = put(d, sid, every_ms=20000, topic=topic, body="far")
    first = data["next_at_ms"]
    assert first - now_ms() > 15000, data
    assert d.get(f"{sid}@{first}") is None   # parked: not a job yet
    wait_until(lambda: d.get(f"{sid}@{first}") is not None, 20, "the parked occurrence made")
    made_ms = now_ms()
    assert first - made_ms <= 15000, (first, made_ms)   # never longer than max_delay_s
    assert first - made_ms > 0, (first, made_ms)      # made before it is due
    wait_until(lambda: len(occurrences(reader, sid)) >= 2, 60, "2 occurrences")
    occ = occurrences(reader, sid)
    assert sorted(occ)[:2] == [first, first + 20000], occ
    for fire, msgs in occ.items():
        assert len(msgs) == 1, msgs
        assert msgs[0]["recv_ms"] >= fire, (msgs[0]["recv_ms"], fire)
        # made as a job before it was due: delivered by the delay topics, not by a late sweep
        assert int(msgs[0]["headers"]["dq-sent-ms"]) - fire < 1000, msgs[0]


def simultaneous(requests):
    """[(status, document)] of requests [(delayqd, method, path, body)], each on a connection
    of its own opened beforehand, all sent at the same instant."""
    conns = [http.client.HTTPConnection("127.0.0.1", d.port, timeout=30) for d, *_ in requests]
    for c in conns:
        c.connect()
    go = threading.Barrier(len(requests))

    def one(i):
        _, method, path, body = requests[i]
        go.wait()
        conns[i].request(method, path, json.dumps(body), {"Content-Type": "application/json"})
        r = conns[i].getresponse()
        return r.status, json.loads(r.read())
    with ThreadPoolExecutor(len(requests)) as pool:
        out = list(pool.map(one, range(len(requests))))
    for c in conns:
        c.close()
    return out


def test_concurrent_puts_that_create_a_schedule_make_one_grid(stack):
    """A deploy of many instances puts a new schedule from each at once: ten identical PUTs,
    five on each of two instances, sent at the same instant, three schedules in turn. One PUT
    creates each; the others keep its grid, generation and runs (read and decided in one Redis
    script), so every fire time runs once and the generation stays the first put's."""
    a = Delayqd(stack).start().wait_groups_owned()
    b = Delayqd(stack, cluster=a).start()
    topic = f"{a.name}_herd"
    reader = Reader(stack, topic)
    firsts = {}
    for _ in range(3):
        sid = "herd-" + uuid.uuid4().hex[:6]
        spec = {"every_ms": 1000, "topic": topic, "body": "h"}
        answers = simultaneous([((a, b)[i % 2], "PUT", f"{SCHED}/{sid}", spec) for i in range(10)])
        assert all(st == 200 for st, _ in answers), answers
        gens = {doc["data"]["generation"] for _, doc in answers}
        assert gens == {1}, (sid, gens)   # each concurrent put that created it bumped it
        nexts = {doc["data"]["next_at_ms"] for _, doc in answers}
        assert len(nexts) == 1, (sid, nexts)   # one grid
        firsts[sid] = nexts.pop()
    for sid, first in firsts.items():
        wait_until(lambda: len(occurrences(reader, sid)) >= 5, 20, "5 occurrences")
    time.sleep(1.5)
    for sid, first in firsts.items():
        occ = occurrences(reader, sid)
        fires = sorted(occ)
        assert fires == [first + 1000 * i for i in range(len(fires))], (sid, fires)   # none lost
        assert all(len(m) == 1 for m in occ.values()), {f: len(m) for f, m in occ.items()}
    reader.close()


def test_nothing_runs_after_a_delete_answered_whatever_puts_raced_before_it(stack):
    """Twenty rounds, each a schedule of its own on two instances: six PUTs of different
    timings (or ten identical ones) sent at the same instant, then a DELETE. Each PUT that
    changed the timing answers a generation of its own; after the DELETE's answer no
    occurrence of the schedule is sent, of any generation."""
    a = Delayqd(stack).start().wait_groups_owned()
    b = Delayqd(stack, cluster=a).start()
    topic = f"{a.name}_raced"
    reader = Reader(stack, topic)
    deleted = {}

    def round_of(r):
        sid = f"raced{r}-" + uuid.uuid4().hex[:4]
        if r % 2:
            specs = [{"every_ms": 1000, "topic": topic, "body": f"{r}"}] * 10
        else:
            specs = [{"every_ms": 1000 + 150 * i, "topic": topic, "body": f"{r}-{i}"}
                     for i in range(6)]
        answers = simultaneous([((a, b)[i % 2], "PUT", f"{SCHED}/{sid}", spec)
                                for i, spec in enumerate(specs)])
        assert all(st == 200 for st, _ in answers), answers
        gens = sorted(doc["data"]["generation"] for _, doc in answers)
        if r % 2:
            assert set(gens) == {1}, (sid, gens)
        else:
            assert gens == list(range(1, 7)), (sid, gens)   # each its own
        time.sleep(r % 3 * 0.4)   # some deletes meet an occurrence on its way
        st, doc = (a, b)[r % 2].http("DELETE", f"{SCHED}/{sid}")
        assert st == 200, (st, doc)
        deleted[sid] = now_ms()
    with ThreadPoolExecutor(5) as pool:
        list(pool.map(round_of, range(20)))
    time.sleep(4)   # longer than every interval put
    late = {sid: [int(m["headers"]["dq-sent-ms"]) - at for ms in occurrences(reader, sid).values()
                  for m in ms if int(m["headers"]["dq-sent-ms"]) >= at]
            for sid, at in deleted.items()}
    late = {sid: v for sid, v in late.items() if v}
    assert not late, late   # ms after the DELETE's answer, by schedule
    for sid in deleted:
        assert a.http("GET", f"{SCHED}/{sid}")[0] == 404
    reader.close()


def test_concurrent_puts_of_new_bodies_leave_the_kept_body_on_the_next_occurrence(stack):
    """Six PUTs of one schedule with the same timing and six bodies, three on each of two
    instances at once, in six rounds between fire times: the next occurrence carries the body
    the schedule keeps (GET), whichever PUT's write and add came last."""
    a = Delayqd(stack).start().wait_groups_owned()
    b = Delayqd(stack, cluster=a).start()
    topic = f"{a.name}_bodies"
    reader = Reader(stack, topic)
    sid = "bodies"
    first = put(a, sid, every_ms=1500, topic=topic, body="b0")["next_at_ms"]
    kept = {}
    for r in range(6):
        fire = first + 1500 * r
        time.sleep(max(0, fire + 400 - now_ms()) / 1000)   # between fire times
        answers = simultaneous([((a, b)[i % 2], "PUT", f"{SCHED}/{sid}",
                                 {"every_ms": 1500, "topic": topic, "body": f"r{r}-{i}"})
                                for i in range(6)])
        assert all(st == 200 for st, _ in answers), answers
        st, doc = a.http("GET", f"{SCHED}/{sid}")
        assert doc["data"]["next_at_ms"] == fire + 1500, (r, doc["data"])
        kept[fire + 1500] = doc["data"]["body"]
    wait_until(lambda: set(kept) <= set(occurrences(reader, sid)), 10, "the occurrences")
    occ = occurrences(reader, sid)
    wrong = {f - first: (occ[f][0]["payload"], body) for f, body in kept.items()
             if occ[f][0]["payload"] != body}
    assert not wrong, wrong   # (delivered, kept) by fire time
    reader.close()


def test_an_occurrence_whose_schedule_changed_paused_or_went_does_not_run(stack):
    """Each occurrence is checked against its schedule when it comes due: one of an older
    generation, or of a schedule paused or deleted since, is cancelled, never delivered, even
    when the change could not remove it (here: the schedule's hash changed in Redis as a pause,
    a timing PUT and a delete change it, the pending occurrence left in place, as when Redis
    failed between the change and the removal)."""
    d = Delayqd(stack).start().wait_groups_owned()
    topic = f"{d.name}_checked"
    reader = Reader(stack, topic)
    cases = {"paused": ["HSET", "p", "1"], "changed": ["HINCRBY", "g", "1"], "deleted": ["DEL"]}
    pending = {}
    for name in cases:
        pending[name] = put(d, name, every_ms=3000, topic=topic, body=name)["next_at_ms"]
    for name, cmd in cases.items():
        assert d.get(f"{name}@{pending[name]}")["state"] == "pending"
        stack.redis(cmd[0], shard_key(d.prefix, "h:", name), *cmd[1:])
    wait_until(lambda: all(d.get(f"{n}@{f}")["state"] == "cancelled" for n, f in pending.items()),
               15, "the occurrences cancelled")
    says = {n: d.get(f"{n}@{f}")["error"] for n, f in pending.items()}
    assert "paused" in says["paused"] and "changed" in says["changed"], says
    assert "deleted" in says["deleted"], says
    time.sleep(1)
    assert not any(occurrences(reader, n) for n in cases), reader.all()
    put(d, "control", every_ms=1000, topic=topic, body="c")   # unchanged ones still run
    wait_until(lambda: occurrences(reader, "control"), 10, "the control schedule's run")
    reader.close()


def test_puts_of_the_same_timing_meet_a_callback_occurrence_in_retry(stack):
    """The same PUT every 300 ms from two instances while the schedule's callback endpoint
    answers 500 for its first 10 s: occurrences in retry keep their place (a PUT of the same
    timing disturbs none), the schedule moves on meanwhile, and every fire time is called back
    until answered, answered 2xx once; every PUT answers 200."""
    from test_callbacks import SECRET, Receiver
    started = now_ms()
    rx = Receiver(lambda path, n: 500 if now_ms() - started < 10000 else 200)
    conf = {"callbacks": f'secret = "{SECRET}"; allow_private = true; '
                         'retry = { min_backoff_ms = 300; max_backoff_ms = 2000; max_attempts = 30; };'}
    a = Delayqd(stack, extra=conf).start().wait_groups_owned()
    b = Delayqd(stack, cluster=a, extra=conf).start()
    spec = {"every_ms": 2000, "body": "t", "callback": {"url": rx.url("/tick")}}
    first = put(a, "hooked", **spec)["next_at_ms"]
    answers, k = [], 0
    while now_ms() < started + (30000 if FULL else 20000):   # 30 s with DELAYQ_FULL_TARGETS
        st, doc = (a, b)[k % 2].http("PUT", f"{SCHED}/hooked", spec)
        answers.append((st, doc.get("message")))
        k += 1
        time.sleep(0.3)
    last = now_ms()
    assert all(st == 200 for st, _ in answers), [x for x in answers if x[0] != 200]

    def fires_answered():
        ok = {}
        for job_id, calls in rx.by_id().items():
            fire = int(job_id.rsplit("@", 1)[1])
            if any(c["ms"] - started >= 10000 for c in calls):   # answered 2xx from then on
                ok[fire] = calls
        return ok
    want = [f for f in range(first, last, 2000)]
    try:
        wait_until(lambda: set(want) <= set(fires_answered()), 40, "every fire time answered")
    except AssertionError:
        got = fires_answered()
        raise AssertionError(("unanswered", [(f - first) // 2000 for f in want if f not in got],
                              {(f - first) // 2000: [(c["ms"] - started) for c in cs]
                               for f, cs in rx.by_id().items() for f in [int(f.rsplit("@", 1)[1])]},
                              a.http("GET", f"{SCHED}/hooked")[1]["data"]))
    time.sleep(2)
    by_fire = {}
    for job_id, calls in rx.by_id().items():
        by_fire[int(job_id.rsplit("@", 1)[1])] = calls
    assert set(want) <= set(by_fire), sorted(set(want) - set(by_fire))   # none lost
    for fire in want:
        ok = [c for c in by_fire[fire] if c["ms"] - started >= 10000]
        assert len(ok) == 1, (fire, len(ok))   # answered once, no call after the 2xx
        assert min(c["ms"] for c in by_fire[fire]) >= fire   # never early
    assert all((f - first) % 2000 == 0 for f in by_fire), sorted(by_fire)   # one grid
    late = sorted(min(c["ms"] for c in by_fire[f]) - f for f in want if f >= started + 10000)
    print(f"    {len(answers)} puts, {len(want)} fire times; first call minus fire time once "
          f"the endpoint answers: p50 {late[len(late) // 2]} ms, max {late[-1]} ms")
    rx.close()


def test_immediately_runs_one_occurrence_at_the_put_that_makes_the_grid(stack):
    """"immediately": true runs one occurrence at the PUT, besides the grid's; the same PUT
    repeated (every deploy) keeps the grid and runs none; a PUT of another timing runs one
    again. It is a request of the PUT, not kept in the schedule."""
    d = Delayqd(stack).start().wait_groups_owned()
    topic = f"{d.name}_now"
    reader = Reader(stack, topic)
    spec = {"every_ms": 20000, "topic": topic, "body": "n", "immediately": True}
    st, doc = d.http("PUT", f"{SCHED}/now", spec)
    assert st == 200 and "one occurrence now: now@" in doc["message"], doc
    job = doc["message"].rsplit(" ", 1)[1]
    assert "immediately" not in doc["data"], doc
    grid = doc["data"]["next_at_ms"]
    wait_until(lambda: occurrences(reader, "now"), 10, "the immediate occurrence")
    (fire,) = occurrences(reader, "now")
    assert f"now@{fire}" == job and fire < grid, (fire, grid)
    st, doc = d.http("PUT", f"{SCHED}/now", spec)   # repeated: the grid kept, nothing now
    assert st == 200 and doc["message"] == "ok" and doc["data"]["next_at_ms"] == grid, doc
    st, doc = d.http("PUT", f"{SCHED}/now", dict(spec, every_ms=30000))   # another timing
    assert st == 200 and "one occurrence now" in doc["message"], doc
    wait_until(lambda: len(occurrences(reader, "now")) >= 2, 10, "the second immediate occurrence")
    time.sleep(1)
    assert len(occurrences(reader, "now")) == 2, occurrences(reader, "now")
    reader.close()


def test_runs_list_each_fire_time_and_what_became_of_it(stack):
    """GET /schedules/{id}/runs: the last fire times the schedule moved on from, the latest
    first, each with its occurrence's job id and its record's state now (a callback answered
    500 ends failed, with why); limit bounds the page; a deleted schedule has none."""
    from test_callbacks import SECRET, Receiver
    rx = Receiver(lambda path, n: 500 if path == "/bad" else 200)
    d = Delayqd(stack, extra={"callbacks": f'secret = "{SECRET}"; allow_private = true; '
                              'retry = { max_attempts = 1; };'}).start().wait_groups_owned()
    topic = f"{d.name}_runs"
    first = put(d, "runs", every_ms=1000, topic=topic, body="r")["next_at_ms"]
    put(d, "bad", every_ms=1000, body="b", callback={"url": rx.url("/bad")})
    wait_until(lambda: len(d.http("GET", f"{SCHED}/runs/runs")[1]["data"]["runs"]) >= 4, 15, "4 runs")
    wait_until(lambda: all(r["state"] == "delivered"
                           for r in d.http("GET", f"{SCHED}/runs/runs")[1]["data"]["runs"]),
               10, "runs delivered")
    st, doc = d.http("GET", f"{SCHED}/runs/runs?limit=3")
    assert st == 200 and len(doc["data"]["runs"]) == 3, doc
    runs = doc["data"]["runs"]
    fires = [r["fire_at_ms"] for r in runs]
    assert fires == sorted(fires, reverse=True) and all((f - first) % 1000 == 0 for f in fires), runs
    assert all(r["ran"] and r["job_id"] == f"runs@{r['fire_at_ms']}" and r["error"] is None
               for r in runs), runs
    wait_until(lambda: any(r["state"] == "failed"
                           for r in d.http("GET", f"{SCHED}/bad/runs")[1]["data"]["runs"]),
               15, "a failed run")
    failed = [r for r in d.http("GET", f"{SCHED}/bad/runs")[1]["data"]["runs"] if r["state"] == "failed"]
    assert "500" in failed[0]["error"], failed
    assert d.http("GET", f"{SCHED}/runs/runs?limit=0")[0] == 400
    assert d.http("GET", f"{SCHED}/runs/runs?limit=101")[0] == 400
    assert d.http("DELETE", f"{SCHED}/runs")[0] == 200
    assert d.http("GET", f"{SCHED}/runs/runs")[0] == 404
    assert stack.redis("EXISTS", shard_key(d.prefix, "runs:", "runs")) == "0"
    rx.close()


def test_overlap_skip_skips_occurrences_while_the_one_before_is_unfinished(stack):
    """overlap "skip": an occurrence that comes due while the one before it has not finished
    (its callback still retrying) is skipped, marked cancelled saying so, counted; once the
    one before is answered, the next runs. overlap "allow" (the default) runs them all."""
    from test_callbacks import SECRET, Receiver
    clock = {"put": None}   # calls are answered 500 for 4.5 s from the PUTs, then 200
    rx = Receiver(lambda path, n: 500 if now_ms() - clock["put"] < 4500 else 200)
    d = Delayqd(stack, extra={"callbacks": f'secret = "{SECRET}"; allow_private = true; '
                              'retry = { min_backoff_ms = 300; max_backoff_ms = 600; '
                              'max_attempts = 50; };'}).start().wait_groups_owned()
    clock["put"] = started = now_ms()
    for name, overlap in (("skip", "skip"), ("allow", "allow")):
        put(d, f"ov-{name}", every_ms=1000, body=name, overlap=overlap,
            callback={"url": rx.url(f"/{name}")})
    wait_until(lambda: now_ms() - started > 9000, 15, "the calls answered 2xx for a while")

    def fires(path):
        return sorted({int(c["headers"]["webhook-id"].rsplit("@", 1)[1]) for c in rx.of(path)})
    skipped = [r for r in d.http("GET", f"{SCHED}/ov-skip/runs?limit=100")[1]["data"]["runs"]
               if r["state"] == "cancelled"]
    assert skipped and all("overlap" in r["error"] for r in skipped), skipped
    called = fires("/skip")
    assert not set(r["fire_at_ms"] for r in skipped) & set(called), (skipped, called)
    early = {c["headers"]["webhook-id"] for c in rx.of("/skip") if c["ms"] - started < 4400}
    assert len(early) == 1, early   # while the first was retrying, no other was called
    assert len(called) >= 3, called   # the first, retried, then the ones after it finished
    allowed = fires("/allow")
    assert len(allowed) >= len(called) + len(skipped) - 1, (allowed, called, skipped)
    st, doc = d.http("GET", f"{SCHED}/ov-allow/runs?limit=100")
    assert not [r for r in doc["data"]["runs"] if r["state"] == "cancelled"], doc
    assert d.metric("delayq_schedule_overlaps_total") >= len(skipped)
    rx.close()


def test_schedules_of_the_unsharded_layout_move_to_their_shards_and_go_on(stack):
    """A schedule kept by an older delayqd under "{sched}" is found at once (GET, the listing,
    its occurrences' check), moved to its shard by the sweep, and goes on firing once per
    fire time."""
    d = Delayqd(stack).start().wait_groups_owned()
    topic = f"{d.name}_legacy"
    reader = Reader(stack, topic)
    first = put(d, "old", every_ms=1000, topic=topic, body="o")["next_at_ms"]
    d.stop()
    new = shard_key(d.prefix, "h:", "old")
    fields = stack.redis("HGETALL", new).split("\n")
    stack.redis("HSET", f"{d.prefix}{{sched}}:h:old", *fields)
    due = stack.redis("ZSCORE", new.replace(":h:old", ":due"), "old")
    stack.redis("ZADD", f"{d.prefix}{{sched}}:due", due, "old")
    stack.redis("ZADD", f"{d.prefix}{{sched}}:ids", "0", "old")
    stack.redis("DEL", new)
    stack.redis("ZREM", new.replace(":h:old", ":due"), "old")
    stack.redis("ZREM", new.replace(":h:old", ":ids"), "old")
    d.start()
    wait_until(lambda: stack.redis("EXISTS", f"{d.prefix}{{sched}}:h:old") == "0", 10,
               "the legacy copy moved")
    assert stack.redis("EXISTS", new) == "1"
    st, doc = d.http("GET", f"{SCHED}/old")
    assert st == 200 and doc["data"]["generation"] == 1, doc
    assert [x["id"] for x in d.http("GET", SCHED)[1]["data"]["schedules"]] == ["old"]
    since = now_ms()
    wait_until(lambda: len([f for f in occurrences(reader, "old") if f > since]) >= 3, 20,
               "3 occurrences after the move")
    occ = occurrences(reader, "old")
    assert all(len(m) == 1 for m in occ.values()), occ
    assert all((f - first) % 1000 == 0 for f in occ), sorted(occ)
    reader.close()
