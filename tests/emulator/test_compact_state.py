"""The emulator's packed ledger and request counts read back exactly what was recorded.

A served emulator keeps every charge and a count per distinct request body for its lifetime, so
both are packed (relaybatch.emulator.state.Ledger, RequestCounts). These tests hold them to what
the plain list of Charge objects and the Counter they replace gave: same values and types, same
order, and the admin API's answers byte for byte.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from decimal import Decimal
from typing import Any

import httpx
import pytest
from emulator_http import anthropic, bearer, user_chat, user_messages

from relaybatch.emulator import EmulatorState
from relaybatch.emulator.clock import rfc3339
from relaybatch.emulator.codecs.fast_json import JSONResponse
from relaybatch.emulator.state import Charge, Ledger, RequestCounts, RequestRecord


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


CHARGES = [
    Charge(
        "demo", "/v1/chat/completions", "relay-chat-small", Decimal("0.000123"), {"a": 1}, digest("1"), 1.5
    ),
    # Trailing zeros, exponents and signs are part of a Decimal's value as the admin API prints it.
    Charge("demo", "/v1/chat/completions", "relay-chat-small", Decimal("1.50"), {}, digest("2"), 2.25),
    Charge(
        "other",
        "/v2/videos",
        "relay-video",
        Decimal("0E-8"),
        {"seconds": 4.5, "size": "720x1280"},
        digest("3"),
        3.0,
    ),
    Charge(
        "demo", "/v1/x", "m", Decimal("-2.5E+3"), {"t": "naïve ☃", "n": None, "ok": True}, digest("4"), 1e9
    ),
    Charge(
        "demo",
        "/v1/images/generations",
        "relay-image",
        Decimal("0.04"),
        {"input_tokens": 3, "input_tokens_details": {"text_tokens": 3, "image_tokens": 0}, "list": [1, 2.0]},
        digest("5"),
        0.1,
    ),
    # Not JSON-native (a tuple would come back a list): kept as it was given.
    Charge("demo", "/v1/x", "m", Decimal("7"), {"pair": (1, 2), "big": 2**70}, digest("6"), 4.0),
]


def test_the_ledger_gives_back_every_charge_exactly() -> None:
    ledger = Ledger()
    assert ledger == [] and len(ledger) == 0 and list(ledger) == []
    for charge in CHARGES:
        ledger.append(charge)

    assert len(ledger) == len(CHARGES)
    assert list(ledger) == CHARGES and ledger == CHARGES and ledger != CHARGES[:-1]
    assert [str(c.usd) for c in ledger] == [str(c.usd) for c in CHARGES]
    assert all(type(c.usd) is Decimal for c in ledger)
    assert [c.as_json() for c in ledger] == [c.as_json() for c in CHARGES]
    assert ledger[0] == CHARGES[0] and ledger[-1] == CHARGES[-1] and ledger[1:3] == CHARGES[1:3]
    assert ledger[-1].usage["pair"] == (1, 2)
    with pytest.raises(IndexError):
        ledger[len(CHARGES)]


def test_request_counts_read_like_the_counter_they_replace() -> None:
    rng = random.Random(7)
    pairs = [("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("GET", "/v2/videos/v_1")]
    bodies = [digest(str(n)) for n in range(30)]
    # Hashes that start with zeros must keep their leading zeros.
    bodies += ["0" * 64, "00ff" + "0" * 60]
    counts, reference = RequestCounts(), Counter[tuple[str, str, str]]()
    for _ in range(500):
        key = (*rng.choice(pairs), rng.choice(bodies))
        counts.add(*key)
        reference[key] += 1

    assert list(counts) == list(reference) and list(counts.items()) == list(reference.items())
    assert dict(counts) == dict(reference) and Counter(counts) == reference
    assert len(counts) == len(reference) and len(counts.items()) == len(reference)
    assert sum(counts.values()) == 500
    for method, path in pairs:
        assert counts.total(method, path) == sum(
            n for (m, p, _), n in reference.items() if (m, p) == (method, path)
        )
    seen = next(iter(reference))
    assert counts[seen] == reference[seen] and seen in counts and counts.get(seen) == reference[seen]
    for missing in [
        ("POST", "/nowhere", bodies[0]),
        ("GET", "/v1/models", "f" * 64),
        ("GET", "/v1/models", "xyz"),
    ]:
        assert counts[missing] == 0 and missing not in counts and counts.get(missing, -1) == -1
    assert ("POST",) not in counts


async def test_admin_answers_are_byte_for_byte_what_the_plain_records_gave(
    http: httpx.AsyncClient, state: EmulatorState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger and request log as the plain list and Counter rendered them, from what the
    routes handed over, against what the admin API answers now."""
    given: list[Charge] = []
    logged: Counter[tuple[str, str, str]] = Counter()
    charge, record = state.charge, state.record_request

    def spy_charge(
        account: Any, route: str, model: str, usd: Decimal, usage: Any, body_hash: str, **kw: Any
    ) -> Any:
        refused = charge(account, route, model, usd, usage, body_hash, **kw)
        if refused is None:
            given.append(Charge(account.name, route, model, usd, usage, body_hash, state.clock.now()))
        return refused

    def spy_record(method: str, path: str, body_hash: str, account: str | None) -> RequestRecord:
        logged[(method, path, body_hash)] += 1
        return record(method, path, body_hash, account)

    monkeypatch.setattr(state, "charge", spy_charge)
    monkeypatch.setattr(state, "record_request", spy_record)
    for text in ["one", "two", "one", "ünïcode ☃"]:
        await http.post("/v1/chat/completions", json=user_chat(text=text), headers=bearer())
    await http.post("/anthropic/v1/messages", json=user_messages(), headers=anthropic())
    await http.post("/v1/chat/completions", json=user_chat(text="x"), headers=bearer("rb-standard-key"))
    await http.get("/v1/models", headers=bearer())
    assert len(given) == 6 and sum(logged.values()) == 7

    for query, wanted in [("", given), ("?account=demo", [c for c in given if c.account == "demo"])]:
        charges = [c.as_json() for c in wanted]
        total = sum((c.usd for c in wanted), Decimal(0))
        expected = JSONResponse({"charges": charges, "total_usd": str(total)}).body
        assert (await http.get("/_emulator/ledger" + query)).content == expected

    answer = await http.get("/_emulator/requests")
    distinct = [{"method": m, "path": p, "body_hash": h, "count": n} for (m, p, h), n in logged.items()]
    recent = [
        {
            "method": r.method,
            "path": r.path,
            "body_hash": r.body_hash,
            "account": r.account,
            "time": rfc3339(r.time),
            "at": r.time,
            "status": r.status,
        }
        for r in state.requests.recent
    ]
    assert answer.content == JSONResponse({"total": 7, "distinct": distinct, "recent": recent}).body


def test_request_counts_stay_exact_as_the_table_grows() -> None:
    """Thousands of entries (the table grows several times), with every bodiless GET sharing one
    digest across thousands of paths, and repeats of early entries after each growth."""
    counts, reference = RequestCounts(), Counter[tuple[str, str, str]]()
    empty = hashlib.sha256(b"").hexdigest()
    for n in range(6000):
        for key in [("GET", f"/v2/videos/v_{n}", empty), ("POST", "/v1/chat/completions", digest(str(n)))]:
            counts.add(*key)
            reference[key] += 1
        if n % 997 == 0:
            early = ("GET", "/v2/videos/v_0", empty)
            counts.add(*early)
            reference[early] += 1

    assert list(counts.items()) == list(reference.items()) and len(counts) == 12_000
    assert all(counts[key] == n for key, n in reference.items())
    assert counts[("GET", "/v2/videos/v_0", empty)] == 8
    assert (
        counts.total("GET", "/v2/videos/v_5999") == 1 and counts.total("POST", "/v1/chat/completions") == 6000
    )
