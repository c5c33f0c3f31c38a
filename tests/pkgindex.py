"""A local package index for resolution tests: PEP 503 simple-API directories of tiny real wheels.

`PackageIndex(root)` lays out one directory per PyTorch build (`root/cu128/torch/index.html`,
...), as download.pytorch.org does, and `root/pypi/` for everything else, so the answers'
`torch.index_url = "<root>/{build}"` and `UV_DEFAULT_INDEX=<root>/pypi` give uv the same shape of
world the real indexes do. Each wheel is built by the test (no download), each link carries its
sha256, and the stand-in `torch` has a `torch/version.py` with `__version__` and `cuda`, and a
tiny API (`torch.cuda`, `torch.distributed`) that says plainly that it is a stand-in, so the stack
smoke test can tell it from the real one.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

BUILDS = ("cpu", "cu126", "cu128", "cu129", "cu130", "cu132")

# The stand-in's API: enough for the stack smoke test to import it and find it is not real.
FAKE_TORCH_INIT = """\
from torch.version import __version__, cuda as _cuda
FAKE = True  # mlsetup's test stand-in: no tensors, no kernels


class cuda:
    @staticmethod
    def is_available():
        return False

    @staticmethod
    def device_count():
        return 0
"""


# An in-tree PEP 517 backend that appends "uid phase" to a log each time it runs: the package
# that has only an sdist, whose metadata comes only from running its build (issue 21).
UID_BACKEND = """\
import base64, hashlib, os, zipfile

NAME, VERSION, LOG = {name!r}, {version!r}, {log!r}
META = f"Metadata-Version: 2.1\\nName: {{NAME}}\\nVersion: {{VERSION}}\\n"
INFO = f"{{NAME}}-{{VERSION}}.dist-info"


def _note(phase):
    with open(LOG, "a") as f:
        f.write(f"{{os.getuid()}} {{phase}}\\n")


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _note("metadata")
    os.makedirs(os.path.join(metadata_directory, INFO))
    with open(os.path.join(metadata_directory, INFO, "METADATA"), "w") as f:
        f.write(META)
    return INFO


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _note("wheel")
    files = {{
        f"{{NAME}}.py": b"UID = True\\n",
        f"{{INFO}}/METADATA": META.encode(),
        f"{{INFO}}/WHEEL": b"Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
    }}
    record = [
        f"{{n}},sha256={{base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()}},{{len(d)}}"
        for n, d in files.items()
    ]
    files[f"{{INFO}}/RECORD"] = ("\\n".join([*record, f"{{INFO}}/RECORD,,"]) + "\\n").encode()
    name = f"{{NAME}}-{{VERSION}}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
        for member, data in files.items():
            zf.writestr(member, data)
    return name
"""


def build_sdist(directory: Path, name: str, version: str, log: Path) -> Path:
    """`name-version.tar.gz` whose build backend (in the tree, no requirements) records the uid
    it runs as in `log`, for the metadata and for the wheel."""
    root = f"{name}-{version}"
    members = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\n'
        'backend-path = ["."]\n',
        "backend.py": UID_BACKEND.format(name=name, version=version, log=str(log)),
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{root}.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for member, text in sorted(members.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{root}/{member}")
            info.size, info.mtime, info.mode = len(data), 1796083200, 0o644
            tf.addfile(info, io.BytesIO(data))
    return path


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(
    directory: Path, name: str, version: str, files: dict[str, str], requires: tuple[str, ...] = ()
) -> Path:
    """A pure-Python wheel `name-version-py3-none-any.whl` holding `files`, depending on
    `requires` (PEP 508 strings)."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    contents = {
        **{path: text.encode() for path, text in files.items()},
        f"{info}/METADATA": metadata.encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: mlsetup-tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = [_record_line(path, data) for path, data in contents.items()]
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in sorted(contents.items()):
            info_ = zipfile.ZipInfo(member, date_time=(2026, 12, 1, 0, 0, 0))
            zf.writestr(info_, data)
    return path


class PackageIndex:
    def __init__(self, root: Path) -> None:
        self.root = root
        for build in (*BUILDS, "pypi"):
            (root / build).mkdir(parents=True, exist_ok=True)
            self._write_root(build)

    @property
    def torch_url(self) -> str:
        """What the answers' torch.index_url is set to."""
        return f"{self.root}/{{build}}"

    @property
    def default_url(self) -> str:
        """The index for everything but the PyTorch family (UV_DEFAULT_INDEX)."""
        return str(self.root / "pypi")

    def add(
        self,
        where: str,
        name: str,
        version: str,
        files: dict[str, str] | None = None,
        requires: tuple[str, ...] = (),
    ) -> Path:
        """A wheel on the `where` index ("pypi" or a build such as "cu128")."""
        project = self.root / where / name
        wheel = build_wheel(
            project, name, version, files or {"_" + name.replace("-", "_") + ".py": ""}, requires
        )
        self._write_project(project)
        self._write_root(where)
        return wheel

    def add_file(self, where: str, name: str, path: Path) -> Path:
        """A distribution file made elsewhere (a real wheel, an sdist) on the `where` index."""
        project = self.root / where / name
        project.mkdir(parents=True, exist_ok=True)
        copy = project / path.name
        copy.write_bytes(path.read_bytes())
        self._write_project(project)
        self._write_root(where)
        return copy

    def add_sdist(self, where: str, name: str, version: str, log: Path) -> Path:
        """An sdist (and no wheel) on the `where` index whose build records its uid in `log`."""
        project = self.root / where / name
        sdist = build_sdist(project, name, version, log)
        self._write_project(project)
        self._write_root(where)
        return sdist

    def add_torch(self, version: str, build: str, cuda: str | None) -> Path:
        local = f"{version}+{build}"
        return self.add(
            build,
            "torch",
            local,
            {
                "torch/__init__.py": FAKE_TORCH_INIT,
                "torch/version.py": f"__version__ = '{local}'\ncuda = {cuda!r}\n",
            },
        )

    def add_torchvision(self, version: str, build: str, torch: str) -> Path:
        return self.add(
            build,
            "torchvision",
            f"{version}+{build}",
            {"torchvision/__init__.py": f"__version__ = '{version}+{build}'\n"},
            requires=(f"torch=={torch}",),
        )

    @staticmethod
    def _write_project(project: Path) -> None:
        links = []
        for wheel in sorted([*project.glob("*.whl"), *project.glob("*.tar.gz")]):
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            href = wheel.name.replace("+", "%2B")
            links.append(f'<a href="{href}#sha256={digest}">{wheel.name}</a><br>')
        (project / "index.html").write_text(
            "<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n"
        )

    def _write_root(self, where: str) -> None:
        index = self.root / where
        names = sorted(p.name for p in index.iterdir() if p.is_dir())
        (index / "index.html").write_text(
            "<!DOCTYPE html><html><body>\n"
            + "".join(f'<a href="{n}/">{n}</a><br>\n' for n in names)
            + "</body></html>\n"
        )


def standard_index(root: Path) -> PackageIndex:
    """The world the stack tests resolve in: torch 2.9.0 (cu128), 2.11.0 (cu130, cpu), 2.6.0
    (cu126), torchvision for each, a vllm-like package that pins torch 2.9.0, one that pins torch
    2.6.0, and a package that pins nothing."""
    index = PackageIndex(root)
    for version, build, cuda, vision in (
        ("2.9.0", "cu128", "12.8", "0.24.0"),
        ("2.11.0", "cu130", "13.0", "0.26.0"),
        ("2.11.0", "cpu", None, "0.26.0"),
        ("2.6.0", "cu126", "12.6", "0.21.0"),
    ):
        index.add_torch(version, build, cuda)
        index.add_torchvision(vision, build, version)
    index.add("pypi", "vllmish", "0.1.0", requires=("torch==2.9.0", "torchvision==0.24.0"))
    index.add("pypi", "oldpin", "1.0", requires=("torch==2.6.0",))
    index.add("pypi", "helper", "1.2.3")
    return index
