"""One attempt budget per item per execution: the engine retries, the client does not repeat it.

Before, the client's five attempts and the engine's five multiplied to 25 sends of one item
against a steady 503. The clients here keep their own default of five attempts on purpose.
"""

from __future__ import annotations

from engine_fakes import ClientFactory
from engine_items import chat, video
from starlette.applications import Starlette
from test_transitions import faults, path_of

from relaybatch.emulator.config import FaultRule
from relaybatch.engine import CheckpointStore, EngineSettings, PollSettings, execute
from relaybatch.gateway import RetryPolicy

FAST_POLICY = RetryPolicy(base_delay=0.001, max_delay=0.01)
SETTINGS = EngineSettings(concurrency=4, poll=PollSettings(initial_seconds=0.02, max_seconds=0.05))


def sends(app: Starlette, path: str) -> int:
    counts = app.state.emulator.requests.counts
    return sum(count for (method, route, _), count in counts.items() if method == "POST" and route == path)


async def test_a_steady_503_gets_exactly_the_budget_of_sends(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    faults(fast_app, FaultRule(fault="status=503", every=1, paths=["/v1/chat"]))
    store.add_items([chat(1)])

    await execute(store, make_client(retry=FAST_POLICY), settings=SETTINGS)

    assert sends(fast_app, "/v1/chat/completions") == FAST_POLICY.max_attempts == 5
    row = store.item(chat(1).key)
    assert row["state"] == "failed" and row["retryable"] == 1 and row["attempts"] == 5
    assert "gave up after 5 attempts" in row["last_error"]
    assert path_of(store, chat(1).key).count("sending") == 5


async def test_the_budget_is_the_retry_setting_whoever_sets_it(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    faults(fast_app, FaultRule(fault="status=529", every=1, paths=["/v1/chat"]))
    store.add_items([chat(1), chat(2)])
    settings = EngineSettings(
        concurrency=4, retry=RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.01)
    )

    # The client's own policy (8 attempts) is not used for the items: the engine's setting wins.
    await execute(store, make_client(retry=RetryPolicy(max_attempts=8, base_delay=0.001)), settings=settings)

    assert sends(fast_app, "/v1/chat/completions") == 2 * 3


async def test_a_billed_create_answered_503_is_sent_once_and_left_uncertain(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    """A 5xx to a video create may follow a charge: neither layer repeats it."""
    faults(fast_app, FaultRule(fault="status=503", every=1, paths=["/v2/videos"]))
    store.add_items([video(1)])

    await execute(store, make_client(retry=FAST_POLICY), settings=SETTINGS)

    assert sends(fast_app, "/v2/videos") == 1
    assert store.item(video(1).key)["state"] == "uncertain"


async def test_the_callers_client_keeps_its_own_policy(make_client: ClientFactory) -> None:
    client = make_client(retry=FAST_POLICY)
    view = client.with_retry(RetryPolicy(max_attempts=1))
    assert client.retry_policy.max_attempts == 5 and view.retry_policy.max_attempts == 1
