"""dead letters: listed newest first from the dead-letter topic, shown whole, and redriven as
jobs at most once each; poison messages come from kcat, as from any producer, and redriven
jobs are read back from the business topic."""

import time

from harness import Delayqd, Reader, now_ms, wait_until
from test_callbacks import Receiver, callbacks_conf

DEAD = "/delay-queue/api/dead"


def listing(d, query="", headers=None):
    st, doc = d.http("GET", f"{DEAD}{query}", headers=headers)
    assert st == 200 and doc["code"] == 0, (st, doc)
    return doc["data"]


def redrive(d, body, status=200):
    st, doc = d.http("POST", f"{DEAD}/redrive", body)
    assert st == status, (st, doc)
    return doc["data"] if status == 200 else doc


def test_dead_letters_are_listed_shown_and_redriven_once(stack):
    rx = Receiver(lambda path, n: 400)
    d = Delayqd(stack, extra={"callbacks": callbacks_conf()}).start().wait_groups_owned()
    topic = f"{d.name}_biz"
    reader = Reader(stack, topic)
    delay = f"{d.name}_delay_{d.levels[0]}"
    stack.produce(delay, "poison body", key="k1", headers={"dq-topic": topic, "dq-due-ms": "soon",
                                                            "trace": "t-1"})
    stack.produce(delay, "no target")
    called = d.add_ok(delay=1, body="cb", callback={"url": rx.url("/bad")})
    # a job's letter whose record is gone: the letter itself is what is redriven
    stack.produce(d.dlq, "from the letter", key="gone-1",
                  headers={"dq-id": "gone-1", "dq-topic": topic, "dq-error": "test: refused"})
    wait_until(lambda: len(listing(d)["dead"]) >= 4, 30, "four dead letters")
    data = listing(d)
    letters = data["dead"]
    assert data["before"] is None and len(letters) == 4, data
    assert [x["dead_ms"] for x in letters] == sorted((x["dead_ms"] for x in letters), reverse=True)
    by_body = {x["body_preview"]: x for x in letters}
    poison = by_body["poison body"]
    assert poison["topic"] == topic and poison["job_id"] is None and not poison["redriven"], poison
    assert "dq-due-ms" in poison["reason"], poison
    assert by_body["cb"]["job_id"] == called and by_body["cb"]["attempts"] == 1, by_body["cb"]
    assert "HTTP 400" in by_body["cb"]["reason"], by_body["cb"]

    st, doc = d.http("GET", f"{DEAD}/{poison['partition']}/{poison['offset']}")
    assert st == 200, (st, doc)
    one = doc["data"]
    assert one["body"] == "poison body" and one["key"] == "k1", one
    assert one["headers"]["trace"] == "t-1" and one["source"].startswith(delay + "/"), one

    # filters: a topic, a reason's prefix
    assert {x["body_preview"] for x in listing(d, f"?topic={topic}")["dead"]} == \
        {"poison body", "from the letter"}
    assert [x["body_preview"] for x in listing(d, "?reason=test:")["dead"]] == ["from the letter"]
    # paging: one at a time, every letter once, newest first
    seen, before = [], ""
    while True:
        page = listing(d, f"?limit=1&before={before}")
        seen += [(x["partition"], x["offset"]) for x in page["dead"]]
        if page["before"] is None:
            break
        before = page["before"]
    assert seen == [(x["partition"], x["offset"]) for x in letters], (seen, letters)

    picked = [{"partition": x["partition"], "offset": x["offset"]} for x in letters]
    t0 = now_ms()
    out = redrive(d, {"dead": picked})
    assert out["redriven"] == 3, out
    assert [s["offset"] for s in out["skipped"]] == [by_body["no target"]["offset"]], out
    assert "no topic" in out["skipped"][0]["why"], out
    # the poison message, under an id of its own, with its body, key and headers
    job = f"dead-{poison['partition']}-{poison['offset']}"
    m = reader.wait_ids([job], 15)[job][0]
    assert m["payload"] == "poison body" and m["key"] == "k1" and m["headers"]["trace"] == "t-1", m
    assert m["recv_ms"] >= t0
    # the letter whose record was gone: its own body
    m = reader.wait_ids(["gone-1"], 15)["gone-1"][0]
    assert m["payload"] == "from the letter", m
    # the failed callback job: from its record, called again
    wait_until(lambda: len(rx.of("/bad")) >= 2, 15, "the callback called again")
    # at most once: each redriven letter says so, and a second redrive adds nothing
    again = redrive(d, {"dead": picked[:1] + [{"partition": poison["partition"],
                                               "offset": poison["offset"]}]})
    assert again["redriven"] == 0 and all("redriven before" in s["why"] or "no topic" in s["why"]
                                          for s in again["skipped"]), again
    assert any(job in s["why"] for s in again["skipped"]), again
    flags = {(x["partition"], x["offset"]): x["redriven"] for x in listing(d)["dead"]}
    assert flags[(poison["partition"], poison["offset"])] is True, flags
    assert flags[(by_body["no target"]["partition"], by_body["no target"]["offset"])] is False
    time.sleep(1)
    assert len([x for x in reader.all() if x["headers"].get("dq-id") == job]) == 1
    assert d.metric("delayq_dead_letters_redriven_total") == 3
    # a filter that matches nothing redrives nothing
    assert redrive(d, {"filter": {"reason": "nothing like this"}}) == \
        {"redriven": 0, "skipped": [], "before": None}
    reader.close()
    rx.close()


def test_redrive_by_filter_and_bad_requests(stack):
    d = Delayqd(stack, extra={"auth_token": "w", "read_token": "r"}).start()
    w = {"Authorization": "Bearer w"}
    r = {"Authorization": "Bearer r"}
    topic = f"{d.name}_biz"
    reader = Reader(stack, topic)
    for i in range(5):
        stack.produce(d.dlq, f"m{i}", headers={"dq-topic": topic, "dq-error": f"kind-{i % 2}: x"})
    wait_until(lambda: len(listing(d, headers=r)["dead"]) == 5, 15, "five letters")
    st, doc = d.http("POST", f"{DEAD}/redrive", {"filter": {"reason": "kind-1"}}, headers=r)
    assert st == 401, doc   # a read token may look, not redrive
    st, doc = d.http("POST", f"{DEAD}/redrive", {"filter": {"reason": "kind-1"},
                                                   "deliver_at_ms": now_ms() + 2000}, headers=w)
    assert st == 200 and doc["data"]["redriven"] == 2, doc
    got = reader.wait_count(2, 15)
    assert sorted(m["payload"] for m in got) == ["m1", "m3"], got
    assert all(m["recv_ms"] >= int(m["headers"]["dq-due-ms"]) for m in got), got
    bad = [
        ("POST", f"{DEAD}/redrive", {}, 400, "either dead"),
        ("POST", f"{DEAD}/redrive", {"dead": [{"partition": "x", "offset": 1}]}, 400, "partition"),
        ("POST", f"{DEAD}/redrive", {"dead": []}, 400, "1 to 1000"),
        ("POST", f"{DEAD}/redrive", {"filter": {"topic": 5}}, 400, "topic"),
        ("POST", f"{DEAD}/redrive", {"filter": {"topic": topic}, "confirm": 1}, 400, "confirm"),
        ("POST", f"{DEAD}/redrive", {"filter": {"all": False}}, 400, "all must be true"),
        ("GET", f"{DEAD}?before=1.2.3", None, 400, "names 3 partitions, the dead-letter topic has 2"),
        ("POST", f"{DEAD}/redrive", {"filter": {"all": True}, "before": "7"}, 400, "names 1"),
        ("GET", f"{DEAD}?before=zzz", None, 400, "before"),
        ("GET", f"{DEAD}?limit=0", None, 400, "limit"),
        ("GET", f"{DEAD}/0/999999", None, 404, "no dead letter"),
        ("GET", f"{DEAD}/x", None, 404, "no such dead-letter route"),
        ("POST", f"{DEAD}", None, 405, "GET"),
        ("GET", f"{DEAD}/redrive", None, 405, "POST"),
    ]
    for method, path, body, status, says in bad:
        st, doc = d.http(method, path, body, headers=w)
        assert st == status and says in doc["message"], (method, path, st, doc)
    reader.close()


def test_a_misspelt_or_too_broad_redrive_filter_redrives_nothing(stack):
    """An operator's typo in a filter (topics for topic) or a filter without a criterion is
    refused, naming what was wrong; a filter that matches more letters than
    dead.redrive_confirm_over touches none and says so (409) until it is confirmed."""
    d = Delayqd(stack, extra={"redrive_confirm_over": 3}).start()
    topic = f"{d.name}_biz"
    reader = Reader(stack, topic)
    for i in range(6):
        stack.produce(d.dlq, f"m{i}", headers={"dq-topic": topic, "dq-error": "test: x"})
    wait_until(lambda: len(listing(d)["dead"]) == 6, 15, "six letters")
    refused = [
        ({"filter": {"topics": topic}}, "topics is not a member of a filter"),
        ({"filter": {}}, "at least one of topic, reason, from_ms, to_ms"),
        ({"filter": {"topic": topic}, "deliver_at": 1}, "deliver_at is not a member of a redrive"),
        ({"dead": [{"partition": 0, "offset": 0}], "dry_run": True}, "dry_run is not a member"),
    ]
    for body, says in refused:
        doc = redrive(d, body, 400)
        assert says in doc["message"], (body, doc)
    doc = redrive(d, {"filter": {"topic": topic}}, 409)
    assert "more than 3 dead letters" in doc["message"] and "confirm" in doc["message"], doc
    doc = redrive(d, {"filter": {"all": True}}, 409)
    assert doc["data"] == {"matched_over": 3}, doc
    time.sleep(2)
    assert not reader.all(), "a refused redrive redrove letters"
    assert not any(x["redriven"] for x in listing(d)["dead"])
    assert redrive(d, {"filter": {"topic": topic, "reason": "nothing like it"}})["redriven"] == 0
    res = redrive(d, {"filter": {"topic": topic}, "confirm": True})
    assert res["redriven"] == 6, res
    assert sorted(m["payload"] for m in reader.wait_count(6, 15)) == [f"m{i}" for i in range(6)]
    # below the bound, no confirmation is asked for
    for i in range(2):
        stack.produce(d.dlq, f"n{i}", headers={"dq-topic": topic, "dq-error": "second: y"})
    wait_until(lambda: len(listing(d, "?reason=second")["dead"]) == 2, 15, "two more letters")
    assert redrive(d, {"filter": {"reason": "second"}})["redriven"] == 2
    reader.close()


def test_ten_thousand_dead_letters_page_by_page_and_redriven(stack):
    d = Delayqd(stack).start()
    n, out = 10000, f"{d.name}_out"
    stack.produce(d.dlq, "\n".join(f"n{i}" for i in range(n)),
                  headers={"dq-topic": out, "dq-error": "envelope: test"})
    wait_until(lambda: listing(d, "?limit=1")["dead"], 15, "the letters")
    seen, times, before, pages = set(), [], "", 0
    while True:
        page = listing(d, f"?limit=500&before={before}")
        pages += 1
        for x in page["dead"]:
            assert (x["partition"], x["offset"]) not in seen, x
            seen.add((x["partition"], x["offset"]))
            times.append(x["dead_ms"])
        if page["before"] is None:
            break
        before = page["before"]
    assert len(seen) == n and pages == n // 500, (len(seen), pages)
    assert times == sorted(times, reverse=True)

    # 999 of them by list (with one listed twice and one offset past the end), then the rest by
    # filter: every letter becomes a job once, delivered once
    reader = Reader(stack, out)
    page = listing(d, "?limit=500")
    first = (page["dead"] + listing(d, f"?limit=499&before={page['before']}")["dead"])
    picked = [{"partition": x["partition"], "offset": x["offset"]} for x in first]
    res = redrive(d, {"dead": picked + [{"partition": 0, "offset": 10 ** 9}]})
    assert res["redriven"] == 999 and [s["why"] for s in res["skipped"]] == ["no dead letter there"], \
        res["skipped"][:5]
    res = redrive(d, {"dead": picked[:1] * 2})
    assert res["redriven"] == 0 and [s["why"] for s in res["skipped"]] == \
        ["listed before",
         f"redriven before, as job dead-{picked[0]['partition']}-{picked[0]['offset']}"], res
    res = redrive(d, {"filter": {"reason": "envelope"}, "confirm": True})
    assert res["redriven"] == n - 999 and len(res["skipped"]) == 999 and res["before"] is None, \
        (res["redriven"], res["skipped"][:3], res["before"])
    assert all(s["why"].startswith("redriven before, as job dead-") for s in res["skipped"])
    ids = {f"dead-{p}-{o}" for p, o in seen}
    got = reader.wait_ids(ids, 120)
    assert all(len(got[i]) == 1 for i in ids), [i for i in ids if len(got[i]) > 1][:5]
    reader.close()
    assert d.metric("delayq_dead_letters_redriven_total") == n


def test_dead_letters_of_every_partition_are_listed_and_redriven(stack):
    """A dead-letter topic of 300 partitions (delay.partitions may be up to 1,024): letters in
    its first, middle and last partitions are listed, paged through, shown and redriven."""
    d = Delayqd(stack, levels=["1s"], partitions=300).start()
    topic = f"{d.name}_wide"
    reader = Reader(stack, topic)
    for p in (0, 255, 256, 299):
        stack.produce(d.dlq, f"letter {p}", key=f"wide-{p}", partition=p,
                      headers={"dq-id": f"wide-{p}", "dq-topic": topic, "dq-error": "test: wide"})
    wait_until(lambda: len(listing(d)["dead"]) >= 4, 30, "four dead letters")
    letters = listing(d)["dead"]
    assert sorted(x["partition"] for x in letters) == [0, 255, 256, 299], letters
    seen, before = [], ""
    while True:   # one a page: the cursor carries every partition's place
        page = listing(d, f"?limit=1&before={before}")
        seen += [x["partition"] for x in page["dead"]]
        if not page["before"]:
            break
        before = page["before"]
    assert sorted(seen) == [0, 255, 256, 299], seen
    st, doc = d.http("GET", f"{DEAD}/299/0")
    assert st == 200 and doc["data"]["body"] == "letter 299", (st, doc)
    data = redrive(d, {"dead": [{"partition": 299, "offset": 0}]})
    assert data["redriven"] == 1, data
    reader.wait_ids(["wide-299"], 30)
    reader.close()
