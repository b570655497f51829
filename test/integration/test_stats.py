"""GET /delay-queue/api/stats and the pending gauges of /metrics: what waits in the delay topics
and when it next acts, counted from Kafka offsets, driven with curl and kcat."""

import os
import re
import signal

from harness import ROOT, Delayqd, run, wait_until

STATS = "/delay-queue/api/stats"
LEVELS = ["1s", "5s", "30s", "5m", "2h", "1d"]


def stats(d, headers=None):
    st, doc = d.http("GET", STATS, headers=headers)
    assert st == 200 and doc["code"] == 0 and doc["message"] == "ok", (st, doc)
    return doc["data"]


def stats_until(d, pred, timeout, what):
    """Polls /stats (a view lives up to 2 s) until pred holds for its data; returns it."""
    last = []

    def ok():
        last[:] = [stats(d)]
        return pred(last[0])
    wait_until(ok, timeout, what, step=0.5)
    return last[0]


def pending_gauges(d):
    """{(name, label): value} of the labelled pending gauges of /metrics."""
    text = run(["curl", "-sS", "-m", "10", f"http://127.0.0.1:{d.port}/metrics"]).stdout
    return {(m[0], m[1]): float(m[2]) for m in
            re.findall(r'^(delayq_pending_jobs(?:_by_due)?)\{\w+="(\w+)"\} (\S+)$', text, re.M)}


def test_stats_count_pending_jobs_by_level_and_due(stack):
    d = Delayqd(stack, levels=LEVELS, extra={"max_delay_s": 3 * 86400}).start().wait_groups_owned()
    topic = f"{d.name}_orders"
    empty = stats(d)
    assert empty["pending"] == 0 and empty["overdue_ms"] == 0, empty
    assert empty["by_level"] == {lv: 0 for lv in LEVELS}, empty
    assert empty["by_due"] == {"1m": 0, "10m": 0, "1h": 0, "1d": 0, "later": 0}, empty

    # Each delay a level exactly, so that each job waits in one topic until its due time (the
    # 2-day ones: in 1d's, whose hop comes within a day, when they move down a level).
    plan = {30: 7, 300: 5, 7200: 3, 2 * 86400: 2}
    d.bulk_add([{"topic": topic, "delay": delay, "body": "x"}
                for delay, n in plan.items() for _ in range(n)])
    # Read within 30 s of the adds: nothing is due before. The cache may hold the empty view
    # for a moment.
    s = stats_until(d, lambda v: v["pending"], 10, "stats to see the adds")
    assert s["pending"] == 17, s
    assert s["by_level"] == {"1s": 0, "5s": 0, "30s": 7, "5m": 5, "2h": 3, "1d": 2}, s
    assert s["by_due"] == {"1m": 7, "10m": 5, "1h": 0, "1d": 5, "later": 0}, s
    assert sum(s["by_due"].values()) == s["pending"]
    assert s["overdue_ms"] == 0, s

    wait_until(lambda: pending_gauges(d).get(("delayq_pending_jobs", "5m")) == 5, 20,
               "the pending gauges")
    g = pending_gauges(d)
    assert g[("delayq_pending_jobs", "1d")] == 2 and g[("delayq_pending_jobs", "1s")] == 0, g
    assert g[("delayq_pending_jobs_by_due", "10m")] == 5, g
    assert d.metric("delayq_overdue_ms") == 0

    # Once the 30 s jobs are delivered and committed, they no longer count.
    s = stats_until(d, lambda v: v["pending"] == 10, 120, "the delivered jobs to leave the count")
    assert s["by_level"]["30s"] == 0 and s["by_due"]["1m"] == 0 and s["by_due"]["10m"] == 5, s
    assert s["overdue_ms"] == 0, s
    wait_until(lambda: pending_gauges(d).get(("delayq_pending_jobs", "30s")) == 0, 20,
               "the 30s gauge to fall")


def test_stats_overdue_while_the_owner_is_stopped(stack):
    """The group's owner is stopped (SIGSTOP) with its lease still valid: a second instance,
    which owns no group, answers /stats and sees messages whose hop time has passed."""
    a = Delayqd(stack, levels=["1s", "5s"], extra={"claim_ttl_ms": 30000}).start().wait_groups_owned()
    b = Delayqd(stack, cluster=a).start()
    topic = f"{a.name}_orders"
    stack.ensure_topic(topic)
    assert stats(b)["overdue_ms"] == 0
    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        for p in (0, 1):
            stack.produce(a.delay_topic("1s"), "late", headers={"dq-topic": topic}, partition=p)
        s = stats_until(b, lambda v: v["overdue_ms"] >= 1500, 20,
                        "overdue_ms to grow while nothing forwards")
        assert s["pending"] == 2 and s["by_level"]["1s"] == 2 and s["by_due"]["1m"] == 2, s
        wait_until(lambda: b.metric("delayq_overdue_ms") > 0, 10, "the overdue gauge")
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
    # Forwarding again (the owner, or b once the lease expired): nothing is late any more.
    s = stats_until(b, lambda v: v["pending"] == 0, 90, "the late messages to be forwarded")
    assert s["overdue_ms"] == 0, s


def test_stats_needs_the_token_and_get(stack):
    d = Delayqd(stack, extra={"auth_token": "s3cret"}).start()
    st, doc = d.http("GET", STATS)
    assert st == 401 and doc["code"] == 401, (st, doc)
    st, doc = d.http("POST", STATS, headers={"Authorization": "Bearer s3cret"}, body={})
    assert st == 405, (st, doc)
    s = stats(d, headers={"Authorization": "Bearer s3cret"})
    assert set(s) == {"pending", "by_level", "by_due", "overdue_ms", "callbacks", "schedules",
                      "redis"}, s
    assert s["redis"] == {"maxmemory_policy": "noeviction", "evicts": False}, s
    assert s["callbacks"] == {"waiting_for_retry": 0}, s
    assert s["schedules"] == {"count": 0}, s
    assert set(s["by_level"]) == set(d.levels), s


def test_every_metric_is_documented(stack):
    """Each metric /metrics serves (with pull topics and callbacks on, so that theirs are there)
    is in the docs' tables, and the docs name none that is not served."""
    d = Delayqd(stack, extra={"pull_topics": ["p-*"], "callbacks": "allow_private = true;"}).start()
    d.add_ok(topic="p-one", delay=1, body="x")   # a pull topic's gauges, once it has a job ready

    def served():
        return set(re.findall(r"^# TYPE (delayq_\w+) ", d.metrics_text(), re.M))
    documented = set()
    for name in os.listdir(os.path.join(ROOT, "docs")):
        if name.endswith(".md"):
            documented |= set(re.findall(r"`(delayq_[a-z_]+)", open(os.path.join(ROOT, "docs", name)).read()))
    # the pending and pull gauges come with the first stats view and the first ready job
    try:
        wait_until(lambda: documented <= served(), 15, "every documented metric to be served")
    except AssertionError:
        raise AssertionError(f"documented, not served: {sorted(documented - served())}") from None
    assert served() - documented == set(), f"served, not documented: {sorted(served() - documented)}"
