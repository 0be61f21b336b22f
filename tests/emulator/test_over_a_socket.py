"""The emulator served by uvicorn on a free loopback port, started and stopped by the test."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
import uvicorn
from emulator_http import bearer, user_chat

from relaybatch.emulator import EmulatorConfig, EmulatorState, create_app
from tests.ports import free_port


@pytest.fixture
def served(shipped_config: EmulatorConfig) -> Iterator[tuple[str, EmulatorState]]:
    app = create_app(shipped_config)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", app.state.emulator
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def test_chat_and_faults_over_a_real_socket(served: tuple[str, EmulatorState]) -> None:
    base, state = served
    with httpx.Client(base_url=base) as client:
        ok = client.post("/v1/chat/completions", json=user_chat(), headers=bearer())
        limited = client.get("/v1/models", headers=bearer("rb-limited-key"))
        with pytest.raises(httpx.TransportError):
            client.post(
                "/v1/chat/completions",
                json=user_chat(),
                headers={**bearer(), "x-emulator-fault": "drop=after"},
            )
        with pytest.raises(httpx.TransportError):
            client.post(
                "/v1/chat/completions",
                json=user_chat(),
                headers={**bearer(), "x-emulator-fault": "drop=before"},
            )
        after = client.post("/v1/chat/completions", json=user_chat(), headers=bearer())

    assert ok.status_code == 200
    assert limited.headers["x-ratelimit-limit-requests"] == "6"
    assert after.status_code == 200
    assert len(state.ledger) == 3  # the first call, the dropped-after call, the last call


def test_openai_sdk_over_a_real_socket(served: tuple[str, EmulatorState]) -> None:
    base, _ = served
    with openai.OpenAI(api_key="rb-demo-key", base_url=base + "/v1", max_retries=0) as client:
        completion = client.chat.completions.create(
            model="relay-chat-small", messages=[{"role": "user", "content": "over the wire"}]
        )

    assert completion.choices[0].message.content
