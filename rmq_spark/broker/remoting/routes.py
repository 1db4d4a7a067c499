"""The remoting server's code -> handler table, merged from the handler modules.

Each module listed in ``_MODULES`` exports ``handlers(deps) -> dict[int, Handler]`` for the
codes it serves; a code claimed by two modules is a programming error (``ValueError`` at
start-up), so the table has one owner per code. Adding a module is one import and one entry.
Codes nobody serves are answered ``REQUEST_CODE_NOT_SUPPORTED`` by the server.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rmq_spark.broker.remoting import (
    admin,
    consume,
    consume_stats,
    groups_admin,
    locks,
    offsets_remote,
    produce,
    pull,
    send_back_remote,
    sync_admin,
)
from rmq_spark.broker.remoting.calls import Deps, Handler
from rmq_spark.broker.transactions import remoting_end

__all__ = ["build_routes"]

_MODULES: tuple[Callable[[Deps], Mapping[int, Handler]], ...] = (
    produce.handlers,
    admin.handlers,
    consume.handlers,
    pull.handlers,
    offsets_remote.handlers,
    send_back_remote.handlers,
    locks.handlers,
    consume_stats.handlers,
    groups_admin.handlers,
    remoting_end.handlers,
    sync_admin.handlers,
)


def build_routes(deps: Deps) -> dict[int, Handler]:
    """Every code served, to its handler."""
    table: dict[int, Handler] = {}
    for handlers in _MODULES:
        for code, handler in handlers(deps).items():
            if code in table:
                raise ValueError(f"remoting code {code} has two handlers ({handlers.__module__})")
            table[int(code)] = handler
    return table
