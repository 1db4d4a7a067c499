"""PURE: constants of RocketMQ's on-disk formats, and segment file names.

Owns magic codes, sysflag bits, fixed record positions, system topic names, property keys and
the 20-digit segment naming (docs/FORMAT.md sections 1, 2, 2.1, 2.2). Knows nothing of
files or record contents beyond these numbers.
"""

from __future__ import annotations

__all__ = [
    "BLANK_MAGIC_CODE",
    "BORNHOST_V6_FLAG",
    "CHECKPOINT_FILE_SIZE_BYTES",
    "COMMITLOG_DIR",
    "COMPRESSED_FLAG",
    "CONFIRM_PHY_OFFSET_POSITION",
    "CQ_UNIT_SIZE_BYTES",
    "END_FILE_MIN_BLANK_LENGTH",
    "MAX_PROPERTIES_SIZE_BYTES",
    "MAX_TOPIC_LENGTH_V1",
    "MESSAGE_MAGIC_CODES",
    "MESSAGE_MAGIC_CODE_V1",
    "MESSAGE_MAGIC_CODE_V2",
    "MULTI_TAGS_FLAG",
    "PHYSICAL_OFFSET_POSITION",
    "QUARANTINE_DIR",
    "QUEUE_OFFSET_POSITION",
    "RMQ_SYS_SCHEDULE_TOPIC",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "RMQ_SYS_WHEEL_TIMER_TOPIC",
    "STOREHOST_V6_FLAG",
    "TRANSACTION_COMMIT_TYPE",
    "TRANSACTION_MASK",
    "TRANSACTION_NOT_TYPE",
    "TRANSACTION_PREPARED_TYPE",
    "TRANSACTION_ROLLBACK_TYPE",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "is_segment_name",
    "parse_segment_name",
    "segment_base_offset",
    "segment_name",
    "transaction_type",
]

# --- magic codes (section 1.1), as unsigned 32-bit values ------------------------------------
MESSAGE_MAGIC_CODE_V1 = 0xDAA320A7
MESSAGE_MAGIC_CODE_V2 = 0xDAA320AB
BLANK_MAGIC_CODE = 0xCBD43194
MESSAGE_MAGIC_CODES = frozenset({MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2})

# --- record geometry (sections 1.2, 1.6) ------------------------------------------------------
QUEUE_OFFSET_POSITION = 20
PHYSICAL_OFFSET_POSITION = 28
END_FILE_MIN_BLANK_LENGTH = 8
MAX_TOPIC_LENGTH_V1 = 127
MAX_PROPERTIES_SIZE_BYTES = 32767

# --- sysflag bits (section 2) -----------------------------------------------------------------
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20

# --- system topics ----------------------------------------------------------------------------
RMQ_SYS_SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RMQ_SYS_WHEEL_TIMER_TOPIC = "rmq_sys_wheel_timer"
RMQ_SYS_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
RMQ_SYS_TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"  # halves past transactionCheckMax

# --- store directory layout (sections 0.1, 6.1, 8.1) ------------------------------------------
COMMITLOG_DIR = "commitlog"
QUARANTINE_DIR = "quarantine"  # under the store root (not commitlog/, which RocketMQ 4.x
# loads whole): the bytes and segments an operator's `recover` or recovery cut
CQ_UNIT_SIZE_BYTES = 20
CHECKPOINT_FILE_SIZE_BYTES = 4096
CONFIRM_PHY_OFFSET_POSITION = 32

_SEGMENT_NAME_DIGITS = 20


def transaction_type(sys_flag: int) -> int:
    """The transaction bits of a sysflag: one of the ``TRANSACTION_*_TYPE`` values."""
    return sys_flag & TRANSACTION_MASK


def segment_name(base_offset: int) -> str:
    """The 20-digit zero-padded file name of a segment starting at ``base_offset``.

    Examples
    --------
    >>> segment_name(1073741824)
    '00000000001073741824'
    """
    if base_offset < 0:
        raise ValueError(f"segment base offset must be >= 0, got {base_offset}")
    return f"{base_offset:0{_SEGMENT_NAME_DIGITS}d}"


def is_segment_name(name: str) -> bool:
    """True for a 20-digit decimal file name."""
    return len(name) == _SEGMENT_NAME_DIGITS and name.isascii() and name.isdigit()


def parse_segment_name(name: str) -> int:
    """The base offset a segment file name stands for; ``ValueError`` if it is not one."""
    if not is_segment_name(name):
        raise ValueError(f"not a segment file name (20 decimal digits): {name!r}")
    return int(name)


def segment_base_offset(physical_offset: int, segment_size_bytes: int) -> int:
    """Base offset of the segment holding ``physical_offset``."""
    return physical_offset - physical_offset % segment_size_bytes
