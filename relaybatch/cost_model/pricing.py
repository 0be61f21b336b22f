"""Prices from `GET /v1/models/pricing`, parsed into Decimals and kept for the whole run.

The gateway's pricing object holds USD strings; token prices are USD per token. A price the
object does not give stays ``None`` here, so the cost of a call that needs it is marked
unknown rather than silently zero.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, Protocol

from relaybatch.errors import UserError

PricingKind = Literal["token", "generation", "fixed"]

# Fixed rules of the gateway's interface, not served by the pricing route (spec: typed judgment,
# web search). Kept here so every price the run uses comes from one place.
JUDGMENT_INPUT_USD_PER_TOKEN = Decimal("0.042") / Decimal(1_000_000)
WEB_SEARCH_USD_PER_REQUEST = Decimal("0.05")


class PricingError(UserError):
    """The pricing object could not be read, or the gateway could not pick one price."""


@dataclass(frozen=True)
class TextRates:
    prompt: Decimal | None = None
    completion: Decimal | None = None
    internal_reasoning: Decimal | None = None


@dataclass(frozen=True)
class CacheRates:
    read: Decimal | None = None
    write: Decimal | None = None
    write_1h: Decimal | None = None


@dataclass(frozen=True)
class ModelPrices:
    """Every unit price one (model, provider) has; ``None`` means the gateway gave none."""

    model: str
    provider: str | None = None
    kind: PricingKind = "token"
    text: TextRates = field(default_factory=TextRates)
    cache: CacheRates = field(default_factory=CacheRates)
    input_image: Decimal | None = None
    output_image: Decimal | None = None
    over_200k_text: TextRates | None = None
    over_200k_cache: CacheRates | None = None
    per_image: Decimal | None = None
    audio_per_second: Decimal | None = None
    video_per_second: Decimal | None = None
    video_per_second_with_audio: Decimal | None = None
    per_request: Decimal | None = None
    # The pricing object exactly as served, stored with the run so the prices used can be audited.
    source: Mapping[str, Any] = field(default_factory=dict, compare=False)


def judgment_prices(model: str) -> ModelPrices:
    """Typed judgment: 0.042 USD per million input tokens, output free."""
    rates = TextRates(prompt=JUDGMENT_INPUT_USD_PER_TOKEN, completion=Decimal(0))
    return ModelPrices(model=model, kind="fixed", text=rates)


def web_search_prices(route: str) -> ModelPrices:
    """Web search: 0.05 USD per successful request; failures are free."""
    return ModelPrices(model=route, kind="fixed", per_request=WEB_SEARCH_USD_PER_REQUEST)


def _price(section: Mapping[str, Any] | None, name: str, where: str) -> Decimal | None:
    if not isinstance(section, Mapping) or section.get(name) is None:
        return None
    value = section[name]
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise PricingError(f"{where}.{name}: expected a decimal string, got {value!r}")
    try:
        # str() first: a number that arrived as JSON float keeps its written digits.
        price = Decimal(str(value))
    except InvalidOperation:
        raise PricingError(f"{where}.{name}: {value!r} is not a decimal number") from None
    if not price.is_finite() or price < 0:
        raise PricingError(f"{where}.{name}: {value!r} is not a non-negative price")
    return price


def _section(parent: Mapping[str, Any] | None, name: str) -> Mapping[str, Any] | None:
    value = parent.get(name) if isinstance(parent, Mapping) else None
    return value if isinstance(value, Mapping) else None


def _text(section: Mapping[str, Any] | None, where: str) -> TextRates:
    return TextRates(
        prompt=_price(section, "prompt", where),
        completion=_price(section, "completion", where),
        internal_reasoning=_price(section, "internal_reasoning", where),
    )


def _cache(section: Mapping[str, Any] | None, where: str) -> CacheRates:
    return CacheRates(
        read=_price(section, "read", where),
        write=_price(section, "write", where),
        write_1h=_price(section, "write_1h", where),
    )


def parse_pricing(envelope: Mapping[str, Any], *, model: str | None = None) -> ModelPrices:
    """Read a `/v1/models/pricing` answer (the envelope, or its `data`) into ModelPrices."""
    data = envelope.get("data", envelope)
    if not isinstance(data, Mapping):
        raise PricingError(f"pricing for {model or '?'}: `data` is not an object")
    model_id = str(data.get("id") or model or "")
    pricing = _section(data, "pricing")
    if pricing is None:
        raise PricingError(f"pricing for {model_id}: the answer has no `pricing` object")
    where = f"pricing for {model_id}"
    kind = pricing.get("kind", "token")
    if kind not in ("token", "generation"):
        raise PricingError(f"{where}: unknown pricing kind {kind!r}")
    multimodal = _section(pricing, "multimodal")
    over = _section(_section(pricing, "tiers"), "over_200k")
    generation = _section(pricing, "generation")
    video = _section(generation, "video")
    return ModelPrices(
        model=model_id,
        provider=data.get("provider"),
        kind=kind,
        text=_text(_section(pricing, "text"), f"{where}: text"),
        cache=_cache(_section(pricing, "cache"), f"{where}: cache"),
        input_image=_price(multimodal, "input_image", f"{where}: multimodal"),
        output_image=_price(multimodal, "output_image", f"{where}: multimodal"),
        over_200k_text=_text(_section(over, "text"), f"{where}: tiers.over_200k.text") if over else None,
        over_200k_cache=(
            _cache(_section(over, "cache"), f"{where}: tiers.over_200k.cache")
            if _section(over, "cache")
            else None
        ),
        per_image=_price(_section(generation, "image"), "per_image", f"{where}: generation.image"),
        audio_per_second=_price(_section(generation, "audio"), "per_second", f"{where}: generation.audio"),
        video_per_second=_price(video, "per_second", f"{where}: generation.video"),
        video_per_second_with_audio=_price(video, "per_second_with_audio", f"{where}: generation.video"),
        # Not in the interface's table; the emulator (and possibly the gateway) prices search this way.
        per_request=_price(_section(generation, "request"), "per_request", f"{where}: generation.request"),
        source=json.loads(json.dumps(dict(envelope), default=str)),
    )


PricingFetcher = Callable[[str, str | None], Awaitable[Mapping[str, Any]]]


class PricingClient(Protocol):
    async def get_pricing(self, model: str, provider: str | None = None) -> Any: ...


async def fetch_pricing(client: PricingClient, model: str, provider: str | None) -> Mapping[str, Any]:
    """The `/v1/models/pricing` answer for a model as JSON (no charge)."""
    answer = await client.get_pricing(model, provider)
    if hasattr(answer, "model_dump"):
        dumped: Mapping[str, Any] = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
        return dumped
    return dict(answer)


def conflict_candidates(body: Any) -> list[str]:
    """Provider names a 409 answer lists, wherever the gateway put them (the shape is not shown)."""
    found: list[str] = []
    sections = [body, body.get("error")] if isinstance(body, Mapping) else []
    for section in sections:
        if not isinstance(section, Mapping):
            continue
        for name in ("candidates", "providers", "mappings", "options"):
            for entry in section.get(name) or []:
                label = entry.get("provider") or entry.get("name") if isinstance(entry, Mapping) else entry
                if label and str(label) not in found:
                    found.append(str(label))
    return found


def ambiguous_price_error(model: str, job: str | None, candidates: Iterable[str]) -> PricingError:
    names = ", ".join(candidates)
    where = f"job {job!r}" if job else "the job"
    hint = f" (candidates: {names})" if names else ""
    return PricingError(
        f"model {model!r} has several providers with different prices: set `provider` on {where}{hint}"
    )


class PriceBook:
    """Prices per (model, provider), fetched once per run; ``load`` before the run, ``get`` during it.

    Fetching up front means a 409 (ambiguous price) stops the run before anything is billed, and
    the budget can price a worst case synchronously at every submission.
    """

    def __init__(self, fetch: PricingFetcher) -> None:
        self._fetch = fetch
        self._prices: dict[tuple[str, str | None], ModelPrices] = {}
        self._missing: set[tuple[str, str | None]] = set()

    async def load(
        self, model: str, provider: str | None = None, *, job: str | None = None
    ) -> ModelPrices | None:
        """Fetch (once) and keep the prices of a model; None when the gateway publishes none."""
        key = (model, provider)
        if key in self._missing:
            return None
        if key not in self._prices:
            from relaybatch.gateway.errors import Conflict, GatewayError, NotFound

            try:
                envelope = await self._fetch(model, provider)
            except Conflict as conflict:
                candidates = conflict.candidate_providers or conflict_candidates(conflict.body)
                raise ambiguous_price_error(model, job, candidates) from None
            except NotFound:
                # No published price: calls on it are recorded with their cost marked unknown.
                self._missing.add(key)
                return None
            except GatewayError as error:
                raise PricingError(f"could not fetch the price of model {model!r}: {error}") from None
            self._prices[key] = parse_pricing(envelope, model=model)
        return self._prices[key]

    def get(self, model: str, provider: str | None = None) -> ModelPrices | None:
        return self._prices.get((model, provider))

    def is_missing(self, model: str, provider: str | None = None) -> bool:
        """True when the gateway said this model has no price (404), as opposed to not asked yet."""
        return (model, provider) in self._missing

    def put(self, prices: ModelPrices, provider: str | None) -> None:
        """Add prices already known (from the run's stored snapshot), under the provider asked for."""
        self._prices[(prices.model, provider)] = prices

    def items(self) -> list[tuple[tuple[str, str | None], ModelPrices]]:
        return sorted(self._prices.items(), key=lambda entry: (entry[0][0], entry[0][1] or ""))
