"""The benchmarks' work: numbered one-turn chat items, built one at a time (never a list of a million)."""

from __future__ import annotations

from collections.abc import Iterator

from relaybatch.manifests import Item


def chat_items(count: int, job: str, *, question: str = "Question {}?", carry: bool = True) -> Iterator[Item]:
    """``count`` chat items on the small model; ``question`` is formatted with the item's number,
    which is also its id and (with ``carry``) carried to the results as ``n``."""
    for number in range(count):
        yield Item.build(
            item_id=str(number),
            job=job,
            kind="chat",
            request={
                "model": "relay-chat-small",
                "messages": [{"role": "user", "content": question.format(number)}],
            },
            carry={"n": number} if carry else None,
        )
