"""The consume path's collaborators over one store: ``broker_wiring``.

The store's ConsumeQueue (``store.consume_queues``), the TAG/SQL92 filters (``filters.py``),
the groups' settings from ``config/subscriptionGroup.json`` and the committed offsets in
``config/consumerOffset.json`` (``rocketmq_config_files.py``), as ``ports.ConsumerWiring``
names them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rmq_spark.broker.config_files.rocketmq_config_files import (
    SubscriptionGroups,
    read_consumer_offsets,
    write_consumer_offsets,
)
from rmq_spark.broker.consumer.ports import ConsumerWiring, QueueSource
from rmq_spark.broker.filters.expression import compile_filter
from rmq_spark.clock import Clock
from rmq_spark.errors import FilterExpressionError

__all__ = ["broker_wiring"]


def _consume_queues(store: Any) -> QueueSource:
    queues: QueueSource = store.consume_queues
    return queues


def broker_wiring(root: Path, clock: Clock | None = None) -> ConsumerWiring:
    """The consume path's collaborators for the store at ``root``."""
    return ConsumerWiring(
        queue_source=_consume_queues,
        compile_filter=compile_filter,
        filter_errors=(FilterExpressionError,),
        group_settings=SubscriptionGroups(root, clock=clock),
        read_offsets=read_consumer_offsets,
        write_offsets=write_consumer_offsets,
    )
