"""docs/configuration.md, rendered from the configuration's schema (`orbital.domain.config_schema`).

    python -m orbital.methods.config_reference > docs/configuration.md

`tests/unit/test_config_reference.py` fails when the file and the schema differ.
"""

from __future__ import annotations

from orbital.domain import config_schema as schema

HEADER = """# Configuration reference

<!-- Generated from orbital/domain/config_schema.py by `python -m orbital.methods.config_reference > \
docs/configuration.md`; do not edit by hand. -->

Every key the gateway reads, with its type, its default and what it does. Read the configuration with `config.get`
(`orbital call config.get '{"path":"timeouts"}'`) and change one key, or a whole section, with `config.set`
(`orbital call config.set '{"path":"timeouts.toolMs","value":90000}'`), from the console's Settings or over
`POST /api/v1/config.set`.

- **Checked.** `config.set` refuses a value of the wrong type, out of range, or a model whose provider is neither
  built in nor configured with `providers.<name>.baseUrl`: the answer is an error 400 (a GSV error frame over the
  socket) such as `timeouts.toolMs: expected integer ≥ 1000, got "fast" (nothing was stored)`, with
  `details.problems: [{path, expected, got}]`, and nothing is stored. A section written whole is checked key by key.
- **Unknown keys are kept.** A key this gateway does not read is stored (GSV clients keep settings of their own),
  and the answer carries a `warning`: ``unknown key `modle` — did you mean `model`?``. `orbital call` prints it on
  stderr; the console shows it next to the field.
- **Missing paths.** `config.get` of a path that holds nothing answers `{"path": …, "exists": false}`.
- **The model** is `{"provider", "id"}`; `config.set` also takes `"provider/model-id"` and stores it as the object.
  `/model provider/model-id` in a chat picks one for the session and is refused the same way.
- **Secrets** (every `apiKeys` entry, every provider `headers` value, and any key named like a credential: `token`,
  `botToken`, `webhookSecret`, `password`, `apiKey`…) are shown as `"***"` on every read; writing `"***"` back keeps
  the stored secret.
- `null` where a key is optional turns it off or back to its default; `config.set` without a `value` deletes the key
  (the default applies again).

`<name>` stands for a name you choose (a provider, a channel, an account, a skill), `<n>` for a list's position.

| key | type | default | what it does |
|---|---|---|---|
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    lines = [HEADER.rstrip("\n")]
    for row in schema.reference_rows():
        default = schema.default_text(row.default)
        shown = default if default == "—" else f"`{default}`"
        if len(default) > 60:
            shown = "(long: see `config.get`)"
        description = row.description + (" Secret: shown as `***`." if row.secret else "")
        lines.append(f"| `{row.path}` | {_cell(row.type)} | {_cell(shown)} | {_cell(description)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    print(render(), end="")


if __name__ == "__main__":
    main()
