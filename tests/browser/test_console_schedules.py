"""The console's Schedules view in a real browser: cron jobs created and edited with the schedule builder (and its
next-runs preview, which shows the gateway's own validation message), enabled and disabled, run now with the run
in the job's history, deleted after asking; the heartbeat's status, start and trigger. Every change is checked
through the protocol, as another client sees it."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from orbital.client import GatewayClient
from playwright.sync_api import expect

from tests.browser.conftest import PHONE, Console, HeldAnswers
from tests.conftest import wait_for
from tests.e2e.conftest import GatewayProcess
from tests.support.fake_llm import FakeLLM, reply

FAR_AWAY = {"kind": "cron", "expr": "0 3 1 1 *", "tz": "UTC"}
"""A schedule that never comes due while the tests run (03:00 on January 1st)."""


def iso(ms: int) -> str:
    """An instant as JavaScript's `toISOString` writes it (what the console puts in `<time datetime>`)."""
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"


def job_named(admin: GatewayClient, name: str) -> dict[str, Any] | None:
    return next((j for j in admin.call("cron.list", {"limit": 500})["jobs"] if j["name"] == name), None)


def add_job(admin: GatewayClient, name: str, **fields: Any) -> dict[str, Any]:
    spec = fields.pop("spec", {"mode": "task", "message": f"Do {name}", "deliver": False})
    job = {"name": name, "schedule": fields.pop("schedule", FAR_AWAY), "spec": spec, **fields}
    return admin.call("cron.add", job)["job"]


def next_runs(page: Any) -> Any:
    """The times of the editor's preview, once it is up to date with the form (not `aria-busy`)."""
    return page.locator(".preview:not([aria-busy]) .next-runs time")


def row_of(page: Any, name: str) -> Any:
    return page.locator("table.jobs tbody tr").filter(has=page.get_by_role("link", name=name, exact=True))


def test_creates_a_cron_job_with_the_builder_and_lists_it_with_its_next_run(
    console: Console, admin: GatewayClient
) -> None:
    page = console.open("#/schedules").page
    page.get_by_role("button", name="New job").click()
    expect(page.get_by_role("heading", name="New job")).to_be_visible()
    page.get_by_label("Name", exact=True).fill("Weekday digest")
    page.get_by_label("On a cron schedule").check()
    page.get_by_label("Preset").select_option(label="Weekdays at 09:00")
    expect(page.get_by_label("Cron expression")).to_have_value("0 9 * * 1-5")
    expect(page.get_by_text("Reads: Weekdays at 09:00")).to_be_visible()
    page.get_by_label("Time zone").fill("Europe/Paris")
    expect(next_runs(page)).to_have_count(5)
    page.get_by_label("Message").fill("Write my digest")
    page.get_by_label("Deliver the reply").uncheck()
    page.get_by_role("button", name="Create job").click()

    row = row_of(page, "Weekday digest")
    expect(row).to_contain_text("Weekdays at 09:00")
    expect(row).to_contain_text("Europe/Paris")
    job = job_named(admin, "Weekday digest")
    assert job is not None
    assert job["schedule"] == {"kind": "cron", "expr": "0 9 * * 1-5", "tz": "Europe/Paris"}
    assert job["spec"] == {"mode": "task", "message": "Write my digest", "deliver": False}
    assert job["enabled"] is True and job["agentId"] == "main"
    # the next run shown is the gateway's
    expect(row.locator(f'time[datetime="{iso(job["state"]["nextRunAtMs"])}"]')).to_be_visible()
    expect(page.get_by_role("switch", name="Enabled: Weekday digest")).to_be_checked()
    assert not console.errors


def test_the_preview_shows_the_next_runs_and_the_gateways_error_beside_the_form(
    console: Console, admin: GatewayClient
) -> None:
    page = console.open("#/schedules/new").page
    page.get_by_label("On a cron schedule").check()
    expr = page.get_by_label("Cron expression")
    expr.fill("30 8 * * *")
    page.get_by_label("Time zone").fill("UTC")
    schedule = {"kind": "cron", "expr": "30 8 * * *", "tz": "UTC"}
    expected = admin.call("cron.preview", {"schedule": schedule, "count": 5})["nextRunsMs"]
    times = next_runs(page)
    expect(times).to_have_count(5)
    for i, ms in enumerate(expected):
        expect(times.nth(i)).to_have_attribute("datetime", iso(ms))
    expect(page.get_by_text("Reads: Every day at 08:30")).to_be_visible()

    expr.fill("61 * * * *")
    preview = page.locator(".preview:not([aria-busy])")
    expect(preview).to_contain_text("cron minute value 61 is out of range 0-59")
    expect(page.locator(".next-runs")).to_have_count(0)

    # saving it anyway: the gateway's message next to the form, and nothing typed is lost
    page.get_by_label("Name", exact=True).fill("Broken schedule")
    page.get_by_label("Message").fill("Never saved")
    page.get_by_role("button", name="Create job").click()
    expect(page.get_by_role("alert").filter(has_text="cron minute value 61 is out of range 0-59")).to_be_visible()
    expect(expr).to_have_value("61 * * * *")
    expect(page.get_by_label("Name", exact=True)).to_have_value("Broken schedule")
    expect(page.get_by_label("Message")).to_have_value("Never saved")
    assert job_named(admin, "Broken schedule") is None

    # fixed, it saves
    expr.fill("15 6 * * *")
    expect(next_runs(page)).to_have_count(5)
    page.get_by_role("button", name="Create job").click()
    expect(row_of(page, "Broken schedule")).to_contain_text("Every day at 06:15")
    job = job_named(admin, "Broken schedule")
    assert job is not None and job["schedule"] == {"kind": "cron", "expr": "15 6 * * *", "tz": "UTC"}


def test_a_run_that_ended_but_is_not_in_the_history_yet_shows_there_soon(
    console: Console, admin: GatewayClient, fake: FakeLLM
) -> None:
    """The job is recorded as run a moment before its run is added to the history, and the page reads the two side
    by side: a history read in that moment has not got the run yet. The page looks again soon, not at its slow pace
    (30 s)."""
    job = add_job(admin, "Catch up")
    fake.script(reply("caught up"))
    admin.call("cron.run", {"id": job["id"], "mode": "force"})
    wait_for(lambda: admin.call("cron.runs", {"jobId": job["id"]})["count"] == 1, timeout=30)
    socket = HeldAnswers(console.page, "cron.runs")
    socket.replace_next({"runs": [], "count": 0, "jobId": job["id"]})  # read before the run was added
    page = console.open(f"#/schedules/job/{job['id']}").page
    expect(page.get_by_role("heading", name="Catch up", level=1)).to_be_visible()
    runs = page.locator("table.runs tbody tr")
    expect(runs).to_have_count(1)
    expect(runs.first.locator(".badge")).to_have_text("ok")
    assert socket.replacement is None  # the stale answer was the one the page read first
    assert not console.errors, console.errors


def test_runs_a_job_now_and_shows_the_run_in_its_history(console: Console, admin: GatewayClient, fake: FakeLLM) -> None:
    job = add_job(admin, "Say done")
    fake.script(reply("done"))
    page = console.open("#/schedules").page
    row_of(page, "Say done").get_by_role("link", name="Say done").click()
    expect(page.get_by_role("heading", name="Say done", level=1)).to_be_visible()
    expect(page.get_by_text("No runs yet")).to_be_visible()

    page.get_by_role("button", name="Run now: Say done").click()
    follow = page.get_by_role("link", name="Follow the run in its session")
    session = rf"#/chat/agent%3Amain%3Acron%3A{job['id']}%3A[0-9a-f-]+$"
    expect(follow).to_have_attribute("href", re.compile(session))
    runs = page.locator("table.runs tbody tr")
    expect(runs).to_have_count(1)
    expect(runs.first.locator(".badge")).to_have_text("ok")
    expect(runs.first).to_contain_text("done")

    recorded = admin.call("cron.runs", {"jobId": job["id"]})
    assert recorded["count"] == 1 and recorded["runs"][0]["status"] == "ok"
    expect(runs.first.locator(f'time[datetime="{iso(recorded["runs"][0]["ts"])}"]')).to_be_visible()
    opened = runs.first.get_by_role("link", name="Open session")  # the record names the session it ran in
    expect(opened).to_have_attribute("href", f"#/chat/{quote(recorded['runs'][0]['sessionKey'], safe='')}")
    assert len(fake.requests) == 1
    assert "Do Say done" in str(fake.requests[0].body)
    # the job's own line shows the outcome too
    expect(page.locator("dl.facts")).to_contain_text("Last run")
    expect(page.locator("dl.facts .badge.ok")).to_have_text("ok")
    follow.click()  # the run's own session, in the Chat view
    expect(page).to_have_url(re.compile(session))


def test_disables_and_enables_a_job_from_the_keyboard(console: Console, admin: GatewayClient) -> None:
    job = add_job(admin, "Toggle me")
    page = console.open("#/schedules").page
    switch = page.get_by_role("switch", name="Enabled: Toggle me")
    expect(switch).to_be_checked()
    switch.focus()
    page.keyboard.press("Space")
    expect(page.get_by_text("“Toggle me” disabled.")).to_be_visible()
    expect(row_of(page, "Toggle me")).to_contain_text("(disabled)")
    expect(switch).not_to_be_checked()
    expect(switch).to_be_focused()  # the list was drawn again, the focus stayed
    off = job_named(admin, "Toggle me")
    assert off is not None and off["enabled"] is False and "nextRunAtMs" not in off["state"]

    page.keyboard.press("Space")
    expect(page.get_by_text("“Toggle me” enabled.")).to_be_visible()
    expect(switch).to_be_checked()
    on = job_named(admin, "Toggle me")
    assert on is not None and on["enabled"] is True and on["state"]["nextRunAtMs"] > job["createdAtMs"]
    expect(row_of(page, "Toggle me").locator(f'time[datetime="{iso(on["state"]["nextRunAtMs"])}"]')).to_be_visible()


def test_edits_a_job_into_an_interval_and_clears_an_option(console: Console, admin: GatewayClient) -> None:
    spec = {"mode": "task", "message": "Old message", "deliver": False, "model": "openai/some-model"}
    job = add_job(admin, "Edit me", spec=spec, description="Before")
    page = console.open("#/schedules").page
    page.get_by_role("button", name="Edit: Edit me").click()
    expect(page.get_by_role("heading", name="Edit job")).to_be_visible()
    name = page.get_by_label("Name", exact=True)
    expect(name).to_have_value("Edit me")
    expect(page.get_by_label("Cron expression")).to_have_value("0 3 1 1 *")
    expect(page.get_by_label("Time zone")).to_have_value("UTC")
    expect(page.get_by_label("Message")).to_have_value("Old message")
    expect(page.get_by_label("Deliver the reply")).not_to_be_checked()

    name.fill("Edited")
    page.get_by_label("Description (optional)").fill("")
    page.get_by_label("At an interval").check()
    page.get_by_label("Every", exact=True).fill("2")
    page.get_by_label("Unit").select_option("hours")
    expect(next_runs(page)).to_have_count(5)
    page.get_by_text("More options").click()
    model = page.get_by_label("Model")
    expect(model).to_have_value("openai/some-model")
    model.fill("")
    page.get_by_role("button", name="Save changes").click()

    expect(row_of(page, "Edited")).to_contain_text("Every 2 hours")
    saved = admin.call("cron.list", {"limit": 500})["jobs"]
    edited = next(j for j in saved if j["id"] == job["id"])
    assert edited["name"] == "Edited" and "description" not in edited
    assert edited["schedule"] == {"kind": "every", "everyMs": 2 * 3600 * 1000}
    assert edited["spec"]["message"] == "Old message" and edited["spec"]["deliver"] is False
    assert not edited["spec"].get("model")


def test_deletes_a_job_only_once_confirmed(console: Console, admin: GatewayClient) -> None:
    add_job(admin, "Delete me")
    page = console.open("#/schedules").page
    row = row_of(page, "Delete me")
    expect(row).to_have_count(1)
    page.get_by_role("button", name="Delete: Delete me").click()
    dialog = page.get_by_role("dialog", name="Delete job")
    expect(dialog).to_contain_text("Delete me")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)
    assert job_named(admin, "Delete me") is not None

    page.get_by_role("button", name="Delete: Delete me").click()
    page.get_by_role("dialog", name="Delete job").get_by_role("button", name="Delete").click()
    expect(row).to_have_count(0)
    assert job_named(admin, "Delete me") is None


def test_shows_starts_and_triggers_the_heartbeat(console: Console, admin: GatewayClient, fake: FakeLLM) -> None:
    fake.script(reply("HEARTBEAT_OK"))
    page = console.open("#/schedules").page
    card = page.get_by_role("region", name="Heartbeat")
    card.get_by_role("button", name="Start schedule").click()
    expect(card.get_by_role("status")).to_contain_text("Heartbeat scheduler started")
    main = admin.call("heartbeat.status")["agents"]["main"]
    assert main["nextHeartbeatAt"] is not None
    expect(card.locator("table.agents tbody tr").filter(has_text="main")).to_be_visible()
    expect(card.locator(f'time[datetime="{iso(main["nextHeartbeatAt"])}"]')).to_be_visible()

    expect(card.get_by_label("Agent")).to_have_value("main")
    card.get_by_role("button", name="Trigger now").click()
    expect(card.get_by_role("status")).to_contain_text("Heartbeat triggered for agent main")
    link = card.get_by_role("link", name="Open the heartbeat session")
    expect(link).to_have_attribute("href", "#/chat/agent%3Amain%3Aheartbeat%3Asystem%3Ainternal")
    after = admin.call("heartbeat.status")["agents"]["main"]
    assert after["lastHeartbeatAt"] is not None
    expect(card.locator(f'time[datetime="{iso(after["lastHeartbeatAt"])}"]')).to_be_visible()
    wait_for(lambda: len(fake.requests) >= 1, 20, what="the heartbeat's model call")


def test_fits_a_phone(browser: Any, gateway: GatewayProcess, admin: GatewayClient) -> None:
    add_job(admin, "A job with a rather long name that has to wrap on a phone screen")
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    context.set_default_timeout(15_000)
    try:
        page = context.new_page()
        tab = Console(page, gateway.http).open("#/schedules")
        expect(page.get_by_role("link", name="A job with a rather long name")).to_be_visible()
        widths = "[document.documentElement.scrollWidth, document.querySelector('main').scrollWidth]"
        assert max(page.evaluate(widths)) <= PHONE["width"]
        page.get_by_role("button", name="New job").click()
        page.get_by_label("At an interval").check()
        expect(next_runs(page)).to_have_count(5)
        assert max(page.evaluate(widths)) <= PHONE["width"]
        # a one-off job, deleted once it has run
        page.get_by_role("radio", name="Once").check()
        page.get_by_label("Date and time").fill("2031-02-03T04:05")
        at_ms = page.evaluate("new Date('2031-02-03T04:05').getTime()")
        expect(next_runs(page)).to_have_count(1)
        expect(next_runs(page)).to_have_attribute("datetime", iso(at_ms))
        page.get_by_label("Delete the job once it has run successfully").check()
        page.get_by_label("Name", exact=True).fill("One-off on a phone")
        page.get_by_label("Sends an event to the agent's main session").check()
        page.get_by_label("Text", exact=True).fill("Time for the one-off")
        page.get_by_role("button", name="Create job").click()
        expect(page.get_by_role("link", name="One-off on a phone")).to_be_visible()
        assert max(page.evaluate(widths)) <= PHONE["width"]
        job = job_named(admin, "One-off on a phone")
        assert job is not None and job["schedule"] == {"kind": "at", "atMs": at_ms}
        assert job["deleteAfterRun"] is True and job["spec"] == {"mode": "systemEvent", "text": "Time for the one-off"}
        assert all(url.startswith((gateway.http, "ws://127.0.0.1", "data:")) for url in tab.requests)
        assert not tab.errors
    finally:
        context.close()


def test_leaving_a_job_form_with_unsaved_changes_asks_first(console: Console, admin: GatewayClient) -> None:
    page = console.open("#/schedules/new").page
    expect(page.get_by_role("heading", name="New job")).to_be_visible()
    console.go("nodes")  # nothing typed: it leaves without asking
    expect(page.get_by_role("heading", name="Nodes", level=1)).to_be_visible()
    page.go_back()
    name = page.get_by_label("Name", exact=True)
    name.fill("Half-typed job")

    console.go("chat")
    question = page.get_by_role("dialog", name="Discard your changes?")
    expect(question).to_be_visible()
    expect(page).to_have_url(re.compile(r"#/schedules/new$"))  # the address stays the form's while it asks
    question.get_by_role("button", name="Cancel").click()
    expect(question).to_have_count(0)
    expect(name).to_have_value("Half-typed job")
    expect(page).to_have_url(re.compile(r"#/schedules/new$"))

    page.get_by_role("button", name="Cancel").click()  # the form's own Cancel asks too
    question.get_by_role("button", name="Discard changes").click()
    expect(page.get_by_role("heading", name="Schedules", level=1)).to_be_visible()
    expect(page).to_have_url(re.compile(r"#/schedules$"))
    assert job_named(admin, "Half-typed job") is None

    # an edit that is saved leaves without a question
    add_job(admin, "Rename me")
    page.get_by_role("button", name="Refresh").click()
    page.get_by_role("button", name="Edit: Rename me").click()
    page.get_by_label("Name", exact=True).fill("Renamed")
    page.get_by_role("button", name="Save changes").click()
    expect(row_of(page, "Renamed")).to_have_count(1)
    expect(question).to_have_count(0)


def route_cutting_run_pages(page: Any, per_page: int) -> list[int]:
    """Route the page's socket through the test: an answer to `cron.runs` holding more than `per_page` runs is cut to
    that many and marked `truncated`, as the gateway does with a page too large for one message. Returns the offsets
    the page asked for, as they come."""
    asked: dict[str, int] = {}
    offsets: list[int] = []

    def route(ws: Any) -> None:
        server = ws.connect_to_server()

        def from_page(message: str | bytes) -> None:
            frame = json.loads(message)
            if frame.get("method") == "cron.runs":
                asked[frame["id"]] = frame["params"].get("offset", 0)
                offsets.append(asked[frame["id"]])
            server.send(message)

        def from_server(message: str | bytes) -> None:
            frame = json.loads(message)
            if frame.get("type") == "res" and frame.get("id") in asked and frame.get("ok"):
                runs = frame["payload"]["runs"]
                if len(runs) > per_page:
                    frame["payload"] = {**frame["payload"], "runs": runs[:per_page], "truncated": True}
                    message = json.dumps(frame)
            ws.send(message)

        ws.on_message(from_page)
        server.on_message(from_server)

    page.route_web_socket(re.compile(r"/ws$"), route)
    return offsets


def test_a_run_history_cut_short_by_the_gateway_is_read_page_after_page(
    console: Console, admin: GatewayClient, fake: FakeLLM
) -> None:
    job = add_job(admin, "Runs a lot")
    fake.responder = lambda request: reply("done")

    def recorded() -> int:
        return int(admin.call("cron.runs", {"jobId": job["id"]})["count"])

    for n in range(1, 6):
        admin.call("cron.run", {"id": job["id"], "mode": "force"})
        wait_for(lambda: recorded() >= n, 20, what=f"run {n} recorded")
    offsets = route_cutting_run_pages(console.page, per_page=2)
    page = console.open(f"#/schedules/job/{job['id']}").page
    runs = page.locator("table.runs tbody tr")
    expect(runs).to_have_count(5)  # 2 + 2 + 1: each cut page followed from where it ended
    expect(page.locator(".count")).to_have_text("5 of 5")
    expect(page.get_by_role("button", name="Show older runs")).to_be_hidden()  # nothing older: no idle button
    assert offsets[:3] == [0, 2, 4]
    newest = admin.call("cron.runs", {"jobId": job["id"]})["runs"]
    for n, run in enumerate(newest):
        expect(runs.nth(n).locator(f'time[datetime="{iso(run["ts"])}"]')).to_be_visible()
