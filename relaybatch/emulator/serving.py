"""Serving the emulator over HTTP: the listening socket, what it prints at start, who may steer it.

``relaybatch emulator serve`` binds the socket itself (so ``--port 0`` picks a free port and the
banner shows the real one), prints the address, the keys of the configured accounts, the base URL
each SDK needs and the admin API, then hands the socket to uvicorn.

The emulator answers anyone with the demo keys and its admin API can top up balances, inject faults
and move the clock. On loopback that is only this machine's users; beyond loopback the admin API
must have a token (refused otherwise) and a warning says the port is open to the network.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from pathlib import Path

from relaybatch.emulator.config import EmulatorConfig
from relaybatch.errors import UserError

ADMIN_TOKEN_ENV = "RELAYBATCH_EMULATOR_ADMIN_TOKEN"
ADMIN_ROUTES = "requests, ledger, accounts, accounts/{name}/balance, clock, clock/advance, faults"
LISTEN_BACKLOG = 2048


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses; any other name or address counts as beyond."""
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, admin_token: str | None) -> str | None:
    """The warning to print for ``host`` (None on loopback); UserError when the admin API is unguarded."""
    if is_loopback(host):
        return None
    if not admin_token:
        raise UserError(
            f"emulator serve --host {host} listens beyond loopback, so its admin API needs a token: "
            f"set {ADMIN_TOKEN_ENV} (or pass --admin-token), or listen on 127.0.0.1"
        )
    return (
        f"warning: the emulator listens on {host}, beyond loopback: anyone who can reach the port "
        "can call it with the keys below; the admin API needs the admin token"
    )


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket for (host, port); port 0 picks a free one."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as error:
        raise UserError(f"emulator serve: cannot listen on {host}:{port}: {error}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
    except OSError as error:
        sock.close()
        raise UserError(f"emulator serve: cannot listen on {host}:{port}: {error}") from None
    sock.set_inheritable(True)
    return sock


def base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def banner(url: str, config: EmulatorConfig, config_path: Path, *, admin_token: bool) -> list[str]:
    """What ``emulator serve`` prints at start: one fact per line, never wrapped."""
    lines = [f"relaybatch emulator listening on {url}", f"  config: {config_path}"]
    lines.append("  API keys:")
    for account in config.accounts:
        limit = f"{account.rate_limit_rpm} requests/min" if account.rate_limit_rpm else "no rate limit"
        models = "all models" if account.models is None else f"models {', '.join(account.models)}"
        for key in account.api_keys:
            lines.append(f"    {key}  account {account.name}, {account.balance_usd} USD, {limit}, {models}")
    lines += [
        f"  OpenAI SDK:    base_url={url}/v1 (videos: base_url={url}/v2)",
        f"  Anthropic SDK: base_url={url}",
        f'  Google GenAI:  http_options={{"base_url": "{url}", "api_version": "v1beta"}}',
        f"  admin API:     {url}/_emulator/ ({ADMIN_ROUTES})",
        "    "
        + (
            "needs Authorization: Bearer <admin token>"
            if admin_token
            else "open to this machine (no admin token; loopback only)"
        ),
        "  Ctrl-C stops.",
    ]
    return lines


def serve(
    config: EmulatorConfig,
    config_path: Path,
    *,
    host: str,
    port: int,
    admin_token: str | None,
    say: Callable[[str], None],
    warn: Callable[[str], None],
) -> None:
    """Serve until interrupted; ``say`` prints the banner, ``warn`` the exposure warning."""
    import uvicorn

    from relaybatch.emulator.app import create_app

    warning = check_exposure(host, admin_token)
    app = create_app(config, admin_token=admin_token)
    sock = listening_socket(host, port)
    if warning:
        warn(warning)
    for line in banner(base_url(sock), config, config_path, admin_token=bool(admin_token)):
        say(line)
    # No access log and no proxy-header rewriting: both cost per request, and the emulator's
    # request log (GET /_emulator/requests) already records every call.
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, proxy_headers=False))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
