"""The workspace port's contract: the same tests against the file workspace (in a temporary directory) and the S3
workspace (on moto, with the bucket of template.yaml), then what only the file workspace does: its presigned URLs
served over real HTTP, its durability across a killed process, its blobs."""

from __future__ import annotations

import hashlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
from orbital.local.object_urls import ObjectRoute, mount
from orbital.store.backends.files import FileWorkspace, WorkspaceInUseError
from orbital.store.backends.s3 import S3Workspace
from orbital.store.workspace import Headers, MissingObjectError, Workspace

from tests.support.asgi_server import elsewhere, serving

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "orbital-contract-workspace"


def _template_bucket(client: Any) -> None:
    """The workspace bucket as template.yaml declares it."""
    client.create_bucket(Bucket=BUCKET)
    client.put_bucket_encryption(
        Bucket=BUCKET,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
        },
    )
    client.put_public_access_block(
        Bucket=BUCKET,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        },
    )
    client.put_bucket_ownership_controls(
        Bucket=BUCKET, OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    )
    client.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})


@pytest.fixture(params=["files", "s3"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def workspace(kind: str, tmp_path: Path) -> Iterator[Workspace]:
    """Either workspace; the file one serves its presigned URLs on a real HTTP server."""
    if kind == "files":
        store = FileWorkspace(tmp_path / "objects")
        try:
            with serving(mount(elsewhere, ObjectRoute(store))) as base:
                store.set_base_url(base)
                yield store
        finally:
            store.close()
        return
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        _template_bucket(client)
        yield S3Workspace(client, BUCKET)


def _etag(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


def _keys(workspace: Workspace, prefix: str = "") -> list[str]:
    return [info.key for info in workspace.list_all(prefix)]


# --- the port, both ways -------------------------------------------------------------------------------------------


def test_put_head_get_describe_the_object(workspace: Workspace) -> None:
    body = b"# Soul\nbe kind\n"
    workspace.put("agents/main/SOUL.md", body, content_type="text/markdown", metadata={"owner": "u-1", "sha256": "x"})
    head = workspace.head("agents/main/SOUL.md")
    assert head is not None
    assert (head.key, head.size, head.content_type, head.etag) == (
        "agents/main/SOUL.md",
        len(body),
        "text/markdown",
        _etag(body),
    )
    assert head.metadata == {"owner": "u-1", "sha256": "x"}
    assert head.last_modified is not None
    moment = datetime.fromisoformat(head.last_modified)
    assert moment.tzinfo is not None and abs(moment - datetime.now(UTC)) < timedelta(days=1)
    got = workspace.get("agents/main/SOUL.md")
    assert got is not None
    assert got[0] == body
    assert got[1] == head


def test_missing_objects(workspace: Workspace) -> None:
    assert workspace.head("nothing/here") is None
    assert workspace.get("nothing/here") is None
    assert workspace.read_range("nothing/here", 0, 10) is None
    workspace.delete("nothing/here")  # no error
    assert workspace.delete_prefix("nothing/") == 0
    assert workspace.listing("nothing/") == workspace.listing("nothing/", delimiter=None)
    assert workspace.listing("nothing/").keys == [] and workspace.listing("nothing/").prefixes == []


def test_a_key_and_the_keys_under_it_are_separate_objects(workspace: Workspace) -> None:
    workspace.put("a", b"file a")
    workspace.put("a/b", b"file a/b")
    workspace.put("a/b/c", b"file a/b/c")
    assert [workspace.get(k)[0] for k in ("a", "a/b", "a/b/c")] == [b"file a", b"file a/b", b"file a/b/c"]
    workspace.delete("a/b")
    assert workspace.head("a/b") is None
    assert workspace.get("a") is not None and workspace.get("a/b/c") is not None
    assert _keys(workspace) == ["a", "a/b/c"]


def test_overwrite_replaces_bytes_type_and_metadata(workspace: Workspace) -> None:
    workspace.put("k", b"first version", content_type="text/plain", metadata={"owner": "one"})
    workspace.put("k", b"2nd", content_type="application/json")
    got = workspace.get("k")
    assert got is not None
    assert got[0] == b"2nd"
    assert (got[1].size, got[1].content_type, got[1].metadata, got[1].etag) == (
        3,
        "application/json",
        {},
        _etag(b"2nd"),
    )


HEADERS = {
    "content_encoding": "gzip",
    "content_disposition": 'attachment; filename="notes.txt"',
    "content_language": "nl",
    "cache_control": "max-age=60",
}


def _headers(info: Any) -> dict[str, str | None]:
    return {name: getattr(info, name) for name in HEADERS}


def test_headers_are_kept_and_replaced_with_the_object(workspace: Workspace) -> None:
    workspace.put("h", b"\x1f\x8bzipped", content_type="text/plain", metadata={"origin": "upload"}, **HEADERS)
    head = workspace.head("h")
    assert head is not None and _headers(head) == HEADERS and head.content_type == "text/plain"
    got = workspace.get("h")
    assert got is not None and got[1] == head
    assert workspace.listing("").keys[0].content_encoding is None  # a listing does not carry them
    workspace.copy("h", "h-copy", content_type="text/plain")  # metadata replaced: the headers go too
    copied = workspace.head("h-copy")
    assert copied is not None and _headers(copied) == dict.fromkeys(HEADERS) and copied.metadata == {}
    workspace.put("h", b"plain")  # a put replaces them all
    again = workspace.head("h")
    assert again is not None and _headers(again) == dict.fromkeys(HEADERS)


def test_stream_reads_an_object_in_parts(workspace: Workspace) -> None:
    body = os.urandom(300_000)
    workspace.put("big", body, content_type="application/zip", metadata={"k": "v"}, content_encoding="identity")
    opened = workspace.stream("big")
    assert opened is not None
    stream, info = opened
    try:
        first = stream.read(100_000)
        workspace.put("big", b"replaced meanwhile")  # the stream goes on with the bytes it began with
        parts = [first, *iter(lambda: stream.read(64 * 1024), b"")]
    finally:
        stream.close()
    assert len(first) == 100_000 and b"".join(parts) == body
    assert (info.size, info.content_type, info.metadata, info.etag, info.content_encoding) == (
        len(body),
        "application/zip",
        {"k": "v"},
        _etag(body),
        "identity",
    )
    assert workspace.stream("nothing/here") is None


def test_empty_object(workspace: Workspace) -> None:
    workspace.put("empty", b"")
    got = workspace.get("empty")
    assert got is not None and got[0] == b"" and got[1].size == 0 and got[1].etag == _etag(b"")
    assert workspace.read_range("empty", 0, 10) == b""


def test_listing_with_and_without_delimiter_in_key_order(workspace: Workspace) -> None:
    for key in (
        "w/b.md",
        "w/a.md",
        "w/memory/2026-01-02.md",
        "w/memory/2026-01-01.md",
        "w/memory/deep/x.md",
        "w/skills/s1/SKILL.md",
        "w/skills/s2/SKILL.md",
        "w/z/one",
        "w/zz",
        "w/c.md",
        "wx/other",
        "w",
    ):
        workspace.put(key, key.encode())
    top = workspace.listing("w/")
    assert [i.key for i in top.keys] == ["w/a.md", "w/b.md", "w/c.md", "w/zz"]
    assert top.prefixes == ["w/memory/", "w/skills/", "w/z/"]
    assert [i.size for i in top.keys] == [6, 6, 6, 4]
    assert all(i.etag == _etag(i.key.encode()) and i.last_modified for i in top.keys)
    memory = workspace.listing("w/memory/")
    assert [i.key for i in memory.keys] == ["w/memory/2026-01-01.md", "w/memory/2026-01-02.md"]
    assert memory.prefixes == ["w/memory/deep/"]
    # a prefix that is not a "directory": every key starting with it
    bare = workspace.listing("w")
    assert [i.key for i in bare.keys] == ["w"]
    assert bare.prefixes == ["w/", "wx/"]
    assert _keys(workspace, "w/memory") == ["w/memory/2026-01-01.md", "w/memory/2026-01-02.md", "w/memory/deep/x.md"]
    everything = workspace.listing("", delimiter=None)
    assert everything.prefixes == []
    assert [i.key for i in everything.keys] == sorted(i.key for i in everything.keys) and len(everything.keys) == 12
    assert workspace.list_all("w/s") == workspace.listing("w/s", delimiter=None).keys
    assert [i.key for i in workspace.list_all("w/s")] == ["w/skills/s1/SKILL.md", "w/skills/s2/SKILL.md"]


def test_listing_is_in_utf8_byte_order(workspace: Workspace) -> None:
    """S3 orders keys by their UTF-8 bytes (code points), not UTF-16 units: U+E000 sorts before U+1F600."""
    names = ["u/😀", "u/\ue000", "u/é", "u/z", "u/Z", "u/a b", "u/a", "u/\ud7ff1", "u/\ud7ff/deeper"]
    for name in names:
        workspace.put(name, b"x")
    assert _keys(workspace, "u/") == [
        "u/Z",
        "u/a",
        "u/a b",
        "u/z",
        "u/é",
        "u/\ud7ff/deeper",
        "u/\ud7ff1",
        "u/\ue000",
        "u/😀",
    ]
    assert _keys(workspace, "u/\ud7ff") == ["u/\ud7ff/deeper", "u/\ud7ff1"]
    listed = workspace.listing("u/")
    assert listed.prefixes == ["u/\ud7ff/"]
    assert "u/\ud7ff1" in [i.key for i in listed.keys]


def test_read_range(workspace: Workspace) -> None:
    data = bytes(range(256)) * 40
    workspace.put("r/data.bin", data)
    assert workspace.read_range("r/data.bin", 0, 1) == data[:1]
    assert workspace.read_range("r/data.bin", 100, 4000) == data[100:4000]
    assert workspace.read_range("r/data.bin", 10_000, 20_000) == data[10_000:]  # fewer at the end
    assert workspace.read_range("r/data.bin", len(data), len(data) + 5) == b""  # past the end
    for start, end in ((-1, 5), (5, 5), (6, 5)):
        with pytest.raises(ValueError):
            workspace.read_range("r/data.bin", start, end)


def test_copy_replaces_type_and_metadata(workspace: Workspace) -> None:
    workspace.put("c/src.bin", b"payload", content_type="text/plain", metadata={"owner": "me"})
    workspace.put("c/dst.bin", b"old bytes at the destination")
    workspace.copy("c/src.bin", "c/dst.bin", content_type="image/png")
    got = workspace.get("c/dst.bin")
    assert got is not None
    assert got[0] == b"payload"
    assert (got[1].content_type, got[1].metadata, got[1].etag, got[1].size) == ("image/png", {}, _etag(b"payload"), 7)
    source = workspace.head("c/src.bin")
    assert source is not None and (source.content_type, source.metadata) == ("text/plain", {"owner": "me"})
    workspace.delete("c/src.bin")
    assert workspace.get("c/dst.bin") == got  # the copy stands alone
    with pytest.raises(MissingObjectError):
        workspace.copy("c/src.bin", "c/again.bin", content_type="text/plain")
    assert workspace.head("c/again.bin") is None


def test_delete_prefix(workspace: Workspace) -> None:
    for key in ("transfers/7/part/0", "transfers/7/part/65536", "transfers/7/staging", "transfers/70/staging", "t"):
        workspace.put(key, b"x")
    assert workspace.delete_prefix("transfers/7/") == 3
    assert _keys(workspace) == ["t", "transfers/70/staging"]
    assert workspace.delete_prefix("transfers/7") == 1
    assert _keys(workspace) == ["t"]


def test_presigned_urls_work_with_plain_http(workspace: Workspace) -> None:
    """What a node does: PUT a file to an upload URL, GET a download URL (the workspace copies in between)."""
    data = os.urandom(300_000)
    put = requests.put(workspace.presign_put("transfers/1/staging"), data=data, headers={"Content-Type": "image/png"})
    assert put.status_code == 200, put.text
    staged = workspace.head("transfers/1/staging")
    assert staged is not None and (staged.size, staged.content_type, staged.etag) == (
        len(data),
        "image/png",
        _etag(data),
    )
    workspace.copy("transfers/1/staging", "agents/main/in/p.png", content_type="image/png")
    got = requests.get(workspace.presign_get("agents/main/in/p.png"))
    assert got.status_code == 200
    assert got.content == data
    assert got.headers["ETag"] == _etag(data)


def test_an_upload_url_keeps_the_headers_sent_with_it(workspace: Workspace) -> None:
    sent = {
        "Content-Type": "text/plain",
        "Content-Encoding": "gzip",
        "Content-Disposition": 'attachment; filename="a.txt"',
        "Content-Language": "nl",
        "Cache-Control": "no-cache",
    }
    body = b"\x1f\x8b not really gzip"
    put = requests.put(workspace.presign_put("up/a"), data=body, headers=sent)
    assert put.status_code == 200, put.text
    head = workspace.head("up/a")
    assert head is not None
    assert _headers(head) == {
        "content_encoding": "gzip",
        "content_disposition": 'attachment; filename="a.txt"',
        "content_language": "nl",
        "cache_control": "no-cache",
    }
    got = requests.get(workspace.presign_get("up/a"), headers={"Accept-Encoding": "identity"}, stream=True)
    try:
        assert got.status_code == 200
        assert got.raw.read(decode_content=False) == body
        for name, value in sent.items():
            assert got.headers[name] == value, name
    finally:
        got.close()


# --- the file workspace's URLs, over HTTP --------------------------------------------------------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[FileWorkspace, str]]:
    """A file workspace whose largest PUT is 1000 bytes, and its URL route on a real server."""
    store = FileWorkspace(tmp_path / "objects", max_put_bytes=1000)
    try:
        with serving(mount(elsewhere, ObjectRoute(store))) as base:
            store.set_base_url(lambda: base)
            yield store, base
    finally:
        store.close()


def _with_query(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    fields = dict(item.split("=", 1) for item in parts.query.split("&"))
    fields.update(changes)
    return f"{parts.scheme}://{parts.netloc}{parts.path}?" + "&".join(f"{k}={v}" for k, v in fields.items())


def test_urls_are_bound_to_method_key_and_expiry(served: tuple[FileWorkspace, str]) -> None:
    store, base = served
    store.put("a/b c?d#e%f", b"secret bytes", content_type="text/plain")
    get_url = store.presign_get("a/b c?d#e%f")
    assert get_url.startswith(f"{base}/_objects/a%2Fb%20c%3Fd%23e%25f?expires=")
    ok = requests.get(get_url)
    assert (ok.status_code, ok.content, ok.headers["Content-Type"]) == (200, b"secret bytes", "text/plain")
    assert ok.headers["Last-Modified"].endswith("GMT")

    signature = get_url.rsplit("signature=", 1)[1]
    tampered = _with_query(get_url, signature=("0" if signature[0] != "0" else "1") + signature[1:])
    later = _with_query(get_url, expires=str(int(time.time()) + 86_400))
    other_key = get_url.replace("/_objects/a%2Fb%20c%3Fd%23e%25f", "/_objects/a%2Fother")
    unsigned = get_url.split("?", 1)[0]
    for url in (
        tampered,
        later,
        other_key,
        unsigned,
        _with_query(get_url, expires="-5"),
        _with_query(get_url, expires="1e9"),
    ):
        refused = requests.get(url)
        assert refused.status_code == 403, url
        assert b"secret" not in refused.content
    # the method is signed: a GET URL does not write, a PUT URL does not read, nothing else is served
    assert requests.put(get_url, data=b"overwritten").status_code == 403
    assert requests.get(store.presign_put("a/b c?d#e%f")).status_code == 403
    assert requests.delete(get_url).status_code == 403
    assert requests.head(get_url).status_code == 403
    assert store.get("a/b c?d#e%f")[0] == b"secret bytes"
    # another start draws another key: its URLs are refused here
    other = FileWorkspace(store.root.parent / "other", base_url=base)
    try:
        assert requests.get(other.presign_get("a/b c?d#e%f")).status_code == 403
    finally:
        other.close()


def test_a_get_is_a_download_never_sniffed(served: tuple[FileWorkspace, str]) -> None:
    """These URLs are on the console's origin: an object is never shown as a page there, whatever its type."""
    store, _ = served
    store.put("page", b"<script>alert(1)</script>", content_type="text/html")
    store.put("named", b"%PDF-1.4", content_type="application/pdf", content_disposition='attachment; filename="a.pdf"')
    store.put("inline", b"GIF89a", content_type="image/gif", content_disposition="inline")
    for key, disposition in (
        ("page", "attachment"),
        ("named", 'attachment; filename="a.pdf"'),
        ("inline", "attachment"),
    ):
        got = requests.get(store.presign_get(key))
        assert got.status_code == 200, key
        assert got.headers["X-Content-Type-Options"] == "nosniff", key
        assert got.headers["Content-Disposition"] == disposition, key
    ranged = requests.get(store.presign_get("page"), headers={"Range": "bytes=0-3"})
    assert ranged.status_code == 206 and ranged.headers["Content-Disposition"] == "attachment"


def test_an_expired_url_is_refused(served: tuple[FileWorkspace, str]) -> None:
    store, _ = served
    store.put("k", b"bytes")
    assert requests.get(store.presign_get("k", expires=-1)).status_code == 403
    assert requests.put(store.presign_put("k", expires=-1), data=b"new").status_code == 403
    assert store.get("k")[0] == b"bytes"


def test_unknown_key_is_404_and_other_paths_go_on(served: tuple[FileWorkspace, str]) -> None:
    store, base = served
    assert requests.get(store.presign_get("never/written")).status_code == 404
    other = requests.get(f"{base}/health")
    assert (other.status_code, other.content) == (299, b"elsewhere")


def test_put_at_the_limit_and_over_it(served: tuple[FileWorkspace, str]) -> None:
    store, base = served
    url = store.presign_put("up/limit.bin")
    assert requests.put(url, data=b"x" * 1000).status_code == 200
    assert store.head("up/limit.bin").size == 1000
    # a Content-Length over the limit is refused before any byte of the body is read
    netloc = urlsplit(base).netloc
    conn = http.client.HTTPConnection(netloc, timeout=30)
    try:
        conn.putrequest("PUT", url[len(base) :])
        conn.putheader("Content-Length", "1001")
        conn.endheaders()
        response = conn.getresponse()
        assert response.status == 413
        assert b"at most 1000 bytes" in response.read()
    finally:
        conn.close()
    # a body of no declared length is counted as it streams in
    big = requests.put(store.presign_put("up/streamed.bin"), data=iter([b"y" * 600, b"y" * 401]))
    assert big.status_code == 413
    assert store.head("up/streamed.bin") is None
    assert store.head("up/limit.bin").size == 1000
    assert list(store.tmp.iterdir()) == []


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_body_cut_short_stores_nothing(served: tuple[FileWorkspace, str], framing: str) -> None:
    store, base = served
    store.put("up/kept.bin", b"before")
    url = store.presign_put("up/kept.bin")
    netloc = urlsplit(base).netloc
    host, port = netloc.split(":")
    if framing == "chunked":
        head, body = "Transfer-Encoding: chunked", b"190\r\n" + b"z" * 400 + b"\r\n"
    else:
        head, body = "Content-Length: 900", b"z" * 400
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"PUT {url[len(base) :]} HTTP/1.1\r\nHost: {netloc}\r\n{head}\r\n\r\n".encode() + body)
        deadline = time.monotonic() + 30
        while not list(store.tmp.iterdir()):  # the server has begun writing the body
            assert time.monotonic() < deadline
            time.sleep(0.01)
    deadline = time.monotonic() + 30
    while list(store.tmp.iterdir()):  # the disconnect drops the partial file
        assert time.monotonic() < deadline, "the partial upload was not removed"
        time.sleep(0.01)
    assert store.get("up/kept.bin")[0] == b"before"


def test_ranges_of_a_get(served: tuple[FileWorkspace, str]) -> None:
    store, _ = served
    data = bytes(range(200))
    store.put("g/r.bin", data)
    url = store.presign_get("g/r.bin")
    part = requests.get(url, headers={"Range": "bytes=10-19"})
    assert (part.status_code, part.content, part.headers["Content-Range"]) == (206, data[10:20], "bytes 10-19/200")
    assert requests.get(url, headers={"Range": "bytes=190-"}).content == data[190:]
    assert requests.get(url, headers={"Range": "bytes=-5"}).content == data[-5:]
    assert requests.get(url, headers={"Range": "bytes=150-999"}).content == data[150:]
    assert requests.get(url, headers={"Range": "bytes=200-"}).status_code == 416
    whole = requests.get(url, headers={"Range": "lines=1-2"})
    assert (whole.status_code, whole.content) == (200, data)


def test_five_megabytes_through_the_nodes_http_functions(tmp_path: Path) -> None:
    """The node's own upload and download functions (orbital.node.transfer) against the served URLs."""
    from orbital.node.transfer import http_get_into, http_put_file

    source = tmp_path / "big.bin"
    data = os.urandom(5 * 1024 * 1024)
    source.write_bytes(data)
    store = FileWorkspace(tmp_path / "objects")
    try:
        with serving(mount(elsewhere, ObjectRoute(store))) as base:
            store.set_base_url(base)
            assert http_put_file(store.presign_put("transfers/9/staging"), source, len(data), "video/mp4") == len(data)
            staged = store.head("transfers/9/staging")
            assert staged is not None and (staged.size, staged.content_type) == (len(data), "video/mp4")
            with (tmp_path / "back.bin").open("w+b") as fh:
                assert http_get_into(store.presign_get("transfers/9/staging"), fh) == len(data)
            assert (tmp_path / "back.bin").read_bytes() == data
    finally:
        store.close()


def test_the_local_gateway_mounts_the_route_for_a_file_workspace(tmp_path: Path) -> None:
    from orbital.local.server import GatewayOptions, LocalGateway

    gateway = LocalGateway(GatewayOptions(project=ROOT, data_dir=tmp_path / "data"))
    store = FileWorkspace(tmp_path / "objects")
    try:
        gateway.services = SimpleNamespace(workspace=store)  # what its composition root gives it
        with serving(gateway._with_object_urls(elsewhere)) as base:
            store.set_base_url(base)
            store.put("m/x", b"mounted")
            assert requests.get(store.presign_get("m/x")).content == b"mounted"
            assert requests.get(f"{base}/health").status_code == 299
    finally:
        store.close()


def test_a_workspace_without_a_gateway_url_cannot_presign(tmp_path: Path) -> None:
    with FileWorkspace(tmp_path / "objects") as store, pytest.raises(RuntimeError, match="no gateway URL"):
        store.presign_get("k")


# --- the file workspace on disk ------------------------------------------------------------------------------------


def _blob_files(store: FileWorkspace) -> list[Path]:
    return sorted(p for p in store.blobs.rglob("*") if p.is_file())


def test_blobs_are_shared_by_equal_bytes_and_removed_when_unreferenced(tmp_path: Path) -> None:
    with FileWorkspace(tmp_path / "objects") as store:
        store.put("one", b"same bytes")
        store.put("two", b"same bytes")
        store.copy("one", "three", content_type="text/plain")
        assert [p.name for p in _blob_files(store)] == [hashlib.sha256(b"same bytes").hexdigest()]
        store.put("one", b"other bytes")
        assert len(_blob_files(store)) == 2
        store.delete("two")
        store.delete("three")
        assert [p.name for p in _blob_files(store)] == [hashlib.sha256(b"other bytes").hexdigest()]
        store.put("d/1", b"a")
        store.put("d/2", b"b")
        store.copy("d/1", "kept", content_type="text/plain")
        assert store.delete_prefix("d/") == 2
        assert sorted(p.name for p in _blob_files(store)) == sorted(
            hashlib.sha256(b).hexdigest() for b in (b"other bytes", b"a")
        )


def test_concurrent_writes_of_equal_bytes_never_lose_a_blob(tmp_path: Path) -> None:
    """Threads writing, copying and deleting objects that share their bytes: every key left reads back, and exactly
    the blobs still named are on disk."""
    from concurrent.futures import ThreadPoolExecutor

    bodies = [b"shared one", b"shared two"]
    with FileWorkspace(tmp_path / "objects", durable=False) as store:

        def work(worker: int) -> None:
            for i in range(60):
                key = f"w{worker}/{i % 5}"
                body = bodies[(worker + i) % 2]
                if i % 3 == 2:
                    store.delete(key)
                elif i % 7 == 3:
                    store.delete_prefix(f"w{worker}/")
                else:
                    store.put(key, body)
                    store.copy(key, f"copies/{worker}", content_type="text/plain")

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(work, range(4)))
        left = store.list_all("")
        assert left
        for info in left:
            got = store.get(info.key)
            assert got is not None and got[0] in bodies
        named = {hashlib.sha256(store.get(info.key)[0]).hexdigest() for info in left}
        assert {p.name for p in _blob_files(store)} == named


def test_an_index_written_before_the_further_headers_were_kept_gains_them(tmp_path: Path) -> None:
    import sqlite3

    root = tmp_path / "objects"
    with FileWorkspace(root) as store:
        store.put("old", b"written before", content_type="text/plain", content_encoding="gzip")
    db = sqlite3.connect(root / "index.sqlite3")  # the index as it was: without the three columns
    with db:
        db.execute(
            "CREATE TABLE earlier AS SELECT key, blob, size, etag, content_type, content_encoding, metadata, "
            "modified_ns FROM workspace_objects"
        )
        db.execute("DROP TABLE workspace_objects")
        db.execute(
            "CREATE TABLE workspace_objects (key TEXT PRIMARY KEY, blob TEXT NOT NULL, size INTEGER NOT NULL, "
            "etag TEXT NOT NULL, content_type TEXT NOT NULL, content_encoding TEXT, metadata TEXT, "
            "modified_ns INTEGER NOT NULL) WITHOUT ROWID"
        )
        db.execute("INSERT INTO workspace_objects SELECT * FROM earlier")
        db.execute("DROP TABLE earlier")
    db.close()
    with FileWorkspace(root) as store:
        old = store.get("old")
        assert old is not None and old[0] == b"written before"
        assert (old[1].content_type, old[1].content_encoding, old[1].cache_control) == ("text/plain", "gzip", None)
        store.put("new", b"x", cache_control="no-store")
        assert store.head("new").cache_control == "no-store"


def test_bad_keys_and_bodies(tmp_path: Path) -> None:
    with FileWorkspace(tmp_path / "objects") as store:
        for key in ("", "x" * 1025, "bad\ud800", "nul\x00"):
            with pytest.raises(ValueError):
                store.put(key, b"x")
        with pytest.raises(TypeError):
            store.put("k", "text, not bytes")
        store.put("é" * 512, b"1024 bytes of UTF-8 is the longest key")
        assert list(store.tmp.iterdir()) == []


BAD_KEYS = ("", "x" * 1025, "bad\ud800", "nul\x00")


def test_bad_keys_and_bodies_are_refused_by_the_port(workspace: Workspace) -> None:
    workspace.put("src", b"x")
    for key in BAD_KEYS:
        with pytest.raises(ValueError):
            workspace.put(key, b"x")
        with pytest.raises(ValueError):
            workspace.copy("src", key, content_type="text/plain")
        for presign in (workspace.presign_get, workspace.presign_put):
            with pytest.raises(ValueError):
                presign(key)
    with pytest.raises(TypeError):
        workspace.put("k", "text, not bytes")  # type: ignore[arg-type]
    workspace.put("é" * 512, b"1024 bytes of UTF-8 is the longest key")
    assert [info.key for info in workspace.list_all("")] == ["src", "é" * 512]


PUBLIC = sorted(name for name in vars(Workspace) if not name.startswith("_") and callable(vars(Workspace)[name]))


@pytest.mark.parametrize("backend", [FileWorkspace, S3Workspace])
def test_a_backend_implements_the_hooks_not_the_public_methods(backend: type[Workspace]) -> None:
    assert {"get", "put", "copy", "delete", "listing", "presign_get"} <= set(PUBLIC)
    assert [name for name in PUBLIC if getattr(backend, name) is not getattr(Workspace, name)] == []
    assert backend.__abstractmethods__ == frozenset()


def test_the_port_hands_the_backend_the_headers_of_a_put() -> None:
    seen: list[tuple[str, bytes, Headers]] = []

    class Recording(S3Workspace):
        def _put(self, key: str, body: bytes, headers: Headers) -> None:
            seen.append((key, body, headers))

    Recording(client=None, bucket="b").put("k", b"1", content_type="text/plain", cache_control="no-store")  # type: ignore[arg-type]
    assert seen == [("k", b"1", Headers(content_type="text/plain", cache_control="no-store"))]


def test_one_workspace_per_directory(tmp_path: Path) -> None:
    with FileWorkspace(tmp_path / "objects"):
        with pytest.raises(WorkspaceInUseError):
            FileWorkspace(tmp_path / "objects")
    FileWorkspace(tmp_path / "objects").close()  # free again once closed


CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from orbital.store.backends.files import FileWorkspace

    store = FileWorkspace(Path(sys.argv[1]))
    store.put("agents/main/notes/today.md", b"written before the kill", content_type="text/markdown")
    partial = store.upload()
    partial.write(b"never committed")
    partial.file.flush()
    print("written", flush=True)
    sys.stdin.read()
    """
)


def test_a_write_that_returned_survives_kill_9(tmp_path: Path) -> None:
    root = tmp_path / "objects"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "written"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert len(list((root / "tmp").iterdir())) == 1  # the upload under way when it died
    orphan = root / "blobs" / "00" / ("00" * 32)
    orphan.parent.mkdir()
    orphan.write_bytes(b"a blob no key names (a crash between its rename and the index commit)")
    with FileWorkspace(root) as store:
        got = store.get("agents/main/notes/today.md")
        assert got is not None
        assert got[0] == b"written before the kill" and got[1].content_type == "text/markdown"
        assert list(store.tmp.iterdir()) == []
        assert not orphan.exists()
        assert [p.name for p in _blob_files(store)] == [hashlib.sha256(b"written before the kill").hexdigest()]
