"""The YAML manifest's shape: run settings and jobs, as pydantic models."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

from relaybatch.manifests.items import Kind
from relaybatch.manifests.limits import MAX_BUDGET_USD
from relaybatch.manifests.wording import FieldRule, describe

UncertainPolicy = Literal["report", "resend"]


def _decimal_from_yaml(value: Any) -> Any:
    # YAML reads 2.50 as a float; going through its shortest text keeps 2.50 exact, not 2.4999...
    return str(value) if isinstance(value, float) else value


class VideoSpec(BaseModel):
    """A video job's render settings (docs/manifests.md, "Long video jobs"; relaybatch.engine.poll_plan)."""

    model_config = ConfigDict(extra="forbid")

    expected_render_seconds: float | None = Field(
        default=None,
        gt=0,
        le=86_400,
        description="how long a render should take (default: 10 + 10 x seconds)",
    )
    render_deadline_seconds: float | None = Field(
        default=None,
        gt=0,
        le=7 * 86_400,
        description="past this a render is stuck (default: 8 x expected, >= 900)",
    )
    on_deadline: Literal["keep", "cancel"] = Field(
        default="keep", description="a stuck render: keep polling it slowly, or cancel it at the gateway"
    )
    max_in_flight: int | None = Field(
        default=None, ge=1, le=100_000, description="this job's renders created and not finished, at most"
    )


class RunSettings(BaseModel):
    """Settings of the whole run; the engine reads them from `Manifest.settings`."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$", description="default: file stem")
    budget_usd: Decimal | None = Field(
        default=None, gt=0, le=MAX_BUDGET_USD, description="stop new billed work past this"
    )
    budget_per_execution_usd: Decimal | None = Field(
        default=None, gt=0, le=MAX_BUDGET_USD, description="at most this per execution (a CLI run, a night)"
    )
    budget_per_day_usd: Decimal | None = Field(
        default=None, gt=0, le=MAX_BUDGET_USD, description="at most this per calendar day (budget_timezone)"
    )
    budget_per_week_usd: Decimal | None = Field(
        default=None, gt=0, le=MAX_BUDGET_USD, description="at most this per calendar week, from Monday"
    )
    budget_per_month_usd: Decimal | None = Field(
        default=None, gt=0, le=MAX_BUDGET_USD, description="at most this per calendar month"
    )
    budget_timezone: str = Field(
        default="UTC", description="IANA time zone of the day, week and month budgets, e.g. Europe/Paris"
    )
    concurrency: int = Field(default=16, ge=1, le=1024)
    rate_limit_rpm: int | None = Field(
        default=None, gt=0, description="a known requests-per-minute limit for this process's limiter"
    )
    uncertain: UncertainPolicy = Field(
        default="report", description="items sent with no answer recorded: report them, or resend"
    )
    reuse: Literal["all"] | list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]] | None = Field(
        default=None,
        description="take other runs' done answers to the same requests instead of sending: "
        "all (every run under the runs folder) or a list of run names",
    )
    max_in_flight: dict[str, PositiveInt] = Field(
        default_factory=dict,
        description="per model ID: its renders created and not finished, at most (a provider's cap)",
    )

    _decimal = field_validator(
        "budget_usd",
        "budget_per_execution_usd",
        "budget_per_day_usd",
        "budget_per_week_usd",
        "budget_per_month_usd",
        mode="before",
    )(_decimal_from_yaml)

    @field_validator("budget_timezone")
    @classmethod
    def _a_time_zone(cls, name: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a path
            raise ValueError(
                f"{describe(name)} is not a time zone; use an IANA name such as UTC or Europe/Paris"
            ) from None
        return name

    def period_budgets(self) -> dict[str, Decimal]:
        """Each period's budget that is set: execution, day, week, month."""
        values = {
            "execution": self.budget_per_execution_usd,
            "day": self.budget_per_day_usd,
            "week": self.budget_per_week_usd,
            "month": self.budget_per_month_usd,
        }
        return {period: usd for period, usd in values.items() if usd is not None}

    @field_validator("name")
    @classmethod
    def _a_folder_name(cls, name: str | None) -> str | None:
        if name in (".", ".."):  # the pattern allows dots: these two would be the runs folder or its parent
            raise ValueError(f"'{name}' is not a folder name; use letters, digits, . _ -")
        return name


class JobSpec(BaseModel):
    """One job: a kind, a model, request defaults and the rows that fill its templates."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    kind: Kind
    model: str | None = Field(default=None, min_length=1)
    request: dict[str, Any] = Field(
        default_factory=dict, description="request defaults; strings are templates"
    )
    prompt: str | None = Field(default=None, description="template of the user text / prompt / query")
    system: str | None = Field(default=None, description="template of the system instruction")
    image: str | list[str] | None = Field(default=None, description="column(s) holding image paths or base64")
    items: list[dict[str, Any]] | None = None
    data: str | None = Field(default=None, description="CSV, JSONL or Parquet file, relative to the manifest")
    id: str | None = Field(default=None, description="template of the item id; default: the id column or row")
    carry: list[str] = Field(default_factory=list, description="input columns copied to the results")
    via: Literal["native", "converter"] = Field(
        default="native",
        description="converter: call the model through the kind's converter base (a model of another family)",
    )
    budget_usd: Decimal | None = Field(default=None, gt=0, le=MAX_BUDGET_USD)
    output_schema: dict[str, Any] | str | None = Field(
        default=None,
        description="the answer's JSON Schema: inline, a .json file beside the manifest, or module:Class",
    )
    noul_threshold: float = Field(
        default=0.5, gt=0, lt=1, description="judgment: a noul answer is true when P(true) >= this"
    )
    max_reasks: int = Field(
        default=2, ge=0, le=10, description="times an answer that does not fit output_schema is asked again"
    )
    provider: str | None = Field(
        default=None,
        min_length=1,
        description="pricing provider, for a model whose providers publish different prices (409)",
    )
    video: VideoSpec | None = Field(default=None, description="render settings of a video job")

    _decimal = field_validator("budget_usd", mode="before")(_decimal_from_yaml)

    @model_validator(mode="after")
    def _one_source_and_a_model(self) -> JobSpec:
        if self.items is not None and self.data is not None:
            raise FieldRule(
                "data", "is given with items too, and a job has one source of rows; keep items or data"
            )
        if self.items is None and self.data is None:
            raise ValueError(
                "has no rows; give data (a CSV, JSONL or Parquet file, e.g. data: rows.csv) "
                "or items (inline rows)"
            )
        if self.model is None and self.kind != "web_search":
            raise FieldRule(
                "model",
                f"is required for kind {self.kind}; "
                "name a model ID from GET /v1/models (e.g. model: relay-chat-small)",
            )
        return self

    @property
    def image_columns(self) -> list[str]:
        if self.image is None:
            return []
        return [self.image] if isinstance(self.image, str) else list(self.image)
