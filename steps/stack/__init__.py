"""The one stack: torch, the answers' packages and the extensions' build requirements, resolved
together by uv into one exact lock before anything is installed. Its one home:

- `inputs`: what a resolution is asked (requirements in order, Python candidates, builds to try,
  the key of all that);
- `commands`: the `uv pip compile` / `uv pip sync` command lines;
- `resolve`, `refusal`, `heldback` and `uvfailure`: the resolution, its refusals, the requested
  packages held below their newest, and uv's output read as a typed cause;
- `releases`: the extension releases the answers ask for, checked against the index first;
- `check`: a lock checked against the machine and the answers;
- `obtain`: where a run's lock comes from (venv.lock, the saved one, a new resolution), and the
  lock `mlsetup plan` and `mlsetup lock` resolve ahead of an apply;
- `venvstate` and `activate`: what a venv holds, read from its files, and the CUDA toolkit its
  activate scripts name.

The lock's file format is a format like the others (steps.formats.lock); uv's index options and
the operator's uv/pip configuration are how commands run (steps.run.index, steps.run.uvconfig).

The engine's side (steps.apply.settle keeps and shares the lock, steps.apply.frozen holds every
later install to it) and the venv step's plan (steps.planning.venv) import from here.
"""
