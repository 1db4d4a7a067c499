"""The ``rocketmq`` source's ``isolation`` option (as Kafka's ``isolation.level``).

``read_committed`` (the default) leaves out what a consumer never sees of a transaction: the
half messages (``RMQ_SYS_TRANS_HALF_TOPIC``), the op markers (``RMQ_SYS_TRANS_OP_HALF_TOPIC``),
the discarded halves (``TRANS_CHECK_MAX_TIME_TOPIC``) and any record whose SYSFLAG says
PREPARED or ROLLBACK (an old store's); a committed message is read once, as its COMMIT record
in its real topic. ``read_uncommitted`` reads every record, half messages too.
"""

from __future__ import annotations

import pyarrow as pa

from rmq_spark.spark.option_values import bad_value
from rmq_spark.store.layout import (
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)

__all__ = ["READ_COMMITTED", "READ_UNCOMMITTED", "TRANSACTION_TOPICS", "committed_only"]

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
TRANSACTION_TOPICS = (
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
)
# A tuple, made an Arrow array per call: pa.array at import pulls in pandas (~170 ms) in the
# stream's planning process, which never filters a batch.
_HIDDEN_TYPES = (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)


def isolation_value(value: str) -> str:
    """The option's value, checked (any letter case)."""
    text = value.strip().lower()
    if text not in (READ_COMMITTED, READ_UNCOMMITTED):
        raise bad_value("isolation", value)
    return text


def committed_only(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` without the rows ``read_committed`` leaves out (see the module docstring);
    a batch without the ``topic`` or ``sys_flag`` column is kept by what it has."""
    import pyarrow.compute as pc  # here, not at the top: an executor's work, not planning's

    names = batch.schema.names
    hidden = None
    if "topic" in names:
        topics = pa.array(TRANSACTION_TOPICS, pa.string())
        hidden = pc.is_in(batch.column("topic"), value_set=topics)
    if "sys_flag" in names:
        tx_type = pc.bit_wise_and(batch.column("sys_flag"), pa.scalar(TRANSACTION_MASK, pa.int32()))
        prepared = pc.is_in(tx_type, value_set=pa.array(_HIDDEN_TYPES, pa.int32()))
        hidden = prepared if hidden is None else pc.or_(hidden, prepared)
    if hidden is None or not pc.any(hidden).as_py():
        return batch
    return batch.filter(pc.invert(hidden))
