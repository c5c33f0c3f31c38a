"""mlsetup's exit codes: a contract (the README, docs/design.md, `mlsetup --help`, the Ansible
role), so they are defined here once and every front end and the engine use these names."""

from __future__ import annotations

EXIT_OK = 0  # every step done (or nothing to do)
EXIT_FAILED = 1  # a step failed: the report says which, why and what to run next
EXIT_INPUT = 2  # invalid input (answers, facts, usage, state, settings, a recipe): nothing ran
EXIT_NEEDS_ROOT = 3  # the command changes or reads what only root may
EXIT_ALREADY_RUNNING = 4  # another apply holds the lock
EXIT_REBOOT = 10  # paused for the reboot that loads the NVIDIA driver; it resumes after it
EXIT_INTERRUPTED = 128 + 2  # Ctrl-C, as a shell reports a command that SIGINT ended
EXIT_BROKEN_PIPE = 128 + 13  # the reader went away, as a shell reports SIGPIPE

# What each code of the contract means, as `mlsetup --help` and the man page say it
MEANINGS = {
    EXIT_OK: "done",
    EXIT_FAILED: "a step failed",
    EXIT_INPUT: "invalid input",
    EXIT_NEEDS_ROOT: "needs root",
    EXIT_ALREADY_RUNNING: "another apply is running",
    EXIT_REBOOT: "paused for a reboot",
}
