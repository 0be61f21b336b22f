"""The text families: chat completions, responses, messages and generate-content, native and converter.

``routes`` holds the shared steps (auth, model lookup, synthesis, billing, JSON or stream); one
module per format reads its request and renders its answer; ``synth`` makes deterministic replies.
"""

from relaybatch.emulator.text.routes import routes

__all__ = ["routes"]
