"""A recorded copy of real PyPI metadata, served on 127.0.0.1, so that resolutions of real stacks
(vllm, sglang, deepspeed, the forty everyday packages) run in the tests without the internet.

`tests/fixtures/pypi-record.zip` is written by `tools/record_pypi.py`, a recording proxy in front
of pypi.org while uv (and mlsetup) resolve the stacks of `tests/fixtures/pypi_stacks.toml`. It
holds, per project, PyPI's simple-API JSON (PEP 691) pruned to the files a Linux x86_64/aarch64
CPython 3.10+ resolution can use; the core metadata (the `.metadata` of PEP 658, cut to the fields
a resolver reads) of every wheel the resolutions looked at; and the few files uv had to download
whole: the sdists that publish no wheel (their metadata comes only from a build, which runs as
the venv's owner) and the build backends those builds install. PyPI serves no `.metadata` for
these files today (uv reads them with range requests); the copy serves each one it recorded, so
uv never needs a wheel's body.

`RecordedIndex` serves it (or answers 404 for everything: a mirror that has nothing), holds the
requests for a project a test names (a slow index), and logs every request; `ProxyTrap` is an
HTTP(S) proxy that refuses and logs every request, so a test can prove that uv fetched nothing
from anywhere but the index it was given.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
import zipfile
from dataclasses import dataclass, field
from email.parser import HeaderParser
from functools import cache
from pathlib import Path
from urllib.parse import quote, unquote

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from steps.core.inputfiles import parse_toml

ARCHIVE = Path(__file__).resolve().parent / "fixtures" / "pypi-record.zip"
STACKS = Path(__file__).resolve().parent / "fixtures" / "pypi_stacks.toml"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


def recorded_stack(name: str) -> list[str]:
    """The packages of a stack the copy was recorded for (its entry in pypi_stacks.toml)."""
    stacks = parse_toml(STACKS.read_text(), str(STACKS))["stack"]
    return next(list(s["packages"]) for s in stacks if s["name"] == name)


# The forty everyday packages, as `torch.packages` names them: the recording lists torch last
# (what plain `uv pip compile` was given), mlsetup adds torch itself.
FORTY = [p for p in recorded_stack("forty") if p != "torch"]

# What a resolution for mlsetup's targets can use: Linux on x86_64 or aarch64, CPython 3.10 and
# newer (and abi3 wheels built for older ones), pure-Python wheels. The rest of a project's files
# (Windows, macOS, musl, other CPUs, Python 2 to 3.9, free-threaded builds) is pruned.
_PLATFORM = re.compile(r"^(any|linux_(x86_64|aarch64)|manylinux[_0-9]*_(x86_64|aarch64))$")
_CPYTHON = re.compile(r"^cp3(\d+)$")
OLDEST_MINOR = 10
# The metadata fields a resolver reads; the rest (descriptions, classifiers) is dropped.
METADATA_FIELDS = (
    "Metadata-Version",
    "Name",
    "Version",
    "Requires-Python",
    "Requires-Dist",
    "Provides-Extra",
)


def wheel_usable(filename: str) -> bool:
    """Whether a wheel could be chosen for a Linux x86_64/aarch64 CPython 3.10+ target."""
    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return False
    for tag in tags:
        if not _PLATFORM.match(tag.platform):
            continue
        if tag.interpreter.startswith("py3") or tag.interpreter == "py2.py3":
            return True
        m = _CPYTHON.match(tag.interpreter)
        if (
            m
            and (tag.abi == "abi3" or int(m.group(1)) >= OLDEST_MINOR)
            and not tag.abi.endswith("t")
        ):
            return True
    return False


def version_of(filename: str) -> str | None:
    """The version a distribution file is of (None: not a wheel or sdist name)."""
    try:
        if filename.endswith(".whl"):
            return str(parse_wheel_filename(filename)[1])
        return str(parse_sdist_filename(filename)[1])
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def prune_project(page: dict, recorded: set[str], listed: tuple[str, ...] = ()) -> dict:
    """A simple-API page cut to the versions a recorded resolution looked at (a file of theirs
    is in `recorded`: its metadata, or the file itself), with their usable files and only the
    fields uv reads. A version no resolution looked at is left out: uv took a newer one or the
    requirements excluded it, so the same resolutions run the same way without it. `listed`:
    versions kept although nothing of theirs was read (an extension's source-only releases: the
    check that the index has them reads only the page, never the sdist)."""
    looked_at = {version_of(f) for f in recorded} | set(listed)
    files = []
    for f in page.get("files", []):
        name = f["filename"]
        if version_of(name) not in looked_at:
            continue
        if name not in recorded and name.endswith(".whl") and not wheel_usable(name):
            continue
        entry = {"filename": name, "hashes": f.get("hashes", {})}
        if f.get("requires-python"):
            entry["requires-python"] = f["requires-python"]
        if f.get("yanked"):
            entry["yanked"] = f["yanked"]
        files.append(entry)
    return {"name": page.get("name"), "files": files}


def strip_metadata(text: str) -> str:
    """Core metadata cut to the fields a resolver reads (its headers, as email headers)."""
    headers = HeaderParser().parsestr(text)
    lines = [f"{k}: {v}" for k in METADATA_FIELDS for v in headers.get_all(k) or ()]
    return "\n".join(lines) + "\n"


@dataclass
class Recording:
    """What the archive holds: pages by canonical project name, metadata by wheel file name,
    whole files by name, and what the recording was (date, upstream, stacks)."""

    pages: dict[str, dict] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    manifest: dict = field(default_factory=dict)  # its "listed": prune_project's, by project

    @classmethod
    def read(cls, path: Path) -> Recording:
        """An archive as `write` left it (its pages already pruned), to add stacks to."""
        out = cls()
        with zipfile.ZipFile(path) as zf:
            for member in zf.namelist():
                data = zf.read(member)
                kind, _, name = member.partition("/")
                if member == "manifest.json":
                    out.manifest = json.loads(data)
                elif kind == "projects":
                    out.pages[name.removesuffix(".json")] = json.loads(data)
                elif kind == "metadata":
                    out.metadata[name.removesuffix(".metadata")] = data.decode()
                elif kind == "files":
                    out.files[name] = data
        return out

    def merge(self, new: Recording) -> None:
        """Add what another recording read: the projects this one lacks, and the metadata and
        files of the releases its pages list. A project recorded here keeps its releases and
        gains only older ones (deepspeed's last wheels, which only a resolution without builds
        reads), so the stacks recorded before resolve as they did (a release uploaded since is
        not added); the new stack resolves among the releases recorded."""
        for name, page in new.pages.items():
            kept = self.pages.setdefault(name, page)
            if kept is not page:
                kept["files"] = [*kept.get("files", []), *_older(kept, page)]
        listed = {f["filename"] for page in self.pages.values() for f in page.get("files", [])}
        self.metadata.update({k: v for k, v in new.metadata.items() if k in listed})
        self.files.update({k: v for k, v in new.files.items() if k in listed})

    def write(self, path: Path) -> None:
        """Deterministic: sorted members, a fixed date, LZMA-compressed."""
        members: dict[str, bytes] = {"manifest.json": json.dumps(self.manifest, indent=1).encode()}
        recorded = set(self.metadata) | set(self.files)
        for name, page in self.pages.items():
            mine = {f["filename"] for f in page.get("files", [])} & recorded
            pruned = prune_project(page, mine, tuple(self.manifest.get("listed", {}).get(name, ())))
            members[f"projects/{name}.json"] = json.dumps(pruned, separators=(",", ":")).encode()
        for filename, text in self.metadata.items():
            members[f"metadata/{filename}.metadata"] = text.encode()
        for filename, data in self.files.items():
            members[f"files/{filename}"] = data
        tmp = path.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_LZMA) as zf:
            for member in sorted(members):
                info = zipfile.ZipInfo(member, date_time=(2026, 12, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_LZMA
                zf.writestr(info, members[member])
        tmp.replace(path)


def _older(kept: dict, page: dict) -> list[dict]:
    """The files of `page` of releases older than every release `kept` lists (none when it lists
    none), which `kept` lacks."""
    versions = {version_of(f["filename"]) for f in kept.get("files", [])} - {None}
    if not versions:
        return []
    oldest = min(Version(v) for v in versions if v)
    return [
        f
        for f in page.get("files", [])
        if (v := version_of(f["filename"])) and v not in versions and Version(v) < oldest
    ]


class Archive:
    """The recorded copy, read member by member as the server needs them."""

    def __init__(self, path: Path = ARCHIVE) -> None:
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())
        self.lock = threading.Lock()

    def read(self, member: str) -> bytes | None:
        if member not in self.names:
            return None
        with self.lock:
            return self.zip.read(member)

    def metadata(self, wheel: str) -> bytes | None:
        """A wheel's recorded metadata; else that of another wheel of the same release (a
        resolution for another Python or CPU asks for its own wheel's, and a release's wheels
        declare the same requirements, told apart by markers)."""
        own = self.read(f"metadata/{wheel}.metadata")
        if own is not None:
            return own
        name, version = wheel.split("-")[:2]
        prefix = f"metadata/{name}-{version}-"
        sibling = next((n for n in sorted(self.names) if n.startswith(prefix)), None)
        return self.read(sibling) if sibling else None

    @property
    def manifest(self) -> dict:
        return json.loads(self.read("manifest.json") or b"{}")


@cache
def archive() -> Archive:
    return Archive()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _IndexServer
    protocol_version = "HTTP/1.1"  # keep-alive: uv asks hundreds of times
    disable_nagle_algorithm = True  # headers and body in separate writes: no 40 ms waits

    def log_message(self, format: str, *args: object) -> None:
        pass  # the requests go to the server's own log

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        self.server.index.wait_if_held(self.path)
        status, ctype, data = self.server.index.respond(self.path)
        self.server.index.log.append((self.command, self.path, status))
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        if self.server.index.is_held(self.path):  # asked again each time: it can be held
            self.send_header("Cache-Control", "no-cache")
        elif status == 200:  # as PyPI: pages for 10 minutes, files for ever (a warm cache asks
            # none)
            age = 600 if ctype == SIMPLE_JSON else 365 * 86400
            self.send_header("Cache-Control", f"max-age={age}, public")
        self.end_headers()
        if body:
            self.wfile.write(data)


class _IndexServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, index: RecordedIndex) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.index = index

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # uv dropping a kept-alive connection it no longer needs is no error


class RecordedIndex:
    """The recorded copy as a PEP 691 index on 127.0.0.1 (a context manager). `missing`: answer
    404 for everything, as a mirror that holds nothing does. `log`: (method, path, status) of
    every request, in order."""

    def __init__(self, missing: bool = False, source: Archive | None = None) -> None:
        self.missing = missing
        self.source = source
        self.log: list[tuple[str, str, int]] = []
        self._held: dict[str, tuple[threading.Event, float | None]] = {}
        self.waiting: list[str] = []  # the paths of the requests held now
        self._server = _IndexServer(self)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"{self.base}/simple"

    def __enter__(self) -> RecordedIndex:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def hold(self, project: str, seconds: float | None = None) -> threading.Event:
        """A request for `project`'s page waits while the event returned is clear (an index
        that answers slowly: a hanging proxy, a far mirror), or `seconds` at most when given;
        then it is answered as usual. The page is never cached (uv asks for it each time):
        hold it before uv first reads it."""
        gate = threading.Event()
        self._held[canonicalize_name(project)] = (gate, seconds)
        return gate

    def _held_for(self, path: str) -> tuple[threading.Event, float | None] | None:
        m = re.fullmatch(r"/simple/([^/]+)/?", unquote(path.split("?", 1)[0]))
        return self._held.get(canonicalize_name(m.group(1))) if m else None

    def is_held(self, path: str) -> bool:
        return self._held_for(path) is not None

    def wait_if_held(self, path: str) -> None:
        held = self._held_for(path)
        if held is not None and not held[0].is_set():
            gate, seconds = held
            self.waiting.append(path)
            try:
                gate.wait(seconds)
            finally:
                self.waiting.remove(path)

    def fetched(self) -> list[str]:
        """The paths answered 200."""
        return [path for _, path, status in self.log if status == 200]

    def respond(self, path: str) -> tuple[int, str, bytes]:
        if self.missing:
            return 404, "text/plain", b"not here\n"
        source = self.source or archive()
        path = unquote(path.split("?", 1)[0])
        if m := re.fullmatch(r"/simple/([^/]+)/?", path):
            page = source.read(f"projects/{canonicalize_name(m.group(1))}.json")
            if page is None:
                return 404, "text/plain", b"no such project in the recorded copy\n"
            return 200, SIMPLE_JSON, self._page(json.loads(page), source)
        if m := re.fullmatch(r"/files/([^/]+)", path):
            filename = m.group(1)
            if filename.endswith(".metadata"):
                data = source.metadata(filename.removesuffix(".metadata"))
            else:
                data = source.read(f"files/{filename}")
            if data is None:
                return 404, "text/plain", b"not in the recorded copy\n"
            return 200, "application/octet-stream", data
        return 404, "text/plain", b"unknown path\n"

    def _page(self, page: dict, source: Archive) -> bytes:
        files = []
        for f in page["files"]:
            name = f["filename"]
            entry = {**f, "url": f"{self.base}/files/{quote(name)}"}
            if name.endswith(".whl"):
                entry["core-metadata"] = True
            files.append(entry)
        out = {"meta": {"api-version": "1.1"}, "name": page["name"], "files": files}
        return json.dumps(out).encode()


class _TrapHandler(http.server.BaseHTTPRequestHandler):
    server: _TrapServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _refuse(self) -> None:
        self.server.requests.append(f"{self.command} {self.path}")
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_CONNECT = do_GET = do_HEAD = do_POST = _refuse


class _TrapServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _TrapHandler)
        self.requests: list[str] = []


class ProxyTrap:
    """An HTTP(S) proxy that refuses everything and records what was asked of it: with it as
    the proxy (and 127.0.0.1 exempt), any fetch from outside the local index shows here."""

    def __init__(self) -> None:
        self._server = _TrapServer()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def requests(self) -> list[str]:
        return self._server.requests

    def env(self) -> dict[str, str]:
        url = f"http://127.0.0.1:{self._server.server_address[1]}"
        names = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
        return {
            **dict.fromkeys(names, url),
            "no_proxy": "127.0.0.1,localhost",
            "NO_PROXY": "127.0.0.1,localhost",
        }

    def __enter__(self) -> ProxyTrap:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
