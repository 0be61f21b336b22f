"""The curator side of the peer benchmark; runs in the peers' own virtualenv, never the project's.

Curator is configured by its documented ``backend_params``: the native OpenAI backend (aiohttp)
pointed at the emulator, ``max_requests_per_minute`` = the account limit (or effectively
unlimited when there is none, since its fallback of 200 RPM would throttle it far below the
others), ``max_tokens_per_minute`` out of the way (it reserves 4096 output tokens per request
for a model it does not know), the same in-flight cap as every tool, and the same retry count.
Its cache lives in a fresh folder per run (``CURATOR_CACHE_DIR``, set by the caller), because its
cache key ignores the base URL. Prints one JSON line like the other tool scripts.
"""

from __future__ import annotations

import json
import time
from typing import Any

from peer_tool import load_work, tool_parser

UNLIMITED_RPM = 60_000_000
UNLIMITED_TPM = 10_000_000_000


def main() -> None:
    parser = tool_parser(__doc__.splitlines()[0])
    parser.add_argument("--rpm", type=int, default=None)
    args = parser.parse_args()

    from bespokelabs import curator
    from datasets import Dataset

    rows = load_work(args.work)
    model = rows[0]["model"]
    max_tokens = rows[0]["max_tokens"]

    class Prompter(curator.LLM):  # type: ignore[misc,name-defined]
        def prompt(self, row: dict[str, Any]) -> str:
            return str(row["prompt"])

        def parse(self, row: dict[str, Any], response: str) -> dict[str, Any]:
            return {"id": row["id"], "response": response}

    started = time.perf_counter()
    llm = Prompter(
        model_name=model,
        backend="openai",
        generation_params={"max_tokens": max_tokens},
        backend_params={
            "base_url": args.base_url,
            "api_key": args.api_key,
            "max_requests_per_minute": args.rpm or UNLIMITED_RPM,
            "max_tokens_per_minute": UNLIMITED_TPM,
            "max_concurrent_requests": args.concurrency,
            "max_retries": args.max_retries,
            "request_timeout": 60,
        },
    )
    dataset = Dataset.from_list([{"id": row["id"], "prompt": row["prompt"]} for row in rows])
    completed, failed = 0, len(rows)
    try:
        output = llm(dataset)
        dataset_out = getattr(output, "dataset", output)
        completed = sum(1 for response in dataset_out["response"] if response)
        failed = len(rows) - completed
    except Exception as error:  # a peer that gives up entirely still reports its wall time
        print(json.dumps({"error": f"{type(error).__name__}: {error}"[:500]}), flush=True)
    seconds = time.perf_counter() - started
    print(json.dumps({"completed": completed, "failed": failed, "seconds": seconds, "rate_limited": None}))


if __name__ == "__main__":
    main()
