"""The gateway client: typed requests and responses for every route, one error tree, one retry policy."""

from relaybatch.gateway.auth import AuthStyle, auth_headers
from relaybatch.gateway.catalog_types import ModelEntry, ModelList, Pricing, PricingResponse
from relaybatch.gateway.chat_types import ChatCompletion, ChatCompletionRequest
from relaybatch.gateway.client import GatewayClient
from relaybatch.gateway.errors import (
    APIStatusError,
    AuthenticationFailed,
    BadRequest,
    BrokenResponse,
    Conflict,
    ConnectFailed,
    GatewayError,
    InsufficientBalance,
    InvalidRequest,
    NotFound,
    OutcomeUnknown,
    Overloaded,
    PermissionDenied,
    RateLimited,
    ServerError,
    StalledConnection,
    StreamError,
    TransportError,
    UnexpectedResponse,
)
from relaybatch.gateway.generate_content_types import GenerateContentRequest, GenerateContentResponse
from relaybatch.gateway.judgment_types import TypedJudgment, TypedJudgmentRequest
from relaybatch.gateway.media import (
    MediaBytes,
    MediaFile,
    decode_base64_media,
    images_from_result,
    inline_media,
)
from relaybatch.gateway.media_types import (
    TASK_TERMINAL_STATUSES,
    VIDEO_TERMINAL_STATUSES,
    ImageGenerationRequest,
    ImagesResponse,
    Task,
    TaskCreated,
    Video,
    VideoCreateRequest,
    VideoDeleted,
    VideoV1CreateRequest,
)
from relaybatch.gateway.messages_types import Message, MessagesRequest
from relaybatch.gateway.responses_types import Response, ResponsesRequest
from relaybatch.gateway.retry import CallKind, RetryPolicy
from relaybatch.gateway.routes import RouteSettings, WebSearchRoute
from relaybatch.gateway.search_types import ReaderResult, SearchResult
from relaybatch.gateway.timeouts import ClientTimeouts
from relaybatch.gateway.transport import aiohttp_transport

__all__ = [
    "TASK_TERMINAL_STATUSES",
    "VIDEO_TERMINAL_STATUSES",
    "APIStatusError",
    "AuthStyle",
    "AuthenticationFailed",
    "BadRequest",
    "BrokenResponse",
    "CallKind",
    "ChatCompletion",
    "ChatCompletionRequest",
    "ClientTimeouts",
    "Conflict",
    "ConnectFailed",
    "GatewayClient",
    "GatewayError",
    "GenerateContentRequest",
    "GenerateContentResponse",
    "ImageGenerationRequest",
    "ImagesResponse",
    "InsufficientBalance",
    "InvalidRequest",
    "MediaBytes",
    "MediaFile",
    "Message",
    "MessagesRequest",
    "ModelEntry",
    "ModelList",
    "NotFound",
    "OutcomeUnknown",
    "Overloaded",
    "PermissionDenied",
    "Pricing",
    "PricingResponse",
    "RateLimited",
    "ReaderResult",
    "Response",
    "ResponsesRequest",
    "RetryPolicy",
    "RouteSettings",
    "SearchResult",
    "ServerError",
    "StalledConnection",
    "StreamError",
    "Task",
    "TaskCreated",
    "TransportError",
    "TypedJudgment",
    "TypedJudgmentRequest",
    "UnexpectedResponse",
    "Video",
    "VideoCreateRequest",
    "VideoDeleted",
    "VideoV1CreateRequest",
    "WebSearchRoute",
    "aiohttp_transport",
    "auth_headers",
    "decode_base64_media",
    "images_from_result",
    "inline_media",
]
