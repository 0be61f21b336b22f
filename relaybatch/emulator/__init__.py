"""The local Model Relay Gateway emulator: an ASGI app, served by uvicorn or used in-process."""

from relaybatch.emulator.app import EmulatorState, create_app
from relaybatch.emulator.config import EmulatorConfig, load_config

__all__ = ["EmulatorConfig", "EmulatorState", "create_app", "load_config"]
