"""LiteLLM's batch helper for the peer benchmark; runs in the peers' own virtualenv.

``litellm.batch_completion`` is LiteLLM's documented way to send many chat requests from the
SDK: a thread pool (``max_workers``) over ``completion()``. It has no rate limiter, so at an
enforced limit it relies on retries alone (``num_retries``, LiteLLM's own retry wrapper with
backoff). It is configured with the same in-flight cap and retry count as every tool, the
``openai/`` provider prefix with ``api_base`` = the emulator, and the local price map
(``LITELLM_LOCAL_MODEL_COST_MAP``, set by the caller) so nothing is fetched at import.
"""

from __future__ import annotations

import json
import time

from peer_tool import load_work, tool_parser


def main() -> None:
    parser = tool_parser(__doc__.splitlines()[0])
    args = parser.parse_args()

    import litellm

    rows = load_work(args.work)
    started = time.perf_counter()
    responses = litellm.batch_completion(
        model=f"openai/{rows[0]['model']}",
        messages=[[{"role": "user", "content": row["prompt"]}] for row in rows],
        max_tokens=rows[0]["max_tokens"],
        api_base=args.base_url,
        api_key=args.api_key,
        max_workers=args.concurrency,
        num_retries=args.max_retries,
    )
    seconds = time.perf_counter() - started
    completed = sum(1 for response in responses if not isinstance(response, BaseException))
    failures = [response for response in responses if isinstance(response, BaseException)]
    result = {"completed": completed, "failed": len(failures), "seconds": seconds, "rate_limited": None}
    if failures:
        result["first_error"] = f"{type(failures[0]).__name__}: {failures[0]}"[:300]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
