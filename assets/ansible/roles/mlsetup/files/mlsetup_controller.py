"""Controller-side helpers for the mlsetup Ansible role; run with the controller's Python
(ansible-core 2.18+ needs 3.11+ there, so tomllib is present). Prints one JSON object.

  mlsetup_controller.py pack SOURCE OUTDIR
      A reproducible source tarball of the mlsetup checkout at SOURCE (what install.sh
      installs from): the same files give the same bytes, so its sha256 says whether a host
      already runs exactly this source. -> {"tarball", "id", "version", "top"}
  mlsetup_controller.py answers FILE SOURCE
      The answers file checked by mlsetup's own validation (steps.answers of the checkout at
      SOURCE, which needs pydantic and packaging in this Python), so a bad file stops the play
      here, before anything is copied to a host; and what the role needs to know from it.
      -> {"wheelhouse", "reboot_policy"}

Errors go to stderr with exit code 2.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path

import tomllib

# What install.sh needs from a checkout: itself, the package metadata and the packages.
TOP_FILES = ("install.sh", "pyproject.toml", "README.md", "LICENSE")
PACKAGES = ("app", "steps", "assets")
# Not for the hosts, and where an operator's reports, plans and wheels may lie (they would
# change the tarball, and so reinstall mlsetup, on every play).
SKIP = ("assets/ansible",)
MTIME = 1577836800  # 2020-01-01: fixed, and after 1980 so a wheel built from it can zip it


def fail(message: str) -> None:
    print(f"mlsetup role: {message}", file=sys.stderr)
    sys.exit(2)


def _files(source: Path) -> list[Path]:
    files = [source / name for name in TOP_FILES if (source / name).is_file()]
    for package in PACKAGES:
        for path in sorted((source / package).rglob("*")):
            rel = path.relative_to(source)
            if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
                continue
            if rel.as_posix().startswith(tuple(f"{skip}/" for skip in SKIP)):
                continue
            if path.is_file() and path.suffix not in (".pyc", ".pyo"):
                files.append(path)
    return sorted(files)


def pack(source: Path, outdir: Path) -> dict:
    source = source.resolve()
    for needed in ("install.sh", "pyproject.toml", "steps", "app"):
        if not (source / needed).exists():
            fail(
                f"{source} is not an mlsetup checkout (no {needed}); set mlsetup_source to the "
                "directory holding install.sh"
            )
    version = tomllib.loads((source / "pyproject.toml").read_text())["project"]["version"]
    top = f"mlsetup-{version}"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _files(source):
            info = tarfile.TarInfo(f"{top}/{path.relative_to(source).as_posix()}")
            data = path.read_bytes()
            info.size = len(data)
            info.mtime = MTIME
            info.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0) as gz:
        gz.write(raw.getvalue())
    blob = packed.getvalue()
    digest = hashlib.sha256(blob).hexdigest()
    outdir.mkdir(parents=True, exist_ok=True)
    tarball = outdir / f"{top}-{digest[:12]}.tar.gz"
    if not tarball.exists():
        tmp = tarball.with_suffix(".tmp")
        tmp.write_bytes(blob)
        tmp.replace(tarball)
    return {
        "tarball": str(tarball),
        "id": f"{version} sha256:{digest}",
        "version": version,
        "top": top,
    }


def answers(path: Path, source: Path) -> dict:
    sys.path.insert(0, str(source.resolve()))
    try:  # from the checkout the hosts get, so both sides validate the same way
        from steps.answers import load_answers
        from steps.errors import InputError
    except ImportError as exc:
        fail(
            f"cannot check {path} with mlsetup's own validation ({exc}): the controller's "
            f"Python ({sys.executable}) needs mlsetup's dependencies (pip install pydantic "
            "packaging), or set mlsetup_controller_python to the python of an mlsetup install"
        )
    try:
        checked = load_answers(path)
    except InputError as exc:
        fail(f"{exc}\nnothing was copied to the hosts")
    return {"wheelhouse": checked.build.wheelhouse, "reboot_policy": checked.reboot.policy}


def main(argv: list[str]) -> None:
    if len(argv) == 3 and argv[0] == "pack":
        result = pack(Path(argv[1]), Path(argv[2]))
    elif len(argv) == 3 and argv[0] == "answers":
        result = answers(Path(argv[1]), Path(argv[2]))
    else:
        fail("usage: mlsetup_controller.py pack SOURCE OUTDIR | answers FILE SOURCE")
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
