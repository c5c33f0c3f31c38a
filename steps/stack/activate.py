"""The venv's activate scripts name the CUDA toolkit torch is built with.

DeepSpeed's ops, FlashInfer and `torch.utils.cpp_extension.load` compile at run time with the
nvcc of `CUDA_HOME`, else whichever is first on PATH: a toolkit of another CUDA major than
torch's fails (torch refuses a major mismatch) or builds for the wrong runtime. So `activate`
(bash, zsh, sh), `activate.fish` and `activate.csh` end with a block of mlsetup's that exports
`CUDA_HOME` as the toolkit matching torch's CUDA and puts its `bin` right after the venv's own.
The block sits between two marker lines: writing it again replaces it (never a second one), and
the venv's other lines are kept as they are. uv's other activators (nu, PowerShell) are left
alone. The venv belongs to its owner: the owner writes the files (an action run as that account),
root only reads them back, bounded and without following links (steps.stack.venvstate).
"""

from __future__ import annotations

import re

BEGIN = "# >>> mlsetup: the CUDA toolkit torch is built with >>>"
END = "# <<< mlsetup <<<"
_EXPORTED = re.compile(
    rf"^{re.escape(BEGIN)}\n(?:.*\n)*?export CUDA_HOME='([^'\n]+)'\n(?:.*\n)*?{re.escape(END)}$",
    re.M,
)


def cuda_home_of(activate: str | None) -> str | None:
    """The CUDA_HOME mlsetup's block in `activate` (bin/activate's text) exports, if any."""
    m = _EXPORTED.search(activate or "")
    return m.group(1) if m else None


# Run with the venv's Python as the venv's owner: argv[1] the venv, argv[2] the toolkit. Each
# file is rewritten through a temporary file beside it and renamed over it (a reader never sees
# half a file), keeping its mode; a file that is a link is left alone.
WRITE = r"""
import os, re, sys, tempfile
venv, home = sys.argv[1], sys.argv[2]
BEGIN, END = BEGIN_MARK, END_MARK
blocks = {
    "activate": (
        f"export CUDA_HOME='{home}'\n"
        'PATH="$VIRTUAL_ENV/bin:$CUDA_HOME/bin:${PATH#"$VIRTUAL_ENV/bin:"}"\n'
        "export PATH\n"
    ),
    "activate.fish": (
        f"set -gx CUDA_HOME '{home}'\n"
        'set -gx PATH "$VIRTUAL_ENV/bin" "$CUDA_HOME/bin" '
        '(string match -v -- "$VIRTUAL_ENV/bin" $PATH)\n'
    ),
    "activate.csh": (
        f"setenv CUDA_HOME '{home}'\n"
        'setenv PATH "${VIRTUAL_ENV}/bin:${CUDA_HOME}/bin:${PATH}"\n'
    ),
}
old = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END) + r"\n?", re.S)
for name, body in blocks.items():
    path = os.path.join(venv, "bin", name)
    if os.path.islink(path) or not os.path.isfile(path):
        continue
    with open(path, encoding="utf-8") as f:
        text = old.sub("", f.read())
    text = text.rstrip("\n") + f"\n\n{BEGIN}\n{body}{END}\n"
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=f".{name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, os.stat(path).st_mode & 0o777)
    os.replace(tmp, path)
    print(f"{path}: CUDA_HOME={home}")
""".replace("BEGIN_MARK", repr(BEGIN)).replace("END_MARK", repr(END))
