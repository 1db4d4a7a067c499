"""Where a producer's send goes: the broker's checks, its topic's route, its queue, and the
record it is stored as.

Owns ``Placement``: a send's validation (``send_rules.py``'s rules with this broker's limits),
the route of its topic (``TopicTable``, auto-creation included), the queue (the producer's own
choice, its message group's, or round robin), the properties its record carries, and where a
delayed message or a transaction's half waits (the timer topic, the half topic). A batch's
sends share one route lookup per topic. Does not own the put, its durability or what the
producer is answered (``service.py``, ``send_outcomes.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.send_model import (
    MessageKind,
    RouteOutcome,
    SendCode,
    SendCommand,
    SendOutcome,
    reject,
)
from rmq_spark.broker.send_rules import message_properties, timer_transform, validate_send
from rmq_spark.broker.topics import TopicStatus, TopicTable, group_queue_id
from rmq_spark.broker.transactions.records import half_properties
from rmq_spark.clock import Clock
from rmq_spark.store.layout import RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC
from rmq_spark.store.message import LOCALHOST
from rmq_spark.store.properties import REAL_QID, REAL_TOPIC
from rmq_spark.store.put import PutRequest

__all__ = ["Placement"]


class Placement:
    """The checks and placement of sends for one broker (see the module docstring)."""

    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicTable,
        clock: Clock,
        max_message_size_bytes: int,
        delay_level_max: int,
    ) -> None:
        self._config = config
        self._topics = topics
        self._clock = clock
        self._body_max = max_message_size_bytes
        self._delay_level_max = delay_level_max

    def validate(self, command: SendCommand) -> SendOutcome | None:
        """``None`` when ``command`` may be sent, else its refusal."""
        return validate_send(command, self._config, self._body_max, self._delay_level_max)

    def route(
        self, topic: str, namespace: str = "", *, reading: bool = False, client: str = ""
    ) -> RouteOutcome:
        """The queues of ``topic`` (creating it when auto-creation is on); ``reading`` and
        ``client`` (the caller's address, whose creations are limited): see
        ``TopicTable.lookup``."""
        found = self._topics.lookup(topic, namespace, reading=reading, client=client)
        if found.status is TopicStatus.ILLEGAL:
            return RouteOutcome(SendCode.ILLEGAL_TOPIC, found.topic, reason=found.reason)
        if found.status is TopicStatus.NOT_FOUND:
            return RouteOutcome(SendCode.TOPIC_NOT_FOUND, found.topic, reason=found.reason)
        return RouteOutcome(SendCode.OK, found.topic, found.queue_count)

    def place_all(self, commands: Sequence[SendCommand]) -> list[PutRequest | SendOutcome]:
        """The checks and the placement of each send: its put request, or the refusal. The
        route of each (topic, namespace, client) is looked up once (a batch names one)."""
        routes: dict[tuple[str, str, str], RouteOutcome] = {}
        placed: list[PutRequest | SendOutcome] = []
        for command in commands:
            problem = self.validate(command)
            if problem is not None:
                placed.append(problem)
                continue
            client = command.born_host.ip if command.born_host is not None else ""
            key = (command.topic, command.namespace, client)
            route = routes.get(key)
            if route is None:
                route = routes[key] = self.route(command.topic, command.namespace, client=client)
            placed.append(self._place(command, route))
        return placed

    def _place(self, command: SendCommand, route: RouteOutcome) -> PutRequest | SendOutcome:
        """The placement of a valid send on its topic's ``route``: its put request, or the
        refusal."""
        if route.code is not SendCode.OK:
            return reject(route.code, route.reason, command.message_id)
        if command.queue_id is not None:  # a remoting producer's own choice
            if not 0 <= command.queue_id < route.queue_count:
                return reject(
                    SendCode.BAD_REQUEST,
                    f"queueId {command.queue_id} is not a queue of {route.topic} "
                    f"({route.queue_count} queues)",
                    command.message_id,
                )
            queue_id = command.queue_id
        elif command.message_group is not None:
            queue_id = group_queue_id(command.message_group, route.queue_count)
        else:
            queue_id = self._topics.next_queue_id(route.topic, route.queue_count)
        properties = message_properties(command, self._config.cluster_name)
        if command.delay_level is not None:
            # The store's put path rewrites it into SCHEDULE_TOPIC_XXXX (docs/DELAY.md).
            properties["DELAY"] = str(command.delay_level)
        topic, stored_queue_id = route.topic, queue_id
        if command.delivery_timestamp_ms is not None:
            timer = timer_transform(
                command.delivery_timestamp_ms, properties, self._clock.now_ms(), self._config
            )
            if isinstance(timer, SendOutcome):
                return timer
            if timer:
                properties[REAL_TOPIC] = route.topic
                properties[REAL_QID] = str(queue_id)
                topic, stored_queue_id = RMQ_SYS_WHEEL_TIMER_TOPIC, 0
        if command.kind is MessageKind.TRANSACTION:  # a half message (transactions/records.py)
            half_properties(
                properties, route.topic, queue_id, command.producer_group or route.topic
            )
            topic, stored_queue_id = RMQ_SYS_TRANS_HALF_TOPIC, 0
        return PutRequest(
            topic=topic,
            queue_id=stored_queue_id,
            body=command.body,
            properties=properties,
            born_timestamp_ms=command.born_timestamp_ms or None,
            born_host=command.born_host or LOCALHOST,
            idempotent=True,
        )
