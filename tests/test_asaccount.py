"""Root waits on what runs as another account only so long (steps.run.asaccount): the wizard's
Save answers writes as the invoking account in a child that account may signal; a child kept
stopped, or one past its limit, is ended and said, never waited on for ever. (Its ordinary
write: tests/tui/test_wizard_80x24.py, test_save_answers_under_sudo_...)"""

from __future__ import annotations

import errno
import os
import signal
import time

import pytest

from steps.run.asaccount import call_as

NOBODY = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="becoming another account needs root")


def _stop_itself() -> None:
    """What the account may do to the child that has become it: SIGSTOP (kill -STOP PID)."""
    os.kill(os.getpid(), signal.SIGSTOP)


def _sleep_an_hour() -> None:
    time.sleep(3600)


@pytest.mark.parametrize(
    ("work", "limit", "why"),
    [
        (_stop_itself, 3600.0, "was kept stopped (SIGSTOP or a debugger) for 10 s: ended it"),
        (_sleep_an_hour, 1.0, "ran past its limit of 1.0s: ended it"),  # a small bound
    ],
)
def test_a_child_the_account_holds_up_is_ended_with_why(work, limit: float, why: str):
    with pytest.raises(OSError) as raised:
        call_as(NOBODY, NOBODY, work, limit)
    assert raised.value.errno == errno.ETIMEDOUT
    assert raised.value.strerror == f"mlsetup's process as uid {NOBODY} {why}"
