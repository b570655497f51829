"""Integration harness: a real Redis and a real Kafka broker started by the project's own
scripts on free ports in temp dirs, the real delayqd binary, curl for HTTP and kcat for Kafka.
Standard library only; conftest.py makes it pytest's fixture `stack`."""

import http.client
import json
import os
import queue
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DELAYQD = os.environ.get("DELAYQD", os.path.join(ROOT, "build", "delayqd"))
# The sanitizers' allocator keeps freed memory in quarantine and ignores malloc_trim: figures of
# resident memory say nothing about delayqd then.
SANITIZED = bool(os.environ.get("SANITIZE"))
# DELAYQ_FULL_TARGETS=1 runs the longer tests at their full length (a minute where the suite
# takes half); the suite's shorter runs check the same properties.
FULL = bool(os.environ.get("DELAYQ_FULL_TARGETS"))


def now_ms():
    return int(time.time() * 1000)


def rss_mib(pid):
    """Resident memory of process pid, in MiB."""
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


# Ports the tests listen on come from a block of their own per pytest-xdist worker, below the
# kernel's ephemeral range (32768 and up): a port released for a while (a broker or a delayqd
# restarted on it) is then never taken meanwhile by another worker, nor by the kernel for a
# connection; Kafka's controller listens on its port + 1, which is kept free too.
_WORKER = int(re.sub(r"\D", "", os.environ.get("PYTEST_XDIST_WORKER", "")) or 0)
_BLOCK = 12000 // max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
_next_port = [20000 + _WORKER * _BLOCK]


def free_port(pair=False):
    """A port nothing listens on, never handed out before in this process (pair: port + 1 is
    free and kept too)."""
    lo, hi = 20000 + _WORKER * _BLOCK, 20000 + (_WORKER + 1) * _BLOCK
    for _ in range(_BLOCK):
        p = _next_port[0]
        _next_port[0] = p + (2 if pair else 1)
        if _next_port[0] >= hi:
            _next_port[0] = lo
        if p + (1 if pair else 0) >= hi:
            continue
        try:
            for q in (p, p + 1) if pair else (p,):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", q))
            return p
        except OSError:
            continue
    raise RuntimeError(f"no free port in {lo}-{hi}")


def run(cmd, check=True, timeout=120, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stdout}{p.stderr}")
    return p


def wait_until(pred, timeout, what, step=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Stack:
    """Redis and Kafka for the whole run, stopped on exit (also on failure)."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="delayq-it-")
        self.redis_port = free_port()
        self.kafka_port = free_port(pair=True)
        self.redis_dir = os.path.join(self.tmp, "redis")
        self.kafka_dir = os.path.join(self.tmp, "kafka")

    @property
    def brokers(self):
        return f"127.0.0.1:{self.kafka_port}"

    def _script(self, name, verb, port, d):
        return run(["bash", os.path.join(ROOT, "scripts", name), verb, "--port", str(port),
                    "--dir", d], timeout=300)

    def start_redis(self):
        self._script("redis-local.sh", "start", self.redis_port, self.redis_dir)

    def stop_redis(self):
        self._script("redis-local.sh", "stop", self.redis_port, self.redis_dir)

    def start_kafka(self):
        p = self._script("kafka-local.sh", "start", self.kafka_port, self.kafka_dir)
        m = re.search(r"Kafka ([0-9][0-9.]*)\)", p.stdout + p.stderr)
        self.kafka_version = m.group(1) if m else getattr(self, "kafka_version", "?")

    def stop_kafka(self):
        self._script("kafka-local.sh", "stop", self.kafka_port, self.kafka_dir)

    def start(self):
        self.start_redis()
        self.start_kafka()

    def stop(self):
        for f in (self.stop_kafka, self.stop_redis):
            try:
                f()
            except Exception as e:  # keep stopping the rest
                print(f"warning: {e}")

    def redis(self, *args):
        return run(["redis-cli", "-p", str(self.redis_port), "--raw", *args]).stdout.strip()

    def ensure_topic(self, topic):
        """Creates a business topic (the broker auto-creates on a metadata request)."""
        def ready():
            p = run(["kcat", "-b", self.brokers, "-L", "-J", "-t", topic, "-X",
                     "allow.auto.create.topics=true"], check=False)
            try:
                t = json.loads(p.stdout)["topics"][0]
                return not t.get("error") and t["partitions"]
            except (ValueError, KeyError, IndexError):
                return False
        wait_until(ready, 30, f"topic {topic}", step=0.2)

    def partitions(self, topic):
        p = run(["kcat", "-b", self.brokers, "-L", "-J", "-t", topic])
        t = json.loads(p.stdout)["topics"][0]
        return len(t["partitions"]) if not t.get("error") else 0

    def end_offset(self, topic, partition=0):
        """The offset after the last message of a partition: how many it holds."""
        p = run(["kcat", "-b", self.brokers, "-Q", "-t", f"{topic}:{partition}:-1"], check=False)
        m = re.search(r"offset (\d+)", p.stdout)
        return int(m.group(1)) if m else 0

    def topic_config(self, topic, setting):
        """Sets a topic's config ("name=value") with Kafka's own ConfigCommand (Kafka 3.x)."""
        cp = run(["bash", os.path.join(ROOT, "scripts", "kafka-local.sh"), "classpath"]).stdout.strip()
        run(["java", "-cp", cp, "kafka.admin.ConfigCommand", "--bootstrap-server", self.brokers,
             "--alter", "--entity-type", "topics", "--entity-name", topic, "--add-config", setting])

    def produce(self, topic, value, key=None, headers=None, partition=None):
        """Produces one message with kcat, as any direct producer would; a bytes value goes
        whole, from a file (kcat produces a file given as one message)."""
        cmd = ["kcat", "-b", self.brokers, "-P", "-t", topic]
        if key is not None:
            cmd += ["-k", key]
        if partition is not None:
            cmd += ["-p", str(partition)]
        for k, v in (headers or {}).items():
            cmd += ["-H", f"{k}={v}"]
        if isinstance(value, bytes):
            path = os.path.join(self.tmp, f"value-{uuid.uuid4().hex}")
            with open(path, "wb") as f:
                f.write(value)
            run(cmd + [path])
        else:
            run(cmd, input=value)


class Reader:
    """Consumes a topic from the beginning with kcat in the background; records each message
    with the time it was received. Given a list of topics, one kcat reads them all as a
    consumer group member (kcat -G), and the reader is ready once the group assigned it every
    partition."""

    def __init__(self, stack, topic):
        topics = topic if isinstance(topic, list) else [topic]
        for t in topics:
            stack.ensure_topic(t)
        self.topic = topic
        self.messages = []
        self.lock = threading.Lock()
        if len(topics) == 1:
            cmd = ["kcat", "-b", stack.brokers, "-C", "-t", topics[0], "-o", "beginning", "-J", "-u", "-q"]
        else:
            cmd = ["kcat", "-b", stack.brokers, "-G", f"reader-{uuid.uuid4().hex[:8]}",
                   "-X", "auto.offset.reset=earliest", "-J", "-u", *topics]
        self.assigned = threading.Event()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        threading.Thread(target=self._watch, daemon=True).start()
        if len(topics) > 1:
            assert self.assigned.wait(30), f"kcat -G was assigned no partitions of {len(topics)} topics"

    def _watch(self):
        for line in self.proc.stderr:
            if "assigned:" in line:
                self.assigned.set()

    def _read(self):
        for line in self.proc.stdout:
            t = now_ms()
            try:
                m = json.loads(line)
            except ValueError:
                continue
            h = m.get("headers") or []
            m["headers"] = {h[i]: h[i + 1] for i in range(0, len(h) - 1, 2)}
            m["recv_ms"] = t
            with self.lock:
                self.messages.append(m)

    def all(self):
        with self.lock:
            return list(self.messages)

    def by_id(self):
        out = {}
        for m in self.all():
            out.setdefault(m["headers"].get("dq-id"), []).append(m)
        return out

    def wait_ids(self, ids, timeout):
        """Waits until every job id in ids has arrived at least once."""
        want = set(ids)
        wait_until(lambda: want <= set(self.by_id()), timeout,
                   f"{len(want)} jobs on {self.topic}", step=0.2)
        return self.by_id()

    def wait_count(self, n, timeout):
        wait_until(lambda: len(self.all()) >= n, timeout, f"{n} messages on {self.topic}")
        return self.all()

    def close(self):
        self.proc.terminate()
        self.proc.wait(5)


_running = []
_started = []

# What AddressSanitizer, LeakSanitizer and UBSan write when they find something.
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def stop_all():
    """Kills every delayqd a test left running."""
    while _running:
        d = _running.pop()
        if d.alive():
            d.kill()


def sanitizer_reports():
    """Sanitizer findings in the logs of every delayqd started since the last call."""
    found = []
    while _started:
        d = _started.pop()
        text = d.log_text()
        for mark in SANITIZER_MARKS:
            at = text.find(mark)
            if at >= 0:
                found.append(f"{d.name}: {text[max(0, at - 200):at + 1500]}")
                break
    return found


LEVELS_DEFAULT = ["1s", "5s", "10s", "30s", "1m", "5m", "10m", "30m", "1h", "2h", "6h", "12h", "1d"]   # the config's


class Delayqd:
    """One delayqd process with its own topics, group, key prefix and port."""

    LEVELS = ["1s", "5s", "10s"]

    def __init__(self, stack, name=None, extra=None, levels=None, partitions=2, cluster=None):
        """cluster: another Delayqd whose topics, group and keys this one shares (a second
        instance of the same deployment), with its own port, config and log."""
        self.stack = stack
        if cluster:
            name, extra = cluster.name, dict(cluster.extra, **(extra or {}))
            levels, partitions = cluster.levels, cluster.partitions
        self.name = name or "t" + uuid.uuid4().hex[:8]
        self.port = free_port()
        self.levels = levels or self.LEVELS
        self.partitions = partitions
        self.topic_format = f"{self.name}_delay_%s"
        self.dlq = f"{self.name}_dlq"
        self.extra = extra or {}
        self.prefix = self.extra.get("prefix", f"{self.name}:")
        self.proc = None
        tag = f"{self.name}-{self.port}" if cluster else self.name
        self.log_path = os.path.join(stack.tmp, f"{tag}.log")
        self.conf_path = os.path.join(stack.tmp, f"{tag}.conf")
        self.write_config()

    def delay_topic(self, level):
        return self.topic_format.replace("%s", level)

    def write_config(self):
        x = self.extra
        groups = ", ".join("[%s]" % ", ".join(str(p) for p in g)
                           for g in x.get("groups", [range(self.partitions)]))
        props = ", ".join('"%s"' % p for p in x.get("properties", ["security.protocol=plaintext"]))
        if x.get("sentinels"):   # ports of Sentinels that watch the master named master_name
            where = "sentinels = [ %s ]; master_name = \"%s\";" % (
                ", ".join('"127.0.0.1:%d"' % p for p in x["sentinels"]), x.get("master_name", "delayq"))
        elif x.get("cluster"):   # ports of Redis Cluster nodes to start from
            where = "cluster = [ %s ];" % ", ".join('"127.0.0.1:%d"' % p for p in x["cluster"])
        else:
            where = f'host = "127.0.0.1"; port = {x.get("redis_port", self.stack.redis_port)};'

        # extra max_delay_s None leaves the key out, to its default
        max_delay = "" if "max_delay_s" in x and x["max_delay_s"] is None else \
            f"max_delay_s = {x.get('max_delay_s', 86400)};"
        text = f"""
http:  {{ listen = "127.0.0.1:{self.port}"; max_body_bytes = {x.get('max_body_bytes', 65536)};
         auth_token = "{x.get('auth_token', '')}"; read_token = "{x.get('read_token', '')}";
         metrics_token = "{x.get('metrics_token', '')}";
         max_connections_per_ip = {x.get('max_connections_per_ip', 1024)};
         # (every test client comes from 127.0.0.1: test_security.py sets the limit it tests)
         request_timeout_s = {x.get('request_timeout_s', 10)};
         tls_cert_file = "{x.get('tls', ('', ''))[0]}"; tls_key_file = "{x.get('tls', ('', ''))[1]}";
         connection_timeout_s = {x.get('connection_timeout_s', 30)}; threads = {x.get('http_threads', 2)};
         workers = {x.get('http_workers', 4)};
         max_connections = {x.get('max_connections', 1024)};
         max_batch_jobs = {x.get('max_batch_jobs', 1000)}; }};
redis: {{ {where} prefix = "{self.prefix}"; timeout_ms = {x.get('redis_timeout_ms', 1000)};
         {f'username = "{x["redis_user"]}"; password_file = "{x["redis_password_file"]}";' if x.get("redis_user") else ""}
         wait_replicas = {x.get('wait_replicas', 0)}; wait_timeout_ms = {x.get('wait_timeout_ms', 1000)};
         failover_wait_ms = {x.get('failover_wait_ms', 5000)};
         require_noeviction = {"true" if x.get("require_noeviction") else "false"}; }};
kafka: {{ brokers = "{x.get('brokers', self.stack.brokers)}"; group_id = "{self.name}"; properties = ( {props} );
         {f'sasl_password_file = "{x["sasl_password_file"]}";' if x.get("sasl_password_file") else ""}
         produce_timeout_ms = {x.get('produce_timeout_ms', 5000)}; }};
delay: {{ topic_format = "{self.topic_format}";
         levels = [ {", ".join('"%s"' % l for l in self.levels)} ];
         partitions = {self.partitions}; partition_groups = ( {groups} );
         dlq_topic = "{self.dlq}"; claim_ttl_ms = {x.get('claim_ttl_ms', 4000)};
         max_held = {x.get('max_held', 100000)}; }};
job:   {{ retention_s = {x.get('retention_s', 3600)}; {max_delay}
         refused_retry_s = {x.get('refused_retry_s', 60)}; }};
dead:  {{ redrive_confirm_over = {x.get('redrive_confirm_over', 100)}; }};
log:   {{ level = "{x.get('log_level', 'info')}"; }};
pull:  {{ topics = [ {", ".join('"%s"' % t for t in x.get("pull_topics", []))} ];
         ttr_s = {x.get('ttr_s', 60)}; max_attempts = {x.get('max_attempts', 10)};
         also_kafka = {"true" if x.get("also_kafka") else "false"};
         max_wait_ms = {x.get('max_wait_ms', 180000)}; }};
callbacks: {{ {x.get('callbacks', '')} }};
compat: {{ go_delayqueue = {"true" if x.get("go_delayqueue") else "false"};
          ouqiang = {"true" if x.get("ouqiang") else "false"};
          changsongl = {"true" if x.get("changsongl") else "false"}; {x.get('compat', '')} }};
"""
        # private: it may hold a token, and delayqd refuses a readable file holding one
        fd = os.open(self.conf_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(self.conf_path, 0o600)

    def start(self):
        self.log = open(self.log_path, "a")
        env = None
        if self.extra.get("faketime"):   # its wall clock off by that much ("+5s"), libfaketime's
            # way; its monotonic clock, which timed waits count on, left as it is
            env = dict(os.environ, FAKETIME=self.extra["faketime"], FAKETIME_DONT_FAKE_MONOTONIC="1",
                       LD_PRELOAD="/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                       ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") +
                       ":verify_asan_link_order=0")
        self.proc = subprocess.Popen([DELAYQD, "-c", self.conf_path], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)
        _running.append(self)
        if self not in _started:
            _started.append(self)
        wait_until(self._ready, 60, f"delayqd {self.name} to listen")
        return self

    def wait_groups_owned(self, timeout=30):
        """Waits until every partition group is owned and its partitions are assigned (their
        status is published): a fresh broker can take a second to answer the first
        committed-offsets lookup, and on-time assertions are not about start-up."""
        def owned():
            st, doc = self.http("GET", "/delay-queue/api/claims")
            groups = (doc.get("data") or {}).get("groups") or [] if st == 200 else []
            return groups and all(g.get("owner") and g.get("status") for g in groups)
        wait_until(owned, timeout, f"delayqd {self.name} to own its groups", step=0.1)
        return self

    def _ready(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"delayqd exited {self.proc.returncode}:\n{self.log_text()}")
        try:
            return self.http("GET", "/healthz")[0] == 200
        except RuntimeError:
            return False

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Stops the process; returns its exit code (negative: killed by a signal)."""
        if not self.proc or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout)
        self.log.close()
        return rc

    def kill(self):
        return self.stop(signal.SIGKILL)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_text(self):
        with open(self.log_path) as f:
            return f.read()

    # HTTP, with curl: a real client, exactly as users call it.
    def http(self, method, path, body=None, headers=None, raw=None):
        tls = self.extra.get("tls")   # (cert, key, CA that signed it): HTTPS
        cmd = ["curl", "-sS", "-m", "20", "-X", method, "-w", "\n%{http_code}",
               f"{'https' if tls else 'http'}://127.0.0.1:{self.port}{path}"]
        if tls:
            cmd += ["--cacert", tls[2]]
        for k, v in (headers or {}).items():
            cmd += ["-H", f"{k}: {v}"]
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        if data is not None:
            cmd += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
        p = run(cmd, check=False, input=data)
        if p.returncode != 0:
            raise RuntimeError(f"curl failed ({p.returncode}): {p.stderr}")
        text, _, status = p.stdout.rpartition("\n")
        try:
            doc = json.loads(text) if text else None
        except ValueError:
            doc = text
        return int(status), doc

    def add(self, **job):
        return self.http("POST", "/delay-queue/api/jobs/add", job)

    def add_ok(self, **job):
        status, doc = self.add(**job)
        assert status == 200 and doc["code"] == 0, (status, doc)
        return doc["data"]["job_id"]

    def get(self, job_id):
        status, doc = self.http("GET", f"/delay-queue/api/jobs/get?job_id={job_id}")
        assert status == 200 and doc["code"] == 0, (status, doc)
        return doc["data"]

    def remove(self, job_id):
        return self.http("GET", f"/delay-queue/api/jobs/remove?job_id={job_id}")

    def claims(self):
        """{group: owner or None} from GET /delay-queue/api/claims."""
        st, doc = self.http("GET", "/delay-queue/api/claims")
        assert st == 200 and doc["code"] == 0, (st, doc)
        return {g["group"]: g["owner"] for g in doc["data"]["groups"]}

    def metrics_text(self):
        """GET /metrics, whole."""
        return run(["curl", "-sS", "-m", "10", f"http://127.0.0.1:{self.port}/metrics"]).stdout

    def metric(self, name):
        """The value of an unlabelled metric from GET /metrics."""
        p = run(["curl", "-sS", "-m", "10", f"http://127.0.0.1:{self.port}/metrics"])
        for line in p.stdout.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"no metric {name}")

    def token(self):
        """This instance's lease token, from its log (the last process's, after a restart)."""
        tokens = [line.split("instance token=")[1].split()[0] for line in self.log_text().splitlines()
                  if "instance token=" in line]
        assert tokens, "no token in the log"
        return tokens[-1]

    def bulk(self, requests, threads=4):
        """Sends many (method, path, body) requests over keep-alive connections from several
        threads; a fourth element, epoch ms, sends that request no sooner. Returns
        [(status, doc)] in the order given; a failed connection gives (0, error text)."""
        work = queue.Queue()
        for i, r in enumerate(requests):
            work.put((i, r))
        out = [None] * len(requests)

        def worker():
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            while True:
                try:
                    i, (method, path, body, *at) = work.get_nowait()
                except queue.Empty:
                    break
                time.sleep(max(0, (at[0] if at else 0) - now_ms()) / 1000)
                try:
                    conn.request(method, path, json.dumps(body) if body is not None else None,
                                 {"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    out[i] = (resp.status, json.loads(resp.read()))
                except (OSError, http.client.HTTPException, ValueError) as e:
                    out[i] = (0, str(e))
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            conn.close()

        ts = [threading.Thread(target=worker) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return out

    def bulk_add(self, jobs, threads=4):
        """Adds every job (a dict); asserts all were accepted; returns their ids in order."""
        res = self.bulk([("POST", "/delay-queue/api/jobs/add", j) for j in jobs], threads)
        bad = [r for r in res if r[0] != 200 or r[1]["code"] != 0]
        assert not bad, bad[:5]
        return [r[1]["data"]["job_id"] for r in res]


def record(stack, d, job_id):
    """The Redis record: its text head, and its msgpack tail decoded by Redis's own library."""
    lua = ("local v = redis.call('GET', KEYS[1])\n"
           "local at = string.match(v, '^%l%d+|[^|]*|[^|]*|()')\n"
           "return cjson.encode({string.sub(v, 1, at - 1), cmsgpack.unpack(string.sub(v, at)), #v})")
    return json.loads(stack.redis("EVAL", lua, "1", f"{d.prefix}job:{job_id}"))


def lateness(m):
    """(sent - due, received - due) of a delivered message, in ms."""
    due = int(m["headers"]["dq-due-ms"])
    return int(m["headers"]["dq-sent-ms"]) - due, m["recv_ms"] - due


class TcpProxy:
    """Forwards 127.0.0.1:<port> to a target port, until cut: then every connection through it
    is closed and new ones are refused (a network partition between one client and a server)."""

    def __init__(self, target_port):
        self.target = target_port
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.conns = []
        self.cut_flag = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.cut_flag:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            if self.cut_flag:     # accepted while being cut: refuse it too
                c.close()
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                c.close()
                continue
            self.conns += [c, u]
            threading.Thread(target=self._pipe, args=(c, u), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        self.cut_flag = True
        try:
            self.lsock.shutdown(socket.SHUT_RDWR)   # wakes a blocked accept(); close alone does not
        except OSError:
            pass
        self.lsock.close()
        for s in self.conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass
