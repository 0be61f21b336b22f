"""A job's own budget stops only that job: the run's other jobs go on to the end.

Real `relaybatch run` (no Prefect) against the embedded emulator; what the gateway billed is read
from the emulator's own ledger, per model (one model per job here).
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.connect import embedded_emulator
from relaybatch.engine import CheckpointStore

IMAGE_MODEL, CHAT_MODEL = "relay-image-2", "relay-chat-small"
COVERS_BUDGET = Decimal("0.05")
COVERS, ANSWERS = 8, 10


@pytest.fixture(autouse=True)
def without_prefect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", "")  # the run in this process, no Prefect server


def billed(model: str) -> tuple[int, Decimal]:
    """Calls and USD the emulator billed for the model so far (the emulator is process-wide)."""
    charges = [c for c in embedded_emulator().state.emulator.ledger if c.model == model]
    return len(charges), sum((c.usd for c in charges), Decimal(0))


def write_manifest(folder: Path) -> Path:
    """The budgeted job first, so a refusal that stopped the whole run would leave every answer unsent."""
    jobs = [
        {
            "name": "covers",
            "kind": "image",
            "model": IMAGE_MODEL,
            "budget_usd": str(COVERS_BUDGET),
            "request": {"size": "1024x1024", "quality": "low"},
            "prompt": "cover {n}: a lighthouse at dusk",
            "items": [{"id": f"i{n}", "n": n} for n in range(COVERS)],
        },
        {
            "name": "answers",
            "kind": "chat",
            "model": CHAT_MODEL,
            "request": {"max_tokens": 16},
            "prompt": "Question {n}: name a river.",
            "items": [{"id": f"c{n}", "n": n} for n in range(ANSWERS)],
        },
    ]
    path = folder / "mixed.yaml"
    manifest = {"run": {"name": "mixed", "concurrency": 2}, "jobs": jobs}
    path.write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    return path


def run(manifest: Path, runs: Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["run", str(manifest), "--runs-dir", str(runs)], terminal_width=400)
    return result.exit_code, result.output


def counts(runs: Path) -> dict[str, dict[str, int]]:
    with CheckpointStore.open_read_only(runs / "mixed" / "checkpoint.sqlite") as store:
        return store.count_by_job_and_state()


def test_a_job_budget_stops_only_its_job_and_a_resume_keeps_it_stopped(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    manifest = write_manifest(tmp_path)
    images_before, images_usd_before = billed(IMAGE_MODEL)
    chats_before, _ = billed(CHAT_MODEL)

    code, output = run(manifest, runs)

    assert code == 1, output
    per_job = counts(runs)
    assert per_job["answers"] == {"done": ANSWERS}  # the other job went on to the end
    covers_done = per_job["covers"].get("done", 0)
    assert 0 < covers_done < COVERS, per_job
    assert per_job["covers"] == {"done": covers_done, "pending": COVERS - covers_done}
    images, images_usd = billed(IMAGE_MODEL)
    assert images - images_before == covers_done
    assert images_usd - images_usd_before <= COVERS_BUDGET
    assert billed(CHAT_MODEL)[0] - chats_before == ANSWERS
    flat = " ".join(output.split())
    assert f"job covers stopped with {COVERS - covers_done} items pending" in flat
    assert f"job covers budget of {COVERS_BUDGET} USD" in flat and "resume with:" in flat

    status = CliRunner().invoke(app, ["status", "mixed", "--runs-dir", str(runs)], terminal_width=400)
    assert "job covers stopped" in " ".join(status.output.split())

    # Refused while its calls were in flight, the job waited for them to settle (each below its
    # worst case) and went on: it stopped only once the next call could not fit at all.
    assert f"job covers budget of {COVERS_BUDGET} USD reached" in flat, flat
    assert "held for calls in flight" not in flat

    code, output = run(manifest, runs)  # the resume: the job's budget still holds, nothing is sent

    assert code == 1, output
    assert "job covers stopped" in " ".join(output.split())
    assert counts(runs) == per_job
    assert billed(IMAGE_MODEL) == (images, images_usd)  # no cover resent, none past the budget
    assert billed(CHAT_MODEL)[0] - chats_before == ANSWERS  # no answer resent
