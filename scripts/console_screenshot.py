"""Regenerate the README's picture of the console (`make screenshot`): a real `orbital dev` with a token, the
scripted model of the tests over loopback, a real `orbital node`, and the headless Chromium the browser tests drive.
The conversation is scripted, so the picture only changes when the console does.

    .venv/bin/python scripts/console_screenshot.py docs/images/console-chat.png
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orbital.client import GatewayClient  # noqa: E402
from playwright.sync_api import expect, sync_playwright  # noqa: E402

from tests.browser.conftest import CHROMIUM_ARGS, TOKEN, chromium_executable  # noqa: E402
from tests.e2e.conftest import GatewayProcess, NodeProcess  # noqa: E402
from tests.support.agent import configure_fake_model  # noqa: E402
from tests.support.fake_llm import FakeLLM, call, reply  # noqa: E402

QUESTION = "Which of my notes are the longest?"
ANSWER = """Your three notes, longest first:

1. **trip-plan.md**: 42 lines
2. **reading-list.md**: 17 lines
3. **ideas.md**: 9 lines

The trip plan has grown the most; want me to split it by day?"""

NOTES = {"trip-plan.md": 42, "reading-list.md": 17, "ideas.md": 9}


def main(out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="orbital-screenshot-") as tmp, FakeLLM() as llm:
        gateway = GatewayProcess(Path(tmp) / "data", token=TOKEN).start()
        node = None
        try:
            node = NodeProcess(gateway, "laptop", Path(tmp) / "node")
            node.workspace.mkdir(parents=True, exist_ok=True)
            for name, lines in NOTES.items():
                (node.workspace / name).write_text("".join(f"line {i}\n" for i in range(lines)))
            node.start()
            with GatewayClient(gateway.url, timeout=15) as admin:
                admin.connect("client", "screenshot-admin", token=TOKEN)
                configure_fake_model(admin, llm.base_url)
                admin.call("config.set", {"path": "model", "value": {"provider": "openai", "id": "gpt-4.1"}})
            llm.script(
                reply(tool_calls=[call("laptop__Bash", {"command": "wc -l *.md | sort -rn | head -4"})]),
                reply(ANSWER, chunks=6),
            )
            shoot(gateway, out)
        finally:
            if node is not None:
                node.stop()
            gateway.stop()


def shoot(gateway: GatewayProcess, out: Path) -> None:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_executable(), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 940}, color_scheme="light")
            page.set_default_timeout(30_000)
            page.goto(f"{gateway.http}/")
            dialog = page.get_by_role("dialog", name="Connect to Orbital")
            dialog.get_by_label("Gateway token").fill(TOKEN)
            dialog.get_by_role("button", name="Connect").click()
            expect(page.locator("#status")).to_have_attribute("data-state", "open")
            composer = page.locator('[data-view="chat"] textarea')
            composer.fill(QUESTION)
            composer.press("Enter")
            expect(page.get_by_text("The trip plan has grown the most")).to_be_visible()
            card = page.locator('[data-view="chat"] details.tool').first
            card.locator("summary").first.click()  # open, to show its result
            expect(card).to_contain_text("trip-plan.md")
            page.get_by_text("The trip plan has grown the most").scroll_into_view_if_needed()
            composer.blur()
            page.wait_for_load_state("networkidle")
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out))
        finally:
            browser.close()
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "images" / "console-chat.png")
