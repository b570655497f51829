"""The compatibility routes, driven with the exact requests of the original servers' clients
(ouqiang's PHP client, changsongl's Go SDK) and answered byte for byte as the original servers
answer them (Go's encoding/json: ouqiang's struct in its field order, sent as text/plain as
Go's net/http sniffs it; changsongl's gin map with sorted keys, as application/json): status,
Content-Type and body. Ids and bodies come back as they were given (ouqiang trims them with
strings.TrimSpace, Unicode spaces included, as its server does)."""

import http.client
import json
import time
import urllib.parse
import uuid

from harness import Delayqd, Reader, now_ms, wait_until

OQ_TYPE = "text/plain; charset=utf-8"
CS_TYPE = "application/json; charset=utf-8"


def raw(d, method, path, body=None, timeout=30):
    """(status, Content-Type, body text) of one request, body bytes or str sent as they are."""
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=timeout)
    data = body.encode() if isinstance(body, str) else body
    conn.request(method, path, data, {"Content-Type": "application/json"} if data is not None else {})
    r = conn.getresponse()
    out = (r.status, r.getheader("Content-Type"), r.read().decode())
    conn.close()
    return out


def oq(d, path, body):
    """An ouqiang answer's text, checked for its status and type."""
    status, ctype, text = raw(d, "POST", path, body)
    assert (status, ctype) == (200, OQ_TYPE), (path, body, status, ctype, text)
    return text


def php_push(topic, id, delay, ttr, body):
    """The body ouqiang/delayqueue-php sends: Job's members in order, its body json_encode'd."""
    return json.dumps({"topic": topic, "id": id, "delay": delay, "ttr": ttr, "body": body},
                      ensure_ascii=False, separators=(",", ":"))


ADDED = '{"code":0,"message":"添加成功","data":null}'
OK = '{"code":0,"message":"操作成功","data":null}'


def test_ouqiang_answers_byte_for_byte_through_a_jobs_life(stack):
    d = Delayqd(stack, extra={"ouqiang": True}).start()
    body = json.dumps({"uid": 10829378, "className": "App\\Job\\Close", "note": "<a&b>"})
    added_ms = now_ms()
    assert oq(d, "/push", php_push("order", "15702398321", 1, 3, body)) == ADDED
    text = oq(d, "/get", '{"id":"15702398321"}')
    due = json.loads(text)["data"]["delay"]
    assert abs(due - (added_ms // 1000 + 1)) <= 1, text   # the due time, Unix seconds
    esc = json.dumps(body).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    assert text == ('{"code":0,"message":"操作成功","data":{"topic":"order","id":"15702398321",'
                    f'"delay":{due},"ttr":3,"body":{esc}}}}}'), text

    text = oq(d, "/pop", '{"topic":"order"}')   # waits for the job to become due
    assert text == f'{{"code":0,"message":"操作成功","data":{{"id":"15702398321","body":{esc}}}}}', text
    assert now_ms() >= added_ms + 1000
    text = oq(d, "/pop", '{"topic":"order"}')   # never finished: back after its ttr
    assert '"id":"15702398321"' in text and now_ms() >= added_ms + 4000, text
    assert oq(d, "/finish", '{"id":"15702398321"}') == OK
    assert oq(d, "/get", '{"id":"15702398321"}') == OK   # data null: gone
    assert oq(d, "/delete", '{"id":"never-was"}') == OK   # as ouqiang answers

    oq(d, "/push", php_push("mail", "m-1", 1, 30, "hi"))
    text = oq(d, "/pop", '{"topic":"order,mail"}')   # several topics, comma-separated
    assert text == '{"code":0,"message":"操作成功","data":{"id":"m-1","body":"hi"}}', text


def test_ouqiang_ids_are_any_string_and_a_push_overwrites_as_there(stack):
    d = Delayqd(stack, extra={"ouqiang": True}).start()
    odd = "订单 42 with spaces/" + "x" * 200   # not a job id of the native API: kept by digest
    assert oq(d, "/push", php_push("order", "\u3000" + odd + "\n", 1, 30, "\u2003 b \u00a0")) == ADDED
    text = oq(d, "/pop", '{"topic":"order"}')
    assert json.loads(text)["data"] == {"id": odd, "body": "b"}, text   # Go's TrimSpace
    assert json.loads(oq(d, "/get", json.dumps({"id": odd})))["data"]["id"] == odd
    assert oq(d, "/finish", json.dumps({"id": odd})) == OK
    # the id is free at once: the same id again is a new job
    assert oq(d, "/push", php_push("order", odd, 1, 30, "again")) == ADDED
    assert json.loads(oq(d, "/pop", '{"topic":"order"}'))["data"] == {"id": odd, "body": "again"}

    # a push of a pending id replaces it: body, ttr and a delay counted from this push
    assert oq(d, "/push", php_push("order", "p-1", 3600, 30, "old")) == ADDED
    before = now_ms()
    assert oq(d, "/push", php_push("order", "p-1", 1, 20, "new")) == ADDED
    got = json.loads(oq(d, "/get", '{"id":"p-1"}'))["data"]
    assert got["body"] == "new" and got["ttr"] == 20 and got["delay"] <= before // 1000 + 2, got
    assert json.loads(oq(d, "/pop", '{"topic":"order"}'))["data"] == {"id": "p-1", "body": "new"}
    # ... and a reserved one too (ouqiang's SET of the id)
    assert oq(d, "/push", php_push("order", "p-1", 1, 20, "newer")) == ADDED
    assert json.loads(oq(d, "/pop", '{"topic":"order"}'))["data"] == {"id": "p-1", "body": "newer"}


def test_ouqiang_reads_json_as_go_does(stack):
    d = Delayqd(stack, extra={"ouqiang": True}).start()
    # null is as absent, member names match in any case, unknown members are ignored
    assert oq(d, "/push", '{"Topic":"order","ID":"n-1","delay":1,"TTR":5,"body":null,"x":1}') == ADDED
    assert json.loads(oq(d, "/pop", '{"topic":"order"}'))["data"] == {"id": "n-1", "body": ""}
    assert oq(d, "/push", "null") == '{"code":1,"message":"job id不能为空","data":null}'
    cases = [
        ('{"topic":"order","delay":1,"ttr":3,"body":"x"}', "job id不能为空"),
        ('{"id":"a","delay":1,"ttr":3,"body":"x"}', "topic 不能为空"),
        ('{"id":"a","topic":"order","delay":0,"ttr":3}', "delay 取值范围1 - (2^31 - 1)"),
        ('{"id":"a","topic":"order","delay":1,"ttr":86401}', "ttr 取值范围1 - 86400"),
        ('{"id":5,"topic":"order","delay":1,"ttr":3}', "解析json失败"),
        ('{"id":"a","topic":"order","delay":"1","ttr":3}', "解析json失败"),
        ('{"id":"a","topic":"order","delay":1.5,"ttr":3}', "解析json失败"),
        ("{not json", "解析json失败"),
        ("[1]", "解析json失败"),
    ]
    for body, message in cases:
        assert oq(d, "/push", body) == f'{{"code":1,"message":"{message}","data":null}}', body
    assert oq(d, "/pop", '{"topic":" "}') == '{"code":1,"message":"topic不能为空","data":null}'
    assert oq(d, "/finish", '{"id":""}') == '{"code":1,"message":"job id不能为空","data":null}'
    plain = Delayqd(stack).start()   # the switch is off by default
    assert plain.http("POST", "/push", {"id": "a"})[0] == 404



def test_ouqiang_finish_and_delete_leave_jobs_that_are_no_pull_jobs_alone(stack):
    """ouqiang's ids are global, as the native API's: its /finish and /delete of a job added
    there for Kafka answer as for an id of no job, and the job is delivered when due."""
    d = Delayqd(stack, extra={"ouqiang": True}).start()
    topic = "oqkafka-" + uuid.uuid4().hex[:6]
    reader = Reader(stack, topic)
    d.add_ok(id="k-1", topic=topic, delay=3, body="to kafka")
    d.add_ok(id="k-2", topic=topic, delay=600, body="removed")
    assert d.remove("k-2")[0] == 200
    for path in ("/delete", "/finish"):
        for id in ("k-1", "k-2"):
            assert oq(d, path, json.dumps({"id": id})) == OK, (path, id)
    # a push of its id replaces no job of another kind: refused, as an id taken
    pushed = json.loads(oq(d, "/push", php_push("oq", "k-1", 1, 30, "pushed")))
    assert pushed["code"] == 1 and "k-1" in pushed["message"], pushed
    assert d.get("k-1")["state"] == "pending" and d.get("k-1")["body"] == "to kafka"
    # nor does a get show it
    assert oq(d, "/get", json.dumps({"id": "k-1"})) == OK
    assert d.get("k-2")["state"] == "cancelled"   # kept: its id stays refused as long
    reader.wait_ids(["k-1"], 30)


def test_an_ouqiang_pop_of_more_topics_than_served_is_refused_naming_the_limit(stack):
    """A pop lists 16 topics at most here (ouqiang's has no limit): one of more is refused,
    never served from the first 16 alone."""
    d = Delayqd(stack, extra={"ouqiang": True, "max_wait_ms": 2000}).start()
    oq(d, "/push", php_push("t17", "last-1", 1, 30, "b"))
    text = oq(d, "/pop", json.dumps({"topic": ",".join(f"t{i}" for i in range(1, 18))}))
    assert text == '{"code":1,"message":"a pop names 16 topics at most here","data":null}', text
    text = oq(d, "/pop", json.dumps({"topic": ",".join(f"t{i}" for i in range(2, 18))}))
    assert json.loads(text)["data"] == {"id": "last-1", "body": "b"}, text

def cs(d, method, path, body=None, timeout=30):
    """A changsongl answer's text, checked for its status and type."""
    status, ctype, text = raw(d, method, path, body, timeout)
    assert (status, ctype) == (200, CS_TYPE), (method, path, status, ctype, text)
    return text


def sdk_add(id, delay, ttr, body, override=False):
    """The body changsongl/delay-queue-client sends: a Go map, keys sorted, whole seconds."""
    return json.dumps({"body": body, "delay": delay, "id": id, "override": override, "ttr": ttr},
                      separators=(",", ":"))


CS_OK = '{"message":"ok","success":true}'
CS_EXISTS = '{"message":"job is exists","success":false}'
CS_NOT_EXISTS = '{"message":"job is not exists","success":false}'
CS_EMPTY = '{"data":null,"message":"ok","success":true}'


def test_changsongl_answers_byte_for_byte_as_its_sdk_reads_them(stack):
    """The SDK's flow: add, pop (GetDelay and GetTTR are the job's own seconds), a redelivery
    after the ttr, finish; ids and bodies come back exactly as sent."""
    d = Delayqd(stack, extra={"changsongl": True}).start()
    added_ms = now_ms()
    assert cs(d, "POST", "/topic/mytopic/job", sdk_add("  line1\nline2\n", 2, 3, "  <b>&\n")) == CS_OK
    text = cs(d, "GET", "/topic/mytopic/job?timeout=10")
    assert text == ('{"data":{"body":"  \\u003cb\\u003e\\u0026\\n","delay":2,"id":"  line1\\nline2\\n",'
                    '"topic":"mytopic","ttr":3},"message":"ok","success":true}'), text
    assert now_ms() >= added_ms + 2000
    text = cs(d, "GET", "/topic/mytopic/job?timeout=10")   # not finished within its ttr: again
    assert '"delay":2,' in text and '"ttr":3}' in text, text   # its own, however late the pop
    assert cs(d, "PUT", "/topic/mytopic/job/%20%20line1%0Aline2%0A") == CS_OK
    assert cs(d, "PUT", "/topic/mytopic/job/%20%20line1%0Aline2%0A") == CS_NOT_EXISTS
    assert cs(d, "GET", "/topic/mytopic/job?timeout=1") == CS_EMPTY

    # ttr 0: handed out once; the record gone with it once finished
    cs(d, "POST", "/topic/mytopic/job", sdk_add("once", 0, 0, "b"))
    assert '"id":"once"' in cs(d, "GET", "/topic/mytopic/job?timeout=10")
    time.sleep(1.5)
    assert cs(d, "GET", "/topic/mytopic/job?timeout=1") == CS_EMPTY


def test_changsongl_ids_live_in_their_topic_and_are_free_once_done(stack):
    d = Delayqd(stack, extra={"changsongl": True}).start()
    assert cs(d, "POST", "/topic/a/job", sdk_add("same", 0, 30, "in a")) == CS_OK
    assert cs(d, "POST", "/topic/b/job", sdk_add("same", 0, 30, "in b")) == CS_OK   # two jobs
    assert cs(d, "POST", "/topic/a/job", sdk_add("same", 0, 30, "in a")) == CS_EXISTS   # repeated
    assert cs(d, "POST", "/topic/a/job", sdk_add("same", 5, 30, "other")) == CS_EXISTS
    assert json.loads(cs(d, "GET", "/topic/b/job?timeout=10"))["data"]["body"] == "in b"
    assert json.loads(cs(d, "GET", "/topic/a/job?timeout=10"))["data"]["body"] == "in a"
    assert cs(d, "DELETE", "/topic/b/job/same") == CS_OK
    assert cs(d, "DELETE", "/topic/b/job/same") == CS_NOT_EXISTS
    assert cs(d, "PUT", "/topic/other/job/same") == CS_NOT_EXISTS   # another topic's id: none
    # free at once: the id is a new job again, in b
    assert cs(d, "POST", "/topic/b/job", sdk_add("same", 0, 30, "again")) == CS_OK
    assert json.loads(cs(d, "GET", "/topic/b/job?timeout=10"))["data"]["body"] == "again"

    # override replaces a job that is there, and only such a job
    assert cs(d, "POST", "/topic/a/job", sdk_add("swap", 1, 5, "new", override=True)) == CS_NOT_EXISTS
    assert cs(d, "POST", "/topic/a/job", sdk_add("swap", 600, 5, "old")) == CS_OK
    assert cs(d, "POST", "/topic/a/job", sdk_add("swap", 1, 5, "new", override=True)) == CS_OK
    text = cs(d, "GET", "/topic/a/job?timeout=10")
    assert json.loads(text)["data"] == {"body": "new", "delay": 1, "id": "swap", "topic": "a", "ttr": 5}

    # ids the native API would refuse: non-ASCII, spaces, 200 characters
    for id in ("订单 1", "x" * 200):
        assert cs(d, "POST", "/topic/c/job", sdk_add(id, 0, 30, "b")) == CS_OK
        assert json.loads(cs(d, "GET", "/topic/c/job?timeout=10"))["data"]["id"] == id
        assert cs(d, "DELETE", "/topic/c/job/" + urllib.parse.quote(id)) == CS_OK



def test_a_popped_job_whose_record_is_not_marked_yet_is_removed(stack):
    """A due pull job is made ready, then its record marked delivered: a pop and a remove can
    come in between (under load, tens of milliseconds). Its record still says delivering (set
    here by hand, as it stays while the mark waits): changsongl's DELETE and the native remove
    take the job out of its queue all the same, and it is never handed out again."""
    d = Delayqd(stack, extra={"changsongl": True, "max_wait_ms": 3000}).start()
    for id in ("a", "b"):
        assert cs(d, "POST", "/topic/c/job", sdk_add(id, 0, 1, id)) == CS_OK
        assert json.loads(cs(d, "GET", "/topic/c/job?timeout=10"))["data"]["id"] == id
        stack.redis("SETRANGE", f"{d.prefix}job:c/{id}", "0", "s")   # delivering, unmarked
    assert cs(d, "DELETE", "/topic/c/job/a") == CS_OK
    st, doc = d.remove("c/b")
    assert st == 200 and doc["message"] == "ok", (st, doc)
    time.sleep(1.5)   # past their time to run: a job still reserved would be handed out again
    assert cs(d, "GET", "/topic/c/job?timeout=2") == CS_EMPTY


def test_changsongl_finish_and_delete_act_on_pull_jobs_of_their_topic_alone(stack):
    """PUT and DELETE /topic/<t>/job/<id> name the job <id> of topic <t>: a job of that id
    added through the native API for Kafka, or for another pull topic, is left alone and
    answered as no job, pending or ready."""
    d = Delayqd(stack, extra={"changsongl": True}).start()
    topic = "cskafka-" + uuid.uuid4().hex[:6]
    reader = Reader(stack, topic)
    d.add_ok(id="jobs/k-1", topic=topic, delay=3, body="to kafka")
    d.add_ok(id="a/ready", topic="b", deliver="pull", delay=0, body="in b")
    d.add_ok(id="a/later", topic="b", deliver="pull", delay=600, body="in b")
    wait_until(lambda: d.get("a/ready")["state"] == "ready", 15, "the pull job made ready")
    for method in ("DELETE", "PUT"):
        for path in ("/topic/jobs/job/k-1", "/topic/a/job/ready", "/topic/a/job/later"):
            assert cs(d, method, path) == CS_NOT_EXISTS, (method, path)
    # an override replaces none of them either
    for t, id in (("jobs", "k-1"), ("a", "later")):
        assert cs(d, "POST", f"/topic/{t}/job", sdk_add(id, 1, 30, "new", override=True)) == \
            CS_NOT_EXISTS, (t, id)
    assert d.get("jobs/k-1")["state"] == "pending"
    assert d.get("jobs/k-1")["body"] == "to kafka" and d.get("a/later")["body"] == "in b"
    assert d.get("a/later")["state"] == "pending"
    assert json.loads(cs(d, "GET", "/topic/b/job?timeout=10"))["data"]["id"] == "a/ready"
    reader.wait_ids(["jobs/k-1"], 30)

def test_changsongl_pops_and_errors_as_there(stack):
    d = Delayqd(stack, extra={"changsongl": True}).start()
    started = time.monotonic()
    assert cs(d, "GET", "/topic/q/job") == CS_EMPTY   # no timeout: answered at once
    assert time.monotonic() - started < 4   # it waited its 5 s default before
    cs(d, "POST", "/topic/q/job", sdk_add("later", 1, 30, "b"))
    assert json.loads(cs(d, "GET", "/topic/q/job?timeout=600"))["data"]["id"] == "later"   # capped
    cases = [
        ("", '{"message":"body invalid: EOF","success":false}'),
        (sdk_add("", 1, 1, "b"), '{"message":"body invalid: Key: \'addParam.idParam.ID\' Error:Field '
                                 'validation for \'ID\' failed on the \'required\' tag","success":false}'),
        (sdk_add("x" * 201, 1, 1, "b"), '{"message":"body invalid: Key: \'addParam.idParam.ID\' Error:'
                                        'Field validation for \'ID\' failed on the \'max\' tag","success":false}'),
        ('{"id":"x","delay":-1,"ttr":1,"body":"b"}',
         '{"message":"body invalid: json: cannot unmarshal number -1 into Go struct field addParam.delay '
         'of type uint","success":false}'),
    ]
    for body, want in cases:
        assert cs(d, "POST", "/topic/q/job", body) == want, body
    status, ctype, text = raw(d, "PATCH", "/topic/q/job")
    assert status in (404, 405), (status, text)
    assert Delayqd(stack).start().http("GET", "/topic/mytopic/job")[0] == 404   # switch off


def test_an_ouqiang_pop_whose_client_left_takes_nothing(stack):
    """ouqiang's pop waits 178 s, past a proxy's idle timeout: a client cut off meanwhile leaves
    the job to the next pop."""
    d = Delayqd(stack, extra={"ouqiang": True}).start()
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
    conn.request("POST", "/pop", json.dumps({"topic": "left"}), {"Content-Type": "application/json"})
    time.sleep(1)
    conn.close()
    time.sleep(0.3)
    oq(d, "/push", php_push("left", "left-1", 1, 30, "b"))
    text = oq(d, "/pop", '{"topic":"left"}')
    assert json.loads(text)["data"] == {"id": "left-1", "body": "b"}, text
    assert d.metric("delayq_pull_pops_left_total") == 1


def test_compat_networks_open_the_compat_routes_alone_to_clients_without_a_token(stack):
    """Unmodified clients send no token: with http.auth_token set, compat.networks lets clients
    from those networks use the compat routes, and no other route."""
    d = Delayqd(stack, extra={"ouqiang": True, "changsongl": True, "auth_token": "s3cret",
                              "compat": 'networks = [ "127.0.0.0/8" ];'}).start()
    assert oq(d, "/push", php_push("order", "t-1", 1, 30, "b")) == ADDED
    assert cs(d, "POST", "/topic/t/job", sdk_add("t-2", 0, 30, "b")) == CS_OK
    assert raw(d, "GET", "/delay-queue/api/jobs/get?job_id=t-1")[0] == 401
    closed = Delayqd(stack, extra={"ouqiang": True, "auth_token": "s3cret",
                                   "compat": 'networks = [ "10.0.0.0/8" ];'}).start()
    assert raw(closed, "POST", "/push", php_push("order", "t-3", 1, 30, "b"))[0] == 401


def test_compat_jobs_are_handed_out_until_finished_unless_their_limit_says_otherwise(stack):
    """ouqiang and changsongl hand a job out until it is finished, whatever pull.max_attempts
    says for native pull jobs; compat.<protocol>_max_attempts sets a limit for that protocol's
    jobs, after which they go to the dead letters naming it."""
    d = Delayqd(stack, extra={"ouqiang": True, "changsongl": True, "max_attempts": 1,
                              "max_wait_ms": 5000,
                              "compat": "changsongl_max_attempts = 2;"}).start()
    oq(d, "/push", php_push("oqforever", "oq-1", 1, 1, "b"))
    cs(d, "POST", "/topic/cslimited/job", sdk_add("cs-1", 1, 1, "b"))
    for attempt in range(3):   # pull.max_attempts 1 would bury it after the first
        text = oq(d, "/pop", '{"topic":"oqforever"}')
        assert json.loads(text)["data"] == {"id": "oq-1", "body": "b"}, (attempt, text)
    for attempt in range(2):
        text = cs(d, "GET", "/topic/cslimited/job?timeout=5")
        assert '"id":"cs-1"' in text, (attempt, text)
    assert cs(d, "GET", "/topic/cslimited/job?timeout=3") == CS_EMPTY   # buried after two
    assert oq(d, "/finish", '{"id":"oq-1"}') == OK

    def letters():
        return d.http("GET", "/delay-queue/api/dead?topic=cslimited")[1]["data"]["dead"]
    wait_until(letters, 15, "the changsongl job's dead letter")
    (letter,) = letters()
    assert "its own limit is 2" in letter["reason"], letter
    assert d.http("GET", "/delay-queue/api/dead?topic=oqforever")[1]["data"]["dead"] == []
