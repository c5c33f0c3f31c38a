"""Sample a compile's memory once a second, like shared/data/flash-attn-*-mem.txt:

    python tests/bench/sample_memory.py OUT [OBJECT_DIR]

One line a second: unix_time MemAvailable_kB used_kB cicc_count ptxas_count objects, where
used = MemTotal - MemAvailable and objects counts *.o files under OBJECT_DIR. Runs until killed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

import psutil


def main() -> None:
    objects = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    with Path(sys.argv[1]).open("a", buffering=1) as out:
        _sample(out, objects)


def _sample(out: TextIO, objects: Path | None) -> None:
    while True:
        vm = psutil.virtual_memory()
        names = [p.info["name"] for p in psutil.process_iter(["name"])]
        count = sum(1 for _ in objects.rglob("*.o")) if objects and objects.exists() else 0
        out.write(
            f"{int(time.time())} {vm.available // 1024} {(vm.total - vm.available) // 1024} "
            f"{names.count('cicc')} {names.count('ptxas')} {count}\n"
        )
        time.sleep(1)


if __name__ == "__main__":
    main()
