"""Redis with replicas and three Sentinels: delayqd follows the master through a planned
failover, a kill -9 of the master and a switch made by hand behind its back, without restart,
and with redis.wait_replicas = 1 loses no job it acknowledged, resurrects no job it removed, and
refuses adds the replicas did not confirm."""

import http.client
import json
import os
import random
import signal
import threading
import time

from harness import ROOT, Delayqd, Reader, lateness, run, wait_until
from sentinel import SentinelStack

ADD = "/delay-queue/api/jobs/add"
REMOVE = "/delay-queue/api/jobs/remove"


def ha_delayqd(stack, ss, **extra):
    return Delayqd(stack, partitions=2, extra=dict({
        "sentinels": ss.sentinel_ports, "master_name": ss.master_name, "wait_replicas": 1,
        "wait_timeout_ms": 1000, "redis_timeout_ms": 1000}, **extra))


class Load:
    """Adds jobs (delays 2-6 s) at about rate/s on conns keep-alive connections until stopped,
    removing every seventh job it added when remove is set. Remembers what delayqd acknowledged
    and how long each add took to be answered."""

    def __init__(self, d, topic, rate=80, conns=1, remove=True):
        self.d, self.topic, self.rate, self.remove = d, topic, rate / conns, remove
        self.added, self.removed, self.refused = [], [], []   # ids; (time sent, status) for refused
        self.unknown = []   # removes answered 503 (outcome not known): either outcome is right
        self.took = []      # (time sent, seconds to the answer) of every add
        self.stopped = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(k,), daemon=True)
                        for k in range(conns)]

    def _call(self, conn, path, body):
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read())

    def _run(self, k):
        conn = http.client.HTTPConnection("127.0.0.1", self.d.port, timeout=30)
        n = 0
        while not self.stopped.is_set():
            n += 1
            job_id = f"ha-{n}" if k == 0 else f"ha{k}-{n}"
            sent = time.time()
            try:
                st, doc = self._call(conn, ADD, {"id": job_id, "topic": self.topic,
                                                  "delay_ms": random.randint(2000, 6000),
                                                  "body": job_id})
                self.took.append((sent, time.time() - sent))
                if st == 200 and doc["code"] == 0:
                    self.added.append(job_id)
                    if self.remove and n % 7 == 0:
                        st, doc = self._call(conn, REMOVE, {"job_id": job_id})
                        if st == 200 and doc["message"] == "ok":
                            self.removed.append(job_id)
                        elif st != 409:
                            self.unknown.append(job_id)
                else:
                    self.refused.append((sent, st))
            except (OSError, http.client.HTTPException, ValueError) as e:
                if self.added and self.added[-1] == job_id:   # the remove broke off
                    self.unknown.append(job_id)
                else:
                    self.refused.append((sent, str(e)))
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.d.port, timeout=30)
            time.sleep(1 / self.rate)
        conn.close()

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        self.stopped.set()
        for t in self.threads:
            t.join(60)


def check_nothing_lost_or_resurrected(load, reader):
    removed = set(load.removed)
    want = [j for j in load.added if j not in removed and j not in load.unknown]
    try:
        by_id = reader.wait_ids(want, 90)
    except AssertionError:
        missing = sorted(set(want) - set(reader.by_id()))
        raise AssertionError(f"{len(missing)} acknowledged jobs not delivered: {missing[:20]}")
    back = sorted(removed & set(by_id))
    assert not back, f"removed and delivered anyway: {back[:10]}"
    for m in (m for ms in by_id.values() for m in ms):
        sent_late, _ = lateness(m)
        assert sent_late >= 0, ("early", m)
    return by_id


def run_through(stack, fault, replicas, back_within_s):
    """Runs the load through fault(ss) on a stack with that many replicas; no add sent more
    than back_within_s after the fault began may be refused."""
    ss = SentinelStack(stack.tmp, replicas=replicas)
    ss.start()
    try:
        d = ha_delayqd(stack, ss).start().wait_groups_owned()
        reader = Reader(stack, f"{d.name}_ha")
        load = Load(d, reader.topic).start()
        time.sleep(4)
        t_fault = time.time()
        fault(ss)
        time.sleep(8)
        load.stop()
        late = [t - t_fault for t, _ in load.refused if t > t_fault]
        print("    refusals:", [(round(t - t_fault, 1), st) for t, st in load.refused][:12])
        print(f"    {len(load.added)} added, {len(load.removed)} removed, {len(load.refused)} refused; "
              f"the last sent {max(late):.1f}s after the fault began" if late else
              f"    {len(load.added)} added, {len(load.removed)} removed, none refused")
        assert len(load.added) > 150, len(load.added)   # the load ran (slower under sanitizers)
        # adds went on with the same process, and were back in time
        assert not [t for t in late if t > back_within_s], (back_within_s, late)
        check_nothing_lost_or_resurrected(load, reader)
        assert d.alive()
        reader.close()
    finally:
        ss.stop()


def test_planned_failover_loses_nothing(stack):
    # With two replicas one stays attached through the switch, so WAIT 1 is met on the new
    # master at once (with one, only when Sentinel demotes the old master, about 10 s later).
    run_through(stack, lambda ss: ss.failover(), replicas=2, back_within_s=5)


def longest_gap_s(load, since, until):
    """The longest stretch between adds answered with success (answer times), over the adds
    sent between since and until."""
    answered = sorted(sent + took for (sent, took) in load.took if since <= sent <= until)
    return max((b - a for a, b in zip(answered, answered[1:])), default=0.0)


def assert_not_noticed(load, reader, t_fault, t_over):
    """A planned failover between t_fault and t_over under load (150 adds/s, jobs due through
    it) was not noticed: no add refused, none waited more than 2 s, the longest stretch
    without an answered add at most 2 s; no job lost, early, delivered twice, or sent (or seen
    by the consumer) more than 2.5 s late."""
    around = [took for sent, took in load.took if t_fault - 1 <= sent <= t_over + 1]
    gap = longest_gap_s(load, t_fault - 2, t_over + 2)
    print(f"    {len(load.added)} added, {len(load.refused)} refused; failover took "
          f"{t_over - t_fault:.1f}s; slowest answer around it {max(around):.2f}s, "
          f"longest gap between answered adds {gap:.2f}s")
    assert len(load.added) > 600, len(load.added)   # the load ran
    assert not load.refused, load.refused[:10]
    by_id = check_nothing_lost_or_resurrected(load, reader)
    twice = [j for j, ms in by_id.items() if len(ms) > 1]
    assert not twice, twice[:10]
    sent = sorted(lateness(ms[0])[0] for ms in by_id.values())
    seen = sorted(lateness(ms[0])[1] for ms in by_id.values())
    print(f"    delivery lateness (sent - due) ms: p50 {sent[len(sent) // 2]}, "
          f"p99 {sent[len(sent) * 99 // 100]}, max {sent[-1]}; seen by the consumer: "
          f"p99 {seen[len(seen) * 99 // 100]}, max {seen[-1]}")
    assert gap <= 2.0, f"no add was answered for {gap:.2f}s"
    assert max(around) <= 2.0, f"an add waited {max(around):.2f}s"
    assert sent[-1] <= 2500, f"a job was sent {sent[-1]} ms late"
    assert seen[-1] <= 2500, f"a job was seen {seen[-1]} ms late"


def test_planned_failover_under_150_adds_a_second_is_not_noticed(stack):
    """SENTINEL FAILOVER (master and two replicas, wait_replicas = 1) under 150 adds/s from four
    connections, jobs due all through it: Redis calls wait from the failover's beginning to the
    promotion of a replica (about a second), then go to that replica at once, before the
    Sentinels switch; what the forwarder could not claim or mark meanwhile goes again at once.
    No add is refused, none waits more than 2 s, and no job is sent more than 2.5 s late (nor
    seen later by the consumer); nothing is lost, early or delivered twice. The log tells the
    failover's timeline and /metrics counts the move."""
    wait_ms = 5000
    ss = SentinelStack(stack.tmp, replicas=2)
    ss.start()
    try:
        d = ha_delayqd(stack, ss, failover_wait_ms=wait_ms).start().wait_groups_owned()
        reader = Reader(stack, f"{d.name}_planned")
        load = Load(d, reader.topic, rate=150, conns=4, remove=False).start()
        time.sleep(4)
        t_fault = time.time()
        ss.failover()
        t_over = time.time()
        time.sleep(6)
        load.stop()
        assert_not_noticed(load, reader, t_fault, t_over)
        log = d.log_text()
        for line in log.splitlines():
            if "Sentinel" in line or "moved" in line:
                print("    " + line[:200])
        assert "promoted the replica" in log and "after the failover began" in log, log[-3000:]
        assert d.metric("delayq_redis_master_moves_total") >= 1
        assert d.alive()
        reader.close()
    finally:
        ss.stop()


def test_pull_jobs_live_through_a_planned_failover(stack):
    """A job reserved on the old master is still reserved on the new one: its receipt finishes
    it; the others are popped and finished as before."""
    from test_pull import Client, check_pull_round, op, pull_topic
    ss = SentinelStack(stack.tmp, replicas=2)
    ss.start()
    try:
        d = ha_delayqd(stack, ss).start().wait_groups_owned()
        topic = pull_topic()
        d.add_ok(topic=topic, delay_ms=200, deliver="pull", ttr=120)
        held = Client(d).pop(topic, wait_ms=10000)
        assert len(held) == 1, held
        ss.failover()
        wait_until(lambda: op(d, "finish", held[0])[0] == 200, 30, "the finish after the failover")
        check_pull_round(d, n=100)
    finally:
        ss.stop()


def test_master_killed_loses_nothing(stack):
    def kill_and_rejoin(ss):
        old = ss.kill_master()
        ss.wait_promoted(old)
        ss.restart(old)   # back, as the new master's replica
    run_through(stack, kill_and_rejoin, replicas=2, back_within_s=15)


def test_master_turned_replica_behind_its_back_is_left_for_the_new_one(stack):
    """An operator moves the master by hand (REPLICAOF on both nodes, the Sentinels told
    afterwards): Redis keeps delayqd's connections to the old master, which now answers
    READONLY, inside the add script's per-record answers too. Without WAIT to notice, delayqd
    must take those answers as "not the master", find the new one and go on."""
    ss = SentinelStack(stack.tmp)
    ss.start()
    try:
        d = ha_delayqd(stack, ss, wait_replicas=0).start().wait_groups_owned()
        reader = Reader(stack, f"{d.name}_readonly")
        assert d.add_ok(id="before", topic=reader.topic, delay=4, body="before")
        wait_until(lambda: ss.redis(ss.data_ports[1], "EXISTS", f"{d.prefix}job:before") == "1", 10,
                   "the replica to have the job")
        old, new = ss.move_master_by_hand(pause_s=1)
        assert ss.role(old) == "slave"
        answers = []

        def added():
            st, doc = d.add(id=f"after-{len(answers)}", topic=reader.topic, delay=1,
                            body=f"after-{len(answers)}")
            answers.append((st, doc.get("message")))
            return st == 200 and doc["code"] == 0
        wait_until(added, 15, "adds accepted again", step=0.2)
        print(f"    {len(answers)} adds until one was accepted: {answers[:3]}")
        done = f"after-{len(answers) - 1}"
        assert ss.redis(new, "EXISTS", f"{d.prefix}job:{done}") == "1"
        payloads = sorted(m["payload"] for m in reader.wait_count(2, 30))
        assert payloads == sorted(["before", done]), payloads
        assert d.alive()
        reader.close()
    finally:
        ss.stop()


def test_adds_the_replica_does_not_confirm_are_refused_and_never_delivered(stack):
    ss = SentinelStack(stack.tmp)
    ss.start()
    try:
        d = ha_delayqd(stack, ss).start().wait_groups_owned()
        reader = Reader(stack, f"{d.name}_unconfirmed")
        assert d.add_ok(topic=reader.topic, delay=1, body="before")
        replica = next(p for p in ss.data_ports if p != ss.master_port())
        pid = ss.pid(replica)
        os.kill(pid, signal.SIGSTOP)
        try:
            t0 = time.time()
            st, doc = d.add(id="unconfirmed", topic=reader.topic, delay=1, body="never")
            took = time.time() - t0
        finally:
            os.kill(pid, signal.SIGCONT)
        assert st == 503 and "1 replicas confirmed" in doc["message"], (st, doc)
        print(f"    refused after {took:.2f}s")
        wait_until(lambda: ss.is_replica_of(replica, ss.master_port()), 30, "the replica back")
        wait_until(lambda: d.add(id="after", topic=reader.topic, delay=1, body="after")[0] == 200,
                   15, "adds accepted again")
        time.sleep(3)
        assert d.get("unconfirmed") is None
        payloads = sorted(m["payload"] for m in reader.wait_count(2, 20))
        assert payloads == ["after", "before"], payloads
        # The operators' script finds the master through the same Sentinels.
        p = run(["bash", os.path.join(ROOT, "scripts", "claims.sh"), "-c", d.conf_path, "list"])
        assert p.stdout.count(" alive") == 1, p.stdout
        reader.close()
    finally:
        ss.stop()


def test_renewals_the_replica_does_not_confirm_do_not_extend_the_lease(stack):
    """With wait_replicas = 1, a lease renewal counts only once the replica has it, as an
    acquisition does: with the only replica frozen, renewals fail (a failover could take them
    back) and the owner stops forwarding at the lease's deadline instead of going on."""
    ss = SentinelStack(stack.tmp)
    ss.start()
    try:
        d = ha_delayqd(stack, ss, wait_timeout_ms=300).start().wait_groups_owned()
        replica = next(p for p in ss.data_ports if p != ss.master_port())
        pid = ss.pid(replica)
        before = d.metric("delayq_lease_renew_failures_total") or 0
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_until(lambda: (d.metric("delayq_lease_renew_failures_total") or 0) > before, 15,
                       "a renewal the replica did not confirm to fail")
        finally:
            os.kill(pid, signal.SIGCONT)
        line = next(l for l in d.log_text().splitlines() if "renew group=" in l)
        assert "replicas confirmed" in line, line
        wait_until(lambda: ss.is_replica_of(replica, ss.master_port()), 30, "the replica back")
        d.wait_groups_owned()   # the group is taken again once the replica confirms
        assert d.alive()
    finally:
        ss.stop()
