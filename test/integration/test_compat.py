"""compat.ouqiang: ouqiang/delay-queue's routes and JSON, as its README documents them, so that
its clients work unchanged: push, a long-polled pop, redelivery after the ttr, finish, delete,
get, and its error answers (HTTP 200, code 1, its messages)."""

import json
import time

from harness import Delayqd, now_ms


def oq(d, path, body, raw=None):
    status, doc = d.http("POST", path, body, raw=raw)
    assert status == 200 and set(doc) == {"code", "message", "data"}, (path, status, doc)
    return doc


def test_ouqiang_push_pop_redeliver_finish(stack):
    d = Delayqd(stack, extra={"ouqiang": True}).start()
    body = json.dumps({"uid": 10829378, "created": 1498657365})
    added_ms = now_ms()
    doc = oq(d, "/push", {"topic": "order", "id": "15702398321", "delay": 1, "ttr": 3, "body": body})
    assert doc == {"code": 0, "message": "添加成功", "data": None}, doc
    got = oq(d, "/get", {"id": "15702398321"})["data"]
    assert got["topic"] == "order" and got["id"] == "15702398321" and got["ttr"] == 3, got
    assert got["body"] == body and abs(got["delay"] - (added_ms // 1000 + 1)) <= 1, got

    doc = oq(d, "/pop", {"topic": "order"})   # waits for the job to become due
    assert doc == {"code": 0, "message": "操作成功",
                   "data": {"id": "15702398321", "body": body}}, doc
    assert now_ms() >= added_ms + 1000
    doc = oq(d, "/pop", {"topic": "order"})   # never finished: back after its ttr
    assert doc["data"]["id"] == "15702398321" and now_ms() >= added_ms + 4000, doc
    doc = oq(d, "/finish", {"id": "15702398321"})
    assert doc == {"code": 0, "message": "操作成功", "data": None}, doc
    assert oq(d, "/get", {"id": "15702398321"})["data"] is None

    oq(d, "/push", {"topic": "mail", "id": "m-1", "delay": 1, "ttr": 30, "body": "hi"})
    doc = oq(d, "/pop", {"topic": "order,mail"})   # several topics, comma-separated
    assert doc["data"] == {"id": "m-1", "body": "hi"}, doc
    assert oq(d, "/delete", {"id": "m-1"})["code"] == 0
    assert oq(d, "/delete", {"id": "never-was"})["code"] == 0   # as ouqiang answers
    oq(d, "/push", {"topic": "order", "id": "later", "delay": 3600, "ttr": 30, "body": ""})
    assert oq(d, "/delete", {"id": "later"})["code"] == 0
    assert d.get("later")["state"] == "cancelled"


def test_ouqiang_errors_are_its_own(stack):
    d = Delayqd(stack, extra={"ouqiang": True}).start()
    cases = [
        ("/push", {"topic": "order", "delay": 1, "ttr": 3, "body": "x"}, "job id不能为空"),
        ("/push", {"id": "a", "delay": 1, "ttr": 3, "body": "x"}, "topic 不能为空"),
        ("/push", {"id": "a", "topic": "order", "delay": 0, "ttr": 3}, "delay 取值范围1 - (2^31 - 1)"),
        ("/push", {"id": "a", "topic": "order", "delay": 1, "ttr": 86401}, "ttr 取值范围1 - 86400"),
        ("/push", {"id": 5, "topic": "order", "delay": 1, "ttr": 3}, "解析json失败"),
        ("/pop", {"topic": " "}, "topic不能为空"),
        ("/finish", {"id": ""}, "job id不能为空"),
    ]
    for path, body, message in cases:
        doc = oq(d, path, body)
        assert doc == {"code": 1, "message": message, "data": None}, (path, body, doc)
    doc = oq(d, "/push", None, raw="{not json")
    assert doc["code"] == 1 and doc["message"] == "解析json失败", doc
    plain = Delayqd(stack).start()   # the switch is off by default
    assert plain.http("POST", "/push", {"id": "a"})[0] == 404


def cs(d, method, path, body=None):
    status, doc = d.http(method, path, body)
    assert status == 200 and doc["success"] in (True, False) and "message" in doc, (path, status, doc)
    return doc


def test_changsongl_add_pop_finish_delete(stack):
    """changsongl/delay-queue's REST routes, with the bodies its README and Go client use."""
    d = Delayqd(stack, extra={"changsongl": True}).start()
    added_ms = now_ms()
    doc = cs(d, "POST", "/topic/mytopic/job", {"id": "myid1", "delay": 1, "ttr": 2, "body": "body"})
    assert doc == {"message": "ok", "success": True}, doc
    doc = cs(d, "POST", "/topic/mytopic/job", {"id": "myid1", "delay": 1, "ttr": 2, "body": "other"})
    assert doc == {"message": "job is exists", "success": False}, doc
    doc = cs(d, "GET", "/topic/mytopic/job?timeout=10")
    assert doc["success"] and doc["message"] == "ok", doc
    assert doc["data"]["id"] == "myid1" and doc["data"]["body"] == "body", doc
    assert doc["data"]["topic"] == "mytopic" and doc["data"]["ttr"] == 2, doc
    assert doc["id"] == "myid1" and doc["body"] == "body", doc   # where its Go client reads them
    assert now_ms() >= added_ms + 1000
    doc = cs(d, "GET", "/topic/mytopic/job?timeout=10")   # not finished within its ttr: again
    assert doc["data"]["id"] == "myid1", doc
    assert cs(d, "PUT", "/topic/mytopic/job/myid1") == {"message": "ok", "success": True}
    doc = cs(d, "GET", "/topic/mytopic/job?timeout=1")
    assert doc == {"data": None, "message": "ok", "success": True}, doc

    cs(d, "POST", "/topic/mytopic/job", {"id": "once", "delay": 0, "ttr": 0, "body": "b"})
    assert cs(d, "GET", "/topic/mytopic/job?timeout=10")["id"] == "once"
    time.sleep(1.5)   # ttr 0: handed out once, never again
    assert cs(d, "GET", "/topic/mytopic/job?timeout=1")["data"] is None
    assert d.get("once")["state"] == "finished"

    cs(d, "POST", "/topic/mytopic/job", {"id": "swap", "delay": 600, "ttr": 5, "body": "old"})
    doc = cs(d, "POST", "/topic/mytopic/job", {"id": "swap", "delay": 1, "ttr": 5, "body": "new",
                                                "override": True})
    assert doc == {"message": "ok", "success": True}, doc
    doc = cs(d, "GET", "/topic/mytopic/job?timeout=10")
    assert doc["id"] == "swap" and doc["body"] == "new", doc

    cs(d, "POST", "/topic/mytopic/job", {"id": "gone", "delay": 60, "ttr": 5, "body": "b"})
    assert cs(d, "DELETE", "/topic/mytopic/job/gone") == {"message": "ok", "success": True}
    assert d.get("gone")["state"] == "cancelled"
    doc = cs(d, "DELETE", "/topic/mytopic/job/never-was")
    assert doc == {"message": "job is not exists", "success": False}, doc
    doc = cs(d, "POST", "/topic/mytopic/job", {"id": "x", "delay": -1, "ttr": 1, "body": "b"})
    assert doc["success"] is False and "delay" in doc["message"], doc
    assert Delayqd(stack).start().http("GET", "/topic/mytopic/job")[0] == 404   # switch off


def test_an_ouqiang_pop_whose_client_left_takes_nothing(stack):
    """ouqiang's pop waits 178 s, past a proxy's idle timeout: a client cut off meanwhile leaves
    the job to the next pop."""
    import http.client
    d = Delayqd(stack, extra={"ouqiang": True}).start()
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
    conn.request("POST", "/pop", json.dumps({"topic": "left"}), {"Content-Type": "application/json"})
    time.sleep(1)
    conn.close()
    time.sleep(0.3)
    oq(d, "/push", {"topic": "left", "id": "left-1", "delay": 1, "ttr": 30, "body": "b"})
    doc = oq(d, "/pop", {"topic": "left"})
    assert doc["data"] == {"id": "left-1", "body": "b"}, doc
    assert d.metric("delayq_pull_pops_left_total") == 1
