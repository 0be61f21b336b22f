"""Items of every kind the fast emulator accepts, for engine tests."""

from __future__ import annotations

from typing import Any

from relaybatch.manifests import Item


def item(kind: str, request: dict[str, Any], item_id: str, job: str = "job") -> Item:
    return Item.build(item_id=item_id, job=job, kind=kind, request=request, carry={"id": item_id})  # type: ignore[arg-type]


def chat(n: int, model: str = "relay-chat-small", job: str = "job") -> Item:
    request = {"model": model, "messages": [{"role": "user", "content": f"question {n}"}], "max_tokens": 16}
    return item("chat", request, f"chat-{n}", job)


def video(n: int, prompt: str = "a lighthouse at dusk") -> Item:
    request = {"model": "relay-video-2", "prompt": f"{prompt} {n}", "seconds": "4", "size": "1280x720"}
    return item("video", request, f"video-{n}")


def video_v1(n: int, prompt: str = "a river delta") -> Item:
    return item("video_v1", {"model": "relay-video-v1", "prompt": f"{prompt} {n}"}, f"v1-{n}")


def every_kind() -> list[Item]:
    """One item of each of the nine kinds."""
    return [
        chat(1),
        item("responses", {"model": "relay-chat-small", "input": "Explain WAL."}, "responses-1"),
        item(
            "messages",
            {
                "model": "relay-claude-haiku",
                "max_tokens": 32,
                "messages": [{"role": "user", "content": "Hi"}],
            },
            "messages-1",
        ),
        item(
            "generate_content",
            {"model": "relay-gemini-flash", "contents": [{"role": "user", "parts": [{"text": "A fact?"}]}]},
            "gc-1",
        ),
        item("image", {"model": "relay-image-2", "prompt": "a red square", "size": "1024x1024"}, "image-1"),
        video(1),
        video_v1(1),
        item(
            "judgment",
            {
                "model": "relay-judge-1",
                "state": "The parcel never arrived and nobody answers.",
                "questions": {
                    "complaint": {"type": "noul", "instructions": "Is this a complaint?"},
                    "topic": {
                        "type": "choice",
                        "instructions": "Topic?",
                        "criteria": {"billing": "money", "delivery": "shipping"},
                    },
                    "anger": {"type": "score", "instructions": "How angry?", "criteria": ["calm", "angry"]},
                },
            },
            "judgment-1",
        ),
        item("web_search", {"route": "search", "q": "river restoration"}, "search-1"),
    ]
