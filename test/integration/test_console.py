"""The operations console at /delay-queue/ui/, as an operator uses it: headless Chromium driven
through chromedriver (Selenium) against a real delayqd. What the page shows is checked against
the API (with curl) and Kafka (with kcat); what it does is checked there too. Screenshots of
each view go to run/console/."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from datetime import datetime, timezone

import pytest

from harness import ROOT, Delayqd, Reader, now_ms, wait_until

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
SHOTS = os.path.join(ROOT, "run", "console")
# Debian's python3-selenium, for a python3 that does not search Debian's packages (pyenv, venv).
DEBIAN_PACKAGES = "/usr/lib/python3/dist-packages"


def selenium():
    try:
        import selenium.webdriver  # noqa: F401
    except ImportError:
        sys.path.append(DEBIAN_PACKAGES)
    try:
        from selenium import webdriver
    except ImportError as e:
        raise AssertionError("python3-selenium is not installed (scripts/deps.sh installs it)") from e
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service
    return webdriver, Service, WebDriverException


class Console:
    """One headless Chromium tab on a delayqd's console."""

    def __init__(self, d, stack):
        if not CHROMIUM or not CHROMEDRIVER:
            pytest.skip("chromium and chromium-driver are not installed (scripts/deps.sh installs them)")
        webdriver, Service, self.WebDriverException = selenium()
        from selenium.webdriver.common.keys import Keys
        self.keys = Keys
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        self.profile = tempfile.mkdtemp(prefix="chromium-", dir=stack.tmp)
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1400,1000", f"--user-data-dir={self.profile}"):
            opts.add_argument(arg)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.drv = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
        self.url = f"http://127.0.0.1:{d.port}/delay-queue/ui/"
        self.logs = []

    def open(self, view=""):
        self.drv.get(self.url + (f"#{view}" if view else ""))

    def go(self, view):
        """Another view, in the same page (its state, token and polls go on)."""
        self.drv.execute_script("location.hash = arguments[0]", view)

    def find(self, sel):
        """The element of an id ("#x"), a data-testid ("@x"), or a CSS selector."""
        if sel.startswith("@"):
            sel = f'[data-testid="{sel[1:]}"]'
        return self.drv.find_element("css selector", sel)

    def finds(self, css):
        return self.drv.find_elements("css selector", css)

    def text(self, sel):
        return self.find(sel).text

    def value(self, sel):
        return self.find(sel).get_attribute("data-value")

    def click(self, sel):
        self.find(sel).click()

    def type(self, sel, text):
        el = self.find(sel)
        el.clear()
        el.send_keys(text)

    def until(self, pred, timeout, what, step=0.1):
        """wait_until over the page: an element not there yet (or replaced) counts as false."""
        def safe():
            try:
                return pred()
            except self.WebDriverException:
                return False
        try:
            return wait_until(safe, timeout, what, step=step)
        except AssertionError:
            self.shot("failed-" + re.sub(r"\W+", "-", what).strip("-"))
            raise

    def confirm(self, expect=None):
        """Answers OK to the confirmation the page asks; returns its text."""
        self.until(lambda: self.find("#confirm-dialog").get_attribute("open") is not None, 5,
                   "the confirmation")
        text = self.text("#confirm-text")
        assert expect is None or expect in text, text
        self.click("#confirm-ok")
        return text

    def api_log(self):
        """The curl commands of the API-call log, newest first."""
        return [li.find_element("css selector", "code").text for li in self.finds("#api-log li")]

    def shot(self, name):
        os.makedirs(SHOTS, exist_ok=True)
        self.drv.save_screenshot(os.path.join(SHOTS, f"{name}.png"))

    def errors(self, allowed=()):
        """SEVERE entries of the browser's console since the page opened, but those with a
        text of allowed (expected refusals, which Chromium logs as failed loads)."""
        self.logs += self.drv.get_log("browser")
        return [e for e in self.logs if e["level"] == "SEVERE"
                and not any(a in e["message"] for a in allowed)]

    def close(self):
        try:
            self.drv.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)


def api(d, method, path, body=None, token=None):
    st, doc = d.http(method, path, body, headers={"Authorization": f"Bearer {token}"} if token else None)
    assert st == 200 and doc["code"] == 0, (method, path, st, doc)
    return doc["data"]


def shown_count(n):
    """A count as the page shows it: grouped by thousands, "–" when the owner did not know it."""
    return "–" if n < 0 else f"{n:,}"


def iso(ms):
    """Epoch ms as JavaScript's toISOString() writes it."""
    t = datetime.fromtimestamp(ms // 1000, timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def partitions_shown(c, group):
    """The rows of a group's partitions table: (topic, partition, committed, end, lag, head due)."""
    def row(tr):
        cell = lambda k: tr.find_element("css selector", f"[data-testid=status-{k}]")  # noqa: E731
        due = cell("due").find_elements("css selector", "time")
        return tuple(cell(k).text for k in ("topic", "partition", "committed", "end", "lag")) + (
            due[0].get_attribute("datetime") if due else cell("due").text,)
    return sorted(row(tr) for tr in c.finds(f'[data-testid="group-{group}-status"] tbody tr'))


def partitions_of_claims(d, group):
    """The same rows from /claims' status entries of the group; None while it has none."""
    g = next(x for x in api(d, "GET", "/delay-queue/api/claims")["groups"] if x["group"] == group)
    return sorted((s["topic"],) + tuple(shown_count(s[k]) for k in ("partition", "committed", "end", "lag"))
                  + (iso(s["head_due_ms"]) if s["head_due_ms"] is not None else "–",)
                  for s in g["status"]) or None


def page_matches_stats(c, d):
    """Whether the overview's counts are /stats' (both are views of at most 2 s)."""
    s = api(d, "GET", "/delay-queue/api/stats")
    shown = {"pending": c.value("#ov-pending"), "overdue_ms": c.value("#ov-overdue")}
    shown.update({f"level {k}": c.value(f"@level-{k}") for k in s["by_level"]})
    shown.update({f"due {k}": c.value(f"@due-{k}") for k in s["by_due"]})
    want = {"pending": str(s["pending"]), "overdue_ms": str(s["overdue_ms"])}
    want.update({f"level {k}": str(v) for k, v in s["by_level"].items()})
    want.update({f"due {k}": str(v) for k, v in s["by_due"].items()})
    return shown == want


def test_console_overview_and_groups_show_what_the_api_says(stack):
    d = Delayqd(stack, levels=["1s", "5m", "2h"], extra={"groups": [[0], [1]]}).start().wait_groups_owned()
    topic = f"{d.name}_orders"
    # Delays of exactly a level: each job waits in one topic, so that the counts hold still.
    d.bulk_add([{"topic": topic, "delay": 300, "body": "x"}] * 2
               + [{"topic": topic, "delay": 7200, "body": "y"}])
    wait_until(lambda: api(d, "GET", "/delay-queue/api/stats")["pending"] == 3, 10, "stats to count the adds")
    c = Console(d, stack)
    try:
        c.open()
        c.until(lambda: c.value("#ov-pending") == "3", 10, "the overview to show 3 pending")
        c.until(lambda: page_matches_stats(c, d), 20, "the overview to show /stats' counts", step=0.5)
        # the page renders again every second: an element read may be replaced meanwhile
        c.until(lambda: c.value("@level-5m") == "2" and c.value("@level-2h") == "1"
                and c.value("@due-10m") == "2", 10, "the levels' and due times' counts")
        c.until(lambda: c.find("#health-redis").get_attribute("data-state") == "ok"
                and c.find("#health-kafka").get_attribute("data-state") == "ok", 10,
                "Redis and Kafka healthy")
        c.until(lambda: not c.find("#maxmemory-warning").is_displayed(), 10,
                "no maxmemory warning")

        # Adds show in the adds/s sparkline, computed from /metrics' delayq_jobs_added_total.
        c.until(lambda: len(c.finds("#spark-adds polyline")) > 0, 10, "a line in the adds/s sparkline")
        d.bulk_add([{"topic": topic, "delay": 300, "body": "z"}] * 20)
        c.until(lambda: c.text("#rate-adds") not in ("–", "0.00"), 10, "adds/s above 0")
        c.shot("overview")

        # The groups table is /claims'.
        c.go("groups")
        claims = api(d, "GET", "/delay-queue/api/claims")["groups"]
        assert len(claims) == 2, claims

        def table_is_claims():
            now = {g["group"]: g for g in api(d, "GET", "/delay-queue/api/claims")["groups"]}
            rows = c.finds("#groups-table > tbody > tr[data-group]")
            return len(rows) == len(now) and all(
                c.text(f"@group-{g}-owner") == (x["owner"] or "–")
                and c.value(f"@group-{g}-state") == ("alive" if x["owner_alive"] else "dead")
                and c.text(f"@group-{g}-partitions") == ", ".join(map(str, x["partitions"]))
                for g, x in now.items())
        c.until(table_is_claims, 20, "the groups table to show /claims", step=0.5)
        c.shot("groups")

        # Group 0's partitions, opened from the keyboard: /claims' status entries for group 0,
        # kept up to date while open, with the focus left where it was.
        toggle = c.find("@partitions-0")
        assert toggle.get_attribute("aria-expanded") == "false"
        assert toggle.get_attribute("aria-controls") == "group-0-status"
        assert not c.find("@group-0-status").is_displayed()
        toggle.send_keys(c.keys.ENTER)
        c.until(lambda: c.find("@partitions-0").get_attribute("aria-expanded") == "true"
                and c.find("@group-0-status").is_displayed(), 5, "group 0's partitions shown")
        c.until(lambda: partitions_shown(c, 0) == partitions_of_claims(d, 0), 20,
                "group 0's partitions to be /claims' status of group 0", step=0.5)
        c.until(lambda: len(partitions_shown(c, 0)) == 3, 10, "one partition row per level")
        c.shot("groups-partitions")
        before = c.text("#groups-updated")
        c.until(lambda: c.text("#groups-updated") != before, 10, "a refresh of the groups")
        assert c.drv.execute_script("return document.activeElement.dataset.testid") == "partitions-0"
        assert c.find("@group-0-status").is_displayed()
        c.click("@partitions-0")
        c.until(lambda: not c.find("@group-0-status").is_displayed(), 5, "group 0's partitions hidden")
        assert c.find("@partitions-0").get_attribute("aria-expanded") == "false"

        # Release: the owner hands the group back (and, alone, takes it again).
        c.click("@release-1")
        c.confirm("group 1")
        c.until(lambda: "asked its owner to hand group 1 back" in c.text("@groups-status"), 10,
                "the page to say the owner was asked")
        wait_until(lambda: "handed back group=1" in d.log_text(), 30, "the owner to hand group 1 back")
        assert any("-XPOST" in cmd and "/delay-queue/api/claims/release" in cmd and '{"group":1}' in cmd
                   for cmd in c.api_log()), c.api_log()

        # A Redis that may evict job records is warned of.
        policy = stack.redis("CONFIG", "GET", "maxmemory-policy").split()[1]
        stack.redis("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
        try:
            p = Delayqd(stack).start()   # reads the policy as it connects
            c2 = Console(p, stack)
            try:
                c2.open()
                c2.until(lambda: c2.find("#maxmemory-warning").is_displayed(), 10, "the maxmemory warning")
                assert "allkeys-lru" in c2.text("#maxmemory-warning"), c2.text("#maxmemory-warning")
                assert "noeviction" in c2.text("#maxmemory-warning")
                c2.shot("overview-maxmemory-warning")
                assert not c2.errors(), c2.errors()
            finally:
                c2.close()
                p.stop()
        finally:
            stack.redis("CONFIG", "SET", "maxmemory-policy", policy)
        assert not c.errors(), c.errors()
    finally:
        c.close()


def test_console_looks_up_reschedules_and_removes_a_job_and_pauses_a_schedule(stack):
    d = Delayqd(stack).start().wait_groups_owned()
    job = f"{d.name}-order-7"
    d.add_ok(id=job, topic=f"{d.name}_orders", delay=600, body={"order": 7}, headers={"trace": "t7"})
    c = Console(d, stack)
    try:
        c.open("jobs")
        c.type("#job-id", job)
        c.click("#job-lookup")
        c.until(lambda: c.value("[data-testid=job-state] span") == "pending", 10, "the job's state")
        assert c.text("@job-body") == '{"order":7}', c.text("@job-body")
        assert c.text("@job-id") == job

        # Reschedule 20 minutes from now.
        before = now_ms()
        c.type("#resched-delay", "1200")
        c.click("#job-reschedule")
        c.until(lambda: "Rescheduled" in c.text("@job-status"), 10, "the reschedule")
        due = d.get(job)["exec_time_ms"]
        assert before + 1200_000 <= due <= now_ms() + 1200_000, (before, due)
        c.shot("jobs")

        # Remove: the page, then get, say cancelled.
        c.click("#job-remove")
        c.confirm(job)
        c.until(lambda: c.value("[data-testid=job-state] span") == "cancelled", 10,
                "the page to show cancelled")
        assert d.get(job)["state"] == "cancelled"

        # Each action is logged as a curl command that does the same.
        log = c.api_log()
        assert any(cmd.startswith("curl -s -XPOST") and "/delay-queue/api/jobs/remove" in cmd
                   and f'"job_id":"{job}"' in cmd for cmd in log), log
        get = next(cmd for cmd in log if "/delay-queue/api/jobs/get?job_id=" in cmd)
        out = subprocess.run(["bash", "-c", get], capture_output=True, text=True, timeout=20).stdout
        assert f'"id":"{job}"' in out and '"state":"cancelled"' in out, (get, out)

        # Schedules: listed, paused, resumed, deleted.
        sid = f"beat-{uuid.uuid4().hex[:6]}"
        api(d, "PUT", f"/delay-queue/api/schedules/{sid}", {"every_ms": 60000, "topic": f"{d.name}_pings"})
        c.go("schedules")
        c.until(lambda: c.value(f"@state-{sid}") == "active", 10, "the schedule in the list")
        c.click(f"@pause-{sid}")
        c.until(lambda: c.value(f"@state-{sid}") == "paused", 10, "the page to show it paused")
        assert api(d, "GET", f"/delay-queue/api/schedules/{sid}")["paused"] is True
        c.shot("schedules")
        c.click(f"@resume-{sid}")
        c.until(lambda: c.value(f"@state-{sid}") == "active", 10, "the page to show it resumed")
        assert api(d, "GET", f"/delay-queue/api/schedules/{sid}")["paused"] is False
        c.click(f"@delete-{sid}")
        c.confirm(sid)
        c.until(lambda: not c.finds(f'[data-testid="schedule-{sid}"]'), 10, "the row to go")
        st, _ = d.http("GET", f"/delay-queue/api/schedules/{sid}")
        assert st == 404, st
        assert not c.errors(), c.errors()
    finally:
        c.close()


def test_console_redrives_dead_letters_which_are_then_delivered(stack):
    d = Delayqd(stack, partitions=1).start().wait_groups_owned()
    biz = Reader(stack, f"{d.name}_biz")
    # Poison: no dq-topic (nothing to redrive it to), and three with a malformed dq-due-ms
    # (redriven, each is a job for its dq-topic, due at once).
    stack.produce(d.delay_topic("1s"), "no target", headers={"trace": "t0"})
    for i in range(3):
        stack.produce(d.delay_topic("1s"), f"bad due {i}", key=f"k{i}",
                      headers={"dq-topic": biz.topic, "dq-due-ms": "soon"})
    dead = lambda: api(d, "GET", "/delay-queue/api/dead?limit=50")["dead"]  # noqa: E731
    wait_until(lambda: len(dead()) == 4, 30, "four dead letters")
    lost = next(x for x in dead() if x["topic"] is None)
    c = Console(d, stack)
    try:
        c.open("dead")
        c.until(lambda: len(c.finds("#dead-table tbody tr")) == 4, 10, "four letters listed")
        row = f'[data-testid="dead-{lost["partition"]}-{lost["offset"]}"]'
        assert "dq-topic" in c.find(row).find_element("css selector", "[data-testid=dead-reason]").text

        # The one without a target: shown whole; a redrive is refused, and the page says why.
        c.click(f'@dead-view-{lost["partition"]}-{lost["offset"]}')
        c.until(lambda: c.text("@dead-detail-body") == "no target", 10, "the letter's body")
        c.shot("dead-letter")
        c.click("#dead-detail-redrive")
        c.confirm(f'{lost["partition"]}/{lost["offset"]}')
        c.until(lambda: "Skipped 1" in c.text("@dead-result"), 10, "the skip")
        assert "Redriven 0 of 1" in c.text("@dead-result") and "no topic" in c.text("@dead-result")

        # The others by topic: one selected, then every one the filter matches.
        c.type("#dead-topic", biz.topic)
        c.click("#dead-apply")
        c.until(lambda: len(c.finds("#dead-table tbody tr")) == 3, 10, "the filter")
        first = c.finds("#dead-table tbody tr input[type=checkbox]")[0]
        first.click()
        c.click("#dead-redrive-selected")
        c.confirm("1 selected")
        c.until(lambda: "Redriven 1 of 1" in c.text("@dead-result"), 10, "the selection redriven")
        c.click("#dead-redrive-all")
        text = c.confirm("Redrive 2 dead letters")
        assert "1 already redriven" in text, text
        c.until(lambda: "Redriven 2 of 2" in c.text("@dead-result"), 20, "the rest redriven")
        assert c.find("#dead-progress").get_attribute("value") == "1"
        got = biz.wait_count(3, 20)
        assert sorted(m["payload"] for m in got) == ["bad due 0", "bad due 1", "bad due 2"], got
        c.until(lambda: [x.text for x in c.finds("[data-testid=dead-redriven]")] == ["yes"] * 3, 10,
                "the list to show them redriven")
        c.shot("dead")
        assert all(x["redriven"] == (x["topic"] is not None)
                   for x in dead())
        assert any("/delay-queue/api/dead/redrive" in cmd and '"dead":[{"partition":' in cmd
                   for cmd in c.api_log()), c.api_log()
        assert not c.errors(), c.errors()
    finally:
        c.close()
        biz.close()


def test_console_with_the_read_token_views_but_actions_need_the_write_token(stack):
    d = Delayqd(stack, extra={"auth_token": "w", "read_token": "r"}).start()
    job = api(d, "POST", "/delay-queue/api/jobs/add",
              {"topic": f"{d.name}_orders", "delay": 600, "body": "b"}, token="w")["job_id"]
    c = Console(d, stack)
    try:
        c.open()
        # Refused without a token: the page asks for one, once, and keeps it in the tab.
        c.until(lambda: c.find("#token-dialog").get_attribute("open") is not None, 10, "the token dialog")
        c.type("#token-input", "r")
        c.click("#token-save")
        c.until(lambda: c.value("#ov-pending") not in (None, ""), 10, "the overview with the read token")
        assert c.drv.execute_script("return sessionStorage.getItem('delayq.token')") == "r"

        c.go(f"jobs/{job}")
        c.until(lambda: c.value("[data-testid=job-state] span") == "pending", 10, "the job")
        c.click("#job-remove")
        c.confirm(job)
        c.until(lambda: "write token" in c.text("@job-status"), 10, "the page to name the write token")
        assert "write token" in c.text("@notice-text"), c.text("@notice-text")
        assert d.http("GET", f"/delay-queue/api/jobs/get?job_id={job}",
                      headers={"Authorization": "Bearer r"})[1]["data"]["state"] == "pending"

        # From then on the page knows the token for a read token: every action is off, and says why.
        c.until(lambda: c.find("@token-readonly").is_displayed(), 5, "the read-only token indicator")
        assert c.text("@token-readonly") == "read-only token", c.text("@token-readonly")
        for b in ("#job-remove", "#job-reschedule"):
            assert not c.find(b).is_enabled(), b
            assert "write token (http.auth_token)" in c.find(b).get_attribute("title"), b
        assert "write token" in c.text("@readonly-note-jobs"), c.text("@readonly-note-jobs")
        c.shot("read-token-refused")

        c.go("groups")
        c.until(lambda: c.value("@group-0-state") == "alive", 30, "group 0 owned")
        release = c.find("@release-0")
        assert not release.is_enabled()
        title = release.get_attribute("title")
        assert "write token (http.auth_token)" in title, title
        assert c.find("@readonly-note-groups").is_displayed()
        c.shot("read-token-groups")

        # The write token, given through the note's button: the actions are back, and work.
        c.find("@readonly-note-groups").find_element("css selector", "button").click()
        c.until(lambda: c.find("#token-dialog").get_attribute("open") is not None, 5, "the token dialog")
        c.type("#token-input", "w")
        c.click("#token-save")
        c.until(lambda: c.find("@release-0").is_enabled(), 10, "the release enabled with the write token")
        assert not c.find("@token-readonly").is_displayed()
        assert not c.find("@release-0").get_attribute("title")
        assert not c.find("@readonly-note-groups").is_displayed()
        c.click("@release-0")
        c.confirm("group 0")
        c.until(lambda: "asked its owner to hand group 0 back" in c.text("@groups-status"), 10,
                "the page to say the owner was asked")
        assert c.drv.execute_script("return sessionStorage.getItem('delayq.token')") == "w"
        # The refusals are the only errors: Chromium logs each 401 as a failed load.
        assert not c.errors(allowed=("401",)), c.errors(allowed=("401",))
    finally:
        c.close()
