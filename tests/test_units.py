"""steps.core.sizes: the strings the console, the wizard (its SVG snapshots) and the governor's
throttle reasons print for sizes and durations."""

from __future__ import annotations

import pytest

from steps.core.sizes import GiB, KiB, MiB, clock, duration, gib


def test_the_byte_units_are_binary():
    assert (KiB, MiB, GiB) == (1024, 1024**2, 1024**3)


@pytest.mark.parametrize(
    ("n", "digits", "text"),
    [
        (None, 1, "unknown"),
        (0, 1, "0.0 GiB"),
        (int(12.34 * GiB), 1, "12.3 GiB"),
        (150 * GiB, 0, "150 GiB"),
        (0.5 * GiB, 1, "0.5 GiB"),
    ],
)
def test_gib(n, digits, text):
    assert gib(n, digits) == text


@pytest.mark.parametrize(
    ("seconds", "tenths", "text"),
    [
        (0.0, True, "0.0s"),
        (42.46, True, "42.5s"),
        (42.46, False, "0m42s"),
        (60.0, True, "1m00s"),
        (303.9, True, "5m03s"),
        (303.9, False, "5m03s"),
        (3599.0, True, "59m59s"),
        (3900.0, True, "1h05m"),
        (3900.0, False, "1h05m"),
        (-3.0, True, "0.0s"),
        (-3.0, False, "0m00s"),
    ],
)
def test_duration(seconds, tenths, text):
    assert duration(seconds, tenths=tenths) == text


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "00:00"), (303.7, "05:03"), (3903, "1:05:03"), (-1, "00:00")]
)
def test_clock(seconds, text):
    assert clock(seconds) == text
