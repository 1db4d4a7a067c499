"""What a remoting handler is given and returns: ``Call``, ``ClientLink``, ``Handler``, ``Deps``.

A handler module (``produce.py``, the consume modules, ``admin.py``) exports
``handlers(deps) -> dict[int, Handler]``; ``routes.py`` merges them. The server decodes a
request frame, checks it (limits, authentication, the ACL of ``permissions.py``) and awaits
the code's handler with a ``Call``: the command, the connection it came on (``ClientLink``:
who the client is, and ``send_request`` for the broker's own requests to it such as
NOTIFY_CONSUMER_IDS_CHANGED) and the authenticated identity. The handler returns the
response (``call.reply(...)``) or ``None`` for no answer (a oneway request is never answered,
whatever the handler returns).

A handler may serve a wave of calls at once (``WaveHandler``: a producer's sends), one Task
for the requests of its code that came in one read.

A request header field the handler needs and cannot read raises ``HeaderError``: answered
with its code and message (SYSTEM_ERROR, as RocketMQ answers a missing ``@CFNotNull`` field),
no traceback logged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from rmq_spark.broker.remoting.codec import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from rmq_spark.broker.remoting.codes import ResponseCode
from rmq_spark.errors import RemoteProtocolError

if TYPE_CHECKING:
    from rmq_spark.broker.config import BrokerConfig
    from rmq_spark.broker.consumer.service import ConsumeService
    from rmq_spark.broker.security.auth import Identity
    from rmq_spark.broker.service import BrokerService
    from rmq_spark.broker.store_port import BrokerStore

__all__ = ["Call", "ClientLink", "Deps", "Handler", "HeaderError", "WaveHandler", "WaveRun"]


class HeaderError(RemoteProtocolError):
    """A request header field is missing or malformed: answered ``code`` with the message."""

    def __init__(self, message: str, code: int = ResponseCode.SYSTEM_ERROR) -> None:
        super().__init__(message)
        self.code = int(code)


class ClientLink(Protocol):
    """One client connection, as handlers see it (``connection.Connection`` implements it)."""

    @property
    def link_id(self) -> int:
        """A number unique to this connection in this broker process."""
        ...

    @property
    def peer_host(self) -> str: ...

    @property
    def peer_port(self) -> int: ...

    @property
    def language(self) -> str:
        """The ``language`` of the client's last request (``JAVA``, ``GO``, ``CPP``, ...)."""
        ...

    @property
    def version(self) -> int:
        """The ``version`` of the client's last request (``MQVersion`` ordinal, 409 = 4.9.8)."""
        ...

    @property
    def tls(self) -> bool: ...

    @property
    def closed(self) -> bool: ...

    async def send_request(
        self, command: RemotingCommand, timeout_ms: int
    ) -> RemotingCommand | None:
        """Send a broker->client request on this connection with a fresh opaque; the client's
        response (matched by opaque), or ``None`` for a oneway ``command`` (flag bit 1).

        Raises ``TimeoutError`` after ``timeout_ms``, ``ConnectionError`` if the connection
        is or gets closed."""
        ...

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once when the connection closes (at once if it is closed)."""
        ...


@dataclass(frozen=True, slots=True)
class Call:
    """One decoded request, the connection it came on, and who sent it (``None``: auth off or
    the request unsigned where that is allowed)."""

    command: RemotingCommand
    link: ClientLink
    principal: Identity | None = None

    @property
    def code(self) -> int:
        return self.command.code

    @property
    def ext(self) -> dict[str, str]:
        return self.command.ext_fields or {}

    def field(self, name: str, *aliases: str) -> str | None:
        """The header field ``name`` (or the first of ``aliases`` present, e.g. V2's short
        keys), ``None`` when absent."""
        ext = self.ext
        for key in (name, *aliases):
            value = ext.get(key)
            if value is not None:
                return value
        return None

    def required(self, name: str, *aliases: str) -> str:
        """The header field ``name``; ``HeaderError`` when absent (RocketMQ's ``@CFNotNull``)."""
        value = self.field(name, *aliases)
        if value is None:
            raise HeaderError(f"the request header has no {name} field")
        return value

    def int_field(self, name: str, *aliases: str, default: int | None = None) -> int:
        """The header field ``name`` as a Java int/long; ``HeaderError`` when it is absent
        (and no ``default``) or not a decimal integer within a Java long."""
        value = self.field(name, *aliases)
        if value is None:
            if default is None:
                raise HeaderError(f"the request header has no {name} field")
            return default
        try:
            number = int(value.strip(), 10)
        except ValueError:
            raise HeaderError(
                f"the request header's {name} is not an integer: {value[:40]!r}"
            ) from None
        if not -(2**63) <= number < 2**63:
            raise HeaderError(f"the request header's {name} is out of range: {value[:40]!r}")
        return number

    def bool_field(self, name: str, *aliases: str) -> bool:
        """Java's ``Boolean.parseBoolean``: ``true`` (any case) is true, anything else false."""
        value = self.field(name, *aliases)
        return value is not None and value.strip().lower() == "true"

    def reply(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The response to this request: its opaque, the response flag, its serialize type."""
        return response_to(self.command, code, remark, ext_fields, body)


def response_to(
    request: RemotingCommand,
    code: int,
    remark: str | None = None,
    ext_fields: dict[str, str] | None = None,
    body: bytes = b"",
) -> RemotingCommand:
    """A response to ``request`` (also used by the server for its own refusals)."""
    return RemotingCommand(
        code=int(code),
        opaque=request.opaque,
        flag=(request.flag & ~FLAG_ONEWAY) | FLAG_RESPONSE,
        remark=remark,
        ext_fields=ext_fields,
        body=body,
        serialize_type=request.serialize_type,
    )


Handler = Callable[[Call], Awaitable[RemotingCommand | None]]
WaveRun = Callable[[list[Call]], Awaitable[list["RemotingCommand | Exception"]]]


class WaveHandler:
    """A handler that also serves a wave of calls at once: ``wave(calls)`` answers the
    requests of its code that came in one read (``connection.py``) in order, each with its
    response or the exception its request raised (the server answers that as it answers a
    handler that raised). Called with one call, it is the wave of one."""

    __slots__ = ("wave",)

    def __init__(self, wave: WaveRun) -> None:
        self.wave = wave

    async def __call__(self, call: Call) -> RemotingCommand | None:
        [answer] = await self.wave([call])
        if isinstance(answer, Exception):
            raise answer
        return answer


@dataclass(slots=True)
class Deps:
    """What handler modules build their handlers over: the one broker's parts.

    ``broker_addr`` is the remoting address the broker registers (``ip:port``); ``extras``
    holds state a handler module shares with another (keyed by the module's name)."""

    service: BrokerService
    store: BrokerStore
    config: BrokerConfig
    consume: ConsumeService | None = None
    broker_addr: str = ""
    extras: dict[str, Any] = field(default_factory=dict)
