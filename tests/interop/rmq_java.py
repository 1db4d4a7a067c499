"""Helpers shared by the interop tests: request specs for the Java harness and conversions
between its JSON and our ``MessageRecord``. No assertions here."""

from __future__ import annotations

import base64
import random
from typing import Any

from rmq_spark.store.message import HostAddress, MessageRecord

__all__ = [
    "JAVA_STORE_MESSAGE_COUNT",
    "JAVA_STORE_SEGMENT_SIZE_BYTES",
    "b64",
    "random_record_specs",
    "record_from_java",
    "record_spec",
    "spec_for_record",
    "unb64",
]


JAVA_STORE_MESSAGE_COUNT = 100
JAVA_STORE_SEGMENT_SIZE_BYTES = 64 * 1024


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def record_spec(**fields: Any) -> dict[str, Any]:
    """An ``encode`` request of op ``record`` with defaults for every field."""
    spec: dict[str, Any] = {
        "op": "record",
        "topic": "TopicTest",
        "queueId": 0,
        "body": "",
        "flag": 0,
        "sysFlag": 0,
        "bornTimestamp": 1_700_000_000_000,
        "bornHost": "127.0.0.1:50000",
        "storeTimestamp": 1_700_000_000_123,
        "storeHost": "192.168.0.1:10911",
        "reconsumeTimes": 0,
        "preparedTransactionOffset": 0,
        "queueOffset": 0,
        "physicalOffset": 0,
    }
    spec.update(fields)
    return spec


def spec_for_record(record: MessageRecord) -> dict[str, Any]:
    """The ``record`` request that asks Java to encode ``record`` (properties verbatim)."""
    return record_spec(
        topic=record.topic,
        queueId=record.queue_id,
        body=b64(record.body),
        propertiesString=record.properties,
        flag=record.flag,
        sysFlag=record.sys_flag,
        bornTimestamp=record.born_timestamp_ms,
        bornHost=str(record.born_host),
        storeTimestamp=record.store_timestamp_ms,
        storeHost=str(record.store_host),
        reconsumeTimes=record.reconsume_times,
        preparedTransactionOffset=record.prepared_transaction_offset,
        queueOffset=record.queue_offset,
        physicalOffset=record.physical_offset,
    )


def record_from_java(decoded: dict[str, Any]) -> MessageRecord:
    """A ``MessageRecord`` from the harness's JSON of a MessageDecoder-decoded record."""
    return MessageRecord(
        topic=decoded["topic"],
        body=unb64(decoded["body"]),
        properties=decoded["propertiesString"],
        queue_id=decoded["queueId"],
        flag=decoded["flag"],
        queue_offset=decoded["queueOffset"],
        physical_offset=decoded["physicalOffset"],
        sys_flag=decoded["sysFlag"],
        born_timestamp_ms=decoded["bornTimestamp"],
        born_host=HostAddress.parse(decoded["bornHost"]),
        store_timestamp_ms=decoded["storeTimestamp"],
        store_host=HostAddress.parse(decoded["storeHost"]),
        reconsume_times=decoded["reconsumeTimes"],
        prepared_transaction_offset=decoded["preparedTransactionOffset"],
        body_crc=decoded["bodyCrc"],
    )


_TEXT_ALPHABET = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-%|.: "
    "éüßøжλ中文✓€\U0001f680\U0001f600"
)
_TOPIC_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-%|"


def _text(rng: random.Random, low: int, high: int, alphabet: str = _TEXT_ALPHABET) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(low, high)))


def _host(rng: random.Random) -> str:
    port = rng.choice([0, 1, 10911, 65535, rng.randint(0, 65535)])  # InetSocketAddress range
    if rng.random() < 0.3:
        groups = ":".join(f"{rng.randint(0, 0xFFFF):x}" for _ in range(8))
        return f"[{groups}]:{port}"
    return ".".join(str(rng.randint(0, 255)) for _ in range(4)) + f":{port}"


def random_record_specs(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` varied ``record`` requests, the same for the same seed.

    Topics stay within what both sides encode alike: ASCII up to 255 characters (v1 up to
    127, v2 above). Properties go through Java's ``HashMap(128)`` (op field ``properties``)
    in half of the cases and verbatim (``propertiesString``) in the other half.
    """
    rng = random.Random(seed)
    specs = []
    for index in range(count):
        topic = _text(rng, 1, rng.choice([20, 127, 255]), _TOPIC_ALPHABET)
        body = rng.randbytes(rng.choice([0, 1, rng.randint(0, 64), rng.randint(0, 5000)]))
        props = {
            _text(rng, 1, 12).replace(" ", "_"): _text(rng, 1, 30) for _ in range(rng.randint(0, 6))
        }
        fields: dict[str, Any] = {
            "id": index,
            "topic": topic,
            "queueId": rng.choice([0, 1, 7, rng.randint(0, 0x7FFFFFFF)]),
            "body": b64(body),
            "flag": rng.randint(-(1 << 31), (1 << 31) - 1),
            "sysFlag": rng.choice([0, 0x1, 0x2, 0x8, 0x100, 0x203]),
            "bornTimestamp": rng.randint(0, 1 << 45),
            "bornHost": _host(rng),
            "storeTimestamp": rng.randint(0, 1 << 45),
            "storeHost": _host(rng),
            "reconsumeTimes": rng.choice([0, 1, 16, rng.randint(0, 1 << 20)]),
            "preparedTransactionOffset": rng.choice([0, rng.randint(0, 1 << 50)]),
            "queueOffset": rng.randint(0, 1 << 40),
            "physicalOffset": rng.randint(0, 1 << 50),
        }
        if rng.random() < 0.5:
            fields["properties"] = props
        else:
            text = "".join(f"{k}\x01{v}\x02" for k, v in props.items())
            if text and rng.random() < 0.3:
                text = text[:-1]  # 4.9.1-5.1.4 writers drop the trailing separator
            fields["propertiesString"] = text
        specs.append(record_spec(**fields))
    return specs
