"""Errors a user can act on. The CLI prints their message on one line and exits 1, no traceback."""

from __future__ import annotations


class UserError(Exception):
    """Something the user must fix (bad input, missing setting); the message says what to do."""
