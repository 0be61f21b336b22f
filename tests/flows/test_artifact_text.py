"""What the artifacts say, as text a person acts on: progress with time, rate, errors and limit;
the summary with timings, failures by reason and output paths (never file:// links)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from relaybatch.flows.progress import ProgressView
from relaybatch.flows.summary import summary_markdown

from relaybatch.run import Failure, SpendLine
from relaybatch.run.views import error_type


def test_progress_says_elapsed_rate_errors_by_type_and_the_limit() -> None:
    view = ProgressView(
        counts={"done": 70, "failed": 5, "pending": 25},
        spent=Decimal("0.0123"),
        errors={"failed: 400 invalid_request_error": 3, "failed: 404 not_found_error": 2},
        elapsed=125.0,
        finished_at_start=20,
        limit_rpm=120.0,
    )

    text = view.description()

    assert view.percent == 75.0
    assert "75 of 100 items finished (done 70, failed 5, pending 25)" in text
    assert "elapsed 2m05s" in text
    assert "rate 0.4 items/s" in text  # 55 finished in this step over 125 s
    assert "spent 0.0123 USD" in text
    assert "errors: failed: 400 invalid_request_error x3; failed: 404 not_found_error x2" in text
    assert "limit 120 requests/min" in text


def test_an_error_message_is_grouped_by_its_status_and_type() -> None:
    assert error_type("429 rate_limit_error: slow down") == "429 rate_limit_error"
    assert error_type(None) == "no reason recorded"


def test_the_summary_has_timings_failures_with_reasons_and_paths_as_text(tmp_path: Path) -> None:
    results = tmp_path / "results" / "chat.parquet"
    text = summary_markdown(
        "night",
        {"done": 8, "failed": 2},
        [SpendLine("chat", "relay-chat-small", Decimal("0.5"))],
        [results],
        ["stopped early: budget reached"],
        {"plan": 0.25, "execute": 75.5, "export": 1.0},
        [Failure("failed", "400 invalid_request_error: max_tokens | too large", 2, "chat:q7")],
    )

    assert "| execute | 1m15.5s |" in text and "| plan | 0.2 s |" in text
    assert "| failed | 400 invalid_request_error: max_tokens \\| too large | 2 | `chat:q7` |" in text
    assert f"- `{results.resolve()}`" in text and "file://" not in text
    assert "- stopped early: budget reached" in text


def test_the_summary_writes_zero_as_a_number_not_an_exponent() -> None:
    # Decimal("0.00000000") prints as 0E-8: a person reads that as an error, not as nothing.
    lines = [SpendLine("notes", "relay-chat-small", Decimal("0.00001095"), Decimal("0E-8"))]

    text = summary_markdown("nightly", {"done": 1}, lines, [], [])

    assert "E-" not in text
    assert "| notes | relay-chat-small | 0.00001095 | 0.00000000 | 0.00001095 |" in text
