"""The one stack: torch, the answers' packages and the extensions' build requirements, resolved
together by uv into one exact lock before anything is installed. Its one home:

- `lock`: the lock's model and file format (`# mlsetup-lock:` header, pins, the build of torch
  read from the pins);
- `inputs`: what a resolution is asked (requirements in order, Python candidates, builds to try,
  the key of all that);
- `index` and `uvconfig`: uv's index options and the mirror's credentials, and the index the
  operator configured for uv or pip;
- `commands`: the `uv pip compile` / `uv pip sync` command lines;
- `resolve`, `refusal` and `uvfailure`: the resolution, its refusals, and uv's output read as a
  typed cause;
- `check`: a lock checked against the machine and the answers;
- `obtain`: where a run's lock comes from (venv.lock, the saved one, a new resolution), and the
  lock `mlsetup plan` and `mlsetup lock` resolve ahead of an apply.

The engine's side (steps.settle keeps and shares the lock, steps.frozen holds every later
install to it) and the venv step's plan (steps.venv) import from here.
"""
