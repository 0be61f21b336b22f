"""Which price a model has: the provider channels behind one model id and the interface's choice rules.

The pricing route and the billing ledger both ask here, so a charge always uses a price the
pricing route returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from relaybatch.emulator.config import ModelConfig, ProviderConfig


@dataclass(frozen=True)
class PriceChoice:
    pricing: dict[str, Any]
    # Set when the request identified or selected a single provider (the route then returns it).
    provider: str | None


@dataclass(frozen=True)
class PriceProblem:
    status: int
    message: str


def choose_price(
    model: ModelConfig, provider: str | None = None, mapping_id: int | None = None
) -> PriceChoice | PriceProblem:
    """The interface's pricing rules: one provider; same prices agree; different prices need a choice."""
    channels = model.providers
    if not channels:
        return PriceProblem(404, f"no pricing is published for model '{model.id}'")
    if mapping_id is not None:
        channels = [channel for channel in channels if channel.mapping_id == mapping_id]
        if not channels:
            return PriceProblem(404, f"model '{model.id}' has no platform mapping {mapping_id}")
    if provider is not None:
        channels = [channel for channel in channels if channel.name == provider]
        if not channels:
            return PriceProblem(404, f"model '{model.id}' has no provider '{provider}'")
    if len(channels) == 1:
        return PriceChoice(channels[0].pricing, channels[0].name)
    if all(channel.pricing == channels[0].pricing for channel in channels):
        return PriceChoice(channels[0].pricing, None)
    return PriceProblem(
        409,
        f"model '{model.id}' has providers with different prices "
        f"({', '.join(channel.name for channel in channels)}); pass 'provider' to choose one",
    )


def billing_channel(model: ModelConfig) -> ProviderConfig | None:
    """The channel a call is billed on: the model's first provider (its default route upstream).

    When a model's providers disagree on price the pricing route answers 409 without a provider;
    the gateway still routes calls somewhere, and the emulator always routes to the first one.
    """
    return model.providers[0] if model.providers else None
