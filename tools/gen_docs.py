"""Generate mlsetup's shell completion (bash, zsh) and manual page from its argument parser.

    python tools/gen_docs.py          # rewrite assets/completion/* and assets/man/mlsetup.1
    python tools/gen_docs.py --check  # exit 1 if a shipped file differs from what the parser makes

The parser (`app.cli._parser`) is the one description of the command line: what it offers is
what the completion offers and what the manual page lists, and tests/test_gen_docs.py fails when
a shipped file is not what this script makes of it. The files live under assets/, so the wheel
carries them; install.sh puts them where bash-completion, zsh and man look.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.cli import _parser, _version  # noqa: E402
from steps.core.assetdir import ASSETS_DIR  # noqa: E402
from steps.core.settings import KNOWN  # noqa: E402

BASH = REPO / "assets" / "completion" / "mlsetup.bash"
ZSH = REPO / "assets" / "completion" / "_mlsetup"
MAN = REPO / "assets" / "man" / "mlsetup.1"
GENERATED = "generated from mlsetup's argument parser by tools/gen_docs.py; do not edit"

# What the parser cannot say: the environment settings (steps/core/settings.py) and the files.
ENVIRONMENT = {
    "MLSETUP_EXTENSIONS_DIR": "a directory of extension recipes instead of "
    "/etc/mlsetup/extensions.d",
    "MLSETUP_NVML_SNAPSHOT": "a recorded NVML reading (JSON) instead of the GPUs (tests)",
    "MLSETUP_DPKG_LOCK_TIMEOUT": "seconds to wait for apt's lock (default 600)",
    "MLSETUP_INTERRUPTED_WAIT": "seconds to wait for an interrupted run's command to end "
    "(default 600)",
    "MLSETUP_ACCOUNT_TIMEOUT": "seconds a command run as another account (the venv's owner: its "
    "resolution, sync, builds, smoke test) may take before it is ended (default 86400, a day; a "
    "resolution an hour at most)",
    "MLSETUP_ASCII": "1 to draw the wizard in ASCII only (a Linux console)",
    "MLSETUP_PREFIX": "For install.sh: where mlsetup's own venv goes (default /opt/mlsetup)",
    "MLSETUP_BINDIR": "For install.sh: where the mlsetup command goes (default /usr/local/bin)",
}
FILES = {
    "/var/lib/mlsetup/state.json": "the run's state; a re-run resumes from it",
    "/var/lib/mlsetup/report.json": "what the last apply did (mlsetup.report/1)",
    "/var/log/mlsetup/": "the event stream and one log per action",
    "/var/cache/mlsetup/": "build trees and built wheels",
    "/etc/mlsetup/extensions.d/": "extension recipes of one's own (TOML)",
}


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    help: str
    metavar: str | None  # None: a flag that takes no value

    @property
    def takes_dir(self) -> bool:
        return self.metavar == "DIR"


@dataclass(frozen=True)
class Command:
    name: str  # "" for mlsetup itself
    help: str
    description: str
    usage: str
    options: tuple[Option, ...]


def _options(parser: argparse.ArgumentParser) -> tuple[Option, ...]:
    found = []
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        takes_value = action.nargs != 0
        metavar = (str(action.metavar or action.dest.upper())) if takes_value else None
        found.append(Option(tuple(action.option_strings), action.help or "", metavar))
    return tuple(found)


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action


def _installation_free(text: str) -> str:
    """A help text without this checkout's or installation's own paths in it."""
    example = str(ASSETS_DIR / "answers.example.toml")
    return text.replace(example, "answers.example.toml in mlsetup's assets (--help names it)")


def _usage(parser: argparse.ArgumentParser) -> str:
    """The usage line argparse prints, on one line whatever terminal this runs in."""
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=1000)
    return parser.format_usage().strip().removeprefix("usage: ")


def commands() -> list[Command]:
    """mlsetup itself first, then each command in the parser's order."""
    top = _parser()
    sub = _subparsers(top)
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    found = [Command("", "", top.description or "", _usage(top), _options(top))]
    for name, parser in sub.choices.items():
        found.append(
            Command(
                name,
                helps[name],
                _installation_free(parser.description or ""),
                _usage(parser),
                _options(parser),
            )
        )
    return found


def value_options() -> list[str]:
    """Every option that takes a value, hidden ones too: the word after it is not a command."""
    flags: set[str] = set()
    top = _parser()
    for parser in [top, *_subparsers(top).choices.values()]:
        for action in parser._actions:
            if action.option_strings and action.nargs != 0:
                flags.update(action.option_strings)
    return sorted(flags)


# bash ------------------------------------------------------------------------------------------


def bash() -> str:
    EMPTY = '""'  # bash's case pattern for no command yet
    cmds = commands()
    names = " ".join(c.name for c in cmds[1:])
    options_of = "\n".join(
        f'        {c.name or EMPTY}) opts="{" ".join(f for o in c.options for f in o.flags)}" ;;'
        for c in cmds
    )
    files: set[str] = set()
    dirs: set[str] = set()
    for c in cmds:
        for o in c.options:
            if o.metavar:
                (dirs if o.takes_dir else files).update(o.flags)
    return f"""# bash completion for mlsetup(1), {GENERATED}
# shellcheck shell=bash

_mlsetup() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} prev=""
    ((COMP_CWORD > 0)) && prev=${{COMP_WORDS[COMP_CWORD - 1]}}
    # --answers=FILE: bash splits the word at '=' (COMP_WORDBREAKS)
    if [[ $cur == "=" ]]; then
        cur="" prev=${{COMP_WORDS[COMP_CWORD - 1]}}
    elif [[ $prev == "=" ]] && ((COMP_CWORD > 1)); then
        prev=${{COMP_WORDS[COMP_CWORD - 2]}}
    fi

    case $prev in
        {"|".join(sorted(dirs))})
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -d -- "$cur")
            return ;;
        {"|".join(sorted(files))})
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -f -- "$cur")
            return ;;
    esac

    # the command: the first word that is neither an option nor an option's value
    local command="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${{COMP_WORDS[i]}} in
            {"|".join(value_options())})
                ((i++))
                [[ ${{COMP_WORDS[i]}} == "=" ]] && ((i++)) ;;
            -*) ;;
            *) command=${{COMP_WORDS[i]}}; break ;;
        esac
    done

    local opts=""
    case $command in
{options_of}
        *) return ;;
    esac
    if [[ -z $command && $cur != -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "{names}" -- "$cur")
    else
        mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
    fi
}}
complete -F _mlsetup mlsetup
"""


# zsh -------------------------------------------------------------------------------------------


def _zsh_quote(text: str) -> str:
    """`text` inside a single-quoted _arguments spec's [description]."""
    return text.replace("'", "'\\''").replace("[", "\\[").replace("]", "\\]").replace(":", "\\:")


def _zsh_specs(options: tuple[Option, ...], indent: str) -> list[str]:
    specs = []
    for o in options:
        text = _zsh_quote(o.help)
        if o.flags[-1] in ("--help", "--version"):  # alone on a line: nothing else after them
            exclusive = "(- *)"
        else:
            exclusive = f"({' '.join(o.flags)})" if len(o.flags) > 1 else ""
        for flag in o.flags:
            if o.metavar is None:
                specs.append(f"'{exclusive}{flag}[{text}]'")
            else:
                action = "_files -/" if o.takes_dir else "_files"
                specs.append(f"'{exclusive}{flag}=[{text}]:{o.metavar}:{action}'")
    return [f"{indent}{spec} \\" for spec in specs]


def zsh() -> str:
    top, *cmds = commands()
    described = "\n".join(f"        '{c.name}:{_zsh_quote(c.help)}'" for c in cmds)
    per_command = "\n".join(
        f"            {c.name})\n"
        f"                _arguments \\\n"
        + "\n".join(_zsh_specs(c.options, " " * 20))
        + "\n                    && ret=0 ;;"
        for c in cmds
    )
    top_specs = "\n".join(_zsh_specs(top.options, "        "))
    return f"""#compdef mlsetup
# zsh completion for mlsetup(1), {GENERATED}

_mlsetup() {{
    local curcontext=$curcontext state line ret=1
    typeset -A opt_args
    _arguments -C \\
{top_specs}
        '1: :->command' \\
        '*:: :->argument' && ret=0
    case $state in
    command)
        local -a commands=(
{described}
        )
        _describe -t commands 'mlsetup command' commands && ret=0 ;;
    argument)
        curcontext=${{curcontext%:*:*}}:mlsetup-$words[1]:
        case $words[1] in
{per_command}
        esac ;;
    esac
    return ret
}}

_mlsetup "$@"
"""


# man -------------------------------------------------------------------------------------------


def _roff(text: str) -> str:
    """Plain text as roff: backslashes and hyphens escaped, no line starting with a control."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return re.sub(r"^([.'])", r"\\&\1", text, flags=re.M)


def _man_options(options: tuple[Option, ...]) -> list[str]:
    lines = []
    for o in options:
        flags = ", ".join(f"\\fB{_roff(f)}\\fR" for f in o.flags)
        value = f" \\fI{o.metavar}\\fR" if o.metavar else ""
        lines += [".TP", flags + value, _roff(o.help[:1].upper() + o.help[1:]) + "."]
    return lines


def _exit_codes(epilog: str) -> list[tuple[str, str]]:
    """'exit codes: 0 done, 1 a step failed, ...' as [(code, meaning)]."""
    listed = epilog.split(":", 1)[1]
    pairs = [part.strip().split(" ", 1) for part in listed.split(",")]
    return [(code, meaning) for code, meaning in pairs]


def man() -> str:
    top, *cmds = commands()
    epilog = _parser().epilog or ""
    undocumented = set(KNOWN) - set(ENVIRONMENT)
    if undocumented:
        raise SystemExit(f"gen_docs: describe {sorted(undocumented)} in ENVIRONMENT")
    summary = top.description.split(":", 1)[0]  # "Take ... to a working ML stack"
    lines = [
        f'.\\" {GENERATED}',
        f'.TH MLSETUP 1 "" "mlsetup {_version()}" "User Commands"',
        ".SH NAME",
        f"mlsetup \\- {_roff(summary[:1].lower() + summary[1:])}",
        ".SH SYNOPSIS",
    ]
    for c in [top, *cmds]:
        lines += [".nf" if c is top else ".br", _roff(c.usage)]
    lines += [".fi", ".SH DESCRIPTION", _roff(top.description), ".SH OPTIONS"]
    lines += _man_options(top.options)
    lines += [".SH COMMANDS"]
    for c in cmds:
        text = c.description or c.help[:1].upper() + c.help[1:] + "."
        lines += [f".SS {c.name}", _roff(text), ".PP", "Options:"]
        lines += _man_options(c.options)
    lines += ['.SH "EXIT STATUS"']
    for code, meaning in _exit_codes(epilog):
        lines += [".TP", f"\\fB{code}\\fR", _roff(meaning[:1].upper() + meaning[1:]) + "."]
    lines += [".SH ENVIRONMENT"]
    for name, text in ENVIRONMENT.items():
        lines += [".TP", f"\\fB{_roff(name)}\\fR", _roff(text[:1].upper() + text[1:]) + "."]
    lines += [".SH FILES"]
    for path, text in FILES.items():
        lines += [".TP", f"\\fI{_roff(path)}\\fR", _roff(text[:1].upper() + text[1:]) + "."]
    lines += [
        '.SH "SEE ALSO"',
        "\\fBmlsetup answers \\-\\-schema\\fR for the answers file's JSON Schema;",
        "README.md in the source distribution.",
    ]
    return "\n".join(lines) + "\n"


def outputs() -> dict[Path, str]:
    return {BASH: bash(), ZSH: zsh(), MAN: man()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs().items():
        if path.exists() and path.read_text() == text:
            continue
        if args.check:
            stale.append(str(path.relative_to(REPO)))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"gen_docs: wrote {path.relative_to(REPO)}")
    if stale:
        print(f"gen_docs: out of date: {', '.join(stale)}; run python tools/gen_docs.py")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
