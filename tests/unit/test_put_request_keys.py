"""``PutRequest.keys`` given as one str is one KEYS value, as RocketMQ's
``Message.setKeys(String)``, not a key per letter."""

from __future__ import annotations

from pathlib import Path

from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.store.properties import parse_properties
from rmq_spark.store.put import PutRequest


def test_a_str_is_one_keys_value_and_a_tuple_is_joined(tmp_path: Path) -> None:
    with MessageStore.open(StoreConfig(root_dir=tmp_path)) as store:
        offsets = [
            store.put(PutRequest("t", b"a", keys="order-1")).physical_offset,
            store.put(PutRequest("t", b"b", keys="k1 k2", tags="T")).physical_offset,
            store.put(PutRequest("t", b"c", keys=("k1", "k2"))).physical_offset,
            store.put(PutRequest("t", b"d", keys="k3", properties={"p": "v"})).physical_offset,
        ]
        found = [parse_properties(store.read(o).properties)["KEYS"] for o in offsets]
    assert found == ["order-1", "k1 k2", "k1 k2", "k3"]
