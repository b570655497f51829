"""Redis Cluster: three masters with a replica each. Job records spread over the masters by id,
every job is delivered once and on time, remove still races delivery safely, and delayqd follows
a live resharding and a kill -9 of a master without restart, losing nothing it acknowledged."""

import binascii
import os
import random
import signal
import threading
import time

import redisnodes
from cluster import ClusterStack
from harness import ROOT, Delayqd, Reader, lateness, run, wait_until
from test_faults import assert_never_early, race_removes_against_delivery
from test_pull import check_pull_round
from test_redis_ha import Load, assert_not_noticed, check_nothing_lost_or_resurrected


BATCH = "/delay-queue/api/jobs/add_batch"


def slot_of(key):
    """The hash slot of key (no hash tag but "{ctl}"): CRC16-CCITT (XModem) modulo 16384."""
    tag = key[key.index("{") + 1:key.index("}")] if "{" in key else key
    return binascii.crc_hqx(tag.encode(), 0) % 16384


def on_cluster(stack, cs, **extra):
    """A delayqd that knows two of the cluster's nodes (it finds the rest)."""
    return Delayqd(stack, partitions=extra.pop("partitions", 2),
                   extra=dict({"cluster": cs.nodes[:2], "redis_timeout_ms": 1000}, **extra))


def started(stack, masters=3, replicas=1, name="redis-cluster"):
    """A cluster in its own dir per name: a test that changes the cluster's shape (a node
    added, slots unassigned) uses a name of its own, so that no later test restarts it."""
    cs = ClusterStack(stack.tmp, masters=masters, replicas=replicas, name=name)
    cs.start()
    return cs


def test_jobs_spread_over_the_masters_and_arrive_on_time(stack):
    cs = started(stack)
    try:
        d = on_cluster(stack, cs).start().wait_groups_owned()
        reader = Reader(stack, f"{d.name}_spread")
        ids = d.bulk_add([{"topic": reader.topic, "delay_ms": random.randint(500, 6000), "body": str(i)}
                          for i in range(3000)])
        per = cs.keys_per_master(f"{d.prefix}job:*")
        print(f"    records per master: {per}")
        assert len(per) == 3 and sum(per.values()) == 3000, per
        for port, n in per.items():
            assert 850 <= n <= 1150, (port, per)   # within 15% of an even share
        by_id = reader.wait_ids(ids, 60)
        twice = [j for j, ms in by_id.items() if len(ms) > 1]
        assert not twice, twice[:5]
        assert_never_early(reader.all())
        reader.close()
    finally:
        cs.stop()


def test_pull_topics_on_a_cluster(stack):
    cs = started(stack)
    try:
        d = on_cluster(stack, cs).start().wait_groups_owned()
        topics = check_pull_round(d)
        slots = {slot_of(f"{d.prefix}{{pull:{t}}}:ready") for t in topics}
        assert len(slots) == len(topics), slots
    finally:
        cs.stop()


def test_schedules_on_a_cluster(stack):
    cs = started(stack)
    try:
        d = on_cluster(stack, cs).start().wait_groups_owned()
        reader = Reader(stack, f"{d.name}_sched")
        st, doc = d.http("PUT", "/delay-queue/api/schedules/tick", {"every_ms": 1000, "topic": reader.topic})
        assert st == 200, doc
        wait_until(lambda: len(reader.all()) >= 3, 20, "3 occurrences")
        st, doc = d.http("POST", "/delay-queue/api/schedules/tick/pause")
        assert st == 200 and doc["data"]["paused"], doc
        ids = [m["headers"]["dq-id"] for m in reader.all()]
        assert len(ids) == len(set(ids)) and all(i.startswith("tick@") for i in ids), ids
        st, doc = d.http("GET", "/delay-queue/api/schedules")
        assert [s["id"] for s in doc["data"]["schedules"]] == ["tick"], doc
        # 3,000 schedules spread over the masters (16 shards), listed in one order, each firing
        # on its grid, never early
        names = [f"s{i:04d}" for i in range(3000)]
        res = d.bulk([("PUT", f"/delay-queue/api/schedules/{name}",
                       {"every_ms": 5000, "topic": reader.topic, "body": name}) for name in names])
        assert all(st == 200 for st, _ in res), [r for r in res if r[0] != 200][:3]
        per = cs.keys_per_master(f"{d.prefix}{{sched:*}}:h:*")
        print(f"    schedules per master: {per}")
        assert len(per) == 3 and sum(per.values()) == 3001 and min(per.values()) >= 300, per
        listed, after = [], ""
        while True:
            st, doc = d.http("GET", f"/delay-queue/api/schedules?limit=500&after={after}")
            assert st == 200, doc
            listed += [x["id"] for x in doc["data"]["schedules"]]
            if not doc["data"]["after"]:
                break
            after = doc["data"]["after"]
        assert listed == sorted(names + ["tick"]), listed[:5]
        wait_until(lambda: {m["payload"] for m in reader.all()} >= set(names), 30,
                   "an occurrence of each schedule")
        late = []
        for m in reader.all():
            if m["payload"] in names:
                fire = int(m["headers"]["dq-id"].rsplit("@", 1)[1])
                late.append(int(m["headers"]["dq-sent-ms"]) - fire)
        late.sort()
        assert late[0] >= 0, late[:5]   # never early
        print(f"    {len(late)} occurrences, sent minus fire time p50 {late[len(late) // 2]}, "
              f"p99 {late[len(late) * 99 // 100]}, max {late[-1]} ms")
        reader.close()
    finally:
        cs.stop()


def test_remove_racing_delivery_has_one_winner_on_a_cluster(stack):
    cs = started(stack)
    try:
        d = on_cluster(stack, cs).start().wait_groups_owned()
        reader = Reader(stack, f"{d.name}_race")
        race_removes_against_delivery(d, reader, 600)
        reader.close()
    finally:
        cs.stop()


def run_load_through(stack, cs, fault, back_within_s, rate=80, conns=1, refuse_none=False, d=None,
                     **extra):
    d = (d or on_cluster(stack, cs, **extra)).start().wait_groups_owned()
    reader = Reader(stack, f"{d.name}_load")
    load = Load(d, reader.topic, rate=rate, conns=conns).start()
    time.sleep(3)
    t_fault = time.time()
    fault()
    time.sleep(6)
    load.stop()
    late = [t - t_fault for t, _ in load.refused if t > t_fault]
    print(f"    {len(load.added)} added, {len(load.removed)} removed, {len(load.refused)} refused"
          + (f"; the last sent {max(late):.1f}s after the fault began" if late else ""))
    assert len(load.added) > 150, len(load.added)   # the load ran (slower under sanitizers)
    assert not [t for t in late if t > back_within_s], (back_within_s, late)
    assert not (refuse_none and load.refused), load.refused[:10]
    by_id = check_nothing_lost_or_resurrected(load, reader)
    twice = [j for j, ms in by_id.items() if len(ms) > 1]
    assert not twice, twice[:10]
    assert d.alive()
    reader.close()
    return d


def test_live_resharding_loses_nothing(stack):
    cs = started(stack)
    try:
        def reshard():
            a, b = cs.masters()[:2]
            t0 = time.time()
            cs.reshard(a, b, 2000)
            print(f"    2000 slots moved in {time.time() - t0:.1f}s")
        d = run_load_through(stack, cs, reshard, back_within_s=10 ** 6)
        # the records followed the slots: the map delayqd reads is the cluster's
        per = cs.keys_per_master(f"{d.prefix}job:*")
        print(f"    records per master after: {per}")
    finally:
        cs.stop()


class Batches:
    """add_batch of 100 jobs (delays 2-4 s) every 0.2 s until stopped: pipelines of many calls
    over many slots, where one round meets MOVED and ASK at once. Remembers every job's answer."""

    def __init__(self, d, topic):
        self.d, self.topic, self.answers = d, topic, {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        n = 0
        while not self.stopped.is_set():
            jobs = [{"id": f"b{n}-{i}", "topic": self.topic, "delay_ms": random.randint(2000, 4000),
                     "body": f"b{n}-{i}"} for i in range(100)]
            st, doc = self.d.http("POST", BATCH, {"jobs": jobs})
            for job, a in zip(jobs, (doc.get("data") or {}).get("jobs") or [{}] * len(jobs)):
                self.answers[job["id"]] = (st, a.get("status"), a.get("message"))
            n += 1
            time.sleep(0.2)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stopped.set()
        self.thread.join(60)


def test_growing_the_cluster_by_an_empty_master_refuses_no_add(stack):
    """The standard way to grow a cluster, under 150 adds/s, batches of 100 and their
    deliveries: a fourth, empty master joins and a quarter of the slots are resharded to it.
    Calls follow the slots (MOVED, ASK to a node that served nothing before, TRYAGAIN): no add
    is refused, nothing is lost, early or delivered twice, and the new master holds records
    afterwards."""
    cs = started(stack, name="redis-cluster-grown")
    batches = None
    try:
        def grow():
            t0 = time.time()
            port = cs.add_empty_master()
            cs.reshard_all_to(port, 4096)
            print(f"    master {port} added and 4096 slots moved to it in {time.time() - t0:.1f}s")
            grow.port = port
        d = on_cluster(stack, cs)
        batch_reader = Reader(stack, f"{d.name}_batches")

        def grow_under_batches():
            nonlocal batches
            batches = Batches(d, batch_reader.topic).start()
            grow()
            batches.stop()
        d = run_load_through(stack, cs, grow_under_batches, back_within_s=0, rate=150, conns=4,
                             refuse_none=True, d=d)
        refused = {j: a for j, a in batches.answers.items() if a[1] != 200}
        print(f"    batches: {len(batches.answers)} jobs, {len(refused)} refused")
        assert len(batches.answers) >= 1000 and not refused, list(refused.items())[:5]
        by_id = batch_reader.wait_ids(list(batches.answers), 60)
        assert all(len(ms) == 1 for ms in by_id.values())
        assert_never_early(batch_reader.all())
        per = cs.keys_per_master(f"{d.prefix}job:*")
        print(f"    records per master after: {per}")
        assert per.get(grow.port, 0) > 0, per
        batch_reader.close()
    finally:
        if batches:
            batches.stop()
        cs.stop()


def test_slots_served_by_no_node_fail_only_their_calls_and_the_map_is_read_seldom(stack):
    """cluster-require-full-coverage no and slots taken from their master (CLUSTER DELSLOTS):
    the map with the hole is kept, adds of ids in those slots are refused at once and all
    others added and delivered, and the map is read a few times a second at most, however
    many calls fail."""
    cs = started(stack, replicas=0, name="redis-cluster-hole")
    try:
        for p in cs.nodes:
            cs.redis(p, "CONFIG", "SET", "cluster-require-full-coverage", "no")
        d = on_cluster(stack, cs).start().wait_groups_owned()
        reader = Reader(stack, f"{d.name}_hole")
        ctl = slot_of("{ctl}")
        hole = (0, 2999) if ctl > 2999 else (13000, 15999)
        for p in cs.masters():
            cs.redis(p, "CLUSTER", "DELSLOTSRANGE", *hole, check=False)
        wait_until(lambda: not any(a <= hole[0] <= b for p in cs.nodes for n in cs.cluster_nodes(p)
                                   if "master" in n["flags"] for a, b in n["slots"]),
                   10, "every node to serve the hole to nobody")
        in_hole = lambda job_id: hole[0] <= slot_of(f"{d.prefix}job:{job_id}") <= hole[1]
        live = cs.masters()
        calls = lambda: sum(int(redisnodes.info_fields(p, "INFO", "commandstats")
                                .get("cmdstat_cluster|slots", "calls=0").split(",")[0][6:]) for p in live)
        before, t0 = calls(), time.time()
        answers = {}
        for i in range(400):
            answers[f"h-{i}"] = d.add(id=f"h-{i}", topic=reader.topic, delay_ms=1000, body=f"h-{i}")[0]
        took = max(time.time() - t0, 1.0)
        asked = calls() - before
        refused = [j for j, st in answers.items() if st != 200]
        accepted = [j for j, st in answers.items() if st == 200]
        print(f"    {len(accepted)} added, {len(refused)} refused in {took:.1f}s; CLUSTER SLOTS "
              f"asked {asked} times")
        assert refused and all(in_hole(j) for j in refused), refused[:10]
        assert accepted and not any(in_hole(j) for j in accepted), accepted[:10]
        assert asked <= 5 * took + 2, (asked, took)
        by_id = reader.wait_ids(accepted, 30)
        assert all(len(ms) == 1 for ms in by_id.values())
        assert d.alive()
        reader.close()
    finally:
        cs.stop()


def test_a_short_wait_on_one_master_refuses_only_its_jobs_of_a_batch(stack):
    """wait_replicas = 1 and one master's replica frozen: in a batch, the jobs whose records
    that master holds are answered 503 and leave no record, the others are added and
    delivered."""
    cs = started(stack)
    try:
        d = on_cluster(stack, cs, wait_replicas=1, wait_timeout_ms=500).start().wait_groups_owned()
        reader = Reader(stack, f"{d.name}_short")
        ctl = cs.slot_owner(slot_of("{ctl}"))
        victim = next(p for p in cs.masters() if p != ctl)
        mine = next(n["slots"] for n in cs.cluster_nodes() if n["port"] == victim)
        on_victim = lambda job_id: any(a <= slot_of(f"{d.prefix}job:{job_id}") <= b for a, b in mine)
        replica = next(n["port"] for n in cs.cluster_nodes()
                       if n["master"] == cs.node_id(victim))
        pid = cs.pid(replica)
        jobs = [{"id": f"w-{i}", "topic": reader.topic, "delay_ms": 1500, "body": f"w-{i}"}
                for i in range(60)]
        os.kill(pid, signal.SIGSTOP)
        try:
            st, doc = d.http("POST", BATCH, {"jobs": jobs})
        finally:
            os.kill(pid, signal.SIGCONT)
        assert st == 200, (st, doc)
        answers = {j["id"]: a for j, a in zip(jobs, doc["data"]["jobs"])}
        refused = sorted(j for j, a in answers.items() if a["status"] != 200)
        print(f"    {len(jobs) - len(refused)} added, {len(refused)} refused: "
              f"{answers[refused[0]]['message'] if refused else ''}")
        assert refused == sorted(j for j in answers if on_victim(j)), refused
        assert all(a["status"] == 503 and "replicas confirmed" in a["message"]
                   for j, a in answers.items() if j in refused)
        accepted = [j for j in answers if j not in refused]
        assert accepted
        by_id = reader.wait_ids(accepted, 30)
        assert all(len(ms) == 1 for ms in by_id.values())
        time.sleep(1)
        for j in refused:
            assert d.get(j) is None, j   # no record left behind
        assert not set(reader.by_id()) & set(refused)
        reader.close()
    finally:
        cs.stop()


def test_dead_master_without_replica_holds_only_its_own_jobs(stack):
    """cluster-require-full-coverage no, masters without replicas, one killed: adds whose ids
    fall in its slots are refused and its due jobs held, everything else is added and delivered
    as before; once it is back, what it held is delivered. Meanwhile the slot map is read a few
    times a second at most, however many calls fail."""
    cs = started(stack, replicas=0, name="redis-cluster-dead")
    try:
        for p in cs.nodes:
            cs.redis(p, "CONFIG", "SET", "cluster-require-full-coverage", "no")
        d = on_cluster(stack, cs, redis_timeout_ms=500).start().wait_groups_owned()
        reader = Reader(stack, f"{d.name}_dead")
        ctl = cs.slot_owner(slot_of("{ctl}"))   # the leases' master: the one not to kill
        victim = next(p for p in cs.masters() if p != ctl)
        mine = next(n["slots"] for n in cs.cluster_nodes() if n["port"] == victim)
        on_victim = lambda job_id: any(a <= slot_of(f"{d.prefix}job:{job_id}") <= b for a, b in mine)
        held = [f"held-{i}" for i in range(40)]
        for job_id in held:
            assert d.add_ok(id=job_id, topic=reader.topic, delay=3, body=job_id)
        victims_held = [j for j in held if on_victim(j)]
        assert victims_held, "no job on the victim"
        pid = cs.pid(victim)
        cs.kill(victim)
        live = [p for p in cs.nodes if p != victim]
        slots_before = sum(int(redisnodes.info_fields(p, "INFO", "commandstats")
                               .get("cmdstat_cluster|slots", "calls=0").split(",")[0][6:]) for p in live)
        t0 = time.time()
        answers = {}
        for i in range(200):
            st, doc = d.add(id=f"during-{i}", topic=reader.topic, delay_ms=1000, body=f"during-{i}")
            answers[f"during-{i}"] = st
        refused = sorted(j for j, st in answers.items() if st != 200)
        assert refused and all(on_victim(j) for j in refused), refused[:10]
        accepted = [j for j, st in answers.items() if st == 200]
        assert all(not on_victim(j) for j in accepted), accepted[:10]
        by_id = reader.wait_ids(accepted + [j for j in held if j not in victims_held], 30)
        late = sorted(lateness(ms[0])[0] for ms in by_id.values())
        print(f"    {len(accepted)} added, {len(refused)} refused while {victim} was down; "
              f"delivery lateness ms p50 {late[len(late) // 2]} max {late[-1]}")
        time.sleep(max(0, 4 - (time.time() - t0)))
        took = time.time() - t0
        slots_after = sum(int(redisnodes.info_fields(p, "INFO", "commandstats")
                              .get("cmdstat_cluster|slots", "calls=0").split(",")[0][6:]) for p in live)
        print(f"    CLUSTER SLOTS asked {slots_after - slots_before} times in {took:.1f}s")
        assert slots_after - slots_before <= 5 * took + 2, (slots_after - slots_before, took)
        assert not set(reader.by_id()) & set(victims_held), "a job of the dead master delivered"
        assert pid is not None
        cs.restart(victim)
        by_id = reader.wait_ids(victims_held, 60)
        assert all(len(ms) == 1 for ms in by_id.values())
        assert_never_early(reader.all())
        assert d.alive()
        reader.close()
    finally:
        cs.stop()


def test_master_killed_loses_nothing_on_a_cluster(stack):
    cs = started(stack)
    try:
        def kill_and_rejoin():
            old = random.choice(cs.masters())
            cs.kill(old)
            new = cs.wait_failover(old)
            print(f"    master {old} killed, {new} promoted")
            cs.restart(old)   # back as a replica: WAIT 1 can be met again on its shard
        run_load_through(stack, cs, kill_and_rejoin, back_within_s=15, wait_replicas=1)
    finally:
        cs.stop()


def test_planned_failover_under_150_adds_a_second_is_not_noticed_on_a_cluster(stack):
    """CLUSTER FAILOVER of a master by its replica under 150 adds/s from four connections, jobs
    due all through it, wait_replicas = 1: the calls the old master pauses, then redirects
    (MOVED), go to the new master at once, and the old master confirms their writes as its
    replica. Held to the Sentinel failover's bounds (assert_not_noticed)."""
    cs = started(stack)
    try:
        d = on_cluster(stack, cs, wait_replicas=1, wait_timeout_ms=1000,
                       failover_wait_ms=5000).start().wait_groups_owned()
        reader = Reader(stack, f"{d.name}_planned")
        load = Load(d, reader.topic, rate=150, conns=4, remove=False).start()
        time.sleep(4)
        t_fault = time.time()
        old = random.choice(cs.masters())
        new = cs.failover(old)
        t_over = time.time()
        print(f"    master {old} handed its slots to its replica {new}")
        time.sleep(6)
        load.stop()
        assert_not_noticed(load, reader, t_fault, t_over)
        assert d.alive()
        reader.close()
    finally:
        cs.stop()


def test_two_instances_share_the_groups_on_a_cluster(stack):
    cs = started(stack)
    try:
        first = on_cluster(stack, cs, partitions=4, groups=[[0, 1], [2, 3]]).start()
        second = Delayqd(stack, cluster=first).start()
        # a group handed back and not yet taken has no owner: both must be owned, one each
        owners = sorted([first.token(), second.token()])
        wait_until(lambda: sorted(first.claims().values(), key=str) == owners, 30,
                   "one group each", step=0.3)
        p = run(["bash", os.path.join(ROOT, "scripts", "claims.sh"), "-c", first.conf_path, "list"])
        assert p.stdout.count(" alive") == 2, p.stdout
        assert first.token() in p.stdout and second.token() in p.stdout, p.stdout
        reader = Reader(stack, f"{first.name}_two")
        ids = first.bulk_add([{"topic": reader.topic, "delay_ms": 500 + i, "body": str(i)}
                              for i in range(200)])
        by_id = reader.wait_ids(ids, 30)
        assert all(len(ms) == 1 for ms in by_id.values())
        reader.close()
    finally:
        cs.stop()
