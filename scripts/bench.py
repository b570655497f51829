#!/usr/bin/env python3
"""make bench: measures delayqd on this machine, with Kafka and Redis on it too, started here
on free ports in a temp dir. Phases:
  add        concurrent keep-alive HTTP clients (wrk) add jobs with 200-byte bodies
  fairness   adds from one address while another holds 2,000 half-open connections
  batch      the same jobs through add_batch, 10, 100 and 1000 per request
  reschedule pending jobs moved, half to a later time, half to an earlier one
  profile    the same adds for 10 s under `perf record -a`: each process's CPU per add, split
             by where it ran (the kernel, each library): where the add rate's limit lies
  backlog    ~200,000 jobs all due at one instant: from that instant to the last delivered
  precision  2,000 jobs/s for 60 s, delays spread over 1-30 s: lateness of each delivery
  memory     delayqd RSS idle and with 1,000,000 pending jobs; Redis bytes per pending job
  claims     adds' latency alone, then beside a client reading /claims of 500 groups in a loop
  schedules  10,000 schedules of every_ms 10000 for 60 s: lateness of each occurrence, Redis
             bytes per schedule
Prints a table and writes the figures as JSON (--json FILE, default run/bench.json).
  scripts/bench.py [--quick] [--json FILE] [--phases add,batch,reschedule,profile,backlog,...]"""

import argparse
import http.client
import json
import os
import re
import resource
import socket
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "integration"))
import harness  # noqa: E402
from harness import Delayqd, Reader, now_ms, rss_mib, run  # noqa: E402
from cluster import ClusterStack  # noqa: E402
from sentinel import SentinelStack  # noqa: E402
import redisnodes  # noqa: E402

BODY = "x" * 200
FAR_MS = 2 * 3600 * 1000     # pending jobs of the add and memory phases never fall due here


def pct(values, p):
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def machine():
    with open("/proc/meminfo") as f:
        mem_kb = int(re.search(r"MemTotal:\s+(\d+)", f.read()).group(1))
    ver = lambda cmd: run(cmd, check=False).stdout.strip().splitlines()[0]  # noqa: E731
    return {
        "cores": os.cpu_count(), "memory_gib": round(mem_kb / 2**20, 1),
        "cpu": re.search(r"model name\s*:\s*(.*)", open("/proc/cpuinfo").read()).group(1),
        "delayqd": ver([harness.DELAYQD, "--version"]),
        "redis": ver(["redis-server", "--version"]),
        "kafka": "Apache Kafka 3.7.1 (KRaft, single node, scripts/kafka-local.sh)",
    }


def cpu_s(pid):
    """CPU seconds (user + system) used so far by process pid, its threads and its children
    that ended (Redis's AOF rewrites); for a list of pids, their sum."""
    if isinstance(pid, list):
        return sum(cpu_s(p) for p in pid)
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def service_pids(d, stack):
    def pidfile(path):
        try:
            with open(path) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None
    return {"delayqd": d.proc.pid, "kafka": pidfile(os.path.join(stack.kafka_dir, "kafka.pid")),
            "redis": pidfile(os.path.join(stack.redis_dir, "redis.pid"))}


def measured(d, stack, fn, *args):
    """Runs a phase; adds the CPU seconds each server used during it, and the machine's idle
    share, so a figure can be read against what the machine had left."""
    pids = service_pids(d, stack)
    before = {k: cpu_s(p) for k, p in pids.items() if p}
    idle0, stolen0, total0 = machine_idle()
    load0 = children_cpu_s()
    r = fn(d, stack, *args)
    idle1, stolen1, total1 = machine_idle()
    r["cpu_s"] = {k: round(cpu_s(pids[k]) - v, 1) for k, v in before.items()}
    r["cpu_s"]["load generators"] = round(children_cpu_s() - load0, 1)   # wrk, kcat
    r["machine_idle_pct"] = round(100 * (idle1 - idle0) / max(total1 - total0, 1))
    # time the hypervisor gave the machine's cores to others: the machine is shared
    r["machine_stolen_pct"] = round(100 * (stolen1 - stolen0) / max(total1 - total0, 1))
    return r


def children_cpu_s():
    """CPU seconds used by this script's finished children: wrk and kcat."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def machine_idle():
    """Jiffies of all cores so far: idle (with iowait), stolen, and in all (guest time is
    counted in user already)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[3] + v[4], v[7], sum(v[:8])


def redis_used(stack):
    info = stack.redis("INFO", "memory")
    return int(re.search(r"used_memory:(\d+)", info).group(1))


def wrk(d, script, seconds, conns, threads, env, path="add"):
    """Runs wrk with scripts/bench/<script> against an API path (its requests may name others);
    its BENCH line as a dict."""
    env = dict(os.environ, BENCH_LUA_DIR=os.path.join(ROOT, "scripts", "bench"), **env)
    p = subprocess.run(["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "--timeout", "10s",
                        "-s", os.path.join(ROOT, "scripts", "bench", script),
                        f"http://127.0.0.1:{d.port}/delay-queue/api/jobs/{path}"],
                       capture_output=True, text=True, env=env, timeout=seconds + 120)
    m = re.search(r"BENCH (.*)", p.stdout)
    if not m:
        raise RuntimeError(f"wrk: {p.stdout}{p.stderr}")
    f = {k: int(v) for k, v in (kv.split("=") for kv in m.group(1).split())}
    ok = f["requests"] - f["non2xx"] - f["errors"]
    return {"adds": ok, "adds_per_s": round(ok / (f["duration_us"] / 1e6)),
            "errors": f["errors"] + f["non2xx"], "p50_ms": f["p50_us"] / 1000,
            "p99_ms": f["p99_us"] / 1000, "max_ms": f["max_us"] / 1000,
            "connections": conns, "seconds": seconds}


def wrk_adds(d, topic, due_ms, seconds, conns=int(os.environ.get("BENCH_CONNS", "128")), threads=2,
             limit=0):
    """Adds for `seconds`, or (limit) exactly `limit` jobs, then health checks till the end."""
    return wrk(d, "add.lua", seconds, conns, threads, {"BENCH_DUE_MS": str(due_ms), "BENCH_TOPIC": topic,
                                                       "BENCH_LIMIT": str(limit // threads)})


def load_seconds(n, add_rate):
    """How long wrk is given to add n jobs at about add_rate (it adds them and waits out the rest)."""
    return max(5, int(n / max(add_rate, 1) * 1.5) + 2)


def add_exactly(d, topic, due_ms, n, load_s):
    """Adds n jobs (less n's remainder by wrk's thread count) due at due_ms; returns how many
    delayqd accepted (a request wrk had begun when its thread stopped may be missing)."""
    added = d.metric("delayq_jobs_added_total")
    wrk_adds(d, topic, due_ms, load_s, limit=n)
    return int(d.metric("delayq_jobs_added_total") - added)


def phase_batch(d, stack, seconds):
    """add_batch at 10, 100 and 1000 jobs per request: jobs/s, and the time of a request."""
    out = {"target": "jobs >= 50000/s at 100 jobs per request"}
    for n, conns in ((10, 64), (100, 16), (1000, 4)):
        added = d.metric("delayq_jobs_added_total")
        r = wrk(d, "batch.lua", seconds, conns, 2, {"BENCH_DUE_MS": str(now_ms() + FAR_MS),
                                                   "BENCH_TOPIC": "bench_pending", "BENCH_BATCH": str(n)},
                path="add_batch")
        jobs = int(d.metric("delayq_jobs_added_total") - added)
        out[str(n)] = {"jobs_per_s": round(jobs / seconds), "requests": r["adds"], "errors": r["errors"],
                       "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "max_ms": r["max_ms"],
                       "connections": conns}
    return out


def phase_reschedule(d, stack, seconds, per_thread):
    """Reschedules of pending jobs, half to a later time and half to an earlier one."""
    threads, due = 2, now_ms() + FAR_MS
    ids = [f"rs-{t}-{i}" for t in range(threads) for i in range(per_thread)]
    for k in range(0, len(ids), 1000):
        (status, doc), = d.bulk([("POST", "/delay-queue/api/jobs/add_batch",
                                  {"jobs": [{"id": i, "topic": "bench_pending", "deliver_at_ms": due}
                                            for i in ids[k:k + 1000]]})])
        if status != 200 or doc["data"]["failed"]:
            raise RuntimeError(f"reschedule phase: adding its jobs failed: {status} {str(doc)[:300]}")
    r = wrk(d, "reschedule.lua", seconds, 32, threads, {"BENCH_DUE_MS": str(due),
                                                      "BENCH_JOBS": str(per_thread)}, path="reschedule")
    return {"reschedules_per_s": r["adds_per_s"], "errors": r["errors"], "p50_ms": r["p50_ms"],
            "p99_ms": r["p99_ms"], "max_ms": r["max_ms"], "connections": 32, "jobs": len(ids),
            "seconds": seconds}


def phase_claims(stack, seconds, ngroups=500):
    """Adds' latency alone, then while a client reads GET /delay-queue/api/claims of ngroups
    partition groups (one partition each) every 100 ms and back to back, then alone again:
    what the view costs the adds beside it."""
    d = Delayqd(stack, name="claims", levels=["1m"], partitions=ngroups,
                extra={"groups": [[p] for p in range(ngroups)], "log_level": "warn",
                       "max_connections_per_ip": 256}).start()
    out = {"groups": ngroups, "target": "adds' p99 at most 5 ms more beside a /claims of 500 groups"}
    try:
        wait_owned = time.time() + 120
        while time.time() < wait_owned and sum(1 for o in d.claims().values() if o) < ngroups:
            time.sleep(1)
        due = now_ms() + FAR_MS
        wrk_adds(d, "bench_claims", due, 30, conns=32)   # unmeasured: the broker's JIT, the leaders
        out["alone"] = wrk_adds(d, "bench_claims", due, seconds, conns=32)
        for name, pause in (("every_100ms", 0.1), ("back_to_back", 0)):
            stop, views = threading.Event(), []

            def reader():
                c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
                while not stop.is_set():
                    t0 = time.time()
                    c.request("GET", "/delay-queue/api/claims")
                    r = c.getresponse()
                    body = r.read()
                    views.append((r.status, time.time() - t0, len(body)))
                    time.sleep(pause)
                c.close()

            t = threading.Thread(target=reader)
            t.start()
            try:
                r = wrk_adds(d, "bench_claims", due, seconds, conns=32)
            finally:
                stop.set()
                t.join(60)
            took = sorted(v[1] for v in views)
            r.update({"views": len(views), "views_ok": sum(1 for v in views if v[0] == 200),
                      "view_p50_ms": round(1000 * took[len(took) // 2], 1) if took else None,
                      "view_bytes": views[-1][2] if views else 0})
            out[name] = r
        out["alone_after"] = wrk_adds(d, "bench_claims", due, seconds, conns=32)
    finally:
        d.stop()
    return out


def pull_fill(d, topic, n, due_ms):
    """Adds n pull jobs of topic due at due_ms, 1000 per request."""
    for k in range(0, n, 1000):
        (status, doc), = d.bulk([("POST", "/delay-queue/api/jobs/add_batch",
                                  {"jobs": [{"topic": topic, "deliver_at_ms": due_ms, "body": "x" * 64}
                                            for _ in range(min(1000, n - k))]})])
        if status != 200 or doc["data"]["failed"]:
            raise RuntimeError(f"pull phase: adding its jobs failed: {status} {str(doc)[:300]}")


def pull_threads(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith("Threads:")))


def pull_lateness(a, b, n=10000, spread_ms=10000, poppers=16):
    """n jobs due over spread_ms on one pull topic, poppers waiting (wait_ms 5000) on both
    instances: when each was handed out minus its due time, as the popper saw it."""
    topic, late, done = "bench_pull_late", [], threading.Event()
    t0 = now_ms() + 3000
    jobs = [{"topic": topic, "deliver_at_ms": t0 + i * spread_ms // n} for i in range(n)]
    for k in range(0, n, 1000):
        a.bulk([("POST", "/delay-queue/api/jobs/add_batch", {"jobs": jobs[k:k + 1000]})])

    def popper(d):
        c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
        while not done.is_set():
            c.request("POST", "/delay-queue/api/jobs/pop",
                      json.dumps({"topic": topic, "wait_ms": 5000}), {"Content-Type": "application/json"})
            got = json.loads(c.getresponse().read())["data"]["jobs"]
            at = now_ms()
            for j in got:
                late.append(at - j["due_ms"])
                c.request("POST", "/delay-queue/api/jobs/finish",
                          json.dumps({"job_id": j["id"], "receipt": j["receipt"]}),
                          {"Content-Type": "application/json"})
                c.getresponse().read()
        c.close()

    ts = [threading.Thread(target=popper, args=(a if i % 2 else b,)) for i in range(poppers)]
    for t in ts:
        t.start()
    end = time.time() + spread_ms / 1000 + 60
    while len(late) < n and time.time() < end:
        time.sleep(0.2)
    done.set()
    for t in ts:
        t.join(30)
    return {"jobs": n, "popped": len(late), "early": sum(1 for x in late if x < 0),
            "p50_ms": pct(late, 50), "p99_ms": pct(late, 99), "max_ms": max(late) if late else None,
            "poppers": poppers, "instances": 2, "target": "p50 <= 10 ms, p99 <= 50 ms"}


def pull_waiting(d, seconds, n_waiting=2000):
    """Adds' latency while n_waiting pops (from 127.0.0.2) wait on an empty topic, and the
    threads delayqd runs meanwhile."""
    before = pull_threads(d.proc.pid)
    alone = wrk_adds(d, "bench_pending", now_ms() + FAR_MS, seconds, conns=32)
    body = json.dumps({"topic": "bench_pull_idle", "wait_ms": 120000}).encode()
    socks = []
    for _ in range(n_waiting):
        s = socket.socket()
        s.bind(("127.0.0.2", 0))
        s.connect(("127.0.0.1", d.port))
        s.sendall(b"POST /delay-queue/api/jobs/pop HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        socks.append(s)
    try:
        time.sleep(2)
        during = wrk_adds(d, "bench_pending", now_ms() + FAR_MS, seconds, conns=32)
        threads = pull_threads(d.proc.pid)
        answered = 0
        for s in socks:
            s.setblocking(False)
            try:
                answered += bool(s.recv(1))
            except BlockingIOError:
                pass
    finally:
        for s in socks:
            s.close()
    return {"waiting": n_waiting, "answered_early": answered, "threads_before": before,
            "threads_while_waiting": threads, "adds_alone": alone, "adds_while_waiting": during,
            "target": "no thread per waiting pop; adds keep their p99"}


def phase_pull(stack, seconds):
    """Pop+finish pairs per second with 32 poppers taking 10 jobs a pop (finishing them in one
    request, and one by one) and 1; pop lateness with 16 poppers on two instances; adds while
    2,000 pops wait."""
    extra = {"log_level": "warn", "max_connections": 4096, "max_connections_per_ip": 4096,
             "max_body_bytes": 1048576, "pull_topics": ["bench_pull*"]}
    a = Delayqd(stack, name="pull", partitions=8, levels=["1s", "5s", "10s", "1m", "1h", "1d"],
                extra=extra).start()
    b = Delayqd(stack, cluster=a).start()
    out = {"target": "pairs >= 15000/s with max 10 finished in batches, >= 10000/s with max 10 "
                     "and >= 2000/s with max 1 (32 poppers)"}
    try:
        a.wait_groups_owned()
        for mx, rate, batch in ((10, 24000, 1), (10, 24000, 0), (1, 8000, 0)):
            topic = f"bench_pull_{mx}_{batch}"
            name = f"max_{mx}" + ("_batch" if batch else "")

            def readied():
                return a.metric("delayq_pull_ready_total") + b.metric("delayq_pull_ready_total")
            want = readied() + rate * seconds
            pull_fill(a, topic, rate * seconds, now_ms() + 1000)
            end = time.time() + 120
            while readied() < want and time.time() < end:   # all ready before the poppers start
                time.sleep(0.5)
            before = a.metric("delayq_pull_finishes_total")
            drained = []   # when the poppers had finished every job (their pops wait after that)

            def watch():
                t0 = time.time()
                while time.time() < t0 + seconds + 5 and not drained:
                    if a.metric("delayq_pull_finishes_total") - before >= rate * seconds:
                        drained.append(time.time() - t0)
                    time.sleep(0.1)
            w = threading.Thread(target=watch)
            w.start()
            r = wrk(a, "pull.lua", seconds, 32, 2, {"BENCH_TOPIC": topic, "BENCH_MAX": str(mx),
                                                    "BENCH_BATCH": str(batch)}, path="pop")
            w.join()
            pairs = a.metric("delayq_pull_finishes_total") - before
            took = min(drained[0], seconds) if drained else seconds
            out[name] = {"pairs_per_s": round(pairs / took), "pairs": int(pairs),
                                "drained_in_s": round(took, 1) if drained else None,
                                "connections": 32, "errors": r["errors"],
                                "note": "request latency is of pops and finishes together, the "
                                        "pops that waited out the last second included"}
        out["lateness"] = pull_lateness(a, b)
        b.stop()
        out["waiting"] = pull_waiting(a, seconds)
    finally:
        a.stop()
        if b.alive():
            b.stop()
    return out


class Receiver:
    """scripts/bench/receiver.py in its own process (its own core, not this one's GIL)."""

    def __init__(self, stack, stall=False, status=200, answer_ms=0, drop_after_ms=None):
        self.port = harness.free_port()
        self.out = os.path.join(stack.tmp, f"receiver-{self.port}.json")
        self.proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "scripts", "bench", "receiver.py"),
                                      "--port", str(self.port), "--out", self.out, "--status", str(status),
                                      "--answer-ms", str(answer_ms)]
                                     + (["--stall"] if stall else [])
                                     + (["--drop-after-ms", str(drop_after_ms)] if drop_after_ms is not None else []))
        harness.wait_until(lambda: socket.socket().connect_ex(("127.0.0.1", self.port)) == 0, 10,
                           "the receiver")

    def url(self):
        return f"http://127.0.0.1:{self.port}/due"

    def calls(self):
        """{webhook-id: [receive ms, ...]}; stops the receiver."""
        self.proc.terminate()
        self.proc.wait(30)
        with open(self.out) as f:
            return json.load(f)


def callback_fill(d, jobs):
    for k in range(0, len(jobs), 1000):
        (status, doc), = d.bulk([("POST", "/delay-queue/api/jobs/add_batch", {"jobs": jobs[k:k + 1000]})])
        if status != 200 or doc["data"]["failed"]:
            raise RuntimeError(f"callbacks phase: adding failed: {status} {str(doc)[:300]}")
        for j, a in zip(jobs[k:k + 1000], doc["data"]["jobs"]):
            j["id"] = a["job_id"]


def lateness_of(jobs, calls):
    late = [calls[j["id"]][0] - j["deliver_at_ms"] for j in jobs if j["id"] in calls]
    return {"jobs": len(jobs), "called": len(late), "early": sum(1 for x in late if x < 0),
            "p50_ms": pct(late, 50), "p99_ms": pct(late, 99), "max_ms": round(max(late)) if late else None}


def phase_callbacks(stack, n):
    """n callbacks due over 5 s to one endpoint (lateness: received minus due); 4 n due at one
    instant (calls per second); a stalled endpoint with n / 2.5 due beside a healthy one and a
    Kafka topic with as many (their lateness)."""
    d = Delayqd(stack, name="callbacks", partitions=8, levels=["1s", "5s", "10s", "1m", "1h", "1d"],
                extra={"log_level": "warn", "max_body_bytes": 4 << 20,
                       "callbacks": "allow_private = true; timeout_ms = 10000; max_concurrency = 64; "
                                    'secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";'}).start()
    out = {"target": "p50 <= 10 ms, p99 <= 50 ms; >= 5000 calls/s; a stalled endpoint leaves "
                     "the others' p99 <= 50 ms"}
    try:
        d.wait_groups_owned()
        rx = Receiver(stack)
        t0 = now_ms() + 8000
        jobs = [{"deliver_at_ms": t0 + i * 5000 // n, "body": {"n": i}, "callback": {"url": rx.url()}}
                for i in range(n)]
        callback_fill(d, jobs)
        time.sleep(max(0, (t0 + 5000 - now_ms()) / 1000) + 3)
        out["spread"] = dict(lateness_of(jobs, rx.calls()), over_s=5)

        rx = Receiver(stack)
        t0 = now_ms() + 10000
        jobs = [{"deliver_at_ms": t0, "body": {"n": i}, "callback": {"url": rx.url()}} for i in range(4 * n)]
        callback_fill(d, jobs)
        time.sleep(max(0, (t0 - now_ms()) / 1000) + 15)
        calls = rx.calls()
        first = [v[0] for v in calls.values()]
        took = (max(first) - min(first)) / 1000 if first else 0
        out["burst"] = {"jobs": len(jobs), "called": len(calls),
                        "calls_per_s": round(len(calls) / took) if took else None}

        dead, ok, reader = Receiver(stack, stall=True), Receiver(stack), Reader(stack, "bench_cb_kafka")
        m = int(n / 2.5)
        t0 = now_ms() + 8000
        stuck = [{"deliver_at_ms": t0 + i * 2000 // m, "body": "s", "callback": {"url": dead.url()}}
                 for i in range(m)]
        fine = [{"deliver_at_ms": t0 + i * 2000 // m, "body": "h", "callback": {"url": ok.url()}}
                for i in range(m)]
        kafka = [{"topic": "bench_cb_kafka", "deliver_at_ms": t0 + i * 2000 // m, "body": "k"} for i in range(m)]
        for batch in (stuck, fine, kafka):
            callback_fill(d, batch)
        time.sleep(max(0, (t0 + 2000 - now_ms()) / 1000) + 4)
        got = {msg["headers"].get("dq-id"): msg["recv_ms"] for msg in reader.all()}
        kl = [got[j["id"]] - j["deliver_at_ms"] for j in kafka if j["id"] in got]
        out["isolation"] = {"healthy": lateness_of(fine, ok.calls()),
                            "kafka": {"jobs": m, "delivered": len(kl), "p50_ms": pct(kl, 50),
                                      "p99_ms": pct(kl, 99)},
                            "stalled_calls_open": len(dead.calls())}
        reader.close()
    finally:
        d.stop()
    return out



def spread(kind, n, t0, over_ms, **job):
    return [dict(job, deliver_at_ms=t0 + i * over_ms // n, body=f"{kind}{i}") for i in range(n)]


def uuid_tag():
    return os.urandom(3).hex()


def isolation_run(stack, bad, nbad, over_ms, extra, n_other=200):
    """nbad callbacks to the endpoint bad, beside n_other to a healthy endpoint and n_other Kafka
    jobs, all due over over_ms and spread over every partition: the healthy calls' and Kafka
    jobs' lateness, delayqd's RSS (before and at its peak) and the calls sent back to wait."""
    d = Delayqd(stack, name="iso" + uuid_tag(), partitions=8, levels=harness.LEVELS_DEFAULT,
                extra=dict({"log_level": "warn", "max_body_bytes": 4 << 20}, **extra)).start()
    try:
        d.wait_groups_owned()
        stack.ensure_topic(f"{d.name}_kafka")
        ok, reader = Receiver(stack), Reader(stack, f"{d.name}_kafka")
        time.sleep(2)
        rss_before, peak = rss_mib(d.proc.pid), 0
        t0 = now_ms() + 10000
        sick = spread("d", nbad, t0, over_ms, callback={"url": bad.url()})
        fine = spread("h", n_other, t0, over_ms, callback={"url": ok.url()})
        kafka = spread("k", n_other, t0, over_ms, topic=f"{d.name}_kafka")
        for batch in (sick, fine, kafka):
            callback_fill(d, batch)
        while now_ms() < t0 + over_ms + 6000:
            peak = max(peak, rss_mib(d.proc.pid))
            time.sleep(0.2)
        got = {m["headers"].get("dq-id"): int(m["headers"]["dq-sent-ms"]) for m in reader.all()}
        kl = [got[j["id"]] - j["deliver_at_ms"] for j in kafka if j["id"] in got]
        calls = ok.calls()
        hl = [(calls[j["id"]][0] - j["deliver_at_ms"], j["deliver_at_ms"] - t0) for j in fine if j["id"] in calls]
        kw = [(got[j["id"]] - j["deliver_at_ms"], j["deliver_at_ms"] - t0) for j in kafka if j["id"] in got]
        out = {"bad_calls": nbad, "healthy": lateness_of(fine, calls),
               "kafka": {"jobs": n_other, "delivered": len(kl), "early": sum(1 for x in kl if x < 0),
                         "p50_ms": pct(kl, 50), "p99_ms": pct(kl, 99), "max_ms": max(kl) if kl else None},
               "rss_mib": {"before": round(rss_before, 1), "peak": round(peak, 1)},
               "sent_back_to_wait": d.metric("delayq_callback_deferrals_total"),
               "moved_down": d.metric("delayq_moves_total"),
               # delayqd's own view (first calls answered 2xx: sent minus due), by bucket
               "sent_late_buckets": {l.split('"')[1]: int(l.split()[-1]) for l in d.metrics_text().splitlines()
                                     if l.startswith("delayq_callback_lateness_ms_bucket")},
               # the latest (ms late, ms after the first due time): when the others were held back
               "latest": {"healthy": [(round(a), b) for a, b in sorted(hl)[-5:]], "kafka": sorted(kw)[-5:]}}
        reader.close()
        return out
    finally:
        d.stop()


def phase_isolation(stack, n):
    """A dead endpoint (takes connections, never answers; timeout 2 s) with n calls due over 2 s,
    beside 200 healthy calls and 200 Kafka jobs in the same window and partitions, default
    delay.max_held; the same with max_held = 4000 and 2,000 dead calls; and an endpoint
    answering in 20 ms to 1,000 calls a second for 10 s that starts resetting every connection
    after 4 s, beside 100 healthy calls and 100 Kafka jobs a second."""
    conf = 'allow_private = true; timeout_ms = 2000; secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";'
    out = {"target": "healthy calls and Kafka jobs p99 <= 50 ms late beside a dead or dying "
                     "endpoint; memory bounded"}
    dead = Receiver(stack, stall=True)
    out["dead"] = isolation_run(stack, dead, n, 2000, {"callbacks": conf})
    dead.calls()
    dead = Receiver(stack, stall=True)
    out["dead_max_held_4000"] = isolation_run(stack, dead, min(n, 2000), 2000,
                                              {"callbacks": conf, "max_held": 4000})
    dead.calls()
    dying = Receiver(stack, answer_ms=20, drop_after_ms=4000)
    out["dying"] = isolation_run(stack, dying, 10000, 10000, {"callbacks": conf}, n_other=1000)
    made = dying.calls()
    out["dying"]["bad_endpoint_answered_calls"] = len(made)
    return out


def phase_burst(stack, n):
    """n Kafka jobs due at one instant: how late each is sent (dq-sent-ms minus due)."""
    d = Delayqd(stack, name="burst", partitions=8, levels=["1s", "5s", "10s", "1m", "1h", "1d"],
                extra={"log_level": "warn", "max_body_bytes": 4 << 20}).start()
    out = {"target": "p99 <= 50 ms late"}
    try:
        d.wait_groups_owned()
        reader = Reader(stack, "bench_burst")
        t0 = now_ms() + 8000
        jobs = [{"topic": "bench_burst", "deliver_at_ms": t0, "body": "b"} for _ in range(n)]
        callback_fill(d, jobs)
        time.sleep(max(0, (t0 - now_ms()) / 1000) + 6)
        got = {m["headers"].get("dq-id"): int(m["headers"]["dq-sent-ms"]) for m in reader.all()}
        late = [got[j["id"]] - j["deliver_at_ms"] for j in jobs if j["id"] in got]
        out.update(jobs=n, delivered=len(late), early=sum(1 for x in late if x < 0),
                   p50_ms=pct(late, 50), p99_ms=pct(late, 99), max_ms=max(late) if late else None)
        reader.close()
    finally:
        d.stop()
    return out


def phase_storm(stack, n, nk=300):
    """n callbacks due at one instant to an endpoint answering 500 at once (retried from 200 ms,
    5 attempts), beside nk Kafka jobs due over the next 3 s: the Kafka jobs' lateness, the calls
    made, and whether the holder thread kept its leases (the least lease time left at a round
    of renewals, sampled every 100 ms; groups fenced)."""
    d = Delayqd(stack, name="storm", partitions=8, levels=["1s", "5s", "10s", "1m", "1h", "1d"],
                extra={"log_level": "warn", "max_body_bytes": 4 << 20,
                       "callbacks": "allow_private = true; timeout_ms = 10000; max_concurrency = 64; "
                                    "retry = { min_backoff_ms = 200; max_attempts = 5; };"}).start()
    out = {"target": "Kafka jobs p99 <= 50 ms late; no group fenced; every call retried"}
    try:
        d.wait_groups_owned()
        rx, reader = Receiver(stack, status=500), Reader(stack, "bench_storm_kafka")
        t0 = now_ms() + 8000
        calls = [{"deliver_at_ms": t0, "body": {"n": i}, "callback": {"url": rx.url()}} for i in range(n)]
        kafka = [{"topic": "bench_storm_kafka", "deliver_at_ms": t0 + i * 3000 // nk, "body": "k"}
                 for i in range(nk)]
        callback_fill(d, calls)
        callback_fill(d, kafka)
        least = None
        while now_ms() < t0 + 12000:
            left = d.metric("delayq_lease_left_ms")
            if now_ms() >= t0 and (least is None or left < least):
                least = left
            time.sleep(0.1)
        got = {m["headers"].get("dq-id"): int(m["headers"]["dq-sent-ms"]) for m in reader.all()}
        late = [got[j["id"]] - j["deliver_at_ms"] for j in kafka if j["id"] in got]
        made = rx.calls()
        out.update(kafka={"jobs": nk, "delivered": len(late), "early": sum(1 for x in late if x < 0),
                          "p50_ms": pct(late, 50), "p99_ms": pct(late, 99),
                          "max_ms": max(late) if late else None},
                   calls={"jobs": n, "called": len(made), "calls": sum(len(v) for v in made.values()),
                          "retried": sum(1 for v in made.values() if len(v) > 1)},
                   lease_left_min_ms=least, fenced=d.metric("delayq_groups_fenced_total"))
        reader.close()
    finally:
        d.stop()
    return out

def phase_schedules(stack, n, seconds):
    """n schedules of every_ms 10000 put at once, then run for seconds: each occurrence's
    lateness (its delivery's dq-sent-ms minus its fire time, and received minus fire time),
    occurrences delivered twice, and Redis bytes per schedule (its hash, its entries in the
    sets, its pending occurrence's record)."""
    d = Delayqd(stack, name="schedules", partitions=8, levels=["1s", "5s", "10s", "1m", "1h", "1d"],
                extra={"log_level": "warn"}).start()
    out = {"target": "every occurrence on time: p99 <= 20 ms; none twice"}
    try:
        d.wait_groups_owned()
        topic = "bench_schedules"
        reader = Reader(stack, topic)
        before = redis_used(stack)
        t0 = time.time()
        res = d.bulk([("PUT", f"/delay-queue/api/schedules/s{i}", {"every_ms": 10000, "topic": topic,
                                                                   "body": "tick"})
                      for i in range(n)], threads=8)
        bad = [r for r in res if r[0] != 200]
        if bad:
            raise RuntimeError(f"schedules phase: puts failed: {bad[:3]}")
        out["put_s"] = round(time.time() - t0, 1)
        # the whole list, a page of 500 at a time, as a console or a script walks it
        pages, after, listed = [], "", 0
        conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
        while True:
            p0 = time.time()
            conn.request("GET", f"/delay-queue/api/schedules?limit=500&after={after}")
            resp = conn.getresponse()
            st, doc = resp.status, json.loads(resp.read())
            pages.append((time.time() - p0) * 1000)
            if st != 200:
                raise RuntimeError(f"schedules phase: listing failed: {st} {doc}")
            listed += len(doc["data"]["schedules"])
            after = doc["data"]["after"]
            if not after:
                break
        out.update({"listed": listed, "list_pages": len(pages), "list_walk_ms": round(sum(pages)),
                    "list_page_p50_ms": round(pct(pages, 50), 1),
                    "list_page_max_ms": round(max(pages), 1)})
        time.sleep(2)
        out["redis_bytes_per_schedule"] = round((redis_used(stack) - before) / n)
        start = now_ms()
        time.sleep(seconds)
        end = now_ms() - 1000
        seen, sent, recv, twice, per = set(), [], [], 0, {}
        for m in reader.all():
            job = m["headers"].get("dq-id", "")
            fire = int(job.rsplit("@", 1)[1])
            if not (start <= fire <= end):
                continue
            if job in seen:
                twice += 1
                continue
            seen.add(job)
            per[job.rsplit("@", 1)[0]] = per.get(job.rsplit("@", 1)[0], 0) + 1
            sent.append(int(m["headers"]["dq-sent-ms"]) - fire)
            recv.append(m["recv_ms"] - fire)
        out.update({"schedules": n, "seconds": seconds, "occurrences": len(seen),
                    # each schedule fires every 10 s: (end - start) / 10 s times, give or take one
                    "per_schedule_min": min(per.values(), default=0),
                    "per_schedule_max": max(per.values(), default=0),
                    "schedules_seen": len(per), "twice": twice, "early": sum(1 for x in sent if x < 0),
                    "sent_p50_ms": pct(sent, 50), "sent_p99_ms": pct(sent, 99), "sent_max_ms": max(sent) if sent else None,
                    "received_p50_ms": pct(recv, 50), "received_p99_ms": pct(recv, 99)})
        reader.close()
    finally:
        d.stop()
    return out


def phase_fairness(d, stack, seconds, n_idle=2000):
    """Adds from 127.0.0.1 while 127.0.0.2 holds n_idle half-open connections (a request line
    and one header, then nothing): what one client's idle connections cost the others."""
    idle = []
    for _ in range(n_idle):
        s = socket.socket()
        s.bind(("127.0.0.2", 0))
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", d.port))
            s.sendall(b"POST /delay-queue/api/jobs/add HTTP/1.1\r\nHost: x\r\n")
        except OSError:
            pass   # refused: over the address's share
        idle.append(s)
    try:
        r = wrk_adds(d, "bench_pending", now_ms() + FAR_MS, seconds, conns=16)
    finally:
        for s in idle:
            s.close()
    r["half_open"] = n_idle
    r["target"] = "p99 < 100 ms"
    return r


def phase_add(d, stack, seconds):
    r = wrk_adds(d, "bench_pending", now_ms() + FAR_MS, seconds)
    r["target"] = "adds >= 15000/s, p99 <= 20 ms"
    return r


def res_cores(res):
    return res.get("machine", {}).get("cores") or os.cpu_count()


def cpu_per_add(r):
    """CPU each process used per add in the add phase, in us: what the machine's cores allow."""
    return {k: round(v * 1e6 / max(r["adds"], 1), 1) for k, v in r["cpu_s"].items()}


def thread_owners(pids):
    """The process each thread id belongs to now: perf tells samples by thread."""
    owner = {}
    for name, pid in pids.items():
        try:
            for t in os.listdir(f"/proc/{pid}/task"):
                owner[int(t)] = name
        except (OSError, TypeError):
            pass
    return owner


def dso_name(dso):
    """[kernel.kallsyms] -> kernel, [JIT] tid 12 -> JIT, /usr/lib/.../libjansson.so.4.14.0 ->
    libjansson; Debian's redis-server binary is a link named redis-check-rdb."""
    if dso.startswith("[kernel"):
        return "kernel"
    if dso.startswith("[JIT]"):
        return "JIT"
    base = os.path.basename(dso).split(".so")[0]
    return "redis-server" if base == "redis-check-rdb" else base


def phase_profile(d, stack, seconds):
    """Adds under `perf record -a` (every process on the machine, sampled by CPU time): each
    process's CPU per add, split by where it ran."""
    if not shutil.which("perf"):
        return {"skipped": "perf is not installed (Debian package linux-perf)"}
    done = {}
    load = threading.Thread(target=lambda: done.update(
        wrk_adds(d, "bench_pending", now_ms() + FAR_MS, seconds + 2)))
    load.start()
    time.sleep(1)
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        t0, a0, m0 = time.time(), d.metric("delayq_jobs_added_total"), machine_idle()
        rec = run(["perf", "record", "-a", "-F", "499", "-o", data, "--", "sleep", str(seconds)],
                  check=False, timeout=seconds + 60)
        t1, a1, m1 = time.time(), d.metric("delayq_jobs_added_total"), machine_idle()
        owner = thread_owners(service_pids(d, stack))
        load.join()
        if rec.returncode != 0:
            return {"skipped": "perf record: " + (rec.stderr.strip().splitlines() or ["failed"])[-1]}
        rep = run(["perf", "report", "-i", data, "--stdio", "--sort", "pid,dso",
                   "-F", "period,pid,dso", "-t", "|"], check=False, timeout=300)
    rate = (a1 - a0) / max(t1 - t0, 1e-3)
    adds = max(rate * seconds, 1)
    us = {}     # process -> where -> us per add (the period of cpu-clock samples is in ns)
    for line in rep.stdout.splitlines():
        f = [x.strip() for x in line.split("|")]
        tid, _, comm = f[1].partition(":") if len(f) == 3 else ("", "", "")
        if line.startswith("#") or not f[0].isdigit() or not tid.isdigit():
            continue
        proc = ("idle" if tid == "0" else "wrk" if comm == "wrk" else owner.get(int(tid), "other"))
        where = comm if proc == "other" else dso_name(f[2])   # others by their thread name
        us.setdefault(proc, {})
        us[proc][where] = us[proc].get(where, 0) + int(f[0]) / 1e3 / adds
    if not us:
        return {"skipped": "perf report: no samples " + rep.stderr.strip()[-200:]}
    idle = sum(us.pop("idle", {}).values())
    r = {"seconds": seconds, "adds_per_s": round(rate), "wrk": done,
         "cpu_us_per_add": {k: {w: round(v, 1) for w, v in sorted(p.items(), key=lambda x: -x[1])}
                            for k, p in us.items()},
         "idle_pct": round(100 * idle * rate / 1e6 / os.cpu_count()),
         "stolen_pct": round(100 * (m1[1] - m0[1]) / max(m1[2] - m0[2], 1))}
    r["kernel_us_per_add"] = round(sum(p.get("kernel", 0) for p in us.values()), 1)
    return r


def phase_backlog(d, stack, add_rate, n, pids=None):
    topic = f"{d.name}_backlog"
    stack.ensure_topic(topic)
    load_s = load_seconds(n, add_rate)
    due = now_ms() + load_s * 1000 + 15000
    count = add_exactly(d, topic, due, n, load_s)
    time.sleep(max(0, (due - now_ms()) / 1000))
    pids = pids or service_pids(d, stack)
    before, idle0 = {k: cpu_s(p) for k, p in pids.items() if p}, machine_idle()
    deadline = time.time() + 600
    while stack.end_offset(topic) < count and time.time() < deadline:
        time.sleep(0.1)
    used, idle1 = {k: cpu_s(pids[k]) - v for k, v in before.items()}, machine_idle()
    p = run(["kcat", "-b", stack.brokers, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
             "-f", "%T\n"], timeout=600)
    stamps = [int(x) for x in p.stdout.split()]
    last = max(stamps) if stamps else due
    secs = max(last - due, 1) / 1000
    return {"jobs": count, "delivered": len(stamps), "seconds": round(secs, 2),
            "jobs_per_s": round(len(stamps) / secs), "target": ">= 30000 jobs/s",
            # CPU per delivered job while the backlog drained (the poll above adds a little)
            "drain_cpu_us_per_job": {k: round(v * 1e6 / max(len(stamps), 1), 1) for k, v in used.items()},
            "drain_machine_idle_pct": round(100 * (idle1[0] - idle0[0]) / max(idle1[2] - idle0[2], 1))}


def phase_precision(d, stack, rate, seconds):
    topic = f"{d.name}_precision"
    reader = Reader(stack, topic)
    threads = 2
    added = d.metric("delayq_jobs_added_total")
    r = wrk(d, "precision.lua", seconds, 64, threads,
            {"BENCH_TOPIC": topic, "BENCH_RATE": str(rate), "BENCH_THREADS": str(threads)})
    # what delayqd accepted: wrk does not count the adds it had sent when it stopped, which
    # delayqd finishes within milliseconds
    time.sleep(1)
    n = int(d.metric("delayq_jobs_added_total") - added)
    deadline = time.time() + 60
    while len(reader.all()) < n and time.time() < deadline:
        time.sleep(1)
    time.sleep(2)
    msgs = reader.all()
    reader.close()
    sent = [int(m["headers"]["dq-sent-ms"]) - int(m["headers"]["dq-due-ms"]) for m in msgs]
    recv = [m["recv_ms"] - int(m["headers"]["dq-due-ms"]) for m in msgs]
    row = lambda v: {"p50": pct(v, 50), "p99": pct(v, 99), "p99.9": pct(v, 99.9), "max": max(v) if v else None}  # noqa: E731
    ids = {m["headers"].get("dq-id") for m in msgs}
    return {"added": n, "add_rate": r["adds_per_s"], "add_errors": r["errors"], "delivered": len(ids),
            "duplicates": len(msgs) - len(ids),
            "lateness_ms": row(sent), "receive_minus_due_ms": row(recv),
            "early": sum(1 for v in sent if v < 0) + sum(1 for v in recv if v < 0),
            "target": "lateness p99 <= 20 ms, max <= 100 ms, 0 early"}


def phase_first(d, stack, n_topics):
    """The first job to each of n_topics business topics the process never sent to, and then a
    second job to each: lateness as a consumer sees it (arrival minus dq-due-ms), so that the
    wait for a new topic's metadata shows."""
    topics = [f"{d.name}_first_{i}_{now_ms()}" for i in range(n_topics)]
    reader = Reader(stack, topics)
    out = {}
    for rnd in ("first", "second"):
        before = len(reader.all())
        due = now_ms() + 3000
        for i, t in enumerate(topics):
            d.add_ok(topic=t, deliver_at_ms=due + 10 * i, body=rnd)
        deadline = time.time() + 60
        while len(reader.all()) < before + n_topics and time.time() < deadline:
            time.sleep(0.2)
        late = [m["recv_ms"] - int(m["headers"]["dq-due-ms"]) for m in reader.all()[before:]]
        out[rnd] = {"p50": pct(late, 50), "p99": pct(late, 99), "max": max(late) if late else None,
                    "delivered": len(late), "early": sum(1 for v in late if v < 0)}
    reader.close()
    out["topics"] = n_topics
    out["cold_deliveries"] = d.metric("delayq_deliveries_to_cold_topics_total")
    out["target"] = "first messages: arrival - due p99 <= 20 ms, as for later ones"
    return out


# Fills database 9 with n keys like a job's ("dq:job:" and a 36-character id) holding the bare
# body with an expiry: what Redis needs per key before delayqd stores anything of its own.
FLOOR_LUA = """
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  local k = string.format('dq:job:%08x-0000-4000-8000-%012x', i, i)
  redis.call('SET', k, ARGV[3], 'PX', 86400000)
end
return 1
"""


def redis_floor(stack, n):
    """Redis bytes per key for n keys of a job's key length holding only the body, with a TTL."""
    before = redis_used(stack)
    step = 50000
    for lo in range(0, n, step):
        stack.redis("EVAL", "redis.call('SELECT', 9)\n" + FLOOR_LUA, "0", str(lo),
                    str(min(n, lo + step) - 1), BODY)
    per_key = (redis_used(stack) - before) / max(n, 1)
    stack.redis("-n", "9", "FLUSHDB")
    return round(per_key)


def phase_memory(d, stack, idle_mib, add_rate, n):
    before = redis_used(stack)
    count = add_exactly(d, "bench_memory", now_ms() + FAR_MS, n, load_seconds(n, add_rate))
    time.sleep(3)
    per_job = (redis_used(stack) - before) / max(count, 1)
    return {"pending_added": count, "rss_idle_mib": round(idle_mib, 1),
            "rss_pending_mib": round(rss_mib(d.proc.pid), 1),
            "redis_bytes_per_job": round(per_job), "body_bytes": len(BODY),
            "redis_floor_bytes_per_key": redis_floor(stack, count),
            "target": "RSS <= 64 MiB with 1,000,000 pending; Redis <= body + 150 B per job"}


def stack_pids(d, stack, ss):
    """The processes of the replicated phase: delayqd, Kafka, the master, its replica and the
    three Sentinels (summed as one)."""
    master = ss.master_port()
    pids = {"delayqd": d.proc.pid, "kafka": service_pids(d, stack)["kafka"],
            "redis master": ss.pid(master)}
    for i, p in enumerate(x for x in ss.data_ports if x != master):
        pids["redis replica" + (f" {i + 1}" if i else "")] = ss.pid(p)
    return {k: v for k, v in pids.items() if v}


def phase_replicated(stack, seconds, n):
    """Adds and a backlog against a master with one replica behind three Sentinels, with
    redis.wait_replicas 0 and then 1 on the same stack: what confirming every write costs."""
    ss = SentinelStack(stack.tmp, master_name="bench")
    ss.start()
    out = {}
    try:
        for w in (0, 1):
            d = Delayqd(stack, name=f"benchrepl{w}", levels=["1s", "5s", "10s", "1m", "1h", "1d"],
                        partitions=8, extra={"max_delay_s": 86400, "log_level": "warn",
                                             "sentinels": ss.sentinel_ports, "master_name": "bench",
                                             "wait_replicas": w}).start().wait_groups_owned()
            pids = stack_pids(d, stack, ss)
            before = {k: cpu_s(p) for k, p in pids.items()}
            idle0, _, total0 = machine_idle()
            add = wrk_adds(d, f"{d.name}_pending", now_ms() + FAR_MS, seconds)
            idle1, _, total1 = machine_idle()
            add_cpu = {k: round((cpu_s(p) - before[k]) * 1e6 / max(add["adds"], 1), 1)
                       for k, p in pids.items()}
            backlog = phase_backlog(d, stack, add["adds_per_s"], n, pids)
            out[f"wait_replicas={w}"] = {"adds_per_s": add["adds_per_s"], "add_p99_ms": add["p99_ms"],
                                         "add_errors": add["errors"],
                                         "add_cpu_us_per_add": add_cpu,
                                         "add_machine_idle_pct": round(100 * (idle1 - idle0) / max(total1 - total0, 1)),
                                         "backlog_jobs_per_s": backlog["jobs_per_s"],
                                         "backlog_delivered": f"{backlog['delivered']} of {backlog['jobs']}",
                                         "backlog_cpu_us_per_job": backlog["drain_cpu_us_per_job"]}
            d.stop()
    finally:
        ss.stop()
    out["target"] = "wait_replicas=1 keeps >= 80% of the adds/s and backlog jobs/s of wait_replicas=0"
    return out


REDIS_COUNTERS = ("delayq_redis_pipelines_total", "delayq_redis_round_trips_total", "delayq_redis_calls_total")


def redis_counts(d):
    return {k: d.metric(k) for k in REDIS_COUNTERS}


def trips(before, after, work):
    """Round trips per pipeline and per 1,000 jobs of work, and calls per round trip."""
    p, t, c = (after[k] - before[k] for k in REDIS_COUNTERS)
    return {"round_trips_per_pipeline": round(t / max(p, 1), 2),
            "round_trips_per_1000_jobs": round(1000 * t / max(work, 1), 1),
            "calls_per_round_trip": round(c / max(t, 1), 1)}


# The Redis setups compared, each on the same two cores: (name, like-for-like base or None).
CLUSTER_MODES = (("single", None), ("single+replica", None), ("cluster", "single"),
                 ("cluster+replicas", "single+replica"))


def redis_setup(stack, mode):
    """Starts the Redis of a mode of phase_cluster: None for the harness's single server, else
    (stack object, delayqd config extra, {name: pid or pids} of its Redis processes)."""
    if mode == "single":
        no_aof_rewrites([stack.redis_port])
        return None
    if mode == "single+replica":
        ss = SentinelStack(stack.tmp, master_name="benchsr", name="bench-single-replica")
        ss.start()
        no_aof_rewrites(ss.data_ports)
        return ss, {"sentinels": ss.sentinel_ports, "master_name": "benchsr"}, \
            {"redis master": ss.pid(ss.data_ports[0]), "redis replica": ss.pid(ss.data_ports[1])}
    cs = ClusterStack(stack.tmp, masters=3, replicas=1 if mode == "cluster+replicas" else 0,
                      name=f"bench-{mode}")
    cs.start()
    no_aof_rewrites(cs.nodes)
    pids = {"redis masters": [cs.pid(p) for p in cs.masters()]}
    if cs.n_replicas:
        pids["redis replicas"] = [cs.pid(p) for p in cs.replicas()]
    return cs, {"cluster": cs.nodes[:2]}, pids


def no_aof_rewrites(ports):
    """Turns Redis's automatic AOF rewrites off on these nodes: a rewrite (a child process
    copying the whole data set) starts when the AOF has doubled, at a moment that depends on
    how the records happen to be spread, and would land in one setup's figures and not in
    another's. Every setup writes its AOF as usual."""
    for p in ports:
        redisnodes.redis(p, "CONFIG", "SET", "auto-aof-rewrite-percentage", "0")


def phase_cluster(stack, seconds, n):
    """Adds and a backlog against Redis Cluster of three masters beside one Redis server, on the
    same two cores, each without replicas and with a replica per master (a cluster compared with
    the server that has as many copies of each record). Reports the Redis round trips the
    batches take (each pipeline goes to every node at once, one round trip per node) and the
    CPU each process spent per add and per delivered job."""
    out = {}
    for mode, _ in CLUSTER_MODES:
        setup = redis_setup(stack, mode)
        try:
            name = "bench" + re.sub(r"[^a-z]", "", mode)
            extra = {"max_delay_s": 86400, "log_level": "warn", **(setup[1] if setup else {})}
            d = Delayqd(stack, name=name, levels=["1s", "5s", "10s", "1m", "1h", "1d"],
                        partitions=8, extra=extra).start().wait_groups_owned()
            pids = service_pids(d, stack)
            if setup:
                del pids["redis"]
                pids.update(setup[2])
            c0, cpu0 = redis_counts(d), {k: cpu_s(p) for k, p in pids.items()}
            add = wrk_adds(d, f"{d.name}_pending", now_ms() + FAR_MS, seconds)
            c1 = redis_counts(d)
            add_cpu = {k: round((cpu_s(p) - cpu0[k]) * 1e6 / max(add["adds"], 1), 1)
                       for k, p in pids.items()}
            backlog = phase_backlog(d, stack, add["adds_per_s"], n, pids)
            c2 = redis_counts(d)
            out[mode] = {"adds_per_s": add["adds_per_s"], "add_p99_ms": add["p99_ms"],
                         "add_errors": add["errors"], "add_redis": trips(c0, c1, add["adds"]),
                         "add_cpu_us_per_add": add_cpu,
                         "backlog_jobs_per_s": backlog["jobs_per_s"],
                         "backlog_delivered": f"{backlog['delivered']} of {backlog['jobs']}",
                         "backlog_redis": trips(c1, c2, 2 * backlog["jobs"]),
                         "backlog_cpu_us_per_job": backlog["drain_cpu_us_per_job"],
                         "backlog_machine_idle_pct": backlog["drain_machine_idle_pct"]}
            if isinstance(setup and setup[0], ClusterStack):
                out[mode]["records_per_master"] = setup[0].keys_per_master(f"{name}:job:*")
            d.stop()
        finally:
            if setup:
                setup[0].stop()
    for mode, base in CLUSTER_MODES:
        if base:
            out[mode]["of_" + base] = {k: f"{100 * out[mode][k] / max(out[base][k], 1):.0f}%"
                                       for k in ("adds_per_s", "backlog_jobs_per_s")}
    out["target"] = ("the cluster keeps >= 80% of the adds/s and backlog jobs/s of one server with as "
                     "many replicas")
    return out


def table(res):
    lines = []
    if "add" in res:
        a = res["add"]
        lines.append(f"add        {a['adds_per_s']:>8} adds/s   p50 {a['p50_ms']:.1f} ms  p99 {a['p99_ms']:.1f} ms  "
                     f"max {a['max_ms']:.1f} ms  ({a['connections']} conns, {a['errors']} errors)   target {a['target']}")
        if "cpu_us_per_add" in a:
            per = a["cpu_us_per_add"]
            total = sum(per.values())
            lines.append(f"  CPU per add: " + ", ".join(f"{k} {v} us" for k, v in per.items())
                         + f"; {total:.0f} us in all, so {res_cores(res)} cores add at most "
                         f"{res_cores(res) * 1e6 / max(total, 1):,.0f}/s")
    if "fairness" in res:
        f = res["fairness"]
        lines.append(f"fairness   {f['adds_per_s']:>8} adds/s from 127.0.0.1 while 127.0.0.2 holds {f['half_open']} "
                     f"half-open connections: p50 {f['p50_ms']:.1f} ms  p99 {f['p99_ms']:.1f} ms  max "
                     f"{f['max_ms']:.1f} ms  ({f['connections']} conns, {f['errors']} errors)   target {f['target']}")
    if "batch" in res:
        b = res["batch"]
        for n in ("10", "100", "1000"):
            v = b[n]
            lines.append(f"batch {n:>4} {v['jobs_per_s']:>8} jobs/s   per request p50 {v['p50_ms']:.1f} ms  "
                         f"p99 {v['p99_ms']:.1f} ms  max {v['max_ms']:.1f} ms  ({v['connections']} conns, "
                         f"{v['errors']} errors)")
        lines.append(f"  target {b['target']}")
    if "reschedule" in res:
        r = res["reschedule"]
        lines.append(f"reschedule {r['reschedules_per_s']:>8} /s   p50 {r['p50_ms']:.1f} ms  p99 {r['p99_ms']:.1f} ms  "
                     f"max {r['max_ms']:.1f} ms  ({r['connections']} conns, {r['errors']} errors; half later, "
                     f"half earlier, over {r['jobs']} pending jobs)")
    if "profile" in res:
        lines += profile_lines(res["profile"], res_cores(res))
    if "backlog" in res:
        b = res["backlog"]
        lines.append(f"backlog    {b['jobs_per_s']:>8} jobs/s   {b['delivered']} of {b['jobs']} in {b['seconds']} s"
                     f"   target {b['target']}; CPU per job while draining: "
                     + ", ".join(f"{k} {v} us" for k, v in b["drain_cpu_us_per_job"].items()))
    if "precision" in res:
        p = res["precision"]
        la, rv = p["lateness_ms"], p["receive_minus_due_ms"]
        lines.append(f"precision  sent-due p50/p99/p99.9/max {la['p50']}/{la['p99']}/{la['p99.9']}/{la['max']} ms;"
                     f" received-due {rv['p50']}/{rv['p99']}/{rv['p99.9']}/{rv['max']} ms; early {p['early']};"
                     f" {p['delivered']} of {p['added']} delivered ({p['duplicates']} twice) at {p['add_rate']}/s"
                     f"   target {p['target']}")
    if "first" in res:
        f = res["first"]
        lines.append(f"first      {f['topics']} new business topics, arrival-due p50/p99/max: first job "
                     f"{f['first']['p50']}/{f['first']['p99']}/{f['first']['max']} ms, second job "
                     f"{f['second']['p50']}/{f['second']['p99']}/{f['second']['max']} ms; early "
                     f"{f['first']['early'] + f['second']['early']}; sent to a cold topic "
                     f"{f['cold_deliveries']:.0f}   target {f['target']}")
    if "memory" in res:
        m = res["memory"]
        lines.append(f"memory     delayqd RSS {m['rss_idle_mib']} MiB idle, {m['rss_pending_mib']} MiB with "
                     f"{m['pending_added']} pending (fresh process; {m.get('rss_after_earlier_phases_mib')} MiB "
                     f"after the earlier phases); Redis {m['redis_bytes_per_job']} B/job "
                     f"({m['body_bytes']} B body; a bare body under such a key with a TTL: "
                     f"{m['redis_floor_bytes_per_key']} B)   target {m['target']}")
    if "replicated" in res:
        r = res["replicated"]
        for k, v in r.items():
            if k != "target":
                lines.append(f"replicated {k}: {v['adds_per_s']} adds/s (p99 {v['add_p99_ms']:.1f} ms, "
                             f"{v['add_errors']} errors), backlog {v['backlog_jobs_per_s']} jobs/s "
                             f"({v['backlog_delivered']})")
                if "add_cpu_us_per_add" in v:
                    lines.append("  CPU per add: " + ", ".join(f"{n} {u} us" for n, u in v["add_cpu_us_per_add"].items())
                                 + f" (machine idle {v['add_machine_idle_pct']}%); per delivered job: "
                                 + ", ".join(f"{n} {u} us" for n, u in v["backlog_cpu_us_per_job"].items()))
        lines.append(f"  target {r['target']}")
    if "claims" in res:
        r = res["claims"]
        lines.append(f"claims        adds p99 {r['alone']['p99_ms']:.1f} ms alone ({r['alone']['adds_per_s']}/s), "
                     f"{r['alone_after']['p99_ms']:.1f} ms alone after ({r['alone_after']['adds_per_s']}/s)   "
                     f"target {r['target']}")
        for k in ("every_100ms", "back_to_back"):
            v = r[k]
            lines.append(f"  beside /claims {k.replace('_', ' ')}: adds p99 {v['p99_ms']:.1f} ms "
                         f"({v['adds_per_s']}/s); {v['views']} views of {r['groups']} groups, {v['views_ok']} ok, "
                         f"p50 {v['view_p50_ms']} ms, {v['view_bytes']} B")
    if "cluster" in res:
        r = res["cluster"]
        for k, _ in CLUSTER_MODES:
            v = r[k]
            lines.append(f"{k:>16}: {v['adds_per_s']} adds/s (p99 {v['add_p99_ms']:.1f} ms, "
                         f"{v['add_errors']} errors), backlog {v['backlog_jobs_per_s']} jobs/s "
                         f"({v['backlog_delivered']})"
                         + "".join(f", {o.replace('_', ' ')}: {p}" for o, p in v.items() if o.startswith("of_")))
            lines.append(f"    Redis round trips: adds {v['add_redis']}, backlog {v['backlog_redis']}")
            lines.append("    CPU per add: " + ", ".join(f"{n} {u} us" for n, u in v["add_cpu_us_per_add"].items())
                         + "; per delivered job: "
                         + ", ".join(f"{n} {u} us" for n, u in v["backlog_cpu_us_per_job"].items())
                         + f" (machine idle {v['backlog_machine_idle_pct']}%)")
            if "records_per_master" in v:
                lines.append(f"    records per master {v['records_per_master']}")
        lines.append(f"  target {r['target']}")
    for k in ("add", "batch", "reschedule", "backlog", "precision", "memory"):
        if k in res and "cpu_s" in res[k]:
            c = res[k]
            lines.append(f"  {k + ' cpu':14} " + ", ".join(f"{n} {v} s" for n, v in c["cpu_s"].items())
                         + f"; machine idle {c['machine_idle_pct']}%, stolen {c['machine_stolen_pct']}%")
    return "\n".join(lines)


def profile_lines(p, cores):
    if "skipped" in p:
        return [f"profile    skipped: {p['skipped']}"]
    lines = [f"profile    {p['seconds']} s of adds at {p['adds_per_s']}/s under `perf record -a`: "
             "CPU per add of each process, and where it ran (us)"]
    total = 0
    order = ["delayqd", "kafka", "redis", "wrk", "other"]
    for proc, parts in sorted(p["cpu_us_per_add"].items(), key=lambda x: order.index(x[0])):
        sub = sum(parts.values())
        total += sub
        big = [f"{w} {v}" for w, v in parts.items() if v >= 1]
        rest = sub - sum(v for v in parts.values() if v >= 1)
        parts = big + ([f"other {rest:.1f}"] if big and rest >= 0.05 else [])
        lines.append(f"  {proc:8} {sub:6.1f}" + (": " + ", ".join(parts) if parts else ""))
    k = p["kernel_us_per_add"]
    lines.append(f"  {total:.0f} us per add in all, {k:.0f} of them in the kernel (TCP over loopback, epoll, "
                 f"wake-ups); {cores} cores add at most {cores * 1e6 / max(total, 1):,.0f}/s at this cost; "
                 f"idle {p['idle_pct']}% of the cores, stolen {p['stolen_pct']}%")
    if "redis-server" in p["cpu_us_per_add"].get("other", {}):
        lines.append("  (other: redis-server is a child of Redis's, which rewrites its AOF)")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes, to try the script")
    ap.add_argument("--json", default=os.path.join(ROOT, "run", "bench.json"))
    ap.add_argument("--phases", default="add,fairness,batch,reschedule,profile,backlog,precision,first,"
                                        "memory,claims,pull,callbacks,isolation,burst,storm,schedules,replicated,cluster")
    ap.add_argument("--warmup", type=int, default=20, help="seconds of unmeasured adds first")
    a = ap.parse_args()
    phases = a.phases.split(",")
    q = a.quick
    res = {"machine": machine(), "command": "make bench" + (" (quick)" if q else "")}
    print("machine:", json.dumps(res["machine"]), flush=True)
    stack = harness.Stack()
    try:
        stack.start()
        def delayqd():
            return Delayqd(stack, name="bench", levels=["1s", "5s", "10s", "30s", "1m", "5m", "10m", "30m", "1h",
                                                        "2h", "6h", "12h", "1d"], partitions=8,
                           extra={"max_delay_s": 86400, "log_level": "warn", "prefix": "dq:", "max_body_bytes": 1048576,
                                  "max_connections_per_ip": 256,   # the default, which fairness measures
                                  "http_threads": int(os.environ.get("BENCH_HTTP_THREADS", "2")),
                                  "http_workers": int(os.environ.get("BENCH_HTTP_WORKERS", "4"))}).start()
        d = delayqd()
        time.sleep(3)
        idle = rss_mib(d.proc.pid)
        rate = 5000
        if a.warmup:   # unmeasured adds, so that the broker's JIT has compiled its hot paths
            wrk_adds(d, "bench_warmup", now_ms() + FAR_MS, a.warmup)
        if "add" in phases:
            res["add"] = measured(d, stack, phase_add, 5 if q else 20)
            res["add"]["cpu_us_per_add"] = cpu_per_add(res["add"])
            # how long the later phases give wrk for their adds; a stalled add phase (see the
            # load generators' CPU) must not stretch them to many minutes of waiting
            rate = max(res["add"]["adds_per_s"], rate)
            print(table({"add": res["add"]}), flush=True)
        if "fairness" in phases:
            res["fairness"] = phase_fairness(d, stack, 5 if q else 10)
            print(table({"fairness": res["fairness"]}), flush=True)
        if "batch" in phases:
            res["batch"] = measured(d, stack, phase_batch, 5 if q else 15)
            print(table({"batch": res["batch"]}), flush=True)
        if "reschedule" in phases:
            res["reschedule"] = measured(d, stack, phase_reschedule, 5 if q else 15, 2000 if q else 20000)
            print(table({"reschedule": res["reschedule"]}), flush=True)
        if "profile" in phases:
            res["profile"] = phase_profile(d, stack, 3 if q else 10)
            print(table({"profile": res["profile"]}), flush=True)
        if "backlog" in phases:
            res["backlog"] = measured(d, stack, phase_backlog, rate, 10000 if q else 200000)
            print(table({"backlog": res["backlog"]}), flush=True)
        if "precision" in phases:
            res["precision"] = measured(d, stack, phase_precision, 200 if q else 2000, 10 if q else 60)
            print(table({"precision": res["precision"]}), flush=True)
        if "first" in phases:
            res["first"] = phase_first(d, stack, 20 if q else 100)
            print(table({"first": res["first"]}), flush=True)
        if "memory" in phases:
            # What the earlier phases held (up to delay.max_held messages at once) stays with the
            # allocator; the pending jobs are measured on a fresh process, that figure beside.
            after = round(rss_mib(d.proc.pid), 1)
            d.stop()
            # Redis's bytes per job on an empty Redis, as its floor beside them is measured: with
            # the earlier phases' jobs there, its key tables double at another count (+16-50 B/job)
            stack.redis("FLUSHALL")
            d = delayqd()
            time.sleep(3)
            res["memory"] = measured(d, stack, phase_memory, idle, rate, 20000 if q else 1000000)
            res["memory"]["rss_after_earlier_phases_mib"] = after
            print(table({"memory": res["memory"]}), flush=True)
        if "claims" in phases:
            res["claims"] = phase_claims(stack, 5 if q else 15)
            print(table({"claims": res["claims"]}), flush=True)
        if "pull" in phases:
            res["pull"] = phase_pull(stack, 5 if q else 15)
            print(json.dumps({"pull": res["pull"]}, indent=1), flush=True)
        if "callbacks" in phases:
            res["callbacks"] = phase_callbacks(stack, 1000 if q else 5000)
            print(json.dumps({"callbacks": res["callbacks"]}, indent=1), flush=True)
        if "isolation" in phases:
            res["isolation"] = phase_isolation(stack, 2000 if q else 10000)
            print(json.dumps({"isolation": res["isolation"]}, indent=1), flush=True)
        if "burst" in phases:
            res["burst"] = phase_burst(stack, 1000 if q else 5000)
            print(json.dumps({"burst": res["burst"]}, indent=1), flush=True)
        if "storm" in phases:
            res["storm"] = phase_storm(stack, 1000 if q else 5000)
            print(json.dumps({"storm": res["storm"]}, indent=1), flush=True)
        if "schedules" in phases:
            res["schedules"] = phase_schedules(stack, 1000 if q else 10000, 15 if q else 60)
            print(json.dumps({"schedules": res["schedules"]}, indent=1), flush=True)
        if "replicated" in phases:
            d.stop()
            res["replicated"] = phase_replicated(stack, 5 if q else 15, 10000 if q else 100000)
            print(table({"replicated": res["replicated"]}), flush=True)
        if "cluster" in phases:
            d.stop()
            res["cluster"] = phase_cluster(stack, 5 if q else 15, 10000 if q else 300000)
            print(table({"cluster": res["cluster"]}), flush=True)
    finally:
        harness.stop_all()
        stack.stop()
    print("\n" + table(res))
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(res, f, indent=2)
    print(f"figures written to {a.json}")


if __name__ == "__main__":
    main()
