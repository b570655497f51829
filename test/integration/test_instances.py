"""Several delayqd processes share the work through partition-group leases in Redis: spread,
failover, fencing, joins, the claims script, metrics and readiness."""

import os
import re
import signal
import subprocess
import time
from collections import Counter

from harness import ROOT, Delayqd, Reader, TcpProxy, lateness, now_ms, run, wait_until

TTL_MS = 4000   # the harness's delay.claim_ttl_ms


def cluster(stack, n, groups, partitions, **extra):
    first = Delayqd(stack, partitions=partitions, extra=dict(groups=groups, **extra)).start()
    return [first] + [Delayqd(stack, cluster=first).start() for _ in range(n - 1)]


def settled(d, want):
    """Waits until every group has an owner and the owners' counts are `want` (sorted)."""
    def ok():
        owners = d.claims()
        return None not in owners.values() and sorted(Counter(owners.values()).values()) == want
    wait_until(ok, 30, f"groups spread as {want}", step=0.3)
    return d.claims()


def claims_sh(d, *args):
    return run(["bash", os.path.join(ROOT, "scripts", "claims.sh"), "-c", d.conf_path, *args],
               check=False, timeout=60)


def test_three_instances_four_groups_spread_and_deliver_once(stack):
    ds = cluster(stack, 3, [[0], [1], [2], [3]], 4)
    owners = settled(ds[0], [1, 1, 2])
    tokens = {d.token() for d in ds}
    assert set(owners.values()) == tokens, (owners, tokens)
    reader = Reader(stack, f"{ds[0].name}_spread")
    ids = ds[0].bulk_add([{"topic": reader.topic, "delay_ms": 500 + i * 7, "body": str(i)}
                          for i in range(400)])
    reader.wait_ids(ids, 30)
    time.sleep(1)
    assert all(len(ms) == 1 for ms in reader.by_id().values()), "a job delivered twice"
    assert sum(d.metric("delayq_jobs_delivered_total") for d in ds) == 400
    assert all(d.metric("delayq_groups_owned") >= 1 for d in ds)
    reader.close()


def test_killed_instance_groups_are_taken_over(stack):
    a, b = cluster(stack, 2, [[0], [1]], 2)
    settled(a, [1, 1])
    reader = Reader(stack, f"{a.name}_failover")
    ids = a.bulk_add([{"topic": reader.topic, "delay_ms": 1000 + i * 50, "body": str(i)}
                      for i in range(200)])
    victim = b.token()
    t_kill = time.time()
    b.kill()
    wait_until(lambda: set(a.claims().values()) == {a.token()}, TTL_MS / 1000 * 2 + 5,
               "the survivor to take every group")
    took = time.time() - t_kill
    assert took <= (TTL_MS + TTL_MS / 3) / 1000 + 1.5, f"takeover after {took:.1f}s"
    reader.wait_ids(ids, 40)
    assert all(lateness(m)[0] >= 0 for m in reader.all())
    assert victim not in a.claims().values()
    reader.close()


def test_stopped_owner_is_fenced_and_forwards_nothing_after(stack):
    a = Delayqd(stack, partitions=2, extra=dict(groups=[[0, 1]])).start()
    settled(a, [1])
    b = Delayqd(stack, cluster=a).start()     # standby: no group is free
    reader = Reader(stack, f"{a.name}_fence")
    t0 = now_ms()
    early = a.bulk_add([{"topic": reader.topic, "deliver_at_ms": t0 + 1500, "body": f"e{i}"}
                        for i in range(20)])
    late = a.bulk_add([{"topic": reader.topic, "deliver_at_ms": t0 + 6000 + i * 100, "body": f"l{i}"}
                       for i in range(100)])          # due from 6 s to 16 s
    reader.wait_ids(early, 10)
    time.sleep(max(0, (t0 + 3500 - now_ms()) / 1000))
    sent_before = a.metric("delayq_forwards_total")   # nothing is due between here and the stop
    time.sleep(max(0, (t0 + 4000 - now_ms()) / 1000))
    a.proc.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: set(b.claims().values()) == {b.token()}, 15, "the standby to take over")
        time.sleep(max(0, (t0 + 11000 - now_ms()) / 1000))
    finally:
        a.proc.send_signal(signal.SIGCONT)
    reader.wait_ids(early + late, 30)
    time.sleep(2)
    assert a.metric("delayq_forwards_total") == sent_before, "the fenced instance forwarded"
    assert "fenced group=0" in a.log_text()
    assert all(lateness(m)[0] >= 0 for m in reader.all())
    assert set(b.claims().values()) == {b.token()}
    reader.close()


def test_restarted_instance_takes_its_own_leases_back_at_once(stack):
    """kill -9, then the same config started again: the new process takes over the leases of
    its dead predecessor (the same identity: host and http.listen, where only one process can
    listen) at once instead of waiting out their TTL, delivers what fell due meanwhile, and the
    predecessor leaves the live set."""
    ttl_ms = 30000
    d = Delayqd(stack, partitions=2, extra=dict(groups=[[0], [1]], claim_ttl_ms=ttl_ms)).start()
    d.wait_groups_owned()
    reader = Reader(stack, f"{d.name}_restart")
    ids = d.bulk_add([{"topic": reader.topic, "delay_ms": 3000 + i * 10, "body": str(i)}
                      for i in range(100)])
    old = d.token()
    d.kill()
    d.start()
    t0 = time.time()
    d.wait_groups_owned(timeout=ttl_ms / 1000 / 3)   # waiting out the old leases takes ttl_ms
    print(f"    groups owned again {time.time() - t0:.1f}s after the restarted process listened")
    assert set(d.claims().values()) == {d.token()} and d.token() != old
    assert "taken over from an earlier process of this instance" in d.log_text()
    reader.wait_ids(ids, 20)
    assert all(lateness(m)[0] >= 0 for m in reader.all())
    assert d.metric("delayq_live_instances") == 1
    reader.close()


def test_a_second_process_of_one_identity_takes_nothing_from_a_stopped_one(stack):
    """The same config started twice by mistake while the first is stopped (SIGSTOP: alive,
    holding its leases and its port): the second cannot listen where the identity says, so it
    exits saying why and takes no lease; the first, resumed, goes on forwarding alone."""
    a = Delayqd(stack, partitions=2, extra=dict(groups=[[0, 1]])).start()
    settled(a, [1])
    reader = Reader(stack, f"{a.name}_twice")
    a.proc.send_signal(signal.SIGSTOP)
    try:
        p = subprocess.run([a.proc.args[0], "-c", a.conf_path], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode != 0 and str(a.port) in p.stdout + p.stderr, (p.returncode, p.stdout[-500:])
    finally:
        a.proc.send_signal(signal.SIGCONT)
    assert set(a.claims().values()) == {a.token()}
    job = a.add_ok(topic=reader.topic, delay_ms=500, body="after")
    reader.wait_ids([job], 20)
    reader.close()


def test_groups_handed_back_after_a_stop_deliver_every_job_once(stack):
    """Two instances; one stopped (SIGSTOP) long enough for the other to take every group, then
    resumed, so that the other hands groups back by fair share while jobs are read ahead, moved
    down the levels and delivered: every job arrives once, none early, twice over."""
    a, b = cluster(stack, 2, [[0], [1], [2], [3]], 4, claim_ttl_ms=2000)
    settled(a, [2, 2])
    reader = Reader(stack, f"{a.name}_handback")
    ids = []
    for episode in range(2):
        t0 = now_ms()
        ids += a.bulk_add([{"topic": reader.topic, "deliver_at_ms": t0 + 700 + i * 60,
                            "body": f"{episode}-{i}"} for i in range(200)])   # due over 12.7 s
        b.proc.send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: set(a.claims().values()) == {a.token()}, 15, "a to take every group")
            time.sleep(2)
        finally:
            b.proc.send_signal(signal.SIGCONT)
        settled(a, [2, 2])
        reader.wait_ids(ids, 40)
    time.sleep(2)
    by_id = reader.by_id()
    twice = {k: len(v) for k, v in by_id.items() if len(v) > 1}
    assert not twice, f"{len(twice)} jobs delivered more than once"
    assert all(lateness(m)[0] >= 0 for m in reader.all())
    reader.close()


TOKEN_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def claim_token(lease_token, group):
    """A claim token as delayqd writes it into a record's head (forwarder.c): the instance part,
    six digits of the FNV-1a hash of the instance's lease token, then the message part, 24 bits
    of a message's hash and 12 bits of its group."""
    def part(v):
        return "".join(TOKEN_DIGITS[(v >> (6 * i)) & 63] for i in range(6))
    h = 14695981039346656037
    for c in lease_token.encode():
        h = ((h ^ c) * 1099511628211) & (2 ** 64 - 1)
    return part(h) + ":" + part(0x5a5a5a | group << 24)


CLAIMED_BY = """
local v = redis.call('GET', KEYS[1])
local due, at = string.match(v, '^p(%d+)|[^|]*|[^|]*|()')
redis.call('SET', KEYS[1], 's' .. due .. '||' .. ARGV[1] .. '|' .. string.sub(v, at), 'KEEPTTL')
return 1
"""


def test_a_job_another_instance_delivers_is_taken_over_only_once_its_group_is_gone(stack):
    """Records found delivering under another instance's claim. While that instance holds the
    group it claimed the job for, it is the one to deliver it: the others skip their copies.
    Once nobody of that claim holds the group (a crashed instance's claim), the record is taken
    over and the job delivered."""
    a, b = cluster(stack, 2, [[0], [1]], 2)
    owners = settled(a, [1, 1])
    reader = Reader(stack, f"{a.name}_other")
    t0 = now_ms()
    live, gone = [], []
    for i in range(16):   # added apart, so that their messages spread over both partitions
        live.append(a.add_ok(topic=reader.topic, deliver_at_ms=t0 + 4000, body=f"live {i}"))
        gone.append(a.add_ok(topic=reader.topic, deliver_at_ms=t0 + 4000, body=f"gone {i}"))
        time.sleep(0.05)
    for j in live:    # claimed by the owner of group 1, for group 1, which it still holds
        stack.redis("EVAL", CLAIMED_BY, "1", f"{a.prefix}job:{j}", claim_token(owners[1], 1))
    for j in gone:    # claimed for group 0 by an instance that holds no lease
        stack.redis("EVAL", CLAIMED_BY, "1", f"{a.prefix}job:{j}", claim_token("crashed/1/2.x", 0))
    reader.wait_ids(gone, 30)
    time.sleep(2)
    delivered = reader.by_id()
    assert not set(live) & set(delivered), "a job another instance was delivering was taken from it"
    skipped = 0
    for d in (a, b):
        text = run(["curl", "-sS", f"http://127.0.0.1:{d.port}/metrics"]).stdout
        skipped += int(re.search(r'delayq_jobs_skipped_total\{reason="delivering_elsewhere"\} (\d+)',
                                 text).group(1))
    assert skipped, "no copy met the other instance's claim"
    assert all(len(delivered[j]) == 1 for j in gone)
    reader.close()


def test_owner_cut_off_from_redis_stops_before_its_lease_can_expire(stack):
    """The owner cannot renew (nor learn that it lost the lease) but still reaches Kafka: it
    must stop forwarding by itself, before the standby can take the group over."""
    proxy = TcpProxy(stack.redis_port)
    a = Delayqd(stack, partitions=1, extra=dict(groups=[[0]], redis_port=proxy.port)).start()
    settled(a, [1])
    b = Delayqd(stack, cluster=a, extra=dict(redis_port=stack.redis_port)).start()
    reader = Reader(stack, f"{a.name}_cut")
    for i in range(5):
        stack.produce(a.delay_topic("1s"), f"before {i}", key=f"k{i}",
                      headers={"dq-topic": reader.topic})
    reader.wait_count(5, 10)
    proxy.cut()
    wait_until(lambda: set(b.claims().values()) == {b.token()}, 20, "the standby to take over")
    sent_at_takeover = a.metric("delayq_forwards_total")
    for i in range(5, 25):      # direct messages need no Redis: only the lease stops the owner
        stack.produce(a.delay_topic("1s"), f"after {i}", key=f"k{i}",
                      headers={"dq-topic": reader.topic})
        time.sleep(0.1)
    time.sleep(3)
    assert a.metric("delayq_forwards_total") == sent_at_takeover, "the cut-off owner forwarded"
    assert "fenced group=0: its lease was not renewed in time" in a.log_text()
    keys = Counter(m["key"] for m in reader.all())
    assert all(keys[f"k{i}"] == 1 for i in range(5, 25)), keys
    reader.close()


def test_joining_instance_gets_its_share_gracefully(stack):
    ds = cluster(stack, 3, [[0], [1], [2], [3]], 4)
    settled(ds[0], [1, 1, 2])
    reader = Reader(stack, f"{ds[0].name}_join")
    ids = ds[0].bulk_add([{"topic": reader.topic, "delay_ms": 1000 + i * 40, "body": str(i)}
                          for i in range(400)])          # due over 16 s, joining in between
    time.sleep(4)
    ds.append(Delayqd(stack, cluster=ds[0]).start())
    owners = settled(ds[0], [1, 1, 1, 1])
    assert ds[3].token() in owners.values()
    reader.wait_ids(ids, 40)
    time.sleep(1)
    dups = sum(len(ms) - 1 for ms in reader.by_id().values())
    worst = max(lateness(m)[0] for m in reader.all())
    print(f"    join: {dups} duplicates, latest delivery {worst} ms after due")
    assert dups <= 20, dups                  # at most the messages in flight at the hand-back
    assert worst < 8000, worst               # no group left unowned for long
    assert all(lateness(m)[0] >= 0 for m in reader.all())
    assert "handed back group=" in "".join(d.log_text() for d in ds[:3])
    reader.close()


def test_claims_script_list_release_force_release(stack):
    a, b = cluster(stack, 2, [[0, 1], [2, 3]], 4)
    owners = settled(a, [1, 1])
    a.wait_groups_owned()     # and their status published
    p = claims_sh(a, "list")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 3, p.stdout                     # a header and one line per group
    assert lines[0].split()[5] == "PENDING", p.stdout
    for g, owner in owners.items():
        row = lines[1 + g].split()
        assert row[0] == str(g) and row[2] == owner and row[4] == "alive", p.stdout
        assert row[3].endswith("s") and row[5].isdigit(), p.stdout   # lease left, pending
    assert lines[1].split()[1] == "0,1" and lines[2].split()[1] == "2,3", p.stdout
    p = claims_sh(a, "list", "-v")
    assert p.returncode == 0 and p.stdout.count("committed=") == 2 * 2 * len(a.levels), p.stdout
    assert p.stdout.count(" pending=") == 2 * 2 * len(a.levels), p.stdout

    # release: the owner hands the group back gracefully and the script waits for it.
    holder = owners[0]
    p = claims_sh(a, "release", "0")
    assert p.returncode == 0 and "handed back" in p.stdout, (p.stdout, p.stderr)
    settled(a, [1, 1])
    # the same over HTTP (the console's button): asked, and handed back
    held = a.claims()[1]
    st, doc = a.http("POST", "/delay-queue/api/claims/release", {"group": 1})
    assert st == 200 and doc["data"] == {"group": 1, "owner": held}, (st, doc)
    wait_until(lambda: a.claims()[1] != held, TTL_MS * 3 / 1000 + 5, "group 1 handed back")
    st, doc = a.http("POST", "/delay-queue/api/claims/release", {"group": 7})
    assert st == 400 and "group must be an integer from 0 to 1" in doc["message"], (st, doc)
    st, doc = a.http("POST", "/delay-queue/api/claims/release", {"groups": 1})
    assert st == 400 and "groups is not a member of a release of a group" in doc["message"], doc
    settled(a, [1, 1])

    # force-release: refused while the owner is alive, done once it is dead.
    victim = b if b.token() in a.claims().values() else a
    survivor = a if victim is b else b
    g = [g for g, o in survivor.claims().items() if o == victim.token()][0]
    p = claims_sh(a, "force-release", str(g))
    assert p.returncode == 1 and "alive" in p.stderr, (p.stdout, p.stderr)
    victim.kill()
    # Its heartbeat runs out a third of a lease before its lease does: act in that window.
    ctl, token = f"{victim.prefix}{{ctl}}:", victim.token()

    def heartbeat_gone():
        score = stack.redis("ZSCORE", f"{ctl}instances", token).strip()
        return not score or float(score) < time.time() * 1000
    wait_until(heartbeat_gone, TTL_MS / 1000, "the killed owner's heartbeat to run out")
    p = claims_sh(survivor, "force-release", str(g))
    assert p.returncode == 0 and "removed the lease" in p.stdout, (p.stdout, p.stderr)
    wait_until(lambda: survivor.claims()[g] == survivor.token(), 10, "the survivor to take it")

    # Errors: unknown group, no Redis, unreadable config.
    p = claims_sh(survivor, "release", "9")
    assert p.returncode == 1 and "unknown group" in p.stderr, p.stderr
    bad = os.path.join(stack.tmp, "noredis.conf")
    with open(bad, "w") as f:
        f.write('redis: { port = 1; };\n')
    p = run(["bash", os.path.join(ROOT, "scripts", "claims.sh"), "-c", bad, "list"], check=False)
    assert p.returncode == 1 and "does not answer" in p.stderr, p.stderr
    p = run(["bash", os.path.join(ROOT, "scripts", "claims.sh"), "-c", "/nonexistent", "list"],
            check=False)
    assert p.returncode == 1 and "cannot read" in p.stderr, p.stderr
    assert holder


def test_metrics_move_and_readyz_follows_redis(stack):
    d = Delayqd(stack).start()
    reader = Reader(stack, f"{d.name}_metrics")
    added = d.metric("delayq_jobs_added_total")
    ids = [d.add_ok(topic=reader.topic, delay_ms=300, body=str(i)) for i in range(5)]
    d.remove(d.add_ok(topic=reader.topic, delay=60, body="x"))
    reader.wait_ids(ids, 10)
    time.sleep(0.5)
    assert d.metric("delayq_jobs_added_total") == added + 6
    assert d.metric("delayq_jobs_delivered_total") >= 5
    assert d.metric("delayq_jobs_cancelled_total") == 1
    assert d.metric("delayq_delivery_lateness_ms_count") >= 5
    assert d.metric("delayq_groups_owned") == 1
    text = run(["curl", "-sS", f"http://127.0.0.1:{d.port}/metrics"]).stdout
    assert 'delayq_http_requests_total{route="add",status="200"}' in text
    assert 'delayq_http_request_seconds_bucket{route="add",le="+Inf"}' in text
    st, doc = d.http("GET", "/readyz")
    assert st == 200, doc
    stack.stop_redis()
    try:
        # /readyz answers from probes made every second in the background
        st, doc = wait_until(lambda: (lambda r: r if r[0] == 503 else None)(d.http("GET", "/readyz")),
                             5, "/readyz to see Redis gone")
        assert "redis" in doc["message"], doc
        assert d.http("GET", "/healthz")[0] == 200
    finally:
        stack.start_redis()
    wait_until(lambda: d.http("GET", "/readyz")[0] == 200, 10, "ready again")
    reader.close()


def test_control_keys_share_one_hash_tag_and_an_older_layout_is_told(stack):
    """Leases and heartbeats lie under the hash tag {ctl} (one Redis Cluster slot, and the keys
    claims.sh and operators read); a lease of the earlier layout, left by an older delayqd that
    would not see this build's leases, is reported at start."""
    d = Delayqd(stack, partitions=2, extra={"groups": [[0], [1]]})
    stack.redis("SET", f"{d.prefix}claim:1", "old-host:1:0000beef", "PX", "60000")
    d.start().wait_groups_owned()
    wait_until(lambda: "leased under the earlier key layout" in d.log_text(), 10, "the warning")
    assert "group 1 is leased under the earlier key layout" in d.log_text()
    keys = set(stack.redis("KEYS", f"{d.prefix}*").split())
    ctl = f"{d.prefix}{{ctl}}:"
    assert {f"{ctl}claim:0", f"{ctl}claim:1", f"{ctl}instances", f"{ctl}load"} <= keys, keys
    others = {k for k in keys if not k.startswith(ctl) and not k.startswith(f"{d.prefix}job:")}
    assert others == {f"{d.prefix}claim:1"}, others


def test_status_with_more_rows_than_one_call_takes_is_published(stack):
    """A group of 180 partitions over three levels has 540 status rows, more than one HSET
    took before (508): the owner publishes them in several calls, and the claims view and
    claims.sh show every partition."""
    d = Delayqd(stack, partitions=180).start().wait_groups_owned(timeout=90)

    def rows():
        st, doc = d.http("GET", "/delay-queue/api/claims")
        return st == 200 and len(doc["data"]["groups"][0].get("status") or []) == 180 * len(d.levels)
    wait_until(rows, 30, "every partition's status row")
    p = claims_sh(d, "list", "-v")
    assert p.returncode == 0 and p.stdout.count("committed=") == 180 * len(d.levels), p.stdout[-500:]
    assert "publish status" not in d.log_text()


def test_claims_view_names_a_redis_error_instead_of_empty_fields(stack):
    """A key of the view that Redis cannot read as what it should be (here a group's status
    hash overwritten by a string) makes GET /claims 503 naming Redis's error, not a 200 whose
    owner and status are silently missing; once the key is gone the view is whole again."""
    d = Delayqd(stack).start().wait_groups_owned()
    key = f"{d.prefix}{{ctl}}:status:0"
    stack.redis("DEL", key)
    stack.redis("SET", key, "not a hash")
    st, doc = d.http("GET", "/delay-queue/api/claims")
    assert st == 503 and "WRONGTYPE" in doc["message"] and doc["message"].startswith("claims: redis"), (st, doc)
    stack.redis("DEL", key)
    st, doc = d.http("GET", "/delay-queue/api/claims")
    assert st == 200 and doc["data"]["groups"][0]["owner"], (st, doc)
