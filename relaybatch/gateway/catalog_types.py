"""The model catalog and pricing answers. Prices stay decimal strings until read as Decimal."""

from __future__ import annotations

from decimal import Decimal

from pydantic import Field

from relaybatch.gateway.wire import WireModel


class TextPrices(WireModel):
    prompt: Decimal | None = None
    completion: Decimal | None = None
    internal_reasoning: Decimal | None = None


class CachePrices(WireModel):
    read: Decimal | None = None
    write: Decimal | None = None
    write_1h: Decimal | None = None


class MultimodalPrices(WireModel):
    input_image: Decimal | None = None
    output_image: Decimal | None = None


class TierPrices(WireModel):
    text: TextPrices | None = None
    cache: CachePrices | None = None


class Tiers(WireModel):
    over_200k: TierPrices | None = None


class GenerationPrices(WireModel):
    """``image.per_image``, ``audio.per_second``, ``video.per_second`` / ``per_second_with_audio``."""

    image: dict[str, Decimal] | None = None
    audio: dict[str, Decimal] | None = None
    video: dict[str, Decimal] | None = None


class Pricing(WireModel):
    kind: str
    text: TextPrices | None = None
    cache: CachePrices | None = None
    multimodal: MultimodalPrices | None = None
    tiers: Tiers | None = None
    generation: GenerationPrices | None = None


class ModelEntry(WireModel):
    id: str
    display_name: str | None = None
    type_target: str | None = None
    created_at: str | None = None
    pricing: Pricing | None = None  # some descriptions show it; the catalog is specified without


class ModelList(WireModel):
    object: str = "list"
    data: list[ModelEntry] = Field(default_factory=list)
    total: int | None = None


class PricedModel(WireModel):
    id: str
    display_name: str | None = None
    type_target: str | None = None
    provider: str | None = None
    pricing: Pricing


class PricingResponse(WireModel):
    object: str = "pricing"
    data: PricedModel
