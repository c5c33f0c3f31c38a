"""mlsetup's ninja: start the longest objects first, then be the real ninja.

    bin/ninja [NINJA ARGS]      (on the build's PATH before the venv's; torch runs `ninja -v`)

ninja (>= 1.12) starts the ready edge with the largest critical-path weight, ties broken by the
order of the build statements in build.ninja (src/build.cc: EdgeWeightHeuristic weighs every
non-phony edge 1; src/graph.h: EdgePriorityLess compares the weight, then the edge id, which
src/state.cc assigns in parse order). The objects of a torch extension all weigh the same, so
ninja starts them in the order setuptools listed its sources (sorted by name), and the heaviest
can start last: on the H200 server flash-attn's last five objects took 173 s with five jobs or
fewer running while eleven cores idled.

So before ninja reads build.ninja, this orders each run of consecutive build statements by
expected time, longest first and balanced over the most jobs the memory governor lets run
(MLSETUP_JOB_SLOTS; see `planned`), which it lets go one stagger apart (MLSETUP_JOB_STAGGER_S).
An object's expected time is what it took in an earlier build of this same tree (its
.ninja_log), else in an earlier build of the same extension and version that root kept
(MLSETUP_OBJECT_LESSONS, a copy of that build's .ninja_log), else in the recipe's profile
(MLSETUP_OBJECT_PROFILE, a .ninja_log measured elsewhere), else the size of its source scaled by
the seconds per byte of the objects whose time is known. Statements whose inputs are built by
other statements (a link) keep their places, and nothing else in the file changes.

An object that alone is more than one core's share of the build's expected time (causal-conv1d's
causal_conv1d_bwd.cu: three quarters of it) would run on for minutes while the cores idle: where
the build's nvcc is mlsetup's and splits compilations (MLSETUP_NVCC_SPLIT), its statement gets
`nvcc = $nvcc --mlsetup-threads=N`, N its share of the job slots, and mlsetup's nvcc splits its
compilation over that many threads (see `spread`).

Then it execs the next ninja on PATH with the same arguments and environment (the jobserver in
MAKEFLAGS included), so the memory governor sees the real ninja and its jobs as before; it still
decides how many of them run. Anything unexpected leaves build.ninja as it was: the build goes on.

Runs as the account that compiles, with the venv's python3 and nothing but the standard library.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

MANIFEST_LIMIT = 64 * 2**20  # torch's build.ninja is a few KiB; CMake's can be a few MiB
LOG_LIMIT = 16 * 2**20
PLAN_LIMIT = 500  # edges a plan balances over the job slots (flash-attn's 73: a few ms)
# Options after which ninja builds nothing, or whose argument is not a path to read here.
NOT_A_BUILD = {"-t", "--version", "-h", "--help"}
_VARIABLE = re.compile(r"[A-Za-z0-9_-]+")
_TOP_BINDING = re.compile(r"([A-Za-z0-9_.-]+)\s*=\s*(.*)")


@dataclass
class Edge:
    """One build statement: its lines as written, and what ordering needs of it."""

    text: str
    outputs: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)  # the explicit ones
    rule: str = ""
    cost: float | None = None  # expected seconds; bytes of source when nothing is timed


@dataclass
class Manifest:
    chunks: list[str | Edge]  # top-level statements with their indented lines, in file order
    variables: dict[str, str]  # top-level bindings, as the build lines saw them


def object_key(path: str) -> str:
    """An object's name across builds: the part below setuptools' build/temp.<platform> directory
    (whose name holds the Python version), else the path as written."""
    parts = path.split("/")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i].startswith("temp."):
            return "/".join(parts[i + 1 :])
    return path


def read_times(path: Path) -> dict[str, float]:
    """Seconds per object from a .ninja_log (v5-v7: start, end in ms, mtime, output, hash), the
    last entry of each output winning as in ninja; {} when there is none or it is unreadable."""
    try:
        with path.open("rb") as f:
            data = f.read(LOG_LIMIT)
    except OSError:
        return {}
    times: dict[str, float] = {}
    for line in data.decode("utf-8", "surrogateescape").splitlines():
        fields = line.split("\t")
        if line.startswith("#") or len(fields) < 4:
            continue
        try:
            seconds = (int(fields[1]) - int(fields[0])) / 1000
        except ValueError:
            continue
        if seconds >= 0:
            times[object_key(fields[3])] = seconds
    return times


def _logical_lines(text: str) -> list[str]:
    """Physical lines, each ending in "\\n", with a `$`-continued line kept with the next."""
    out: list[str] = []
    pending = ""
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            line += "\n"
        pending += line
        body = line[:-1]
        if (len(body) - len(body.rstrip("$"))) % 2 == 0:  # an odd run of $ escapes the newline
            out.append(pending)
            pending = ""
    if pending:
        out.append(pending)
    return out


def _words(line: str, variables: dict[str, str]) -> list[str]:
    """The words of a build line after `build`: paths unescaped, `:` `|` `||` `|@` as words."""
    words: list[str] = []
    current: list[str] = []
    in_word = False
    i = 0
    while i < len(line):
        c = line[i]
        if c == "$" and i + 1 < len(line):
            nxt = line[i + 1]
            if nxt in " :$":
                current.append(nxt)
                i, in_word = i + 2, True
                continue
            if nxt == "\n":  # a continuation: the newline and the next line's indent vanish
                i += 2
                while i < len(line) and line[i] in " \t":
                    i += 1
                continue
            if nxt == "{" and (end := line.find("}", i)) > 0:
                current.append(variables.get(line[i + 2 : end], ""))
                i, in_word = end + 1, True
                continue
            if m := _VARIABLE.match(line, i + 1):
                current.append(variables.get(m.group(0), ""))
                i, in_word = m.end(), True
                continue
        if c in " \t\n" or c == ":":
            if in_word:
                words.append("".join(current))
                current, in_word = [], False
            if c == ":":
                words.append(":")
            i += 1
            continue
        current.append(c)
        in_word = True
        i += 1
    if in_word:
        words.append("".join(current))
    return words


def _edge(text: str, variables: dict[str, str]) -> Edge:
    words = _words(text[len("build ") :], variables)
    edge = Edge(text)
    if ":" not in words:
        return edge  # not a statement this understands: it stays where it is
    colon = words.index(":")
    edge.outputs = [w for w in words[:colon] if w != "|"]
    rest = words[colon + 1 :]
    edge.rule = rest[0] if rest else ""
    for word in rest[1:]:
        if word in ("|", "||", "|@"):
            break
        edge.inputs.append(word)
    return edge


def parse(text: str) -> Manifest:
    """build.ninja as top-level statements, each with the indented lines that follow it."""
    chunks: list[str | Edge] = []
    variables: dict[str, str] = {}
    for line in _logical_lines(text):
        top = line[:1] not in (" ", "\t", "\n", "#") and line.strip() != ""
        if top and line.startswith("build "):
            chunks.append(_edge(line, variables))
            continue
        if top:
            chunks.append(line)
            if m := _TOP_BINDING.fullmatch(line.rstrip("\n")):
                variables[m.group(1)] = m.group(2)
            continue
        if chunks and isinstance(chunks[-1], Edge):
            chunks[-1].text += line  # its bindings (and any blank line or comment after it)
        elif chunks and isinstance(chunks[-1], str):
            chunks[-1] += line
        else:
            chunks.append(line)
    return Manifest(chunks, variables)


def _movable(manifest: Manifest) -> list[Edge]:
    """The edges whose place may change: not phony, and built from nothing another edge makes."""
    edges = [c for c in manifest.chunks if isinstance(c, Edge)]
    made = {out for e in edges for out in e.outputs}
    return [
        e
        for e in edges
        if e.outputs and e.rule and e.rule != "phony" and not any(i in made for i in e.inputs)
    ]


@dataclass
class Estimates:
    """Where each edge's expected time came from."""

    measured: dict[str, int] = field(default_factory=dict)  # source -> edges
    by_size: int = 0
    unknown: int = 0


def estimate(
    edges: list[Edge], sources: list[tuple[str, dict[str, float]]], base: Path
) -> Estimates:
    """Set each edge's cost: the first source that timed its object, else its source's size times
    the seconds per byte of the timed ones (1 when none is timed: size order alone)."""
    counts = Estimates(measured=dict.fromkeys((name for name, _ in sources), 0))
    sizes: dict[int, int] = {}
    for edge in edges:
        key = object_key(edge.outputs[0])
        for name, times in sources:
            if key in times:
                edge.cost = times[key]
                counts.measured[name] += 1
                break
        try:
            sizes[id(edge)] = (base / edge.inputs[0]).stat().st_size if edge.inputs else -1
        except OSError:
            sizes[id(edge)] = -1
    timed = [e for e in edges if e.cost is not None and sizes[id(e)] > 0]
    total_bytes = sum(sizes[id(e)] for e in timed)
    rate = sum(e.cost or 0.0 for e in timed) / total_bytes if total_bytes else 1.0
    for edge in edges:
        if edge.cost is None and sizes[id(edge)] >= 0:
            edge.cost = sizes[id(edge)] * rate
            counts.by_size += 1
        elif edge.cost is None:
            counts.unknown += 1
    return counts


def longest_first(manifest: Manifest, movable: list[Edge], slots: int, stagger: float) -> bool:
    """Reorder each run of consecutive build statements: its movable edges, in `planned` order,
    into the places movable edges held. True when anything moved."""
    can_move = {id(e) for e in movable}
    changed = False
    run: list[int] = []  # indexes into manifest.chunks of the movable edges of the current run
    for index in range(len(manifest.chunks) + 1):
        chunk = manifest.chunks[index] if index < len(manifest.chunks) else None
        if isinstance(chunk, Edge):
            if id(chunk) in can_move:
                run.append(index)
            continue
        edges = [c for c in (manifest.chunks[i] for i in run) if isinstance(c, Edge)]
        ordered = planned(edges, slots, stagger)
        if ordered != edges:
            changed = True
            for i, edge in zip(run, ordered, strict=True):
                manifest.chunks[i] = edge
        run = []
    return changed


def planned(edges: list[Edge], slots: int, stagger: float = 0.0) -> list[Edge]:
    """The order ninja should start `edges` in with `slots` jobs at a time: longest first, and
    balanced. Each slot is planned a set of objects of about the same total time (the longest
    first, each to the least loaded slot, then moves and swaps off the most loaded one while
    that shortens it), and the edges are listed by when their slot reaches them, each slot
    longest first: ninja, giving each freed job to the next in the list, then runs that plan.
    Plain longest first leaves the slots' ends far apart when the objects are few and long:
    replaying flash-attn's 73 H200 times on 16 slots, 1,069 s against 995 s planned, for a
    bound of 994 s. Slot k starts `stagger` x k seconds late, as the governor lets the first
    jobs go one stagger apart (3.6 s on the H200: its last slot 54 s after the first). Edges of
    unknown time go last; ties keep the file's order. With one slot, or too many edges to plan
    quickly, longest first alone."""
    known = [e for e in edges if e.cost is not None]
    unknown = [e for e in edges if e.cost is None]
    longest = sorted(known, key=lambda e: -(e.cost or 0.0))
    if slots < 2 or len(known) <= slots or len(known) > PLAN_LIMIT:
        return longest + unknown
    bins: list[list[Edge]] = [[] for _ in range(slots)]
    loads = [stagger * k for k in range(slots)]
    for edge in longest:
        i = loads.index(min(loads))
        bins[i].append(edge)
        loads[i] += edge.cost or 0.0
    for _ in range(4 * len(known)):  # each step lowers the loads' sum of squares: it ends
        if not _improve(bins, loads):
            break
    position = {id(e): n for n, e in enumerate(edges)}
    starts = []
    for k, slot in enumerate(bins):
        t = stagger * k
        for edge in sorted(slot, key=lambda e: (-(e.cost or 0.0), position[id(e)])):
            starts.append((t, -(edge.cost or 0.0), position[id(edge)], edge))
            t += edge.cost or 0.0
    return [edge for *_, edge in sorted(starts, key=lambda s: s[:3])] + unknown


def _improve(bins: list[list[Edge]], loads: list[float]) -> bool:
    """One move or swap of an edge between the most loaded slot and another that makes both
    end before the most loaded one did; False when there is none."""
    top = loads.index(max(loads))
    for other in range(len(bins)):
        if other == top:
            continue
        for a in bins[top]:
            for b in [None, *bins[other]]:
                moved = (a.cost or 0.0) - (b.cost or 0.0 if b is not None else 0.0)
                if moved > 0 and loads[other] + moved < loads[top] - 1e-6:
                    bins[top].remove(a)
                    bins[other].append(a)
                    if b is not None:
                        bins[other].remove(b)
                        bins[top].append(b)
                    loads[top] -= moved
                    loads[other] += moved
                    return True
    return False


def spread(manifest: Manifest, movable: list[Edge], slots: int, nvcc: Path) -> list[str]:
    """Give each CUDA object whose share of the build's expected time is worth two or more of its
    `slots` job slots (rounded) that many threads, through mlsetup's nvcc (`nvcc`, which must be
    the manifest's): a statement-level binding, which ninja evaluates in the file's scope, so
    `$nvcc` in it is the file's nvcc. Objects already given a compiler of their own, or builds
    whose flags choose --split-compile themselves, are left alone. Returns "object: N threads"
    for each object given threads."""
    wrapper = manifest.variables.get("nvcc", "").strip()
    try:
        if not wrapper or Path(wrapper).resolve() != nvcc.resolve():
            return []
    except OSError:
        return []
    if any("split-compile" in value for value in manifest.variables.values()):
        return []
    total = sum(e.cost or 0.0 for e in movable)
    if total <= 0:
        return []
    rules = _rules_running_nvcc(manifest)
    given = []
    for edge in movable:
        if edge.rule not in rules or not edge.cost:
            continue
        threads = min(slots, round(slots * edge.cost / total))
        lines = _logical_lines(edge.text)
        if threads < 2 or any(re.match(r"\s+nvcc\s*=", line) for line in lines[1:]):
            continue
        edge.text = "".join([lines[0], f"  nvcc = $nvcc --mlsetup-threads={threads}\n", *lines[1:]])
        given.append(f"{Path(edge.outputs[0]).name}: {threads} threads")
    return given


def _rules_running_nvcc(manifest: Manifest) -> set[str]:
    """The rules whose command starts the manifest's nvcc."""
    names = set()
    for chunk in manifest.chunks:
        if not isinstance(chunk, str) or not chunk.startswith("rule "):
            continue
        lines = _logical_lines(chunk)
        for line in lines[1:]:
            key, _, value = line.strip().partition("=")
            if key.strip() == "command" and re.search(r"\$(nvcc\b|\{nvcc\})", value):
                names.add(lines[0].split()[1])
    return names


def render(manifest: Manifest) -> str:
    return "".join(c.text if isinstance(c, Edge) else c for c in manifest.chunks)


def _target(argv: list[str]) -> tuple[Path, Path] | None:
    """(the directory ninja runs in, its manifest) for these arguments; None when this run of
    ninja builds nothing (a tool, --version) or the arguments are not understood."""
    directory, manifest = Path.cwd(), "build.ninja"
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in NOT_A_BUILD:
            return None
        if arg in ("-C", "-f"):
            if i + 1 >= len(argv):
                return None
            value = argv[i + 1]
            i += 2
        elif arg.startswith(("-C", "-f")) and len(arg) > 2:
            value = arg[2:]
            i += 1
        else:
            i += 1
            continue
        if arg.startswith("-C"):
            directory = directory / value
        else:
            manifest = value
    return directory, directory / manifest


def order(argv: list[str], environ: dict[str, str]) -> str | None:
    """Reorder the manifest these arguments name; what was done, for the build log (None: no
    build, nothing to say)."""
    target = _target(argv)
    if target is None:
        return None
    directory, path = target
    if not path.is_file() or path.stat().st_size > MANIFEST_LIMIT:
        return None
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    manifest = parse(text)
    movable = _movable(manifest)
    if len(movable) < 2:
        return None
    builddir = Path(manifest.variables.get("builddir", "."))
    sources = [
        ("this tree's earlier build", read_times(directory / builddir / ".ninja_log")),
        ("an earlier build kept by mlsetup", _times(environ, "MLSETUP_OBJECT_LESSONS")),
        ("the recipe's profile", _times(environ, "MLSETUP_OBJECT_PROFILE")),
    ]
    counts = estimate(movable, sources, directory)
    value = environ.get("MLSETUP_JOB_SLOTS", "")  # the memory governor's job ceiling
    slots = int(value) if value.isdigit() else 1
    moved = longest_first(manifest, movable, slots, _seconds(environ, "MLSETUP_JOB_STAGGER_S"))
    threads = []
    if environ.get("MLSETUP_NVCC_SPLIT") and slots > 1:
        threads = spread(manifest, movable, slots, Path(__file__).resolve().parent / "nvcc")
    split = f"; split over the idle cores: {', '.join(threads)}" if threads else ""
    if not moved and not threads:
        return f"mlsetup ninja: {len(movable)} objects, already longest first"
    _replace(path, render(manifest))
    where = [f"{n} from {name}" for name, n in counts.measured.items() if n]
    where += [f"{counts.by_size} by source size"] if counts.by_size else []
    where += [f"{counts.unknown} unknown, last"] if counts.unknown else []
    heaviest = sorted((e for e in movable if e.cost is not None), key=lambda e: -(e.cost or 0))
    unit = " s" if sum(counts.measured.values()) else " bytes of source"
    first = ", ".join(f"{Path(e.outputs[0]).name} {e.cost:.0f}{unit}" for e in heaviest[:3])
    balanced = f", balanced over {slots} job slots" if slots > 1 else ""
    return (
        f"mlsetup ninja: {len(movable)} objects ordered longest first{balanced} "
        f"(expected times: {', '.join(where)}); first: {first}{split}"
    )


def _seconds(environ: dict[str, str], name: str) -> float:
    """A variable's value as seconds (0 when it is absent or not a number of them)."""
    try:
        value = float(environ.get(name, ""))
    except ValueError:
        return 0.0
    return value if 0 <= value < 3600 else 0.0


def _times(environ: dict[str, str], name: str) -> dict[str, float]:
    value = environ.get(name, "")
    return read_times(Path(value)) if value.startswith("/") else {}


def _replace(path: Path, text: str) -> None:
    """Write the manifest in one rename, keeping its mode, so ninja never reads half of it."""
    fd, tmp = tempfile.mkstemp(prefix=".mlsetup-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def real_ninja(environ: dict[str, str]) -> str | None:
    """The next ninja on PATH after this one's directory."""
    here = Path(__file__).resolve().parent / "bin"
    for entry in environ.get("PATH", "").split(os.pathsep):
        if not entry:
            continue
        candidate = Path(entry) / "ninja"
        try:
            if Path(entry).resolve() == here or not candidate.is_file():
                continue
        except OSError:
            continue
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def main() -> None:
    argv, environ = sys.argv[1:], dict(os.environ)
    try:
        said = order(argv, environ)
    except Exception as exc:  # never the build's end: ninja gets the file as torch wrote it
        said = f"mlsetup ninja: build.ninja left as written ({type(exc).__name__}: {exc})"
    if said:
        print(said, file=sys.stderr, flush=True)
    ninja = real_ninja(environ)
    if ninja is None:
        sys.exit("mlsetup ninja: no ninja on PATH after mlsetup's own (the venv's is missing)")
    os.execv(ninja, [ninja, *argv])


if __name__ == "__main__":
    main()
