"""Arrow allocates through the system allocator in relaybatch's processes, unless the user chose."""

import os
import subprocess
import sys

SCRIPT = """
import relaybatch.run
import pyarrow as pa
print(pa.default_memory_pool().backend_name)
"""


def backend(**environment: str) -> str:
    inherited = {name: value for name, value in os.environ.items() if name != "ARROW_DEFAULT_MEMORY_POOL"}
    command = [sys.executable, "-c", SCRIPT]
    environment = {**inherited, **environment}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_system_allocator_by_default_and_the_users_choice_when_made() -> None:
    assert backend() == "system"
    assert backend(ARROW_DEFAULT_MEMORY_POOL="jemalloc") == "jemalloc"
