"""No HTTP thread waits on Redis or Kafka: a frozen Redis or a stopped broker slows the requests
that need them, never /healthz, /readyz or /metrics beside them, and a stop under load answers
every request begun and exits cleanly."""

import http.client
import json
import os
import re
import signal
import threading
import time

from harness import Delayqd, Reader, wait_until

GET = "/delay-queue/api/jobs/get"
ADD = "/delay-queue/api/jobs/add"


class Client:
    """One keep-alive connection (http.client, no process per request), reopened after a
    failure. request() returns (status, document), or (0, error text) when the connection
    failed, and notes how long it took."""

    def __init__(self, port, timeout=30):
        self.port, self.timeout, self.conn = port, timeout, None

    def request(self, method, path, body=None):
        t0 = time.time()
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            data = json.dumps(body) if body is not None else None
            headers = {"Content-Type": "application/json"} if data else {}
            self.conn.request(method, path, body=data, headers=headers)
            r = self.conn.getresponse()
            text = r.read()
            if r.getheader("Connection", "").lower() == "close":
                self.close()
            return r.status, (json.loads(text) if text.startswith(b"{") else text), time.time() - t0
        except (OSError, http.client.HTTPException) as e:
            self.close()
            return 0, str(e), time.time() - t0

    def close(self):
        if self.conn:
            self.conn.close()
        self.conn = None


def loop(port, stop, make_request, out, pause=0.0):
    """Sends requests on one connection, pause s apart, until stop is set; appends
    (t, status, doc, took)."""
    c = Client(port)
    i = 0
    while not stop.is_set():
        method, path, body = make_request(i)
        st, doc, took = c.request(method, path, body)
        out.append((time.time(), st, doc, took))
        i += 1
        if st == 0 or pause:
            time.sleep(pause or 0.05)
    c.close()


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else 0


def test_redis_frozen_under_gets_never_delays_health_readiness_or_metrics(stack):
    """20 clients get jobs in a loop while Redis is frozen (SIGSTOP) for 5 s: their gets wait up
    to redis.timeout_ms and get 503, and meanwhile /healthz, /readyz and /metrics, polled every
    50 ms, answer at once (each HTTP thread used to serve a get's Redis call itself, and every
    other connection of that thread waited behind it, here up to 2 s). After the thaw, gets are
    answered 200 again."""
    d = Delayqd(stack, extra={"redis_timeout_ms": 2000}).start().wait_groups_owned()
    known = d.add_ok(topic=f"{d.name}_frozen", delay=600, body="x")
    with open(os.path.join(stack.redis_dir, "redis.pid")) as f:
        pid = int(f.read())
    stop = threading.Event()
    gets = [[] for _ in range(20)]
    probes = {path: [] for path in ("/healthz", "/readyz", "/metrics")}

    def probe(path):
        c = Client(d.port)
        while not stop.is_set():
            st, doc, took = c.request("GET", path)
            probes[path].append((time.time(), st, took))
            time.sleep(0.05)
        c.close()

    threads = [threading.Thread(target=loop, args=(d.port, stop, lambda i: ("GET", f"{GET}?job_id={known}", None), out))
               for out in gets]
    threads += [threading.Thread(target=probe, args=(path,)) for path in probes]
    for t in threads:
        t.start()
    try:
        time.sleep(1)
        frozen_at = time.time()
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(5)
        finally:
            os.kill(pid, signal.SIGCONT)
            thawed_at = time.time()
        time.sleep(3)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    during = {path: [took for t, st, took in rows if frozen_at <= t - took and t <= thawed_at + 0.5]
              for path, rows in probes.items()}
    for path, took in during.items():
        print(f"    {path} while Redis was frozen: {len(took)} answers, p50 {percentile(took, 0.5) * 1000:.1f} ms, "
              f"p99 {percentile(took, 0.99) * 1000:.1f} ms, max {max(took) * 1000:.1f} ms")
    all_gets = [row for out in gets for row in out]
    refused = [row for row in all_gets if frozen_at <= row[0] <= thawed_at + 2 and row[1] == 503]
    print(f"    {len(all_gets)} gets, {len(refused)} answered 503 during the freeze")
    assert all(st in (200, 503) for _, st, _, _ in all_gets), \
        sorted({(st, str(doc)[:120]) for _, st, doc, _ in all_gets if st not in (200, 503)})
    assert refused and all(doc["code"] == 10004 for _, _, doc, _ in refused), refused[:3]
    # a loose bound (the target is 50 ms; this machine is shared): a probe stuck behind a get
    # would wait redis.timeout_ms, 2 s
    for path, took in during.items():
        assert len(took) >= 20 and max(took) < 1.0, (path, len(took), max(took or [0]))
    assert all(st == 200 for _, st, _ in probes["/healthz"] + probes["/metrics"])
    last = [row for out in gets for row in out if row[0] > thawed_at + 2.5]
    assert last and all(st == 200 and doc["data"]["id"] == known for _, st, doc, _ in last), last[:3]


def test_kafka_stopped_readiness_stats_and_adds_answer_at_once(stack):
    """The broker stopped, /readyz and /stats polled 20 times a second: /readyz answers at once
    (503 with the reason) and /stats never holds an HTTP thread; once produce_timeout_ms has
    passed with nothing acknowledged, an add every 3 s is refused at once every time; after the
    broker is back, adds are accepted again soon after /readyz says ready."""
    timeout_ms = 2000
    d = Delayqd(stack, extra={"produce_timeout_ms": timeout_ms}).start().wait_groups_owned()
    topic = f"{d.name}_kstop"
    stack.ensure_topic(topic)
    before = d.add_ok(topic=topic, delay_ms=100, body="before")
    stop = threading.Event()
    polls = {"/readyz": [], "/delay-queue/api/stats": []}
    threads = [threading.Thread(target=loop, args=(d.port, stop, lambda i, p=path: ("GET", p, None), out, 0.05))
               for path, out in polls.items()]
    stack.stop_kafka()
    stopped_at = time.time()
    try:
        for t in threads:
            t.start()
        st, doc = d.add(topic=topic, delay=1, body="first")   # finds Kafka gone
        assert st == 503, (st, doc)
        adds = []
        for i in range(4):
            c = Client(d.port)
            st, doc, took = c.request("POST", ADD, {"topic": topic, "delay": 1, "body": f"during {i}"})
            c.close()
            adds.append(took)
            assert st == 503 and "kafka unreachable" in doc["message"], (st, doc)
            time.sleep(3)
        print(f"    adds while Kafka is known unreachable: answered within {max(adds) * 1000:.1f} ms")
        assert max(adds) < 1.0, adds
    finally:
        restart_at = time.time()
        stack.start_kafka()
        back_at = time.time()
    wait_until(lambda: d.http("GET", "/readyz")[0] == 200, 60, "/readyz to say ready again")
    ready_at = time.time()
    st, doc = d.add(topic=topic, delay_ms=100, body="after")
    accepted_in = time.time() - ready_at
    stop.set()
    for t in threads:
        t.join(60)
    print(f"    ready {ready_at - back_at:.1f}s after the broker was started; the next add answered "
          f"{st} in {accepted_in * 1000:.0f} ms")
    assert st == 200, (st, doc)
    ready = [(st, doc, took) for t, st, doc, took in polls["/readyz"] if stopped_at + 3 <= t - took and t <= restart_at]
    took = [row[2] for row in ready]
    print(f"    /readyz while Kafka was down: {len(took)} answers, p99 {percentile(took, 0.99) * 1000:.1f} ms, "
          f"max {max(took) * 1000:.1f} ms")
    wrong = [(st, doc) for st, doc, _ in ready if not (st == 503 and "kafka" in doc["message"])]
    assert len(ready) >= 20 and not wrong, (len(ready), wrong[:3])
    assert max(took) < 1.0, max(took)
    stats = polls["/delay-queue/api/stats"]
    assert stats and all(st in (200, 503) for _, st, _, _ in stats), stats[:3]
    reader = Reader(stack, topic)   # after the restart: kcat does not outlive the broker's
    by_id = reader.wait_ids([before, doc["data"]["job_id"]], 90)
    assert all(len(ms) == 1 for ms in by_id.values()), by_id
    reader.close()


def stop_under_load(stack, d, fault, heal, kinds):
    """Clients send requests of kinds (add, get, reschedule, claims, stats) in a loop while
    fault() holds; SIGTERM after 2 s. Returns delayqd's exit code, the seconds the stop took
    and every answer."""
    stop = threading.Event()
    known = d.add_ok(topic=f"{d.name}_stop", delay=600, body="x")
    requests = {
        "add": lambda i: ("POST", ADD, {"topic": f"{d.name}_stop", "delay": 60, "body": str(i)}),
        "get": lambda i: ("GET", f"{GET}?job_id={known}", None),
        "reschedule": lambda i: ("GET", f"/delay-queue/api/jobs/reschedule?job_id={known}&delay={300 + i}", None),
        "claims": lambda i: ("GET", "/delay-queue/api/claims", None),
        "stats": lambda i: ("GET", "/delay-queue/api/stats", None),
        "put": lambda i: ("PUT", "/delay-queue/api/schedules/stopping",
                          {"every_ms": 60000, "topic": f"{d.name}_stop", "body": str(i)}),
    }
    outs = {k: [] for k in kinds}
    threads = [threading.Thread(target=loop, args=(d.port, stop, requests[k], outs[k]))
               for k in kinds for _ in range(2)]
    fault()
    try:
        for t in threads:
            t.start()
        time.sleep(2)
        t0 = time.time()
        rc = d.stop(timeout=90)
        took = time.time() - t0
        stop.set()
        for t in threads:
            t.join(60)
    finally:
        stop.set()
        heal()
    return rc, took, outs


def assert_stopped_cleanly(d, rc, took, outs, bound):
    log = d.log_text()
    assert rc == 0, (rc, log[-3000:])
    assert "ERROR: AddressSanitizer" not in log and "runtime error" not in log, log[-3000:]
    for kind, rows in outs.items():
        bad = [(st, str(doc)[:160]) for _, st, doc, _ in rows if st not in (200, 409, 503) and st != 0]
        assert not bad, (kind, bad[:5])
        assert rows, kind
    print(f"    stopped in {took:.1f}s (bound {bound:.0f}s); answers: " +
          ", ".join(f"{k} {sum(1 for r in rows if r[1]) }" for k, rows in outs.items()))
    assert took < bound, took


def test_stop_under_load_with_kafka_stopped_answers_everything_and_exits_cleanly(stack):
    """SIGTERM while adds, gets, reschedules, /claims, /stats and schedule PUTs arrive and the
    broker is down: every request begun gets an answer (or finds the port closed), and delayqd
    exits 0 within its drain bound (produce timeout + 1 s for answers, the produce timeout for Kafka, 2 s for
    the answers to go out, 10 s for forwards in flight) plus what closing the consumer takes
    (the final commit 5 s, the close 3 s, a request in flight 10 s; docs/operations.md)."""
    d = Delayqd(stack, extra={"produce_timeout_ms": 2000}).start().wait_groups_owned()
    rc, took, outs = stop_under_load(stack, d, stack.stop_kafka, stack.start_kafka,
                                     ["add", "get", "reschedule", "claims", "stats", "put"])
    assert_stopped_cleanly(d, rc, took, outs, bound=3 + 2 + 2 + 10 + 18 + 10)


def test_a_stop_with_the_broker_hung_after_forwarding_ends_within_its_bound(stack):
    """Jobs are being forwarded when the broker hangs (SIGSTOP: connections stay open, nothing
    answers), then SIGTERM: the forwards in flight get the produce timeout (2 s here), the
    final commit 5 s, the consumer's close 3 s, a request the broker never answers 10 s
    (docs/operations.md). librdkafka alone would wait for the unanswered commit without end.
    After the broker is back, a restart delivers every job; only the forwards the stop logged
    as unfinished may arrive twice (the broker may have taken them before it hung)."""
    d = Delayqd(stack, extra={"produce_timeout_ms": 2000}).start().wait_groups_owned()
    reader = Reader(stack, f"{d.name}_hung")
    ids = [d.add_ok(topic=reader.topic, delay_ms=300 + 20 * i, body=f"b{i}") for i in range(200)]
    time.sleep(2)
    with open(os.path.join(stack.kafka_dir, "kafka.pid")) as f:
        pid = int(f.read())
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(1.5)
        t0 = time.time()
        rc = d.stop(timeout=120)
        took = time.time() - t0
    finally:
        os.kill(pid, signal.SIGCONT)
    log = d.log_text()
    assert rc == 0, (rc, log[-2000:])
    print(f"    stopped in {took:.1f}s")
    assert took < 10 + 5 + 3 + 10 + 5 + 15, took
    d.start()
    by_id = reader.wait_ids(ids, 90)
    reader.close()
    unfinished = re.search(r"(\d+) forwards unfinished at shutdown", log)
    doubled = [k for k, ms in by_id.items() if len(ms) > 1]
    assert all(len(ms) <= 2 for ms in by_id.values()), by_id
    assert len(doubled) <= (int(unfinished.group(1)) if unfinished else 0), (len(doubled), unfinished)


def test_stop_under_load_with_redis_frozen_answers_everything_and_exits_cleanly(stack):
    """The same with Redis frozen (SIGSTOP): requests on the workers wait out redis.timeout_ms,
    the queued ones are answered 503 at the stop, and delayqd exits 0."""
    d = Delayqd(stack, extra={"redis_timeout_ms": 2000, "produce_timeout_ms": 2000}).start()
    d.wait_groups_owned()
    with open(os.path.join(stack.redis_dir, "redis.pid")) as f:
        pid = int(f.read())
    rc, took, outs = stop_under_load(stack, d, lambda: os.kill(pid, signal.SIGSTOP),
                                     lambda: os.kill(pid, signal.SIGCONT),
                                     ["add", "get", "reschedule", "claims", "put"])
    assert_stopped_cleanly(d, rc, took, outs, bound=3 + 2 + 2 + 2 + 20)


def test_a_stop_with_the_broker_down_and_jobs_read_ahead_ends_within_its_bound(stack):
    """Jobs due over the next 13 s are read ahead and some delivered, the broker stops (its
    commits then go unanswered), and SIGTERM comes a few seconds later: delayqd exits within
    kafka.produce_timeout_ms + 5 s (2 s to 3 s here on a quiet machine; asserted with room for
    a loaded one: it took 15 s or more when forwards in flight got 10 s, the producer 5 s more,
    and the consumer's close waited for unanswered commits), and a restart once the broker is
    back delivers every job."""
    d = Delayqd(stack, extra={"produce_timeout_ms": 2000}).start().wait_groups_owned()
    reader = Reader(stack, f"{d.name}_down")
    ids = d.bulk_add([{"topic": reader.topic, "delay_ms": 1000 + 60 * i, "body": f"b{i}"}
                      for i in range(200)])
    time.sleep(4)
    reader.close()
    stack.stop_kafka()
    try:
        time.sleep(3)
        t0 = time.time()
        rc = d.stop(timeout=120)
        took = time.time() - t0
        log = d.log_text()
    finally:
        stack.start_kafka()
    print(f"    stopped in {took:.1f}s")
    assert rc == 0, (rc, log[-2000:])
    assert took < 2 + 5 + 3, (took, log[-3000:])
    d.start()
    reader = Reader(stack, f"{d.name}_down")
    by_id = reader.wait_ids(ids, 120)
    assert all(len(ms) <= 2 for ms in by_id.values()), by_id
    reader.close()
