"""The console's Settings view in a real browser: the model changed, an API key stored and removed without the page
ever holding it, typed limits stored (and refused with a reason next to the field), the gateway's own refusal shown
beside the value that caused it, and the raw configuration shown masked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from orbital.client import GatewayClient
from playwright.sync_api import expect

from tests.browser.conftest import SOCKET_SPY, Console


@pytest.fixture
def restore(admin: GatewayClient) -> Iterator[GatewayClient]:
    """Put back what the tests change on the module's gateway."""
    model = admin.call("config.get", {"path": "model"})["value"]
    yield admin
    admin.call("config.set", {"path": "model", "value": model})
    for path in ("budgets", "apiKeys.groq", "session.defaultResetPolicy", "timeouts.toolMs", "modle", "cron", "xeno"):
        admin.call("config.set", {"path": path})


def test_the_model_is_chosen_from_the_configured_providers(console: Console, restore: GatewayClient) -> None:
    page = console.open("#/settings").page
    model = page.get_by_role("region", name="Model")
    provider = model.get_by_label("Provider", exact=True)
    expect(provider).to_have_value("openai")  # the fake model's, set by the fixture
    expect(model.get_by_label("Model id")).to_have_value("gpt-test")
    model.get_by_label("Model id").fill("gpt-test-large")
    model.get_by_role("button", name="Save model").click()
    expect(model).to_contain_text("Now: openai/gpt-test-large")
    assert restore.call("config.get", {"path": "model"})["value"] == {"provider": "openai", "id": "gpt-test-large"}

    model.get_by_label("Model id").fill("  ")
    model.get_by_role("button", name="Save model").click()
    expect(model.get_by_role("alert")).to_have_text("Enter the model's id.")
    assert restore.call("config.get", {"path": "model.id"})["value"] == "gpt-test-large"


def test_an_api_key_is_write_only(console: Console, restore: GatewayClient) -> None:
    secret = "gsk-console-secret-6f1d2c9a"
    page = console.open("#/settings").page
    keys = page.get_by_role("region", name="API keys")
    expect(keys.get_by_role("listitem").filter(has_text="openai")).to_contain_text("key set")
    keys.get_by_label("Provider name").fill("groq")
    keys.get_by_label("Its API key").fill(secret)
    keys.get_by_role("button", name="Add key").click()
    groq = keys.get_by_role("listitem").filter(has_text="groq")
    expect(groq).to_contain_text("key set")
    assert restore.call("config.get", {"path": "apiKeys.groq"})["value"] == "***"
    page.get_by_role("region", name="Advanced").get_by_text("Whole configuration").click()
    expect(page.get_by_label("Configuration as JSON")).to_contain_text('"groq": "***"')
    assert secret not in page.content()
    typed = page.evaluate("[...document.querySelectorAll('input, textarea')].map(i => i.value)")
    assert not any(secret in value for value in typed)

    groq.get_by_role("button", name="Remove the groq key").click()
    page.get_by_role("dialog", name="Remove the groq key?").get_by_role("button", name="Remove").click()
    expect(keys.get_by_role("listitem").filter(has_text="groq")).to_have_count(0)
    assert "value" not in restore.call("config.get", {"path": "apiKeys.groq"})
    assert secret not in page.content()


def test_budgets_and_session_policies_are_stored(console: Console, restore: GatewayClient) -> None:
    page = console.open("#/settings").page
    limits = page.get_by_role("region", name="Limits")
    expect(limits.get_by_label("Model call timeout (ms)")).to_have_value("300000")
    limits.get_by_label("Tokens per day").fill("50000")
    limits.get_by_label("Tokens per month").fill("1000000")
    limits.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status").filter(has_text="Saved: Tokens per day, Tokens per month.")).to_be_visible()
    assert restore.call("config.get", {"path": "budgets"})["value"] == {"daily": 50000, "monthly": 1000000}

    limits.get_by_label("Tokens per day").fill("")  # no limit again
    limits.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status").filter(has_text="Saved: Tokens per day (no limit).")).to_be_visible()
    assert restore.call("config.get", {"path": "budgets"})["value"] == {"monthly": 1000000}

    sessions = page.get_by_role("region", name="Sessions")
    expect(sessions.get_by_label("Idle minutes before a reset")).to_be_hidden()
    sessions.get_by_label("Reset", exact=True).select_option("idle")
    sessions.get_by_label("Idle minutes before a reset").fill("90")
    sessions.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status").filter(has_text="Saved: Reset, Idle minutes before a reset.")).to_be_visible()
    policy = restore.call("config.get", {"path": "session.defaultResetPolicy"})["value"]
    assert policy["mode"] == "idle" and policy["idleMinutes"] == 90


def test_invalid_values_are_explained_next_to_their_field(console: Console, restore: GatewayClient) -> None:
    page = console.open("#/settings").page
    limits = page.get_by_role("region", name="Limits")
    limits.get_by_label("Tokens per day").fill("-5")
    limits.get_by_role("button", name="Save").click()
    expect(limits.get_by_role("alert")).to_have_text("At least 0.")  # the schema's range
    expect(limits.get_by_label("Tokens per day")).to_have_value("-5")
    expect(limits.get_by_label("Tokens per day")).to_have_attribute("aria-invalid", "true")
    assert "value" not in restore.call("config.get", {"path": "budgets.daily"})

    # the gateway's own refusals: a path it does not take, and a value it will not store
    advanced = page.get_by_role("region", name="Advanced")
    advanced.get_by_label("Path").fill("budgets..daily")
    advanced.get_by_label("Value (JSON)").fill("1000")
    advanced.get_by_role("button", name="Set", exact=True).click()
    expect(advanced.get_by_role("alert")).to_contain_text("Invalid config path: budgets..daily")
    advanced.get_by_label("Path").fill("compaction.reserveTokens")
    expect(advanced).to_contain_text("Now: 20000")
    advanced.get_by_label("Path").fill("auth.token")
    advanced.get_by_label("Value (JSON)").fill('"my-own-token"')
    advanced.get_by_role("button", name="Set", exact=True).click()
    expect(advanced.get_by_role("alert")).to_contain_text("auth.token is not used by this gateway")
    expect(advanced.get_by_label("Value (JSON)")).to_have_value('"my-own-token"')  # kept for the user to fix
    assert "value" not in restore.call("config.get", {"path": "auth.token"})

    advanced.get_by_label("Path").fill("budgets.session")
    expect(advanced).to_contain_text("Not set.")  # what the path holds now
    advanced.get_by_label("Value (JSON)").fill("not json")
    advanced.get_by_role("button", name="Set", exact=True).click()
    expect(advanced.get_by_role("alert")).to_contain_text("Not JSON")
    advanced.get_by_label("Value (JSON)").fill("12345")
    advanced.get_by_role("button", name="Set", exact=True).click()
    expect(page.get_by_role("region", name="Limits").get_by_label("Tokens per session")).to_have_value("12345")
    assert restore.call("config.get", {"path": "budgets.session"})["value"] == 12345
    assert not console.errors, console.errors


def test_what_is_typed_survives_a_reconnect_and_a_save_elsewhere(console: Console, restore: GatewayClient) -> None:
    console.page.add_init_script(SOCKET_SPY)
    page = console.open("#/settings").page
    limits = page.get_by_role("region", name="Limits")
    daily = limits.get_by_label("Tokens per day")
    expect(limits.get_by_label("Tool call timeout (ms)")).to_have_value("60000")
    daily.fill("4242")  # typed, not saved
    keys = page.get_by_role("region", name="API keys")
    keys.get_by_label("Provider name").fill("half-typed")

    # a save in Advanced: the other cards show the new value where nothing was typed, and keep what was
    advanced = page.get_by_role("region", name="Advanced")
    advanced.get_by_label("Path").fill("timeouts.toolMs")
    advanced.get_by_label("Value (JSON)").fill("45000")
    advanced.get_by_role("button", name="Set", exact=True).click()
    expect(limits.get_by_label("Tool call timeout (ms)")).to_have_value("45000")
    expect(advanced).to_contain_text("Now: 45000")
    expect(daily).to_have_value("4242")
    expect(keys.get_by_label("Provider name")).to_have_value("half-typed")

    # another client changes a setting, then the connection drops: the page reads it again, keeping what is typed
    restore.call("config.set", {"path": "budgets.monthly", "value": 999000})
    daily.focus()
    page.evaluate("window.__sockets.at(-1).close()")
    expect(limits.get_by_label("Tokens per month")).to_have_value("999000")
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    expect(daily).to_have_value("4242")
    expect(daily).to_be_focused()
    assert "value" not in restore.call("config.get", {"path": "budgets.daily"})


def test_the_keyboard_stays_in_the_keys_as_they_are_drawn_again(console: Console, restore: GatewayClient) -> None:
    page = console.open("#/settings").page
    keys = page.get_by_role("region", name="API keys")
    keys.get_by_label("Provider name").fill("groq")
    keys.get_by_label("Its API key").fill("gsk-focus-test")
    keys.get_by_label("Its API key").press("Enter")
    groq = keys.get_by_role("listitem").filter(has_text="groq")
    expect(groq).to_contain_text("key set")
    expect(keys.get_by_label("Its API key")).to_be_focused()  # the form drawn again, the focus where it was
    expect(keys.get_by_label("Provider name")).to_have_value("")

    groq.get_by_role("button", name="Remove the groq key").click()
    page.get_by_role("dialog", name="Remove the groq key?").get_by_role("button", name="Remove").click()
    expect(groq).to_have_count(0)
    expect(keys.get_by_label("Provider name")).to_be_focused()  # its row is gone: on to the form to add one


def test_the_gateways_refusal_and_warning_show_next_to_the_value(console: Console, restore: GatewayClient) -> None:
    page = console.open("#/settings").page
    advanced = page.get_by_role("region", name="Advanced")
    advanced.get_by_label("Path").fill("timeouts.toolMs")
    advanced.get_by_label("Value (JSON)").fill('"fast"')
    advanced.get_by_role("button", name="Set", exact=True).click()
    expect(advanced.get_by_role("alert")).to_contain_text(
        'timeouts.toolMs: expected integer ≥ 1000, got "fast" (nothing was stored)'
    )
    expect(advanced.get_by_label("Value (JSON)")).to_have_value('"fast"')  # kept for the user to fix
    assert restore.call("config.get", {"path": "timeouts.toolMs"})["value"] == 60000

    advanced.get_by_label("Path").fill("model")
    advanced.get_by_label("Value (JSON)").fill('"bogus"')
    advanced.get_by_role("button", name="Set", exact=True).click()
    expect(advanced.get_by_role("alert")).to_contain_text("model: expected `provider/model-id` or {provider, id}")
    assert restore.call("config.get", {"path": "model"})["value"] == {"provider": "openai", "id": "gpt-test"}

    advanced.get_by_label("Path").fill("modle")
    advanced.get_by_label("Value (JSON)").fill('"openai/gpt-test"')
    advanced.get_by_role("button", name="Set", exact=True).click()
    expect(advanced.get_by_role("status").filter(has_text="did you mean")).to_have_text(
        "Stored, but: unknown key `modle` — did you mean `model`?"
    )
    expect(advanced.get_by_role("alert")).to_be_hidden()
    assert restore.call("config.get", {"path": "modle"})["value"] == "openai/gpt-test"
    assert not console.errors, console.errors


def test_the_typed_fields_take_range_default_and_hint_from_the_schema(console: Console, restore: GatewayClient) -> None:
    page = console.open("#/settings").page
    limits = page.get_by_role("region", name="Limits")
    tool = limits.get_by_label("Tool call timeout (ms)")
    expect(tool).to_have_attribute("min", "1000")
    expect(tool).to_have_attribute("placeholder", "60000 (default)")
    expect(limits).to_contain_text("A tool call on a node (ms).")  # the schema's description
    tool.fill("999")
    limits.get_by_role("button", name="Save").click()
    expect(limits.get_by_role("alert")).to_have_text("At least 1000.")
    sessions = page.get_by_role("region", name="Sessions")
    expect(sessions.get_by_label("Hour of the daily reset (UTC)")).to_have_attribute("max", "23")
    expect(sessions).to_contain_text("Which session a direct message goes to.")
    assert restore.call("config.get", {"path": "timeouts.toolMs"})["value"] == 60000


def test_every_other_setting_of_the_schema_has_a_field(console: Console, restore: GatewayClient) -> None:
    page = console.open("#/settings").page
    more = page.get_by_role("region", name="More settings")
    more.get_by_text("Every other setting the gateway reads").click()  # folded until asked for
    jobs = more.get_by_label("cron.maxJobs")
    expect(jobs).to_have_value("200")
    expect(more).to_contain_text("Jobs at most.")  # the schema's description
    for shown_elsewhere in ("timeouts.toolMs", "apiKeys", "model.provider"):
        expect(more.get_by_label(shown_elsewhere, exact=True)).to_have_count(0)
    jobs.fill("0")
    more.get_by_role("button", name="Save").click()
    expect(more.get_by_role("alert")).to_have_text("At least 1.")
    jobs.fill("50")
    more.get_by_label("xeno.partials").check()
    more.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status").filter(has_text="Saved: cron.maxJobs, xeno.partials.")).to_be_visible()
    assert restore.call("config.get", {"path": "cron.maxJobs"})["value"] == 50
    assert restore.call("config.get", {"path": "xeno.partials"})["value"] is True
    assert not console.errors, console.errors
