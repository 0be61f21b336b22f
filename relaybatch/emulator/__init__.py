"""The local Model Relay Gateway emulator: an ASGI app, served by uvicorn or used in-process."""

from relaybatch.emulator.app import create_app
from relaybatch.emulator.config import EmulatorConfig, load_config
from relaybatch.emulator.state import EmulatorState

__all__ = ["EmulatorConfig", "EmulatorState", "create_app", "load_config"]
