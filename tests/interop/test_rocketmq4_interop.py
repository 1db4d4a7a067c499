"""RocketMQ 4.9.8 (the last 4.x) and our store: we read a store its DefaultMessageStore wrote
(v1 records, properties without the trailing separator, the store's own delay rewrite), and it
loads ours, except from the first v2 record on, which 4.x cannot read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from store_checks import (
    check_rocketmq_sees_our_store,
    check_we_read_what_rocketmq_put,
    rocketmq_reads,
    walk_commitlog,
    write_our_store,
)

from rmq_spark.interop import Harness
from rmq_spark.store.config import FlushPolicy
from rmq_spark.store.layout import RMQ_SYS_SCHEDULE_TOPIC

CQ4_UNITS = 1000  # the 4.x harness's ConsumeQueue file size (Main4.CQ_FILE_BYTES / 20)

pytestmark = pytest.mark.slow


def test_we_read_a_store_written_by_rocketmq_4(harness4: Harness, tmp_path: Path) -> None:
    assert harness4.version() == "V4_9_8"
    lines = harness4.write_store(tmp_path / "store", 100, 64 * 1024)
    puts = [line for line in lines if line["event"] == "put"]
    (shutdown,) = [line for line in lines if line["event"] == "shutdown"]
    records, data_end, endings = walk_commitlog(tmp_path / "store" / "commitlog")
    check_we_read_what_rocketmq_put(records, puts)
    assert data_end == shutdown["maxOffset"]
    assert endings[:-1] == ["blank"] * (len(endings) - 1) and len(endings) >= 3
    # What makes 4.9.x different: no trailing \x02, and the delay rewrite done by the store.
    with_props = [r.record.properties for r in records if r.record.properties]
    assert with_props and not any(p.endswith("\x02") for p in with_props)
    delayed = [r.record for r in records if r.record.topic == RMQ_SYS_SCHEDULE_TOPIC]
    assert len(delayed) == 1 and delayed[0].queue_id == 17
    assert "REAL_TOPIC\x01TopicA" in delayed[0].properties


@pytest.mark.parametrize("close", [True, False], ids=["closed", "abandoned"])
def test_rocketmq_4_loads_our_store_without_v2_records(
    harness4: Harness, tmp_path: Path, close: bool
) -> None:
    ours = write_our_store(
        tmp_path / "store", FlushPolicy.SYNC, close, include_v2=False, cq_file_units=CQ4_UNITS
    )
    assert all(len(r.topic) <= 127 for r in ours["records"])
    seen = rocketmq_reads(harness4, tmp_path / "store", tmp_path)
    (load,) = seen["load"]
    assert load["lastExitOK"] is close
    # 4.9.8's recoverAbnormally dispatches CQ units before ScheduleMessageService.load() has
    # parsed the delay levels, which would give SCHEDULE_TOPIC_XXXX units the TAGS hash; but
    # the units are our ConsumeQueue's already, with the delivery time, and a re-dispatch keeps
    # a unit that is there (its offset + size is below the queue's max physical offset).
    check_rocketmq_sees_our_store(ours, seen)


def test_rocketmq_4_cannot_read_our_store_past_the_first_v2_record(
    harness4: Harness, tmp_path: Path
) -> None:
    # A %RETRY% topic longer than 127 chars makes us (like 5.x) write a v2 record. 4.x knows
    # only the v1 magic. Its normal recovery scans just the last three files and truncates the
    # log at the first v2 record there; an earlier v2 record stays and stops every reader and
    # the ConsumeQueue dispatch at its offset. Either way nothing after it is served.
    ours: dict[str, Any] = write_our_store(
        tmp_path / "store", FlushPolicy.SYNC, close=True, cq_file_units=CQ4_UNITS
    )
    results, records = ours["results"], ours["records"]
    first_v2 = next(i for i, r in enumerate(records) if len(r.topic) > 127)
    assert 0 < first_v2 < len(records) - 1
    seen = rocketmq_reads(harness4, tmp_path / "store", tmp_path)
    (load,) = seen["load"]
    assert load["ok"]
    assert load["maxOffset"] < ours["max_offset"]  # 4.x cut our log
    (bad,) = seen["bad_record"]
    assert bad["physicalOffset"] == results[first_v2].physical_offset
    assert [m["physicalOffset"] for m in seen["message"]] == [
        r.physical_offset for r in results[:first_v2]
    ]
