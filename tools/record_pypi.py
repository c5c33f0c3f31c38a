#!/usr/bin/env python3
"""Record the PyPI metadata the stack tests resolve against (a developer tool).

Runs a recording proxy on 127.0.0.1 in front of PyPI and, through it, resolves every stack of
tests/fixtures/pypi_stacks.toml for each of its Pythons: with plain `uv pip compile` (the answer
the tests compare with) and, with --mlsetup, with `mlsetup lock` (whose own extra resolutions
must find their metadata too). The proxy serves uv a PEP 691 page per project whose wheels all
carry PEP 658 metadata: it answers a `.metadata` request from PyPI's own `.metadata` file where
PyPI has one, else from the wheel's METADATA read with HTTP range requests (as uv itself would),
so no wheel is ever downloaded whole. What uv did download whole (an sdist that has no wheel, the
build backend its build installs) is kept if it is small. Then it writes tests/fixtures/
pypi-record.zip (tests/recorded_pypi.py: the layout, the pruning, the server).

uv is run with builds allowed (an sdist's metadata may need one), so as an ordinary account:
run the tool as one, or as root with --as-user NAME. A stack with `builds = false` is resolved
as plain root resolves it: `--no-build`, and `mlsetup lock` without SUDO_USER.

    python tools/record_pypi.py [--as-user NAME] [--mlsetup] [--only NAME] [--upstream URL]
        [--merge]

`--merge` adds what the stacks recorded now read to the archive as it is, instead of replacing
it: a new stack (`--only NAME`) is recorded without changing what the others resolve to.

`--coverage` instead measures, over the projects of the recorded copy, how many have a Linux
x86_64 wheel for each CPython in their newest release (the table in assets/pythons.toml).
"""

from __future__ import annotations

import argparse
import http.server
import io
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from urllib.parse import quote, unquote

from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from steps.core import tomlcompat as tomllib  # noqa: E402 - the checkout on the path first
from steps.known.knowledge import knowledge  # noqa: E402
from tests.recorded_pypi import (  # noqa: E402
    ARCHIVE,
    SIMPLE_JSON,
    STACKS,
    Recording,
    strip_metadata,
)

PLATFORM = "x86_64-manylinux_2_35"
WHOLE_FILE_LIMIT = 3 * 1024 * 1024  # an sdist or backend wheel kept whole; larger is refused
BLOCK = 256 * 1024


class Upstream:
    def __init__(self, base: str, timeout: float = 60) -> None:
        self.base = base.rstrip("/")
        self.timeout = timeout

    def get(self, url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(
            url, headers={"User-Agent": "mlsetup-record", **(headers or {})}
        )
        for attempt in range(4):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return response.status, response.read()
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return 404, b""
                if attempt == 3:
                    raise
            except (urllib.error.URLError, OSError):
                if attempt == 3:
                    raise
            time.sleep(1 + attempt)
        raise AssertionError("unreachable")


class RemoteFile(io.RawIOBase):
    """A file on a server read with HTTP range requests, in blocks: enough for zipfile to find
    one member of a wheel without downloading the rest."""

    def __init__(self, upstream: Upstream, url: str, size: int) -> None:
        self.upstream, self.url, self.size, self.pos = upstream, url, size, 0
        self.blocks: dict[int, bytes] = {}

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def _block(self, index: int) -> bytes:
        if index not in self.blocks:
            start = index * BLOCK
            end = min(self.size, start + BLOCK) - 1
            status, data = self.upstream.get(self.url, {"Range": f"bytes={start}-{end}"})
            if status != 206 and not (status == 200 and start == 0):
                raise OSError(f"{self.url}: range request answered {status}")
            self.blocks[index] = data[: end - start + 1]
        return self.blocks[index]

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        want = min(len(buffer), self.size - self.pos)
        out = bytearray()
        while len(out) < want:
            block = self._block((self.pos + len(out)) // BLOCK)
            offset = (self.pos + len(out)) % BLOCK
            out += block[offset : offset + want - len(out)]
        buffer[: len(out)] = out
        self.pos += len(out)
        return len(out)


def wheel_metadata(upstream: Upstream, url: str, size: int) -> str:
    with zipfile.ZipFile(io.BufferedReader(RemoteFile(upstream, url, size), BLOCK)) as zf:
        [member] = [
            n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
        ]
        return zf.read(member).decode("utf-8", "replace")


class Recorder:
    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.recording = Recording()
        self.origin: dict[str, dict] = {}  # file name -> its upstream entry
        self.refused: list[str] = []
        self.lock = threading.Lock()

    def page(self, name: str, base: str) -> tuple[int, bytes]:
        key = canonicalize_name(name)
        status, data = self.upstream.get(
            f"{self.upstream.base}/simple/{key}/", {"Accept": SIMPLE_JSON}
        )
        if status != 200:
            return 404, b""
        page = json.loads(data)
        files = []
        with self.lock:
            self.recording.pages[key] = page
            for f in page["files"]:
                self.origin[f["filename"]] = f
                entry = {
                    k: v
                    for k, v in f.items()
                    if k not in ("core-metadata", "data-dist-info-metadata")
                }
                entry["url"] = f"{base}/files/{quote(f['filename'])}"
                if f["filename"].endswith(".whl"):
                    entry["core-metadata"] = True
                files.append(entry)
        return 200, json.dumps({**page, "files": files}).encode()

    def metadata(self, filename: str) -> tuple[int, bytes]:
        with self.lock:
            known = self.recording.metadata.get(filename)
            origin = self.origin.get(filename)
        if known is not None:
            return 200, known.encode()
        if origin is None:
            return 404, b""
        if origin.get("core-metadata") or origin.get("data-dist-info-metadata"):
            status, data = self.upstream.get(origin["url"] + ".metadata")
            text = data.decode("utf-8", "replace") if status == 200 else None
        else:
            text = None
        if text is None:
            text = wheel_metadata(self.upstream, origin["url"], int(origin["size"]))
        stripped = strip_metadata(text)
        with self.lock:
            self.recording.metadata[filename] = stripped
        return 200, stripped.encode()

    def whole(self, filename: str) -> tuple[int, bytes]:
        origin = self.origin.get(filename)
        if origin is None:
            return 404, b""
        if int(origin.get("size") or 0) > WHOLE_FILE_LIMIT:
            self.refused.append(filename)
            return 404, b""
        status, data = self.upstream.get(origin["url"])
        if status == 200:
            with self.lock:
                self.recording.files[filename] = data
        return status, data


class Proxy(http.server.BaseHTTPRequestHandler):
    server: ProxyServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        recorder, path = self.server.recorder, unquote(self.path.split("?", 1)[0])
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        try:
            if path.startswith("/simple/"):
                status, data = recorder.page(path.strip("/").split("/")[1], base)
                ctype = SIMPLE_JSON
            elif path.startswith("/files/") and path.endswith(".metadata"):
                status, data = recorder.metadata(path[len("/files/") : -len(".metadata")])
                ctype = "text/plain"
            elif path.startswith("/files/"):
                status, data = recorder.whole(path[len("/files/") :])
                ctype = "application/octet-stream"
            else:
                status, data, ctype = 404, b"", "text/plain"
        except Exception as exc:  # a failed upstream read: uv sees a 502 and says so
            print(f"record_pypi: {path}: {exc}", file=sys.stderr)
            status, data, ctype = 502, str(exc).encode(), "text/plain"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        if status == 200:  # each page once per recording: uv's cache keeps it
            self.send_header("Cache-Control", "max-age=3600, public")
        self.end_headers()
        self.wfile.write(data)


class ProxyServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, recorder: Recorder) -> None:
        super().__init__(("127.0.0.1", 0), Proxy)
        self.recorder = recorder


def uv_binary() -> str:
    from uv import find_uv_bin

    return find_uv_bin()


def runner(as_user: str | None):  # type: ignore[no-untyped-def]
    """subprocess.run as the account that may run builds."""
    account = pwd.getpwnam(as_user) if as_user else None

    def run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=1800,
            user=account.pw_uid if account else None,
            group=account.pw_gid if account else None,
            extra_groups=[] if account else None,
        )

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", default="https://pypi.org")
    parser.add_argument("--as-user", help="the account uv runs as (builds allowed)")
    parser.add_argument("--mlsetup", action="store_true", help="also run `mlsetup lock`")
    parser.add_argument("--only", action="append", help="record only this stack (repeatable)")
    parser.add_argument("--out", type=Path, default=ARCHIVE)
    parser.add_argument("--coverage", action="store_true", help="measure wheel coverage only")
    parser.add_argument(
        "--merge", action="store_true", help="add to the archive instead of replacing it"
    )
    args = parser.parse_args()
    if args.coverage:
        return coverage(Upstream(args.upstream), args.out)
    if os.geteuid() == 0 and not args.as_user:
        parser.error(
            "uv may run an sdist's build backend: run as an ordinary account or give --as-user"
        )
    with STACKS.open("rb") as f:
        stacks = [s for s in tomllib.load(f)["stack"] if not args.only or s["name"] in args.only]

    recorder = Recorder(Upstream(args.upstream))
    server = ProxyServer(recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    index = f"http://127.0.0.1:{server.server_address[1]}/simple"
    work = Path(tempfile.mkdtemp(prefix="record-pypi-"))
    account = pwd.getpwnam(args.as_user) if args.as_user else None
    if account:
        os.chown(work, account.pw_uid, account.pw_gid)
    run = runner(args.as_user)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(work),
        "UV_CACHE_DIR": str(work / "cache"),
        "UV_NO_CONFIG": "1",
        "UV_HTTP_TIMEOUT": "300",
        "UV_CONCURRENT_DOWNLOADS": "16",
    }
    results = []
    try:
        for stack in stacks:
            for python in stack["pythons"]:
                infile = work / f"{stack['name']}-{python}.in"
                infile.write_text("\n".join(stack["packages"]) + "\n")
                argv = [
                    uv_binary(), "pip", "compile", "--no-header", "--no-python-downloads",
                    "--generate-hashes", "--python-version", python, "--python-platform", PLATFORM,
                    "--default-index", index, "--output-file", str(infile.with_suffix(".txt")),
                    *([] if stack.get("builds", True) else ["--no-build"]), str(infile),
                ]  # fmt: skip
                start = time.monotonic()
                done = run(argv, env, work)
                seconds = round(time.monotonic() - start, 1)
                out = infile.with_suffix(".txt")
                pins = out.read_text() if done.returncode == 0 and out.exists() else ""
                torch = next(
                    (
                        ln.split("==")[1].split()[0]
                        for ln in pins.splitlines()
                        if ln.startswith("torch==")
                    ),
                    None,
                )
                results.append(
                    {
                        "stack": stack["name"],
                        "python": python,
                        "exit": done.returncode,
                        "torch": torch,
                        "seconds": seconds,
                    }
                )
                print(
                    f"{stack['name']:<28} {python:<5} exit {done.returncode} torch {torch} "
                    f"{seconds:.1f}s",
                    flush=True,
                )
                if done.returncode != 0:
                    print(
                        "    " + " ".join(done.stderr.strip().splitlines()[-3:])[:600], flush=True
                    )
                if args.mlsetup and stack.get("mlsetup", True):
                    run_mlsetup(stack, python, index, work, env, account)
    finally:
        server.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    manifest = {
        "recorded": time.strftime("%Y-%m-%d"),
        "upstream": args.upstream,
        "platform": PLATFORM,
        "uv": subprocess.run(
            [uv_binary(), "--version"], capture_output=True, text=True
        ).stdout.strip(),
        "uv_pip_compile": results,
        "refused_large_files": sorted(set(recorder.refused)),
    }
    # the extensions' releases (source only) the stacks ask the index for, and their recipes'
    # `checked`: their pages are kept although no file of theirs is read (prune_project)
    listed: dict[str, set[str]] = {}
    for stack in stacks:
        for ext in stack.get("extensions", []):
            recipe = knowledge().extensions[ext["name"]]
            listed.setdefault(canonicalize_name(recipe.package), set()).update(
                v for v in (ext["version"], recipe.checked) if v
            )
    rec = recorder.recording
    if args.merge:
        for name, versions in Recording.read(args.out).manifest.get("listed", {}).items():
            listed.setdefault(name, set()).update(versions)
        rec = Recording.read(args.out)
        rec.merge(recorder.recording)
        added = {(r["stack"], r["python"]) for r in results}
        kept = [
            r
            for r in rec.manifest.get("uv_pip_compile", [])
            if (r["stack"], r["python"]) not in added
        ]
        manifest["uv_pip_compile"] = [*kept, *results]
        manifest["merged"] = [*rec.manifest.get("merged", []), manifest["recorded"]]
        manifest["recorded"] = rec.manifest.get("recorded", manifest["recorded"])
        refused = {*rec.manifest.get("refused_large_files", []), *recorder.refused}
        manifest["refused_large_files"] = sorted(refused)
    manifest["listed"] = {name: sorted(versions) for name, versions in sorted(listed.items())}
    rec.manifest = manifest
    rec.write(args.out)
    print(
        f"record_pypi: {len(rec.pages)} projects, {len(rec.metadata)} metadata files, "
        f"{len(rec.files)} whole files -> {args.out} ({args.out.stat().st_size / 1e6:.2f} MB)"
    )
    return 0


PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14", "3.15")


def coverage(upstream: Upstream, archive: Path) -> int:
    """For each CPython: the projects of the recorded copy whose newest final release has a
    wheel it installs on Linux x86_64 (cpXY, abi3 built for an older one, or pure Python)."""
    from concurrent.futures import ThreadPoolExecutor

    from packaging.utils import parse_wheel_filename
    from packaging.version import InvalidVersion, Version

    with zipfile.ZipFile(archive) as zf:
        names = [
            n[len("projects/") : -len(".json")] for n in zf.namelist() if n.startswith("projects/")
        ]

    def page(name: str) -> dict:
        return json.loads(
            upstream.get(f"{upstream.base}/simple/{name}/", {"Accept": SIMPLE_JSON})[1] or b"{}"
        )

    def installs(filename: str, minor: int) -> bool:
        for tag in parse_wheel_filename(filename)[3]:
            if not (
                tag.platform == "any"
                or (tag.platform.endswith("x86_64") and "linux" in tag.platform)
            ):
                continue
            if tag.interpreter.startswith("py3") or tag.interpreter == "py2.py3":
                return True
            if tag.interpreter == f"cp3{minor}" and tag.abi in (f"cp3{minor}", "none", "abi3"):
                return True
            if (
                tag.abi == "abi3"
                and tag.interpreter.startswith("cp3")
                and int(tag.interpreter[3:]) <= minor
            ):
                return True
        return False

    counts = dict.fromkeys(PYTHONS, 0)
    total = 0
    with ThreadPoolExecutor(16) as pool:
        for data in pool.map(page, names):
            releases: dict[Version, list[str]] = {}
            for f in data.get("files", []):
                fn = f["filename"]
                if not fn.endswith(".whl") or f.get("yanked"):
                    continue
                try:
                    version = parse_wheel_filename(fn)[1]
                except (ValueError, InvalidVersion):
                    continue
                if not version.is_prerelease:
                    releases.setdefault(version, []).append(fn)
            if not releases:
                continue  # only source: no Python is covered or not by it
            total += 1
            newest = releases[max(releases)]
            for python in PYTHONS:
                minor = int(python.split(".")[1])
                counts[python] += any(installs(fn, minor) for fn in newest)
    day = time.strftime("%Y-%m-%d")
    print(f"{total} projects with wheels ({len(names)} in {archive.name}), {day}:")
    for python, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {python}: {n} ({100 * n / max(total, 1):.1f}%)")
    return 0


def run_mlsetup(stack: dict, python: str, index: str, work: Path, env: dict, account) -> None:  # type: ignore[no-untyped-def]
    """`mlsetup lock` for the stack on a recorded machine, through the proxy (it runs its own
    resolutions: the checks of each candidate Python, the probe for the deciding package)."""
    machine = REPO / "assets" / "machines" / stack.get("machine", "rtx-pro-6000-ubuntu2404.json")
    facts = json.loads(machine.read_text())
    facts["pythons"] = [{"version": f"{python}.0", "path": f"/usr/bin/python{python}"}]
    facts_file = work / f"facts-{stack['name']}-{python}.json"
    facts_file.write_text(json.dumps(facts))
    answers = work / f"answers-{stack['name']}-{python}.toml"
    torch = stack.get("torch", {})
    # a stack of extensions asks for them; its packages are what they add to the resolution
    packages = [] if stack.get("extensions") else stack["packages"]
    answers.write_text(
        "version = 1\n[venv]\n"
        f'python = "{stack.get("venv_python", "auto")}"\n[torch]\n'
        f"packages = {json.dumps(packages)}\n"
        + "".join(f'{k} = "{v}"\n' for k, v in torch.items())
        + "".join(
            f'[[extensions]]\nname = "{e["name"]}"\nversion = "{e["version"]}"\n'
            for e in stack.get("extensions", [])
        )
    )
    full = {**env, "UV_DEFAULT_INDEX": index, "PYTHONPATH": str(REPO)}
    if account and stack.get("builds", True):  # else plain root: nobody to build as
        full["SUDO_USER"] = account.pw_name
    argv = [sys.executable, "-m", "app.cli", "lock", "--facts", str(facts_file)]
    argv += ["--answers", str(answers), "-o", str(work / "mlsetup.lock")]
    done = subprocess.run(argv, env=full, cwd=REPO, capture_output=True, text=True, timeout=1800)
    print(
        f"    mlsetup lock: exit {done.returncode}: {(done.stdout + done.stderr).strip()[-300:]}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
