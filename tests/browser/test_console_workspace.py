"""The console's Workspace view in a real browser: browsing folders, markdown rendered, editing and saving (checked
through the protocol), new files, deleting, a save that meets someone else's change (shown as a conflict, then
overwritten or given up), unsaved edits guarded against leaving, and a file too large to edit."""

from __future__ import annotations

import re
from typing import Any

import pytest
from orbital.client import GatewayClient, RpcFailedError
from playwright.sync_api import expect

from tests.browser.conftest import PHONE, Console, HeldAnswers


def read(admin: GatewayClient, path: str) -> str:
    return admin.call("workspace.read", {"path": path})["content"]


def no_sideways_scroll(page: Any) -> None:
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"scrolls sideways by {overflow}px"


def test_browses_into_a_folder_and_renders_markdown(console: Console, admin: GatewayClient) -> None:
    admin.call("workspace.write", {"path": "notes/today.md", "content": "# Today\n\n- **bold** item\n- `code` item\n"})
    admin.call("workspace.write", {"path": "notes/raw.txt", "content": "# not a heading\n<b>not bold</b>"})
    page = console.open("#/workspace").page
    listing = page.get_by_role("region", name="Workspace")
    expect(listing.get_by_role("link", name="SOUL.md")).to_be_visible()
    listing.get_by_role("link", name="notes/").click()
    expect(page).to_have_url(re.compile(r"#/workspace/notes/$"))
    folder = page.get_by_role("region", name="Folder notes/")
    folder.get_by_role("link", name="today.md").click()
    expect(page).to_have_url(re.compile(r"#/workspace/notes/today\.md$"))
    file = page.get_by_role("region", name="File notes/today.md")
    expect(file.locator(".md h1")).to_have_text("Today")
    expect(file.locator(".md li strong")).to_have_text("bold")
    crumbs = page.get_by_role("navigation", name="Breadcrumbs")
    expect(crumbs).to_contain_text("Workspace/notes/today.md")

    crumbs.get_by_role("link", name="notes").click()
    page.get_by_role("region", name="Folder notes/").get_by_role("link", name="raw.txt").click()
    raw = page.get_by_role("region", name="File notes/raw.txt")
    expect(raw.locator("pre")).to_have_text("# not a heading\n<b>not bold</b>")
    expect(raw.locator("b")).to_have_count(0)

    crumbs.get_by_role("link", name="Workspace").click()
    page.get_by_role("region", name="Workspace").get_by_role("link", name="SOUL.md").click()
    soul = page.get_by_role("region", name="File SOUL.md")
    expect(soul.locator(".md h1")).to_have_text("Soul")
    soul.get_by_role("button", name="Show source").click()
    expect(soul.get_by_role("button", name="Show source")).to_have_attribute("aria-pressed", "true")
    expect(soul.locator("pre.ws-text")).to_contain_text("# Soul")
    page.set_viewport_size(PHONE)
    no_sideways_scroll(page)
    assert not console.errors, console.errors


def test_edits_and_saves_a_file_with_the_button_and_with_ctrl_s(console: Console, admin: GatewayClient) -> None:
    admin.call("workspace.write", {"path": "notes/edit.md", "content": "first version"})
    page = console.open("#/workspace/notes/edit.md").page
    file = page.get_by_role("region", name="File notes/edit.md")
    file.get_by_role("button", name="Edit").click()
    editor = page.get_by_label("Content of notes/edit.md")
    expect(editor).to_have_value("first version")
    expect(editor).to_be_focused()
    editor.fill("second version")
    expect(page.get_by_text("Unsaved changes")).to_be_visible()
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("region", name="File notes/edit.md")).to_contain_text("second version")
    assert read(admin, "notes/edit.md") == "second version"

    page.get_by_role("button", name="Edit").click()
    editor.fill("third version, saved from the keyboard")
    editor.press("Control+s")
    expect(page.get_by_role("region", name="File notes/edit.md")).to_contain_text("third version")
    assert read(admin, "notes/edit.md") == "third version, saved from the keyboard"

    # Cancel leaves the file as it was
    page.get_by_role("button", name="Edit").click()
    expect(editor).to_have_value("third version, saved from the keyboard")
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("region", name="File notes/edit.md")).to_contain_text("third version")
    assert not console.errors, console.errors


def test_creates_a_new_file_and_deletes_files(console: Console, admin: GatewayClient) -> None:
    admin.call("workspace.write", {"path": "drafts/keep.md", "content": "keep me"})
    admin.call("workspace.write", {"path": "drafts/old.md", "content": "delete me from the list"})
    page = console.open("#/workspace/drafts/").page
    page.get_by_role("button", name="New file").click()
    dialog = page.get_by_role("dialog", name="New file")
    expect(dialog.get_by_label("File path")).to_have_value("drafts/")
    dialog.get_by_role("button", name="Create").click()  # a folder is not a file name
    expect(dialog.get_by_role("alert")).to_contain_text("folder")
    dialog.get_by_label("File path").fill("drafts/fresh.txt")
    dialog.get_by_role("button", name="Create").click()
    editor = page.get_by_label("Content of drafts/fresh.txt")
    editor.fill("brand new")
    page.get_by_role("button", name="Save").click()
    expect(page).to_have_url(re.compile(r"#/workspace/drafts/fresh\.txt$"))
    expect(page.get_by_role("region", name="File drafts/fresh.txt")).to_contain_text("brand new")
    assert read(admin, "drafts/fresh.txt") == "brand new"

    # a new file under a name that exists is a conflict, not an overwrite
    page.get_by_role("button", name="New file").click()
    page.get_by_role("dialog", name="New file").get_by_label("File path").fill("drafts/keep.md")
    page.get_by_role("dialog", name="New file").get_by_role("button", name="Create").click()
    page.get_by_label("Content of drafts/keep.md").fill("clobber")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("alert").filter(has_text="Conflict")).to_contain_text("already exists")
    page.get_by_role("button", name="Reload theirs").click()
    expect(page.get_by_role("region", name="File drafts/keep.md")).to_contain_text("keep me")
    assert read(admin, "drafts/keep.md") == "keep me"

    # delete the open file
    page.evaluate("location.hash = '#/workspace/drafts/fresh.txt'")
    fresh = page.get_by_role("region", name="File drafts/fresh.txt")
    expect(fresh).to_contain_text("brand new")
    expect(page.locator(".ws-body")).to_have_attribute("aria-busy", "false")
    fresh.get_by_role("button", name="Delete").click()
    confirm = page.get_by_role("dialog", name="Delete file")
    expect(confirm).to_contain_text("drafts/fresh.txt")
    confirm.get_by_role("button", name="Delete").click()
    expect(page).to_have_url(re.compile(r"#/workspace/drafts/$"))
    folder = page.get_by_role("region", name="Folder drafts/")
    expect(folder.get_by_role("link", name="fresh.txt")).to_have_count(0)
    with pytest.raises(RpcFailedError) as gone:
        read(admin, "drafts/fresh.txt")
    assert gone.value.code == 404

    # delete from the list; Cancel first keeps it
    folder.get_by_role("button", name="Delete drafts/old.md").click()
    page.get_by_role("dialog", name="Delete file").get_by_role("button", name="Cancel").click()
    assert read(admin, "drafts/old.md") == "delete me from the list"
    folder.get_by_role("button", name="Delete drafts/old.md").click()
    page.get_by_role("dialog", name="Delete file").get_by_role("button", name="Delete").click()
    expect(folder.get_by_role("link", name="old.md")).to_have_count(0)
    expect(folder.get_by_role("link", name="keep.md")).to_be_visible()
    assert "drafts/old.md" not in admin.call("workspace.list", {"path": "drafts/"})["files"]
    assert not console.errors, console.errors


def test_a_change_made_meanwhile_is_shown_as_a_conflict_and_overwrite_writes_mine(
    console: Console, admin: GatewayClient
) -> None:
    admin.call("workspace.write", {"path": "notes/shared.md", "content": "the original"})
    page = console.open("#/workspace/notes/shared.md").page
    page.get_by_role("button", name="Edit").click()
    editor = page.get_by_label("Content of notes/shared.md")
    editor.fill("my careful edit")
    admin.call("workspace.write", {"path": "notes/shared.md", "content": "their sneaky edit"})
    page.get_by_role("button", name="Save").click()
    conflict = page.get_by_role("alert").filter(has_text="Conflict")
    expect(conflict).to_contain_text("changed since it was read")
    expect(page.get_by_label("Their version")).to_have_text("their sneaky edit")
    expect(editor).to_have_value("my careful edit")
    assert read(admin, "notes/shared.md") == "their sneaky edit"
    page.set_viewport_size(PHONE)
    no_sideways_scroll(page)
    conflict.get_by_role("button", name="Overwrite").click()
    expect(page.get_by_role("region", name="File notes/shared.md")).to_contain_text("my careful edit")
    assert read(admin, "notes/shared.md") == "my careful edit"

    # the other way out: their version wins and mine is dropped
    page.get_by_role("button", name="Edit").click()
    editor.fill("another edit of mine")
    admin.call("workspace.write", {"path": "notes/shared.md", "content": "their second edit"})
    editor.press("Control+s")
    page.get_by_role("alert").filter(has_text="Conflict").get_by_role("button", name="Reload theirs").click()
    expect(page.get_by_role("region", name="File notes/shared.md")).to_contain_text("their second edit")
    expect(page.get_by_label("Content of notes/shared.md")).to_have_count(0)
    assert read(admin, "notes/shared.md") == "their second edit"
    assert not console.errors, console.errors


def test_unsaved_changes_are_not_lost_by_leaving(console: Console, admin: GatewayClient) -> None:
    admin.call("workspace.write", {"path": "notes/guarded.md", "content": "saved text"})
    page = console.open("#/workspace/notes/guarded.md").page
    page.get_by_role("button", name="Edit").click()
    editor = page.get_by_label("Content of notes/guarded.md")
    editor.press("End")
    editor.type(" and more")
    console.go("nodes")
    ask = page.get_by_role("dialog", name="Discard your changes?")
    expect(ask).to_contain_text("notes/guarded.md")
    ask.get_by_role("button", name="Cancel").click()
    expect(page).to_have_url(re.compile(r"#/workspace/notes/guarded\.md$"))
    expect(page.locator("#view")).to_have_attribute("data-view", "workspace")
    expect(editor).to_have_value("saved text and more")

    # a breadcrumb inside the view is guarded too, and leaving the page asks the browser to confirm
    page.get_by_role("navigation", name="Breadcrumbs").get_by_role("link", name="notes").click()
    page.get_by_role("dialog", name="Discard your changes?").get_by_role("button", name="Cancel").click()
    expect(editor).to_have_value("saved text and more")
    asked: list[str] = []
    page.on("dialog", lambda d: (asked.append(d.type), d.dismiss()))
    page.evaluate("location.reload()")  # dismissed: the page stays
    expect(editor).to_have_value("saved text and more")
    assert asked == ["beforeunload"]

    console.go("nodes")
    page.get_by_role("dialog", name="Discard your changes?").get_by_role("button", name="Discard changes").click()
    expect(page.locator("#view")).to_have_attribute("data-view", "nodes")
    assert read(admin, "notes/guarded.md") == "saved text"
    assert not console.errors, console.errors


def test_leaving_the_editor_asks_however_the_address_changes_and_a_reload_keeps_the_text(
    console: Console, admin: GatewayClient
) -> None:
    admin.call("workspace.write", {"path": "notes/back.md", "content": "on disk"})
    page = console.open("#/workspace/notes/").page
    page.get_by_role("region", name="Folder notes/").get_by_role("link", name="back.md").click()
    page.get_by_role("button", name="Edit").click()
    editor = page.get_by_label("Content of notes/back.md")
    editor.fill("typed, not saved")
    page.go_back()  # to the folder, inside the view: the address is put back and the question asked
    page.get_by_role("dialog", name="Discard your changes?").get_by_role("button", name="Cancel").click()
    expect(page).to_have_url(re.compile(r"#/workspace/notes/back\.md$"))
    expect(editor).to_have_value("typed, not saved")

    # leaving the view is asked about too, however the address changes (here: typed)
    page.evaluate("location.hash = '#/nodes'")
    page.get_by_role("dialog", name="Discard your changes?").get_by_role("button", name="Cancel").click()
    expect(page).to_have_url(re.compile(r"#/workspace/notes/back\.md$"))
    expect(editor).to_have_value("typed, not saved")
    page.evaluate("location.hash = '#/nodes'")
    page.get_by_role("dialog", name="Discard your changes?").get_by_role("button", name="Discard changes").click()
    expect(page.locator("#view")).to_have_attribute("data-view", "nodes")
    assert read(admin, "notes/back.md") == "on disk"

    # a reload the page cannot stop: the text is offered again on the file
    page.evaluate("location.hash = '#/workspace/notes/back.md'")
    page.get_by_role("button", name="Edit").click()
    page.get_by_label("Content of notes/back.md").fill("typed again, not saved")
    page.on("dialog", lambda question: question.accept())  # the browser's own "leave the page?"
    page.reload()
    expect(page.locator("#status")).to_have_attribute("data-state", "open")  # the tab kept its token
    offer = page.get_by_role("note").filter(has_text="unsaved changes to notes/back.md")
    offer.get_by_role("button", name="Restore them").click()
    expect(page.get_by_label("Content of notes/back.md")).to_have_value("typed again, not saved")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("region", name="File notes/back.md")).to_contain_text("typed again, not saved")
    assert read(admin, "notes/back.md") == "typed again, not saved"
    expect(page.get_by_role("note").filter(has_text="unsaved changes")).to_have_count(0)
    assert not console.errors, console.errors


def test_a_load_that_answers_after_the_editor_opened_leaves_the_editor_and_its_text(
    console: Console, admin: GatewayClient
) -> None:
    admin.call("workspace.write", {"path": "notes/slow.md", "content": "first version"})
    socket = HeldAnswers(console.page, "workspace.read")
    page = console.open("#/workspace/notes/slow.md").page
    file = page.get_by_role("region", name="File notes/slow.md")
    expect(file.locator(".ws-content")).to_contain_text("first version")
    socket.hold()
    page.get_by_role("button", name="Refresh").click()  # its read is under way, its answer kept back
    expect(page.locator(".ws-body")).to_have_attribute("aria-busy", "true")
    file.get_by_role("button", name="Edit").click()
    editor = page.get_by_label("Content of notes/slow.md")
    editor.fill("typed while the read was under way")
    expect(page.locator(".ws-body")).to_have_attribute("aria-busy", "false")  # the editor is what is shown now
    socket.wait_kept()  # the Refresh's read has been answered by the gateway, not yet passed on
    socket.release()
    expect(page.get_by_role("region", name="Editing notes/slow.md")).to_have_count(1)
    expect(editor).to_have_value("typed while the read was under way")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("region", name="File notes/slow.md")).to_contain_text("typed while the read was under way")
    assert read(admin, "notes/slow.md") == "typed while the read was under way"
    assert not console.errors, console.errors


def test_a_file_too_large_to_edit_is_shown_read_only(console: Console, admin: GatewayClient) -> None:
    admin.call("workspace.write", {"path": "big.log", "content": "line of the big file\n" * 5000})
    page = console.open("#/workspace/big.log").page
    file = page.get_by_role("region", name="File big.log")
    expect(file.get_by_role("note")).to_contain_text("read-only")
    expect(file.get_by_role("button", name="Edit")).to_be_disabled()
    expect(file.locator("pre.ws-text")).to_contain_text("line of the big file")
    assert not console.errors, console.errors


def test_the_workspace_root_shows_no_stray_null(console: Console, admin: GatewayClient) -> None:
    page = console.open("#/workspace").page
    listing = page.get_by_role("region", name="Workspace")
    expect(listing.get_by_role("link", name="SOUL.md")).to_be_visible()
    main = page.locator("main")
    expect(main).not_to_contain_text("null")
    expect(main).not_to_contain_text("undefined")
    page.get_by_role("button", name="Refresh").click()
    expect(listing.get_by_role("link", name="SOUL.md")).to_be_visible()
    expect(main).not_to_contain_text("null")
    assert not console.errors, console.errors


def test_underscores_inside_words_stay_literal_in_markdown(console: Console, admin: GatewayClient) -> None:
    text = (
        "Call snake_case_names and laptop__Bash as they are; a file_name.md too.\n\n"
        "But _this_ is emphasis, __this__ is strong, and in*side*word stars still work."
    )
    admin.call("workspace.write", {"path": "notes/underscores.md", "content": text})
    page = console.open("#/workspace/notes/underscores.md").page
    file = page.get_by_role("region", name="File notes/underscores.md")
    first = file.locator(".md p").nth(0)
    expect(first).to_have_text("Call snake_case_names and laptop__Bash as they are; a file_name.md too.")
    expect(first.locator("em, strong")).to_have_count(0)
    second = file.locator(".md p").nth(1)
    expect(second.locator("em")).to_have_text(["this", "side"])
    expect(second.locator("strong")).to_have_text("this")
    expect(second).to_have_text("But this is emphasis, this is strong, and insideword stars still work.")
    assert not console.errors, console.errors
