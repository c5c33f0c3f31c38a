"""A local package index (PEP 503 directories) of every distribution installed in a venv,
re-packed as wheels from the files their RECORD lists, plus carried wheels.

For a server that reaches no index: its image's own torch becomes something uv can resolve
and `uv pip sync` can install into a new venv, so the stack lock can be tested there.

    python3 venv_index.py /opt/torch/.venv /tmp/stack-index [carried.whl ...]
"""

from __future__ import annotations

import base64
import csv
import hashlib
import re
import shutil
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

SKIP = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def rewheel(site: Path, info: Path, out: Path) -> Path | None:
    meta = Parser().parsestr((info / "METADATA").read_text(errors="replace"))
    wheel_meta = Parser().parsestr((info / "WHEEL").read_text(errors="replace"))
    # every tag the wheel was built for, as one compressed tag set (PEP 425): the first alone can
    # be one an installer does not take (a py2 tag, another CPython)
    parts = [t.split("-") for t in (wheel_meta.get_all("Tag") or ["py3-none-any"])]
    tag = "-".join(".".join(dict.fromkeys(p[i] for p in parts)) for i in range(3))
    name, version = meta["Name"], meta["Version"]
    dist = re.sub(r"[-_.]+", "_", name)
    target = out / _canonical(name) / f"{dist}-{version}-{tag}.whl"
    target.parent.mkdir(parents=True, exist_ok=True)
    record = []
    with (info / "RECORD").open() as f, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as zf:
        for row in csv.reader(f):
            rel = row[0] if row else ""
            if (
                not rel
                or rel.startswith("..")
                or "__pycache__" in rel
                or (rel.startswith(info.name + "/") and rel.split("/")[-1] in SKIP)
            ):
                continue
            path = site / rel
            if not path.is_file():
                continue
            data = path.read_bytes()
            zf.writestr(rel, data)
            record.append(f"{rel},{_digest(data)},{len(data)}")
        record.append(f"{info.name}/RECORD,,")
        zf.writestr(f"{info.name}/RECORD", "\n".join(record) + "\n")
    return target


def write_index(out: Path) -> None:
    for project in sorted(p for p in out.iterdir() if p.is_dir()):
        links = [
            f'<a href="{w.name.replace("+", "%2B")}#sha256='
            f'{hashlib.sha256(w.read_bytes()).hexdigest()}">{w.name}</a><br>'
            for w in sorted(project.glob("*.whl"))
        ]
        page = "<html><body>\n" + "\n".join(links) + "\n</body></html>\n"
        (project / "index.html").write_text(page)
    names = sorted(p.name for p in out.iterdir() if p.is_dir())
    (out / "index.html").write_text(
        "<html><body>\n"
        + "".join(f'<a href="{n}/">{n}</a><br>\n' for n in names)
        + "</body></html>\n"
    )


def main(venv: str, dest: str, carried: list[str]) -> None:
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    (site,) = Path(venv).glob("lib/python3*/site-packages")
    for info in sorted(site.glob("*.dist-info")):
        if (info / "RECORD").is_file() and _canonical(info.name.split("-")[0]) != "pip":
            rewheel(site, info, out)
    for wheel in carried:
        name = _canonical(Path(wheel).name.split("-")[0])
        (out / name).mkdir(exist_ok=True)
        shutil.copy(wheel, out / name)
    write_index(out)
    print(f"{sum(1 for _ in out.glob('*/*.whl'))} wheels in {out}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
