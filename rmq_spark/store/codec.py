"""PURE: one CommitLog message record <-> bytes (``docs/FORMAT.md`` section 2).

The codec's front door: it owns no code, only the names callers import, from the three modules
that hold the codec's concerns:

- ``record_layout.py``: the record layout, the one definition every encoder uses (header format
  and field positions, the length formula, BODYCRC, the put path's ``struct`` packers);
- ``record_encode.py``: ``MessageRecord`` -> bytes, the record CRC property, the BLANK record;
- ``record_decode.py``: bytes -> explicit outcomes (``DecodedRecord``, ``BlankPadding``,
  ``NeedMoreData``, ``Unwritten``, ``SkippedRecord``), raising ``CorruptRecordError`` only for
  bytes that cannot be a record.

Does not own: files, segments, recovery policy (what a torn tail is), the properties string
syntax (``properties.py``) or message ids (``msg_id.py``).
"""

from __future__ import annotations

from rmq_spark.store.record_decode import (
    BlankPadding,
    ByteSource,
    DecodedRecord,
    DecodeOutcome,
    NeedMoreData,
    SkippedRecord,
    Unwritten,
    decode_record,
    peek_header,
)
from rmq_spark.store.record_encode import encode_blank, encode_record, encode_record_mutable
from rmq_spark.store.record_layout import (
    HEADER_FORMAT_IPV4,
    HEADER_SIZE_IPV4,
    MAX_TOPIC_SIZE_BYTES_V2,
    MIN_RECORD_SIZE_BYTES,
    OFFSETS,
    QUEUE_OFFSET_POSITION,
    RECORD_HEAD,
    RECORD_HOSTS,
    RecordPacker,
    body_crc,
    record_mid,
    record_packer,
    record_size,
    store_timestamp_position,
)

__all__ = [
    "BlankPadding",
    "ByteSource",
    "DecodeOutcome",
    "DecodedRecord",
    "HEADER_FORMAT_IPV4",
    "HEADER_SIZE_IPV4",
    "MAX_TOPIC_SIZE_BYTES_V2",
    "MIN_RECORD_SIZE_BYTES",
    "NeedMoreData",
    "OFFSETS",
    "QUEUE_OFFSET_POSITION",
    "RECORD_HEAD",
    "RECORD_HOSTS",
    "RecordPacker",
    "SkippedRecord",
    "Unwritten",
    "body_crc",
    "decode_record",
    "encode_blank",
    "encode_record",
    "encode_record_mutable",
    "peek_header",
    "record_mid",
    "record_packer",
    "record_size",
    "store_timestamp_position",
]
