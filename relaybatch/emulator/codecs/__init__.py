"""Byte formats the emulator writes, apart from any route: JSON, server-sent events, images, MP4.

Each is a module of pure functions (plus the Starlette responses that carry them); routes import
the one they need, e.g. ``from relaybatch.emulator.codecs.mp4 import build_mp4``.
"""

from relaybatch.emulator.codecs import fast_json, images, mp4, sse

__all__ = ["fast_json", "images", "mp4", "sse"]
