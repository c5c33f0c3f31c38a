#!/usr/bin/env python3
"""What assets/ lacks or gets wrong, according to PyPI's own metadata (a developer tool).

Reads PyPI's JSON API (https://pypi.org/pypi/NAME/json) for torch and for every package in the
extension recipes and prints, one finding per line:

- torch release series on PyPI that assets/torch.toml does not list (with what to fill in),
- for each listed series, the Python versions its newest patch release ships Linux wheels for
  (cpXY tags) and its Requires-Python, where they differ from torch.toml,
- for each recipe, releases newer than the one its setup.py was checked against (`checked`),
- every recipe x every torch series on PyPI: the C++ standard the series' ATen.h requires (read
  from its newest release's wheel with HTTP range requests, no whole download) against the one
  the recipe's setup.py passes (read from the sdist of its `checked` release), and the Python
  tags of the series' wheels against the sdist's Requires-Python: each incompatibility
  assets/ do not already know is printed with the lines it comes from (steps/decide/cxxstd.py reads
  them the way the planner and the build's guard do),
- every torch series x its CUDA: the CUDA runtime its newest release's wheel requires (the
  Requires-Dist lines of its METADATA, read with range requests) against assets/torch.toml
  (pypi_cuda, builds, [build.cuXYZ]), and every recipe x that CUDA major: a major past the
  ones its `checked` release names release wheels for (prebuilt_cuda_majors) is one its
  setup.py was never read for.

Nothing is changed: a person reads the sources the findings point to and edits assets/ with a
source comment. A recipe whose package PyPI does not have (404) is a finding, not the end of the
check. Exit status: 0 nothing to change, 1 findings, 3 PyPI could not be read.

`--record DIR` also writes PyPI's answer for each project DIR has none for, trimmed to what the
tool reads (the releases its findings look at, their Linux wheels and sdists, four fields each),
as DIR/NAME.json, and the header, METADATA and setup.py lines it read as DIR/cxx/NAME-VERSION
.json and torch-VERSION-metadata.json (with the file's URL and sha256): a new recipe's response
for tests/test_refresh_knowledge.py is

    python tools/refresh_knowledge.py --record tests/fixtures/pypi

    python tools/refresh_knowledge.py [--pypi https://pypi.org] [--timeout 20] [--record DIR]
        [--lines DIR]

`--lines DIR` reads the header and setup.py lines from DIR/NAME-VERSION.json (as --record wrote
them) instead of the files on PyPI.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urljoin

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from steps.decide.cxxstd import HEADER, header_requires, setup_passes
from steps.formats.lock import cuda_of_pins
from steps.known.knowledge import ExtensionRecipe, knowledge

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
    for files in data["releases"].values():  # a mirror may answer with relative URLs
        for f in files or []:
            if isinstance(f, dict) and isinstance(f.get("url"), str):
                f["url"] = urljoin(url, f["url"])
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


def newest_of_each_series(data: dict) -> dict[str, tuple[Version, list[dict]]]:
    """torch's newest release of each series from OLDEST_SERIES on, oldest series first."""
    newest: dict[str, tuple[Version, list[dict]]] = {}
    for version, files in final_releases(data).items():
        series = f"{version.major}.{version.minor}"
        if Version(series) >= OLDEST_SERIES and (
            series not in newest or version > newest[series][0]
        ):
            newest[series] = (version, files)
    return dict(sorted(newest.items(), key=lambda kv: Version(kv[0])))


def torch_findings(data: dict) -> list[str]:
    known = {r.series: r for r in knowledge().torch.releases}
    newest = newest_of_each_series(data)
    out = []
    for series, (version, files) in newest.items():
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


# -- C++ standards and Python tags: every recipe x every torch series ----------------------


@dataclass(frozen=True)
class Lines:
    """Lines of one file inside a distribution on PyPI: the distribution's URL and sha256, the
    file's path in it, and the lines read, by number."""

    url: str
    sha256: str
    file: str
    lines: dict[int, str]

    @property
    def text(self) -> str:
        return "\n".join(self.lines[n] for n in sorted(self.lines))

    def cite(self, pattern: str) -> str:
        """Where the first line matching `pattern` is: "line 5 of FILE in URL"."""
        number = next((n for n in sorted(self.lines) if re.search(pattern, self.lines[n])), None)
        where = f"line {number} of " if number is not None else ""
        return f"{where}{self.file} in {self.url}"

    def as_json(self) -> dict:
        lines = {str(n): t for n, t in sorted(self.lines.items())}
        return {"url": self.url, "sha256": self.sha256, "file": self.file, "lines": lines}

    @classmethod
    def from_json(cls, data: dict) -> Lines:
        lines = {int(n): str(t) for n, t in data["lines"].items()}
        return cls(str(data["url"]), str(data["sha256"]), str(data["file"]), lines)


class LineReader(Protocol):
    """Where the header and setup.py lines come from: PyPI, or lines recorded from it."""

    def header(self, version: str, files: list[dict]) -> Lines | None: ...

    def setup_py(self, package: str, version: str, files: list[dict]) -> Lines | None: ...

    def wheel_metadata(self, version: str, files: list[dict]) -> Lines | None: ...


ERROR_LINE = r"#\s*error C\+\+"  # the line of ATen.h that states its standard
# the lines of torch's METADATA that say which CUDA its wheel is (steps/formats/lock.py reads the
# same requirements from a lock: CUDA_RUNTIMES)
CUDA_LINE = r"^Requires-Dist:\s*(cuda-toolkit|nvidia-cuda-runtime)"
HEADER_LINES = 12  # ATen.h states its standard in its first lines (line 5 to 9 so far)
SDIST_LIMIT = 64 * 1024 * 1024  # flash-attn 2.8.3.post2's sdist is 8.5 MB


class PypiLines:
    """The lines as PyPI's files have them: a wheel's ATen.h through HTTP range requests (the
    zip's directory and one member, not the 900 MB wheel), an sdist's setup.py whole."""

    def __init__(self, fetch: Fetch, timeout: float) -> None:
        self.fetch = fetch
        self.timeout = timeout

    def header(self, version: str, files: list[dict]) -> Lines | None:
        read = self._wheel_member(files, HEADER)
        if read is None:
            return None
        wheel, text = read
        lines = dict(enumerate(text.splitlines()[:HEADER_LINES], 1))
        return Lines(str(wheel["url"]), _sha256(wheel), HEADER, lines)

    def wheel_metadata(self, version: str, files: list[dict]) -> Lines | None:
        member = f"torch-{version}.dist-info/METADATA"
        read = self._wheel_member(files, member)
        if read is None:
            return None
        wheel, text = read
        found = {n: t for n, t in enumerate(text.splitlines(), 1) if re.search(CUDA_LINE, t)}
        return Lines(str(wheel["url"]), _sha256(wheel), member, found)

    def _wheel_member(self, files: list[dict], member: str) -> tuple[dict, str] | None:
        """One file of a release's Linux wheel, read with range requests."""
        wheel = _linux_wheel(files)
        if wheel is None or "url" not in wheel:
            return None
        from record_pypi import BLOCK, RemoteFile, Upstream  # the range reader uv's way

        url, size = str(wheel["url"]), int(wheel["size"])
        try:
            remote = io.BufferedReader(RemoteFile(Upstream("", self.timeout), url, size), BLOCK)
            with zipfile.ZipFile(remote) as zf:
                text = zf.read(member).decode("utf-8", "replace")
        except (OSError, KeyError, ValueError, zipfile.BadZipFile, urllib.error.URLError) as exc:
            raise Unreachable(f"{url}: {member}: {exc}") from None
        return wheel, text

    def setup_py(self, package: str, version: str, files: list[dict]) -> Lines | None:
        sdist = next((f for f in files if str(f.get("filename", "")).endswith(".tar.gz")), None)
        if sdist is None or "url" not in sdist or int(sdist.get("size") or 0) > SDIST_LIMIT:
            return None
        data = self.fetch(str(sdist["url"]))
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                member = next(
                    m
                    for m in tar.getmembers()
                    if m.name.count("/") == 1 and m.name.endswith("/setup.py") and m.isfile()
                )
                extracted = tar.extractfile(member)
                text = extracted.read().decode("utf-8", "replace") if extracted else ""
        except (tarfile.TarError, StopIteration, OSError):
            return None
        found = {n: t for n, t in enumerate(text.splitlines(), 1) if setup_passes(t) is not None}
        return Lines(str(sdist["url"]), hashlib.sha256(data).hexdigest(), member.name, found)


class RecordedLines:
    """The lines as --record wrote them (DIR/NAME-VERSION.json); None for a file not recorded."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _read(self, name: str) -> Lines | None:
        path = self.directory / f"{name}.json"
        return Lines.from_json(json.loads(path.read_text())) if path.exists() else None

    def header(self, version: str, files: list[dict]) -> Lines | None:
        return self._read(f"torch-{version}")

    def setup_py(self, package: str, version: str, files: list[dict]) -> Lines | None:
        return self._read(f"{package}-{version}")

    def wheel_metadata(self, version: str, files: list[dict]) -> Lines | None:
        return self._read(f"torch-{version}-metadata")


def _linux_wheel(files: list[dict]) -> dict | None:
    """A release's Linux x86_64 CPython wheel, cp312's when there is one (all carry the same
    headers)."""
    wheels = [
        f
        for f in files
        if WHEEL_PYTHON.search(str(f.get("filename", ""))) and "x86_64" in f["filename"]
    ]
    wheels.sort(key=lambda f: "-cp312-" not in f["filename"])
    return wheels[0] if wheels else None


def _sha256(file: dict) -> str:
    return str((file.get("digests") or {}).get("sha256", ""))


@dataclass(frozen=True)
class SeriesHeader:
    series: str
    version: Version
    needs: int
    lines: Lines


def cxx_findings(
    torch: dict,
    packages: dict[str, dict],
    reader: LineReader,
    read: dict[str, Lines],
    unchecked: list[str],
) -> list[str]:
    """Every recipe x every torch series on PyPI: the C++ standard against the series' ATen.h
    and the sdist's Requires-Python against the series' Python tags; what assets/ lack or do
    not know. `read` gets the lines read, by NAME-VERSION; `unchecked` what could not be."""
    k = knowledge()
    known = {r.series: r for r in k.torch.releases}
    error = ERROR_LINE
    out: list[str] = []
    headers: list[SeriesHeader] = []
    pythons: dict[str, list[str]] = {}
    for series, (version, files) in newest_of_each_series(torch).items():
        pythons[series] = linux_pythons(files)
        lines = reader.header(str(version), files)
        if lines is None:
            unchecked.append(f"torch {series}: {version}'s {HEADER} could not be read")
            continue
        read[f"torch-{version}"] = lines
        needs = header_requires(lines.text)
        if needs is None:
            out.append(
                f"torch {series}: {version}'s {HEADER} has no `#error C++NN or later` line "
                f"({lines.file} in {lines.url}): read how it states its standard"
            )
            continue
        headers.append(SeriesHeader(series, version, needs, lines))
        if series in known and known[series].cxx_standard != needs:
            out.append(
                f"torch {series}: {version}'s ATen.h requires C++{needs} ({lines.cite(error)}); "
                f"assets/torch.toml says cxx_standard = {known[series].cxx_standard}"
            )
        elif series not in known:
            out.append(
                f"torch {series}: its [[release]] in assets/torch.toml gets cxx_standard = "
                f"{needs} ({lines.cite(error)})"
            )
    for name, recipe in k.extensions.items():
        data = packages.get(recipe.package)
        if data is None or not recipe.checked:
            continue
        files = final_releases(data).get(Version(recipe.checked), [])
        setup = reader.setup_py(recipe.package, recipe.checked, files)
        if setup is None:
            unchecked.append(f"{name} {recipe.checked}: its sdist's setup.py could not be read")
        else:
            read[f"{recipe.package}-{recipe.checked}"] = setup
        out += _recipe_against_series(name, recipe, files, headers, pythons, setup)
    return out


def _recipe_against_series(
    name: str,
    recipe: ExtensionRecipe,
    files: list[dict],
    headers: list[SeriesHeader],
    pythons: dict[str, list[str]],
    setup: Lines | None,
) -> list[str]:
    known = {r.series: r.cxx_standard for r in knowledge().torch.releases}
    label = f"{name} {recipe.checked}"
    out = []
    passes = None
    if setup is not None:
        passes = setup_passes(setup.text)
        if passes != recipe.cxx_standard:
            says = f"-std=c++{passes}" if passes else "no -std"
            out.append(
                f"{label}: its setup.py passes {says} ({setup.cite(r'std[=:]')}); "
                f"assets/extensions.toml says cxx_standard = {recipe.cxx_standard}"
            )
    builds = recipe.compile_as_cxx or passes
    for h in headers:
        # known: the recipe states the standard it builds with and torch.toml this series' need
        stated = recipe.compile_as_cxx or recipe.cxx_standard
        bounded = stated is not None and stated < known.get(h.series, 0)
        if builds is not None and builds < h.needs and not bounded:
            assert setup is not None
            out.append(
                f"new incompatibility: {label} cannot be built against torch {h.series} "
                f"({h.version}): its setup.py passes -std=c++{builds} "
                f"({setup.cite(r'std[=:]')}), torch {h.version}'s ATen.h requires "
                f"C++{h.needs} ({h.lines.cite(ERROR_LINE)})"
            )
    requires = sorted({str(f.get("requires_python") or "") for f in files} - {""})
    for h in headers:
        tags = pythons.get(h.series, [])
        if requires and tags and not any(_admits(requires[0], p) for p in tags):
            out.append(
                f"new incompatibility: {label} requires Python {requires[0]} (its sdist on PyPI),"
                f" torch {h.series} has wheels only for {', '.join(tags)}"
            )
    return out


# -- CUDA majors: the CUDA of each torch series' wheel against torch.toml and the recipes ------


def wheel_cuda(lines: Lines) -> str | None:
    """The CUDA (major.minor) a torch wheel's METADATA requires: its CUDA runtime's pin."""
    pins = {}
    for text in lines.lines.values():
        try:
            req = Requirement(text.partition(":")[2].strip())
        except InvalidRequirement:
            continue
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if exact:
            pins[req.name] = exact[0]
    runtime = cuda_of_pins(pins)
    return runtime.cuda if runtime else None


def cuda_findings(
    torch: dict,
    packages: dict[str, dict],
    reader: LineReader,
    read: dict[str, Lines],
    unchecked: list[str],
) -> list[str]:
    """Every torch series on the index: the CUDA its wheel is (METADATA's Requires-Dist)
    against assets/torch.toml (pypi_cuda, builds, [build.cuXYZ]) and every recipe x that CUDA
    major (the majors its checked release names release wheels for: a major past them is one
    its setup.py was never read for)."""
    k = knowledge()
    known = {r.series: r for r in k.torch.releases}
    out: list[str] = []
    majors: dict[str, tuple[str, str, str]] = {}  # series -> (major, version, where)
    for series, (version, files) in newest_of_each_series(torch).items():
        lines = reader.wheel_metadata(str(version), files)
        cuda = wheel_cuda(lines) if lines is not None else None
        if lines is None or cuda is None:
            unchecked.append(f"torch {series}: the CUDA of {version}'s wheel could not be read")
            continue
        read[f"torch-{version}-metadata"] = lines
        where = lines.cite(CUDA_LINE)
        build = f"cu{cuda.replace('.', '')}"
        majors[series] = (cuda.partition(".")[0], str(version), where)
        release = known.get(series)
        if release is not None and release.pypi_cuda != cuda:
            out.append(
                f"torch {series}: {version}'s wheel on PyPI is CUDA {cuda} ({where}); "
                f"assets/torch.toml says pypi_cuda = {release.pypi_cuda}"
            )
        if release is not None and build not in release.builds:
            out.append(
                f"torch {series}: {version}'s wheel on PyPI is the {build} build ({where}); "
                f"assets/torch.toml builds = {list(release.builds)} lacks it"
            )
        if build not in k.torch.builds:
            out.append(
                f"{build}: torch {version} on PyPI is built with CUDA {cuda} ({where}); "
                f"assets/torch.toml has no [build.{build}] (its CUDA and the compute "
                "capabilities its kernels cover: RELEASE.md, .ci/manywheel/build_cuda.sh)"
            )
    for name, recipe in k.extensions.items():
        if recipe.package not in packages or not recipe.checked:
            continue  # not on PyPI: that is its finding
        for series, (major, version, where) in majors.items():
            built = recipe.for_build(recipe.checked, f"{major}.0")
            knows = [int(m) for m in built.prebuilt_cuda_majors]
            if knows and int(major) > max(knows):
                out.append(
                    f"new incompatibility: {name} {recipe.checked} has not been read for CUDA "
                    f"{major}: torch {series} ({version}) on PyPI is a CUDA {major} build "
                    f"({where}), its recipe names release wheels for CUDA "
                    f"{', '.join(built.prebuilt_cuda_majors)} only (prebuilt_cuda_majors): "
                    f"read its setup.py for CUDA {major} (the release wheel it would fetch, its "
                    "nvcc conditions) and add a [[variant]]"
                )
    return out


def _admits(spec: str, python: str) -> bool:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return Version(f"{python}.0") in SpecifierSet(spec)
    except InvalidSpecifier:
        return True


def findings(
    fetch: Fetch,
    pypi: str,
    answers: dict[str, dict] | None = None,
    reader: LineReader | None = None,
    lines: dict[str, Lines] | None = None,
    unchecked: list[str] | None = None,
) -> list[str]:
    """The findings; `answers`, when given, gets PyPI's answer for each project read, `lines`
    the header and setup.py lines read (by NAME-VERSION), `unchecked` the files that could not
    be (a recorded run without them: what they would say is not known, nothing to change)."""
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
    if reader is not None:
        read = {} if lines is None else lines
        missed = [] if unchecked is None else unchecked
        out += cxx_findings(seen["torch"], seen, reader, read, missed)
        out += cuda_findings(seen["torch"], seen, reader, read, missed)
    return out


FILE_FIELDS = ("filename", "requires_python", "upload_time", "yanked")
INFO_FIELDS = ("name", "requires_python", "version")


def trimmed(name: str, data: dict) -> dict:
    """PyPI's answer cut to what the tool reads: the releases it looks at (`read_releases`),
    their Linux wheels and sdists, four fields each (a test fixture holds what a test needs,
    not every release since the project began)."""
    wanted = read_releases(name, data)
    releases = {
        version: [{k: f.get(k) for k in FILE_FIELDS} for f in files or [] if _kept(f)]
        for version, files in data["releases"].items()
        if version in wanted
    }
    info = data.get("info") or {}
    return {"info": {k: info.get(k) for k in INFO_FIELDS}, "releases": releases}


def read_releases(name: str, data: dict) -> set[str]:
    """The releases of project `name` (PyPI's own spelling of each) the findings read: torch's
    newest of each series from OLDEST_SERIES on; for a recipe's package, its `checked` release
    and the newer ones (its newest where a recipe says no `checked`)."""
    finals = final_releases(data)
    if name == "torch":
        keep = {version for version, _ in newest_of_each_series(data).values()}
    else:
        checked = [
            Version(r.checked) if r.checked else max(finals, default=None)
            for r in knowledge().extensions.values()
            if r.package == name
        ]
        floor = min((v for v in checked if v is not None), default=None)
        keep = {v for v in finals if floor is not None and v >= floor}
    return {raw for raw in data["releases"] if _version(raw) in keep}


def _version(raw: str) -> Version | None:
    try:
        return Version(raw)
    except InvalidVersion:
        return None


def _kept(file: object) -> bool:
    name = str(file.get("filename", "")) if isinstance(file, dict) else ""
    return name.endswith((".tar.gz", ".zip")) or (name.endswith(".whl") and "linux" in name)


def record(answers: dict[str, dict], directory: Path, lines: dict[str, Lines]) -> list[Path]:
    """DIR/NAME.json for each project read that DIR has no answer for, and DIR/cxx/NAME-VERSION
    .json for the lines read that it lacks (the others stay as they were recorded: tests
    compare against them)."""
    written = []
    for name, data in answers.items():
        path = directory / f"{name}.json"
        if not path.exists():
            path.write_text(json.dumps(trimmed(name, data), indent=0, sort_keys=True) + "\n")
            written.append(path)
    for name, read in lines.items():
        path = directory / "cxx" / f"{name}.json"
        if not path.exists():
            path.parent.mkdir(exist_ok=True)
            path.write_text(json.dumps(read.as_json(), indent=1) + "\n")
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
    parser.add_argument(
        "--lines", type=Path, metavar="DIR", help="header and setup.py lines as recorded in DIR"
    )
    args = parser.parse_args(argv)
    answers: dict[str, dict] = {}
    read: dict[str, Lines] = {}
    unchecked: list[str] = []
    fetch = fetch or http_fetch(args.timeout)
    reader = RecordedLines(args.lines) if args.lines else PypiLines(fetch, args.timeout)
    try:
        found = findings(fetch, args.pypi, answers, reader, read, unchecked)
    except (Unreachable, NotOnPypi) as exc:  # NotOnPypi here: torch itself, a mirror's gap
        print(f"refresh_knowledge: cannot read PyPI, nothing was checked: {exc}")
        return EXIT_UNREACHABLE
    for path in record(answers, args.record, read) if args.record else []:
        print(f"recorded {path}")
    for line in found:
        print(line)
    for line in unchecked:
        print(f"not checked: {line}")
    if not found:
        print(
            "assets/ agree with PyPI: no new torch series, Python tags and Requires-Python "
            "match, every recipe was checked against the newest release, and every recipe x "
            "torch series pair is as assets/ say (C++ standard, CUDA majors, Python tags)"
            + (" where its files were read (not checked: above)" if unchecked else "")
        )
    return EXIT_FINDINGS if found else 0


if __name__ == "__main__":
    sys.exit(main())
