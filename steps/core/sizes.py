"""Sizes and durations: the byte units and the ways mlsetup writes them for a person.

One home for them, so that the engine's messages (the governor's throttle reasons), the console
and the wizard say "12.3 GiB" and "5m03s" the same way. The wizard's SVG snapshots depend on
these exact strings: change a format here and they change.
"""

from __future__ import annotations

KiB = 2**10
MiB = 2**20
GiB = 2**30


def gib(n: float | None, digits: int = 1) -> str:
    """`n` bytes in GiB: "12.3 GiB" (`digits` decimals; 0 gives "12 GiB"); None is "unknown"."""
    return "unknown" if n is None else f"{n / GiB:.{digits}f} GiB"


def duration(seconds: float, *, tenths: bool = True) -> str:
    """How long something took or has left: "42.5s" under a minute ("0m42s" with
    `tenths=False`, for a figure that changes every second), then "5m03s", from an hour
    "1h05m". A negative time counts as none."""
    seconds = max(0.0, seconds)
    if seconds < 60 and tenths:
        return f"{seconds:.1f}s"
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s" if m < 60 else f"{m // 60}h{m % 60:02d}m"


def clock(seconds: float) -> str:
    """Time since a start, as a log line's stamp: "05:03", from an hour "1:05:03"."""
    seconds = max(0, int(seconds))
    h, rem = divmod(seconds, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60:02d}:{rem % 60:02d}"
