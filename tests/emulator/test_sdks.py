"""The official SDKs, configured as public-facts.md shows, complete calls against the emulator
(in-process through their http-client options), streaming and not."""

from __future__ import annotations

import anthropic
import httpx
import httpx2
import openai
from google import genai
from starlette.applications import Starlette

from relaybatch.emulator import EmulatorState

KEY = "rb-demo-key"
BASE = "http://emulator.test"


def openai_client(app: Starlette, base_path: str = "/v1") -> openai.AsyncOpenAI:
    # openai 3.x, like anthropic 2.x, runs on httpx2.
    http_client = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=BASE)
    return openai.AsyncOpenAI(api_key=KEY, base_url=BASE + base_path, http_client=http_client, max_retries=0)


def anthropic_client(app: Starlette) -> anthropic.AsyncAnthropic:
    # anthropic 2.x sends Bearer and a newer version date by default; the gateway wants these.
    http_client = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=BASE)
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    return anthropic.AsyncAnthropic(
        api_key=KEY, base_url=BASE, http_client=http_client, max_retries=0, default_headers=headers
    )


def genai_client(app: Starlette) -> tuple[genai.Client, httpx.AsyncClient]:
    http_client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)
    options = {"base_url": BASE, "api_version": "v1beta", "httpx_async_client": http_client}
    return genai.Client(api_key=KEY, http_options=options), http_client  # type: ignore[arg-type]


async def test_openai_chat_completions(app: Starlette, state: EmulatorState) -> None:
    async with openai_client(app) as client:
        completion = await client.chat.completions.create(
            model="relay-chat-reasoner", messages=[{"role": "user", "content": "hello"}]
        )

    assert completion.choices[0].message.content
    assert completion.usage is not None
    assert completion.usage.completion_tokens_details is not None
    assert completion.usage.completion_tokens_details.reasoning_tokens
    assert len(state.ledger) == 1


async def test_openai_chat_completions_stream_with_usage(app: Starlette) -> None:
    text, usage = "", None
    async with openai_client(app) as client:
        stream = await client.chat.completions.create(
            model="relay-chat-small",
            messages=[{"role": "user", "content": "hello"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            usage = chunk.usage or usage

    assert text.startswith("Emulated answer from relay-chat-small")
    assert usage is not None and usage.total_tokens > 0


async def test_openai_tool_calls(app: Starlette) -> None:
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    async with openai_client(app) as client:
        completion = await client.chat.completions.create(
            model="relay-chat-small",
            messages=[{"role": "user", "content": "find"}],
            tools=[tool],  # type: ignore[list-item]
        )

    calls = completion.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "lookup"  # type: ignore[union-attr]


async def test_openai_responses_plain_and_stream(app: Starlette) -> None:
    async with openai_client(app) as client:
        response = await client.responses.create(model="relay-chat-small", input="hello")
        stream = await client.responses.create(model="relay-chat-small", input="hello", stream=True)
        events = [event async for event in stream]

    assert response.output_text.startswith("Emulated answer")
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == response.output_text


async def test_openai_sdk_through_the_chat_converter(app: Starlette) -> None:
    async with openai_client(app, "/openai/v1") as client:
        completion = await client.chat.completions.create(
            model="relay-claude-haiku", messages=[{"role": "user", "content": "hello"}]
        )

    assert completion.model == "relay-claude-haiku"


async def test_anthropic_messages_plain_and_stream(app: Starlette) -> None:
    async with anthropic_client(app) as client:
        message = await client.messages.create(
            model="relay-claude-sonnet", max_tokens=200, messages=[{"role": "user", "content": "hello"}]
        )
        async with client.messages.stream(
            model="relay-claude-sonnet", max_tokens=200, messages=[{"role": "user", "content": "hello"}]
        ) as stream:
            streamed_text = "".join([text async for text in stream.text_stream])
            final = await stream.get_final_message()

    assert message.content[0].type == "text"
    assert streamed_text == message.content[0].text
    assert final.usage.output_tokens == message.usage.output_tokens
    assert final.stop_reason == "end_turn"


async def test_genai_generate_content_plain_and_stream(app: Starlette) -> None:
    client, http_client = genai_client(app)
    async with http_client:
        response = await client.aio.models.generate_content(model="relay-gemini-pro", contents="hello")
        chunks = [
            chunk
            async for chunk in await client.aio.models.generate_content_stream(
                model="relay-gemini-pro", contents="hello"
            )
        ]

    assert response.text and response.text.startswith("Emulated answer from relay-gemini-pro")
    assert response.usage_metadata is not None and response.usage_metadata.thoughts_token_count
    assert "".join(chunk.text or "" for chunk in chunks) == response.text
    assert chunks[-1].usage_metadata is not None
