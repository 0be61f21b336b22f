"""Items with `via: converter` reach models of another family through the converter base."""

from __future__ import annotations

from engine_fakes import FAST, ClientFactory
from starlette.applications import Starlette

from relaybatch.engine import CheckpointStore, execute
from relaybatch.manifests import Item

TURN = [{"role": "user", "content": "Name a river."}]


def _item(item_id: str, kind: str, request: dict[str, object]) -> Item:
    return Item.build(item_id=item_id, job="cross", kind=kind, request=request)  # type: ignore[arg-type]


async def test_each_text_kind_calls_another_family_through_its_converter(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    store.add_items(
        [
            _item("chat", "chat", {"model": "relay-claude-haiku", "messages": TURN, "via": "converter"}),
            _item("resp", "responses", {"model": "relay-gemini-flash", "input": "hi", "via": "converter"}),
            _item(
                "msgs",
                "messages",
                {"model": "relay-chat-small", "messages": TURN, "max_tokens": 16, "via": "converter"},
            ),
            _item(
                "gen",
                "generate_content",
                {
                    "model": "relay-claude-haiku",
                    "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                    "via": "converter",
                },
            ),
            # The same call on the native route is refused by the gateway: the converter is what works.
            _item("native", "chat", {"model": "relay-claude-haiku", "messages": TURN}),
        ]
    )

    await execute(store, make_client(), settings=FAST)

    rows = {row["item_id"]: row for row in store.iter_items()}
    assert {item_id: row["state"] for item_id, row in rows.items()} == {
        "chat": "done",
        "resp": "done",
        "msgs": "done",
        "gen": "done",
        "native": "failed",
    }
    assert rows["chat"]["result"]["output_text"] and rows["gen"]["result"]["output_text"]
    assert "converter" in rows["native"]["last_error"]
