"""Security: least-privilege tokens, secrets read from files, a config holding a secret kept
private, and clients that cannot starve others of connections."""

import os
import socket
import stat
import subprocess
import time

from harness import DELAYQD, Delayqd, now_ms

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
    assert p.returncode != 0 and "http.auth_token" in p.stderr and "chmod 600" in p.stderr, p.stderr
    os.chmod(clear, 0o600)
    assert check_config(clear).returncode == 0
    with open(clear, "w") as f:
        f.write('redis: { password_file = "/nonexistent/secret"; };\n')
    p = check_config(clear)
    assert p.returncode != 0 and "redis.password_file" in p.stderr and "/nonexistent/secret" in p.stderr, p.stderr
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
