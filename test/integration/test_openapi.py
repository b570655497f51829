"""The API's description, docs/openapi.yaml: served as JSON at /delay-queue/api/openapi.json, true
to what delayqd answers (schemathesis drives a delayqd with what it generates from it), and
complete (every route of delayqd's route tables is in it)."""

import json
import os
import re
import subprocess
import tempfile
import urllib.error
import urllib.request

import yaml

from harness import ROOT, Delayqd

SPEC = os.path.join(ROOT, "docs", "openapi.yaml")
HERE = os.path.join(ROOT, "test", "integration")
SCHEMATHESIS = os.path.join(ROOT, ".venv", "bin", "schemathesis")
API = "/delay-queue/api"
TOKEN = "openapi-token"
METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def spec():
    with open(SPEC) as f:
        return yaml.safe_load(f)


def start(stack, **extra):
    # levels up to 30s: job.max_delay_s keeps its default (30 days), the limit the spec gives;
    # 8 partitions, the default: the dead-letter partitions the spec gives; a pop waits 100 ms
    # at most (the spec allows three minutes, which the run cannot spend on each case)
    return Delayqd(stack, extra=dict({"auth_token": TOKEN, "max_delay_s": None,
                                      "max_wait_ms": 100}, **extra),
                   levels=["1s", "5s", "30s"], partitions=8).start()


def marked(node, out, path=()):
    """{path (a tuple of keys): {keyword: setting}} of every schema in node that carries
    x-delayq-limits."""
    if isinstance(node, dict):
        if "x-delayq-limits" in node:
            out[path] = node["x-delayq-limits"]
        for k, v in node.items():
            marked(v, out, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            marked(v, out, path + (i,))
    return out


def at(node, path):
    for part in path:
        node = node[part]
    return node


def instance_limits(d, max_delay_s=2592000, batch=1000, endpoints=None):
    """What each setting of x-delayq-limits is for instance d."""
    return {"job.max_delay_s": max_delay_s, "job.max_delay_ms": max_delay_s * 1000,
            "http.max_batch_jobs": batch, "dead.partition_max": d.partitions - 1,
            "delay.group_max": 0, "callbacks.endpoints": endpoints,
            "topics.not_business": {"enum": [".", ".."] + [f"{d.name}_delay_{lv}" for lv in d.levels]
                                    + [d.dlq]}}


def with_limits(docs, want):
    """docs with the keywords its x-delayq-limits mark set as want says (None: left)."""
    for path, limits in marked(docs, {}).items():
        for kw, setting in limits.items():
            if want[setting] is None:
                continue
            at(docs, path)[kw] = want[setting]
            if kw == "enum":   # some name is one now
                del at(docs, path)["not"]
    return docs


def test_openapi_json_is_served_without_a_token(stack):
    d = start(stack)
    with urllib.request.urlopen(f"http://127.0.0.1:{d.port}{API}/openapi.json", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == "application/json", r.headers
        served = json.load(r)
    assert served == with_limits(spec(), instance_limits(d)), \
        "the served description is not docs/openapi.yaml with the instance's limits (rebuild delayqd)"
    assert served["openapi"].startswith("3.1") and served["servers"] == [{"url": API}]
    st, doc = d.http("POST", f"{API}/openapi.json")
    assert st == 405 and doc["code"] == 400, (st, doc)


def test_the_served_description_has_the_instance_limits(stack):
    """An instance of other limits serves them: the longest delay, the batch size, the
    dead-letter partitions, the named callback endpoints; nothing else differs."""
    from test_callbacks import callbacks_conf
    d = Delayqd(stack, extra={"auth_token": TOKEN, "max_delay_s": 3600, "max_batch_jobs": 50,
                              "callbacks": callbacks_conf() + ' endpoints = { billing = {'
                              ' url = "http://127.0.0.1:9/b"; }; crm = {'
                              ' url = "http://127.0.0.1:9/c"; }; };'},
                levels=["1s", "5s", "30s"], partitions=3).start()
    with urllib.request.urlopen(f"http://127.0.0.1:{d.port}{API}/openapi.json", timeout=10) as r:
        served = json.load(r)
    want = instance_limits(d, max_delay_s=3600, batch=50, endpoints=["billing", "crm"])
    marks = marked(spec(), {})
    assert len(marks) >= 8, marks
    for path, limits in marks.items():
        for kw, setting in limits.items():
            assert at(served, path)[kw] == want[setting], (path, kw)
    assert served == with_limits(spec(), want)   # nothing else differs
    st, doc = d.http("POST", f"{API}/jobs/add_batch", {"jobs": [{"topic": "t", "delay": 1}] * 51},
                     headers={"Authorization": f"Bearer {TOKEN}"})
    assert st == 413, (st, doc)   # as the served description says


def c_routes():
    """{path: methods} of src/http/routes.c's route table, its paths' macros read from src/ and
    include/."""
    macros = {}
    for d in ("src", "include"):
        for dirpath, _, names in os.walk(os.path.join(ROOT, d)):
            for name in (n for n in names if n.endswith((".c", ".h"))):
                with open(os.path.join(dirpath, name)) as f:
                    macros.update(re.findall(r'^#define (\w+) ("[^"\n]*")', f.read(), re.M))
    with open(os.path.join(ROOT, "src", "http", "routes.c")) as f:
        src = f.read()
    table = src[src.index("} routes[] = {"):]
    table = table[:table.index("\n};")]
    routes = {}
    for expr, flags in re.findall(r'\{\s*([\w" ./-]+?)\s*,\s*R_\w+\s*,\s*([\w |]+?)\s*,', table):
        parts = [json.loads(macros.get(tok, tok)) for tok in re.findall(r'"[^"]*"|\w+', expr)]
        routes["".join(parts)] = {m.lower() for m in re.findall(r"METHOD_(\w+)", flags)}
    assert len(routes) > 20 and f"{API}/jobs/add" in routes, routes
    return routes


def function(path, name):
    """The body of C function name in the file at path."""
    with open(os.path.join(ROOT, path)) as f:
        src = f.read()
    start = src.index(f"{name}(const char *path)\n{{")
    return src[start:src.index("\n}\n", start)]


def test_every_route_is_described(stack):
    """Every route of delayqd under /delay-queue/api, with the methods it takes, is in the spec:
    the route table's in src/http/http.c; below /schedules/ and /dead/, the paths that schedroutes.c
    and dead.c answer (their *_allow functions); and, asked with OPTIONS, each path of the spec
    answers 405 with the spec's methods in Allow."""
    paths = spec()["paths"]
    methods = {p: set(ops) & METHODS for p, ops in paths.items()}
    below = []
    for path, takes in c_routes().items():
        if not path.startswith(API + "/"):
            continue
        sub = path[len(API):]
        if sub.endswith("/"):
            below.append(sub)
            assert any(p.startswith(sub) for p in paths), f"nothing below {path} in the spec"
        else:
            assert sub in paths, f"{path} is not in docs/openapi.yaml"
            assert methods[sub] == takes, (path, methods[sub], takes)
    assert sorted(below) == ["/dead/", "/pull/", "/schedules/"], below
    actions = re.findall(r'strcmp\(action, "(\w+)"\)', function("src/schedules/schedroutes.c", "schedules_allow"))
    dead = re.findall(r'strcmp\(path, "(/\w+)"\)', function("src/dead/dead.c", "dead_allow"))
    assert actions and dead, (actions, dead)
    for sub in (["/schedules/{id}", "/dead/{partition}/{offset}", "/pull/{topic}",
                 "/pull/{topic}/jobs", "/pull/{topic}/pause", "/pull/{topic}/resume"] +
                [f"/schedules/{{id}}/{a}" for a in actions] + [f"/dead{p}" for p in dead]):
        assert sub in paths, f"{API}{sub} is not in docs/openapi.yaml"

    d = start(stack)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for sub, takes in methods.items():
        url = f"http://127.0.0.1:{d.port}{API}" + sub.format(id="oa-1", partition=0, offset=0,
                                                                    topic="oa-topic")
        req = urllib.request.Request(url, method="OPTIONS", headers=auth)
        try:
            urllib.request.urlopen(req, timeout=10)
            raise AssertionError(f"OPTIONS {sub} was answered 2xx")
        except urllib.error.HTTPError as e:
            allow = {m.strip().lower() for m in (e.headers["Allow"] or "").split(",")}
            assert e.code == 405 and allow == takes, (sub, e.code, e.headers["Allow"], takes)


def test_delayqd_answers_as_the_spec_says(stack):
    """schemathesis generates requests from the served spec, valid and not, and checks each
    answer: no 5xx, every status, content type and body as the spec says, invalid input refused
    and valid input taken, a wrong method 405 with Allow, a missing token 401, on every
    operation (jobs, schedules and redrives are stored in this throwaway instance; a pop waits
    100 ms at most). What it may generate, and the two operations whose valid input may still
    be refused for what a JSON Schema cannot state, is in schemathesis.toml;
    schemathesis_hooks.py keeps callbacks out of the bodies it sends, so that delayqd is never
    asked to call a generated URL."""
    assert os.access(SCHEMATHESIS, os.X_OK), f"no {SCHEMATHESIS} (scripts/deps.sh makes .venv)"
    d = start(stack)
    tmp = tempfile.mkdtemp(prefix="schemathesis-", dir=stack.tmp)   # its files, none in the repo
    env = dict(os.environ, HYPOTHESIS_STORAGE_DIRECTORY=os.path.join(tmp, "hypothesis"),
               SCHEMATHESIS_HOOKS=os.path.join(HERE, "schemathesis_hooks.py"))
    cmd = [SCHEMATHESIS, "--config-file", os.path.join(HERE, "schemathesis.toml"), "run",
           f"http://127.0.0.1:{d.port}{API}/openapi.json", "-H", f"Authorization: Bearer {TOKEN}",
           "--max-examples", "10", "--generation-database", "none", "--max-failures", "20",
           "--no-color"]
    try:
        p = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
        raise AssertionError(f"schemathesis ran over 300 s:\n{out[-6000:]}") from None
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"schemathesis exited {p.returncode}:\n{out[-8000:]}"
    assert re.search(r"\d+ generated, \d+ passed", out), out[-3000:]
    assert d.alive(), d.log_text()[-3000:]
