#!/usr/bin/env python3
"""What assets/ lacks or gets wrong, according to PyPI's own metadata (a developer tool).

Reads PyPI's JSON API (https://pypi.org/pypi/NAME/json) for torch and for every package in the
extension recipes and prints, one finding per line:

- torch release series on PyPI that assets/torch.toml does not list (with what to fill in),
- for each listed series, the Python versions its newest patch release ships Linux wheels for
  (cpXY tags) and its Requires-Python, where they differ from torch.toml,
- for each recipe, releases newer than the one its setup.py was checked against (`checked`).

Nothing is changed: a person reads the sources the findings point to and edits assets/ with a
source comment. A recipe whose package PyPI does not have (404) is a finding, not the end of the
check. Exit status: 0 nothing to change, 1 findings, 3 PyPI could not be read.

`--record DIR` also writes PyPI's answer for each project DIR has none for, trimmed to what the
tool reads, as DIR/NAME.json: a new recipe's response for tests/test_refresh_knowledge.py is

    python tools/refresh_knowledge.py --record tests/fixtures/pypi

    python tools/refresh_knowledge.py [--pypi https://pypi.org] [--timeout 20] [--record DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from packaging.version import InvalidVersion, Version

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from steps.knowledge import knowledge

EXIT_FINDINGS = 1
EXIT_UNREACHABLE = 3
OLDEST_SERIES = Version("2.4")  # torch.toml's oldest; older series are not reported
WHEEL_PYTHON = re.compile(r"-cp(\d)(\d+)-cp\d+(t?)-[^-]*linux[^-]*\.whl$")

Fetch = Callable[[str], bytes]


class Unreachable(Exception):
    """PyPI could not be read (no network, a proxy, a mirror without the JSON API)."""


class NotOnPypi(Exception):
    """PyPI answered 404 for one project: a finding about that recipe, the rest is checked."""


def http_fetch(timeout: float) -> Fetch:
    def fetch(url: str) -> bytes:
        request = urllib.request.Request(url, headers={"User-Agent": "mlsetup-refresh-knowledge"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise NotOnPypi(f"PyPI has no project at {url} (404)") from None
            raise Unreachable(f"{url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise Unreachable(f"{url}: {getattr(exc, 'reason', exc)}") from None

    return fetch


def project(fetch: Fetch, pypi: str, name: str) -> dict:
    url = f"{pypi.rstrip('/')}/pypi/{name}/json"
    try:
        data = json.loads(fetch(url))
    except json.JSONDecodeError:
        raise Unreachable(f"{url}: not JSON (a mirror without PyPI's JSON API?)") from None
    if not isinstance(data, dict) or not isinstance(data.get("releases"), dict):
        raise Unreachable(f"{url}: no 'releases' in the answer")
    return data


def final_releases(data: dict) -> dict[Version, list[dict]]:
    """Released (not pre-, dev- or fully yanked) versions and their files."""
    out = {}
    for raw, files in data["releases"].items():
        try:
            version = Version(raw)
        except InvalidVersion:
            continue
        files = [f for f in files or [] if isinstance(f, dict) and not f.get("yanked")]
        if files and not version.is_prerelease and not version.is_devrelease:
            out[version] = files
    return out


def linux_pythons(files: list[dict]) -> list[str]:
    """ "3.12" for each cp312 Linux wheel (free-threaded cp313t builds are not counted)."""
    found = set()
    for f in files:
        m = WHEEL_PYTHON.search(str(f.get("filename", "")))
        if m and not m.group(3):
            found.add((int(m.group(1)), int(m.group(2))))
    return [f"{a}.{b}" for a, b in sorted(found)]


def torch_findings(data: dict) -> list[str]:
    known = {r.series: r for r in knowledge().torch.releases}
    newest: dict[str, tuple[Version, list[dict]]] = {}
    for version, files in final_releases(data).items():
        series = f"{version.major}.{version.minor}"
        if Version(series) >= OLDEST_SERIES and (
            series not in newest or version > newest[series][0]
        ):
            newest[series] = (version, files)
    out = []
    for series, (version, files) in sorted(newest.items(), key=lambda kv: Version(kv[0])):
        pythons = linux_pythons(files)
        requires = sorted({str(f.get("requires_python") or "") for f in files} - {""})
        uploaded = min(str(f.get("upload_time", ""))[:10] for f in files)
        release = known.get(series)
        if release is None:
            out.append(
                f"torch {series}: {version} (uploaded {uploaded}) is on PyPI but not in "
                f"assets/torch.toml: add a [[release]] with pythons = {pythons}, "
                f"requires_python = {', '.join(requires) or '?'!r}, builds from "
                "download.pytorch.org, and pypi_cuda from the wheel's Requires-Dist "
                f"(pip install --dry-run --no-deps --report - torch=={version})"
            )
            continue
        if pythons and tuple(pythons) != release.pythons:
            out.append(
                f"torch {series}: PyPI has Linux wheels of {version} for Python "
                f"{', '.join(pythons)}; assets/torch.toml says {', '.join(release.pythons)}"
            )
        if requires and release.requires_python not in requires:
            out.append(
                f"torch {series}: {version} requires Python {', '.join(requires)}; "
                f"assets/torch.toml says {release.requires_python}"
            )
    for series in known:
        if series not in newest:
            out.append(f"torch {series}: in assets/torch.toml but no release of it is on PyPI")
    return out


def recipe_findings(name: str, package: str, checked: str, data: dict) -> list[str]:
    releases = final_releases(data)
    if not releases:
        return [f"{name}: PyPI has no release of {package}"]
    newest = max(releases)
    if not checked:
        return [f"{name}: the recipe says no `checked` release; PyPI's newest is {newest}"]
    if newest > Version(checked):
        newer = sorted(v for v in releases if v > Version(checked))
        return [
            f"{name}: PyPI has {', '.join(map(str, newer))}; the recipe was checked against "
            f"{checked}: read the new setup.py (arch list and its nvcc conditions, --threads, "
            "release wheel names) and add a [[variant]] where it changed, then raise `checked`"
        ]
    return []


def findings(fetch: Fetch, pypi: str, answers: dict[str, dict] | None = None) -> list[str]:
    """The findings; `answers`, when given, gets PyPI's answer for each project read."""
    seen = {} if answers is None else answers
    seen["torch"] = project(fetch, pypi, "torch")
    out = torch_findings(seen["torch"])
    for name, recipe in knowledge().extensions.items():
        try:
            seen[recipe.package] = project(fetch, pypi, recipe.package)
        except NotOnPypi as exc:
            out.append(f"{name}: {exc}: is the recipe's package = {recipe.package!r} right?")
            continue
        out += recipe_findings(name, recipe.package, recipe.checked, seen[recipe.package])
    return out


FILE_FIELDS = ("filename", "requires_python", "upload_time", "yanked")
INFO_FIELDS = ("name", "requires_python", "version")


def trimmed(data: dict) -> dict:
    """PyPI's answer cut to what the tool reads: Linux wheels and sdists, four fields each."""
    releases = {
        version: [{k: f.get(k) for k in FILE_FIELDS} for f in files or [] if _kept(f)]
        for version, files in data["releases"].items()
    }
    info = data.get("info") or {}
    return {"info": {k: info.get(k) for k in INFO_FIELDS}, "releases": releases}


def _kept(file: object) -> bool:
    name = str(file.get("filename", "")) if isinstance(file, dict) else ""
    return name.endswith((".tar.gz", ".zip")) or (name.endswith(".whl") and "linux" in name)


def record(answers: dict[str, dict], directory: Path) -> list[Path]:
    """DIR/NAME.json for each project read that DIR has no answer for (the others stay as
    they were recorded: tests compare against them)."""
    written = []
    for name, data in answers.items():
        path = directory / f"{name}.json"
        if not path.exists():
            path.write_text(json.dumps(trimmed(data), indent=0, sort_keys=True) + "\n")
            written.append(path)
    return written


def main(argv: list[str] | None = None, fetch: Fetch | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--pypi", default="https://pypi.org", help="PyPI (or a mirror with its JSON API)"
    )
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per request")
    parser.add_argument(
        "--record", type=Path, metavar="DIR", help="write the answers DIR lacks as DIR/NAME.json"
    )
    args = parser.parse_args(argv)
    answers: dict[str, dict] = {}
    try:
        found = findings(fetch or http_fetch(args.timeout), args.pypi, answers)
    except (Unreachable, NotOnPypi) as exc:  # NotOnPypi here: torch itself, a mirror's gap
        print(f"refresh_knowledge: cannot read PyPI, nothing was checked: {exc}")
        return EXIT_UNREACHABLE
    for path in record(answers, args.record) if args.record else []:
        print(f"recorded {path}")
    for line in found:
        print(line)
    if not found:
        print(
            "assets/ agree with PyPI: no new torch series, Python tags and Requires-Python "
            "match, every recipe was checked against the newest release"
        )
    return EXIT_FINDINGS if found else 0


if __name__ == "__main__":
    sys.exit(main())
