"""The Telemetry stream of the gRPC servicer: the client's settings, answered merged with ours.

Owns the stream's life (it ends on the client's EOF or cancel, or when the broker stops) and
the settings reply the Java proxy gives: the publishing limits and retry backoff for a
producer, the consumer's from ``ConsumerRpcs``. Does not own any other RPC (``grpc_api.py``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc

from rmq_spark.broker.grpc.consume_grpc import ConsumerRpcs
from rmq_spark.broker.grpc.grpc_wire import CLIENT_ID_HEADER, Malformed, status
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.security.resources import Name, resolved_of
from rmq_spark.broker.transactions.streams import ProducerStreams, StreamWriter

__all__ = ["TelemetryRpc"]

log = logging.getLogger("rmq_spark.broker")


class TelemetryRpc:
    """Telemetry streams of one broker; ``streams`` counts the open ones."""

    def __init__(
        self,
        *,
        shutdown: asyncio.Event,
        max_body_size: int,
        send_max_attempts: int,
        consumers: ConsumerRpcs | None,
        producer_streams: ProducerStreams | None = None,
    ) -> None:
        self._shutdown = shutdown
        self._max_body_size = max_body_size
        self._send_max_attempts = send_max_attempts
        self._consumers = consumers
        self._producers = producer_streams if producer_streams is not None else ProducerStreams()
        self.streams = 0

    async def stream(self, context: Any) -> None:
        """Answer every Settings with status OK + the merged settings; end on stop or cancel."""
        client_id = dict(context.invocation_metadata()).get(CLIENT_ID_HEADER, "")
        self.streams += 1
        stop_wait = asyncio.ensure_future(self._shutdown.wait())
        writer = StreamWriter(context)
        try:
            while True:
                read = asyncio.ensure_future(context.read())
                done, _ = await asyncio.wait({read, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if read not in done:
                    read.cancel()
                    return
                command = read.result()
                if command is grpc.aio.EOF:
                    return
                if isinstance(command, Malformed):
                    log.warning("broker error: Telemetry of %r: %s", client_id, command.error)
                    continue
                if command.WhichOneof("command") == "settings":
                    resolved = resolved_of(context)  # this command's, resolved at the edge
                    if resolved.rights == "Telemetry/publishing":
                        topics = [topic.full for topic in resolved.topics]
                        self._producers.register(id(context), client_id, topics, writer)
                    reply = self.settings_reply(command.settings, client_id, resolved.group)
                    await writer.write(reply)
                # thread_stack_trace / verify_message_result: we never ask for them.
        except asyncio.CancelledError:
            raise  # the client cancelling its stream is the normal end of it
        except Exception as err:
            log.error("broker error: Telemetry stream of %r: %s", client_id, err)
            log.debug("details", exc_info=True)
        finally:
            stop_wait.cancel()
            self._producers.unregister(id(context))
            self.streams -= 1

    def settings_reply(self, settings: Any, client_id: str = "", group: Name | None = None) -> Any:
        """What the Java proxy answers: the client's settings merged with the broker's;
        ``group`` is a consumer's, as the edge resolved it (``resources.py``)."""
        reply = pb.Settings()
        reply.CopyFrom(settings)
        reply.metric.Clear()
        reply.metric.on = False
        if settings.client_type == pb.PRODUCER or settings.HasField("publishing"):
            reply.publishing.max_body_size = self._max_body_size
            reply.publishing.validate_message_type = True
            reply.backoff_policy.max_attempts = self._send_max_attempts
            backoff = reply.backoff_policy.exponential_backoff
            backoff.initial.FromMilliseconds(10)
            backoff.max.FromMilliseconds(1000)
            backoff.multiplier = 2.0
        elif self._consumers is not None and group is not None:
            self._consumers.settings_reply(reply, client_id, group)
        elif settings.HasField("subscription"):
            reply.subscription.long_polling_timeout.FromSeconds(20)
        return spb.TelemetryCommand(status=status(pb.OK), settings=reply)
