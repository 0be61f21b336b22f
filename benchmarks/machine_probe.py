"""A fixed reference workload, printed beside engine figures so readers can see how loaded the machine was.

The 2-core machine is shared with other sessions; a benchmark's wall time there says as much about the
neighbours as about the code. This probe times one small JSON encoding, in CPU time and in wall time.
"""

from __future__ import annotations

import json
import os
import time

_SAMPLE = {
    "finish_reason": "stop",
    "model": "relay-chat-small",
    "output_text": "ok" * 20,
    "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
}


def probe(rounds: int = 20_000) -> str:
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(rounds):
        json.dumps(_SAMPLE, sort_keys=True)
    cpu_us = (time.process_time() - cpu) / rounds * 1e6
    wall_us = (time.perf_counter() - wall) / rounds * 1e6
    return (
        f"machine probe: json.dumps of a small dict {cpu_us:.1f} us CPU, {wall_us:.1f} us wall; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    print(probe())
