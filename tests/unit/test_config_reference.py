"""docs/configuration.md is what the schema renders, and the schema covers the defaults."""

from __future__ import annotations

from pathlib import Path

from orbital.domain import config as cfg
from orbital.domain import config_schema
from orbital.methods import config_reference

ROOT = Path(__file__).resolve().parents[2]


def test_the_configuration_reference_is_what_the_schema_renders() -> None:
    on_disk = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert on_disk == config_reference.render(), (
        "docs/configuration.md is out of date: run "
        "'.venv/bin/python -m orbital.methods.config_reference > docs/configuration.md'"
    )


def test_every_default_is_a_key_of_the_schema_and_passes_it() -> None:
    defaults = cfg.defaults()
    assert config_schema.unknown_keys(next(iter(defaults)), defaults[next(iter(defaults))]) == []
    for key, value in defaults.items():
        assert config_schema.unknown_keys(key, value) == [], key
        assert config_schema.problems_at(defaults, key) == [], key


def test_the_reference_names_every_key_the_readers_document() -> None:
    paths = {row.path for row in config_schema.reference_rows()}
    for path in (
        "timeouts.llmMs",
        "timeouts.toolMs",
        "timeouts.logsMs",
        "agents.maxIterations",
        "budgets.session",
        "session.defaultBudget.maxTokens",
        "budgets.daily",
        "budgets.monthly",
        "xeno.partials",
        "auth.token",
        "channels.<name>.accounts.<name>.botToken",
        "compaction.extractMemories",
        "agents.defaultHeartbeat.activeHours.start",
    ):
        assert path in paths, path


def test_the_readme_links_the_reference() -> None:
    assert "docs/configuration.md" in (ROOT / "README.md").read_text(encoding="utf-8")
