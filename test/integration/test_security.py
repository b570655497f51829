"""Security: least-privilege tokens, secrets read from files, a config holding a secret kept
private, and clients that cannot starve others of connections."""

import glob
import json
import os
import re
import resource
import signal
import socket
import stat
import subprocess
import time
import uuid

import harness
from harness import DELAYQD, Delayqd, Reader, free_port, now_ms, run, wait_until

ADD = "/delay-queue/api/jobs/add"


def bearer(token):
    return {"Authorization": f"Bearer {token}"} if token else {}


def test_each_token_reaches_exactly_its_paths(stack):
    d = Delayqd(stack, extra={"auth_token": "all-t0ken", "read_token": "read-t0ken",
                              "metrics_token": "metrics-t0ken"}).start()
    st, doc = d.http("POST", ADD, {"topic": "orders", "delay": 60}, headers=bearer("all-t0ken"))
    assert st == 200, doc
    job_id = doc["data"]["job_id"]
    paths = {   # path: (method, body, the tokens that open it)
        "add": ("POST", ADD, {"topic": "orders", "delay": 60}, {"all-t0ken"}),
        "get": ("GET", f"/delay-queue/api/jobs/get?job_id={job_id}", None, {"all-t0ken", "read-t0ken"}),
        "stats": ("GET", "/delay-queue/api/stats", None, {"all-t0ken", "read-t0ken"}),
        "claims": ("GET", "/delay-queue/api/claims", None, {"all-t0ken", "read-t0ken"}),
        "reschedule": ("GET", f"/delay-queue/api/jobs/reschedule?job_id={job_id}&delay=90", None,
                       {"all-t0ken"}),
        "metrics": ("GET", "/metrics", None, {"all-t0ken", "metrics-t0ken"}),
        "healthz": ("GET", "/healthz", None, {None, "all-t0ken", "read-t0ken", "metrics-t0ken", "wrong"}),
        "readyz": ("GET", "/readyz", None, {None, "all-t0ken", "read-t0ken", "metrics-t0ken", "wrong"}),
        "remove": ("GET", f"/delay-queue/api/jobs/remove?job_id={job_id}", None, {"all-t0ken"}),
    }
    for name, (method, path, body, opens) in paths.items():
        for token in (None, "wrong", "read-t0ken", "metrics-t0ken", "all-t0ken"):
            st, doc = d.http(method, path, body, headers=bearer(token))
            if token in opens:
                assert st in (200, 503), (name, token, st, doc)
            else:
                assert st == 401 and doc["code"] == 401, (name, token, st, doc)
    st, doc = d.http("GET", "/readyz")
    assert st == 200 and doc["message"] == "ready", doc


def test_metrics_open_without_a_metrics_token(stack):
    d = Delayqd(stack, extra={"auth_token": "all-t0ken"}).start()
    assert d.http("GET", "/metrics")[0] == 200
    assert d.http("GET", "/delay-queue/api/stats")[0] == 401


def check_config(conf):
    return subprocess.run([DELAYQD, "-c", conf, "--check-config"], capture_output=True, text=True)


def test_secrets_from_files_and_a_readable_config_holding_one(stack):
    token_file = os.path.join(stack.tmp, "token")
    with open(token_file, "w") as f:
        f.write("fr0m-a-file\n")   # the trailing newline is not part of it
    d = Delayqd(stack, extra={"auth_token": ""})
    text = open(d.conf_path).read().replace('auth_token = "";', f'auth_token_file = "{token_file}";')
    with open(d.conf_path, "w") as f:
        f.write(text)
    os.chmod(d.conf_path, 0o644)   # no secret in clear: readable is fine
    d.start()
    assert d.http("POST", ADD, {"topic": "orders", "delay": 60})[0] == 401
    st, doc = d.http("POST", ADD, {"topic": "orders", "delay": 60}, headers=bearer("fr0m-a-file"))
    assert st == 200, doc
    d.stop()

    clear = os.path.join(stack.tmp, "clear.conf")
    with open(clear, "w") as f:
        f.write(text.replace(f'auth_token_file = "{token_file}";', 'auth_token = "in-clear";'))
    os.chmod(clear, 0o644)
    p = check_config(clear)
    assert p.returncode != 0 and "http.auth_token" in p.stderr and "auth_token_file" in p.stderr, p.stderr
    os.chmod(clear, 0o640)   # its group (the service's) may read it
    assert check_config(clear).returncode == 0
    with open(clear, "w") as f:
        f.write('redis: { password_file = "/nonexistent/secret"; };\n')
    p = check_config(clear)
    assert p.returncode != 0 and "redis.password_file" in p.stderr and "/nonexistent/secret" in p.stderr, p.stderr
    crlf, fifo = os.path.join(stack.tmp, "crlf-token"), os.path.join(stack.tmp, "fifo-token")
    with open(crlf, "w", newline="") as f:
        f.write("tok\r\n")
    os.mkfifo(fifo)
    for path, want in ((crlf, None), (fifo, "not a regular file")):
        with open(clear, "w") as f:
            f.write(f'http: {{ auth_token_file = "{path}"; }};\n')
        p = check_config(clear)   # a FIFO must not hang the start
        assert (p.returncode == 0) if want is None else (want in p.stderr), (path, p.stderr)
    both = os.path.join(stack.tmp, "both.conf")
    with open(both, "w") as f:
        f.write(f'http: {{ auth_token = "a"; auth_token_file = "{token_file}"; }};\n')
    os.chmod(both, 0o600)
    p = check_config(both)
    assert p.returncode != 0 and "not both" in p.stderr, p.stderr
    with open(both, "w") as f:
        f.write('http: { read_token = "r"; };\n')
    p = check_config(both)
    assert p.returncode != 0 and "http.read_token" in p.stderr, p.stderr
    assert stat.S_IMODE(os.stat(d.conf_path).st_mode) == 0o644


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * p / 100))]


def half_open(port, n, source):
    """n connections from source that send a request line and one header, then nothing."""
    out = []
    for _ in range(n):
        s = socket.socket()
        s.bind((source, 0))
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(b"POST /delay-queue/api/jobs/add HTTP/1.1\r\nHost: x\r\n")
        except OSError:
            pass   # refused: over its address's share
        out.append(s)
    return out


def test_half_open_connections_from_one_address_do_not_starve_another(stack):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:   # 2,000 client sockets here, the server's share in delayqd
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    d = Delayqd(stack, extra={"max_connections_per_ip": 256, "request_timeout_s": 10}).start()
    idle = half_open(d.port, 2000, "127.0.0.2")
    try:
        took = []
        for i in range(200):
            t0 = now_ms()
            assert d.add_ok(topic="orders", delay=600, body=str(i))
            took.append(now_ms() - t0)
        print(f"    adds from another address while 2,000 half-open: p50 {pct(took, 50)} ms, "
              f"p99 {pct(took, 99)} ms (curl's own start included)")
        # Not a speed test: without the limit the first adds wait for the request deadline
        # (10 s) to free slots; with it, none waits for anything.
        assert max(took) < 5000, f"an add waited {max(took)} ms for a connection slot"
    finally:
        for s in idle:
            s.close()


def test_a_request_must_arrive_whole_within_its_deadline(stack):
    """A client dribbling a request a byte at a time keeps libmicrohttpd's idle timeout from
    firing, but not the request's deadline."""
    d = Delayqd(stack, extra={"request_timeout_s": 2, "connection_timeout_s": 30}).start()
    s = socket.create_connection(("127.0.0.1", d.port))
    t0 = time.time()
    closed = None
    for b in b"POST /delay-queue/api/jobs/add HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"y" * 40:
        try:
            s.sendall(bytes([b]))
        except OSError:
            closed = time.time() - t0
            break
        time.sleep(0.25)
    if closed is None:
        s.settimeout(5)
        try:
            assert s.recv(100) == b""
        except ConnectionResetError:
            pass
        closed = time.time() - t0
    s.close()
    assert closed < 9, f"a dribbling client was served for {closed:.1f} s"
    assert d.add_ok(topic="orders", delay=600)


def make_cert(d, name):
    """A CA of its own and a certificate for 127.0.0.1 signed by it, in directory d: the paths
    (cert, key, ca)."""
    ca_key, ca, key, csr, cert = (os.path.join(d, f"{name}-{x}") for x in
                                  ("ca.key", "ca.pem", "key.pem", "csr.pem", "cert.pem"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    subprocess.run(["openssl", "req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2",
                    "-subj", f"/CN={name} test CA"], check=True, capture_output=True)
    subprocess.run(["openssl", "req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True)
    ext = os.path.join(d, f"{name}-ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
                    "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext],
                   check=True, capture_output=True)
    return cert, key, ca


def curl_status(url, *args):
    p = subprocess.run(["curl", "-sS", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}", *args, url],
                       capture_output=True, text=True)
    return p.returncode, p.stdout


def test_https_serves_rotates_on_sighup_and_refuses_plain_http(stack):
    tmp = os.path.join(stack.tmp, "tls")
    os.makedirs(tmp, exist_ok=True)
    cert, key, ca = make_cert(tmp, "first")
    live_cert, live_key = os.path.join(tmp, "live-cert.pem"), os.path.join(tmp, "live-key.pem")
    for src, dst in ((cert, live_cert), (key, live_key)):
        with open(src, "rb") as f, open(dst, "wb") as g:
            g.write(f.read())
    d = Delayqd(stack, extra={"tls": (live_cert, live_key, ca)}).start()
    job_id = d.add_ok(topic="orders", delay=600, body="over TLS")
    assert d.get(job_id)["body"] == "over TLS"
    st, doc = d.remove(job_id)
    assert st == 200 and doc["code"] == 0, doc
    rc, code = curl_status(f"http://127.0.0.1:{d.port}/healthz")
    assert rc != 0 or code == "000", (rc, code)   # plain HTTP gets no answer
    rc, code = curl_status(f"https://127.0.0.1:{d.port}/healthz")   # nor an unknown CA
    assert rc != 0, (rc, code)

    # A new certificate from another CA, in place of the old one, then SIGHUP.
    cert2, key2, ca2 = make_cert(tmp, "second")
    for src, dst in ((cert2, live_cert), (key2, live_key)):
        with open(src, "rb") as f, open(dst, "wb") as g:
            g.write(f.read())
    os.kill(d.proc.pid, signal.SIGHUP)
    wait_until(lambda: curl_status(f"https://127.0.0.1:{d.port}/healthz", "--cacert", ca2) == (0, "200"),
               10, "the new certificate to be served")
    assert curl_status(f"https://127.0.0.1:{d.port}/healthz", "--cacert", ca)[0] != 0
    d.extra["tls"] = (live_cert, live_key, ca2)
    assert d.get(d.add_ok(topic="orders", delay=600))["state"] == "pending"

    # A certificate that does not load, or a key that is not its own, leaves the current one.
    with open(live_cert, "w") as f:
        f.write("not a certificate\n")
    os.kill(d.proc.pid, signal.SIGHUP)
    wait_until(lambda: "was not reloaded" in d.log_text(), 10, "the failed reload to be logged")
    with open(cert, "rb") as f, open(live_cert, "wb") as g:   # the first certificate, the second key
        g.write(f.read())
    os.kill(d.proc.pid, signal.SIGHUP)
    wait_until(lambda: "is not the key of the certificate" in d.log_text(), 10, "the mismatch to be logged")
    assert curl_status(f"https://127.0.0.1:{d.port}/healthz", "--cacert", ca2) == (0, "200")
    assert d.alive()
    d.stop()
    p = check_config(d.conf_path)
    assert p.returncode != 0 and "is not the key" in p.stderr, p.stderr


def tls_redis_behind_stunnel(tmp, cert, key, ca, tries=3):
    """A TLS-only redis-server and a stunnel client in front of it, answering PING through the
    tunnel: (redis, tunnel, tls_port, plain_port). Their output goes to files in tmp, named
    when they do not come up; a port taken meanwhile by another process (free_port closes the
    port it found) is tried again with new ports."""
    for attempt in range(tries):
        tls_port, plain_port = free_port(), free_port()
        logs = [os.path.join(tmp, f"{name}-{attempt}.log") for name in ("redis", "stunnel")]
        redis = subprocess.Popen(["redis-server", "--port", "0", "--tls-port", str(tls_port),
                                  "--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file",
                                  ca, "--tls-auth-clients", "no", "--save", "", "--appendonly", "no",
                                  "--dir", tmp], stdout=open(logs[0], "w"), stderr=subprocess.STDOUT)
        conf = os.path.join(tmp, "stunnel.conf")
        with open(conf, "w") as f:
            f.write(f"foreground = yes\npid =\n[redis]\nclient = yes\naccept = 127.0.0.1:{plain_port}\n"
                    f"connect = 127.0.0.1:{tls_port}\nCAfile = {ca}\nverifyChain = yes\n"
                    f"checkIP = 127.0.0.1\n")
        tunnel = subprocess.Popen(["stunnel", conf], stdout=open(logs[1], "w"), stderr=subprocess.STDOUT)
        end = time.time() + 20
        while time.time() < end and redis.poll() is None and tunnel.poll() is None:
            if run(["redis-cli", "-p", str(plain_port), "PING"], check=False).stdout.strip() == "PONG":
                return redis, tunnel, tls_port, plain_port
            time.sleep(0.1)
        for p in (tunnel, redis):
            p.terminate()
            p.wait(10)
    raise AssertionError("Redis through stunnel never answered; see " + ", ".join(
        os.path.join(tmp, f"{n}-{a}.log") for a in range(tries) for n in ("redis", "stunnel")))


def test_jobs_go_through_a_tls_only_redis_behind_stunnel(stack):
    """Redis that speaks TLS only, reached through a local stunnel (the setup of
    docs/operations.md): jobs are added, claimed and delivered through it."""
    tmp = os.path.join(stack.tmp, "redis-tls")
    os.makedirs(tmp, exist_ok=True)
    cert, key, ca = make_cert(tmp, "redis")
    redis, tunnel, tls_port, plain_port = tls_redis_behind_stunnel(tmp, cert, key, ca)
    try:
        plain = run(["redis-cli", "-p", str(tls_port), "PING"], check=False)
        assert "PONG" not in plain.stdout, "Redis answered without TLS"
        d = Delayqd(stack, extra={"redis_port": plain_port}).start().wait_groups_owned()
        topic = "tls-redis-" + uuid.uuid4().hex[:6]
        reader = Reader(stack, topic)
        ids = [d.add_ok(topic=topic, delay_ms=500 + 100 * i, body=str(i)) for i in range(10)]
        got = reader.wait_ids(ids, 60)
        assert all(len(got[i]) == 1 for i in ids), got
        assert all(d.get(i)["state"] == "delivered" for i in ids)
        d.stop()
        reader.close()
    finally:
        for p in (tunnel, redis):
            p.terminate()
            p.wait(10)


def test_jobs_go_through_kafka_over_sasl_ssl(stack):
    """A broker of its own with a SASL_SSL listener (SCRAM-SHA-256, a certificate from a test
    CA): delayqd reaches it with config properties alone (the password from a file), adds and
    delivers jobs through it. The broker's PLAINTEXT listener is only for the test's reader."""
    tmp = os.path.join(stack.tmp, "kafka-sasl")
    os.makedirs(tmp, exist_ok=True)
    cert, key, ca = make_cert(tmp, "kafka")
    keystore = os.path.join(tmp, "broker.p12")
    run(["openssl", "pkcs12", "-export", "-in", cert, "-inkey", key, "-out", keystore,
         "-passout", "pass:ks-secret", "-name", "kafka"])
    password = os.path.join(tmp, "sasl-password")
    with open(password, "w") as f:
        f.write("scram-s3cret\n")
    broker = harness.Stack.__new__(harness.Stack)   # the test's reader uses its plain listener
    broker.kafka_port = free_port(pair=True)   # its controller listens on port + 1
    sasl_port, kdir = free_port(), os.path.join(tmp, "kafka")
    env = dict(os.environ, KAFKA_LOCAL_SASL_SSL_PORT=str(sasl_port), KAFKA_LOCAL_KEYSTORE=keystore,
               KAFKA_LOCAL_KEYSTORE_PASSWORD="ks-secret", KAFKA_LOCAL_SCRAM="delayq:scram-s3cret")
    script = os.path.join(harness.ROOT, "scripts", "kafka-local.sh")
    try:
        run(["bash", script, "start", "--port", str(broker.kafka_port), "--dir", kdir], env=env,
            timeout=300)
        d = Delayqd(stack, extra={
            "brokers": f"127.0.0.1:{sasl_port}", "sasl_password_file": password,
            "properties": ["security.protocol=sasl_ssl", "sasl.mechanisms=SCRAM-SHA-256",
                           "sasl.username=delayq", f"ssl.ca.location={ca}"]}).start()
        d.wait_groups_owned(60)
        topic = "sasl-" + uuid.uuid4().hex[:6]
        reader = Reader(broker, topic)
        ids = [d.add_ok(topic=topic, delay_ms=500 + 100 * i, body=str(i)) for i in range(10)]
        got = reader.wait_ids(ids, 60)
        assert all(len(got[i]) == 1 for i in ids), got
        reader.close()
        d.stop()
        wrong = Delayqd(stack, extra={
            "brokers": f"127.0.0.1:{sasl_port}",
            "properties": ["security.protocol=sasl_ssl", "sasl.mechanisms=SCRAM-SHA-256",
                           "sasl.username=delayq", "sasl.password=wrong", f"ssl.ca.location={ca}"]})
        p = subprocess.run([DELAYQD, "-c", wrong.conf_path], capture_output=True, text=True, timeout=120)
        out = p.stdout + p.stderr
        assert p.returncode != 0 and "uthentication" in out, out[-2000:]
    finally:
        run(["bash", script, "stop", "--dir", kdir], check=False, timeout=120)


def test_per_address_limit_is_exact_over_every_http_thread(stack):
    """http.threads = 4 and max_connections_per_ip = 10: ten connections from one address are
    all served, whichever threads accept them, and the eleventh is refused; once one closes,
    another is served."""
    d = Delayqd(stack, extra={"max_connections_per_ip": 10, "http_threads": 4}).start()

    def held():   # a request whose headers have not ended: the connection stays open
        s = socket.create_connection(("127.0.0.1", d.port))
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        return s

    def answer(s):
        s.settimeout(5)
        try:
            s.sendall(b"\r\n")
            return s.recv(4096)
        except OSError:
            return b""

    # The start-up probe's connection (curl GET /healthz) counts until its thread has seen it
    # close: on a loaded machine that can take a moment after curl exited.
    time.sleep(1)
    conns = [held() for _ in range(10)]
    time.sleep(0.3)
    extra = held()
    refused = answer(extra)
    extra.close()
    answers = [answer(s) for s in conns]
    served = sum(a.startswith(b"HTTP/1.1 200") for a in answers)
    print(f"    {served} of 10 served, the 11th {'refused' if not refused else 'served'}")
    assert served == 10, answers
    assert refused == b"", refused
    conns.pop().close()
    time.sleep(0.3)
    again = held()
    assert answer(again).startswith(b"HTTP/1.1 200")
    again.close()
    for s in conns:
        s.close()


def documented_acl(user, password, prefix):
    """The ACL SETUSER command of docs/security.md's hardening checklist, for this user,
    password and key prefix."""
    text = open(os.path.join(harness.ROOT, "docs", "security.md")).read()
    line = next(ln.strip() for ln in text.splitlines() if ln.strip().startswith("ACL SETUSER delayq "))
    words = line.split()
    assert words[2] == "delayq" and ">CHANGE-ME" in words and "~dq:*" in words, words
    return [user if w == "delayq" else f">{password}" if w == ">CHANGE-ME" else
            f"~{prefix}*" if w == "~dq:*" else f"&{prefix}*" if w == "&dq:*" else w
            for w in words]


def test_the_documented_redis_acl_user_runs_every_flow(stack):
    """Under a Redis user holding exactly the commands and keys docs/security.md lists, every
    flow works (add, deliver, get, remove, reschedule, claims, stats, pull, callback, schedule,
    dead letters, delayq-claims reading its password from a file), and Redis refused nothing."""
    from test_callbacks import Receiver, callbacks_conf
    name = "acl" + uuid.uuid4().hex[:6]
    password = uuid.uuid4().hex
    pw_file = os.path.join(stack.tmp, f"{name}.pw")
    with open(pw_file, "w") as f:
        f.write(password + "\n")
    stack.redis(*documented_acl(name, password, f"{name}:"))
    stack.redis("ACL", "LOG", "RESET")
    rx = Receiver()
    d = None
    try:
        d = Delayqd(stack, name=name, extra={
            "redis_user": name, "redis_password_file": pw_file, "pull_topics": [f"{name}_pull"],
            "callbacks": callbacks_conf()}).start().wait_groups_owned()
        topic = f"{name}_biz"
        reader = Reader(stack, topic)
        delivered = d.add_ok(topic=topic, delay=1, body="one")
        removed = d.add_ok(topic=topic, delay=60, body="two")
        moved = d.add_ok(topic=topic, delay=60, body="three")
        assert d.remove(removed)[0] == 200
        st, doc = d.http("POST", "/delay-queue/api/jobs/reschedule", {"job_id": moved, "delay": 2})
        assert st == 200, doc
        called = d.add_ok(delay=1, body="cb", callback={"url": rx.url("/hook")})
        pulled = d.add_ok(topic=f"{name}_pull", delay=1, body="p")
        st, doc = d.http("PUT", f"/delay-queue/api/schedules/{name}-s",
                         {"every_ms": 1000, "topic": topic, "body": "tick"})
        assert st == 200, doc
        stack.produce(d.delay_topic(d.levels[0]), "poison", headers={"dq-topic": topic, "dq-due-ms": "x"})
        reader.wait_ids([delivered, moved], 20)
        wait_until(lambda: rx.of("/hook"), 20, "the callback")
        st, doc = d.http("POST", "/delay-queue/api/jobs/pop",
                         {"topic": f"{name}_pull", "wait_ms": 10000, "ttr": 30})
        assert st == 200 and [j["id"] for j in doc["data"]["jobs"]] == [pulled], doc
        j = doc["data"]["jobs"][0]
        st, doc = d.http("POST", "/delay-queue/api/jobs/finish", {"job_id": j["id"], "receipt": j["receipt"]})
        assert st == 200, doc
        wait_until(lambda: any(m["headers"].get("dq-id", "").startswith(f"{name}-s@")
                               for m in reader.all()), 15, "an occurrence")
        st, doc = d.http("GET", f"/delay-queue/api/schedules/{name}-s/runs")
        assert st == 200 and doc["data"]["runs"], doc
        assert d.http("DELETE", f"/delay-queue/api/schedules/{name}-s")[0] == 200
        wait_until(lambda: d.http("GET", "/delay-queue/api/dead")[1]["data"]["dead"], 15, "the dead letter")
        letter = d.http("GET", "/delay-queue/api/dead")[1]["data"]["dead"][0]
        st, doc = d.http("POST", "/delay-queue/api/dead/redrive",
                         {"dead": [{"partition": letter["partition"], "offset": letter["offset"]}]})
        assert st == 200 and doc["data"]["redriven"] == 1, doc
        reader.wait_ids([f"dead-{letter['partition']}-{letter['offset']}"], 15)
        for path in ("/delay-queue/api/claims", "/delay-queue/api/stats"):
            st, doc = d.http("GET", path)
            assert st == 200, (path, doc)
        assert d.get(called)["state"] == "delivered" and d.get(removed)["state"] == "cancelled"
        p = run(["bash", os.path.join(harness.ROOT, "scripts", "claims.sh"), "-c", d.conf_path, "list"],
                check=False)
        assert p.returncode == 0 and "alive" in p.stdout, (p.stdout, p.stderr)
        d.stop()
        assert stack.redis("ACL", "LOG") == "", stack.redis("ACL", "LOG")   # nothing refused
        reader.close()
    finally:
        if d and d.alive():
            d.stop()
        rx.close()
        stack.redis("ACL", "DELUSER", name)


# What the Redis user never needs: AUTH is open to all; the Sentinels are asked (and subscribed
# to) with their own credentials.
NOT_THE_USERS = {"auth", "sentinel", "psubscribe", "subscribe"}


def test_every_redis_command_in_the_code_is_in_the_documented_acl(stack):
    """The code's Redis commands (its scripts' calls, the commands it builds, delayq-claims'),
    each one in the documented ACL user's list: a command added to the code and not to the
    docs fails here, even on a path the flow above does not take."""
    known = set(stack.redis("COMMAND", "LIST").split())
    allowed = {w[1:] for w in documented_acl("u", "p", "x:") if w.startswith("+")}
    sent = set()
    src = os.path.join(harness.ROOT, "src")
    for name in sorted(glob.glob(os.path.join(src, "**", "*.c"), recursive=True)):
        text = open(name).read()
        sent |= {m.lower() for m in re.findall(r"redis\.p?call\('([A-Z]+)'", text)}
        if re.search(r"conn_command|conn_call|conn_pipeline|redisCommand|redisAppendCommand|link_cmd", text):
            for word in re.findall(r'"([A-Z]{3,})[" %]', text):
                if word.lower() in known:
                    sent.add(word.lower())
    claims = open(os.path.join(harness.ROOT, "scripts", "claims.sh")).read()
    sent |= {m.lower() for m in re.findall(r"\brcli ([A-Z]+)", claims)}
    missing = {c for c in sent - NOT_THE_USERS
               if c not in allowed and not any(a.startswith(c + "|") for a in allowed)}
    assert not missing, f"sent but not in docs/security.md's ACL user: {sorted(missing)}"
    assert {"evalsha", "hset", "zadd", "getdel", "time"} <= sent, sent   # the scan sees the code


def test_the_read_token_sees_no_callback_header_value(stack):
    """Users put receivers' API keys in a callback's headers: the read token is shown their
    names only, in schedules and dead letters as in get; the write token sees them whole."""
    secret = "Bearer key-" + uuid.uuid4().hex
    d = Delayqd(stack, extra={"auth_token": "w", "read_token": "r",
                              "callbacks": 'secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"; '
                                           'allow_private = true;'}).start()
    callback = {"url": "http://127.0.0.1:9/hook", "headers": {"Authorization": secret}}
    st, doc = d.http("PUT", "/delay-queue/api/schedules/keyed",
                     {"every_ms": 3600000, "body": "b", "callback": callback}, headers=bearer("w"))
    assert st == 200 and doc["data"]["callback"]["headers"]["Authorization"] == secret, doc
    stack.produce(d.dlq, "letter", headers={"dq-topic": "orders", "dq-error": "x",
                                            "dq-callback": json.dumps(callback)})
    reads = ["/delay-queue/api/schedules/keyed", "/delay-queue/api/schedules",
             "/delay-queue/api/dead"]
    wait_until(lambda: d.http("GET", reads[2], headers=bearer("w"))[1]["data"]["dead"], 15,
               "the dead letter to be listed")
    letter = d.http("GET", reads[2], headers=bearer("w"))[1]["data"]["dead"][0]
    reads.append(f"/delay-queue/api/dead/{letter['partition']}/{letter['offset']}")
    for path in reads:
        st, whole = d.http("GET", path, headers=bearer("w"))
        assert st == 200 and (secret in json.dumps(whole) or path == reads[2]), (path, whole)
        st, seen = d.http("GET", path, headers=bearer("r"))
        assert st == 200 and secret not in json.dumps(seen), (path, seen)
    st, doc = d.http("GET", reads[0], headers=bearer("r"))
    assert doc["data"]["callback"]["headers"] == {"Authorization": None}, doc
    st, doc = d.http("GET", reads[3], headers=bearer("r"))
    assert json.loads(doc["data"]["headers"]["dq-callback"])["headers"] == {"Authorization": None}, doc
