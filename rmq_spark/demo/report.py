"""The demo's closing report: SQL over ``rmq.*``, lookups by key and id, and the checks.

Prints four queries (messages per topic and tag, a lookup by key, a lookup by message id,
delayed messages with their due and delivery times), then checks what a user would ask:
is every acknowledged message in ``rmq.messages``, was each delayed message redelivered
exactly once and never early. Returns the figures as a dict (written to ``summary.json``).
"""

from __future__ import annotations

from typing import Any

from rmq_spark.demo.traffic import AckLog

__all__ = ["final_report"]

DELAYED_SQL = """
SELECT s.properties['REAL_TOPIC'] AS real_topic, s.uniq_key, s.topic AS held_in,
       cq.tags_code AS due_ms, unix_millis(d.store_timestamp) AS delivered_ms,
       unix_millis(d.store_timestamp) - cq.tags_code AS late_ms
FROM rmq.consume_queue cq
JOIN rmq.messages s ON s.physical_offset = cq.physical_offset
LEFT JOIN rmq.messages d
  ON d.uniq_key = s.uniq_key AND d.topic = s.properties['REAL_TOPIC']
WHERE cq.topic IN ('SCHEDULE_TOPIC_XXXX', 'rmq_sys_wheel_timer')
"""


def _heading(text: str) -> None:
    print(f"\n== {text}", flush=True)


def final_report(spark: Any, run: Any, acks: AckLog) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from rmq_spark.spark.query import message_by_msg_id, messages_by_key

    _heading("messages per topic and tag: SELECT topic, tags, count(*) FROM rmq.messages ...")
    spark.sql(
        "SELECT topic, tags, count(*) AS messages FROM rmq.messages "
        "GROUP BY topic, tags ORDER BY topic, tags"
    ).show(50, truncate=False)

    keyed = next((a for a in acks.acked if a.kind == "NORMAL" and a.key), None)
    if keyed is not None:
        _heading(f"lookup by key: rmq-spark query --topic {keyed.topic} --key {keyed.key}")
        messages_by_key(spark, run.tables_dir, keyed.topic, keyed.key).select(
            "topic",
            "queue_id",
            "queue_offset",
            "tags",
            "keys",
            "msg_id",
            F.col("body").cast("string").alias("body"),
        ).show(truncate=False)

    row = spark.sql("SELECT msg_id FROM rmq.messages WHERE topic = 'Orders' LIMIT 1").first()
    if row is not None:
        _heading(f"lookup by message id (straight from the CommitLog): --msg-id {row.msg_id}")
        record = message_by_msg_id(run.store_dir, row.msg_id)
        print(
            f"topic={record.topic} queue={record.queue_id} offset={record.physical_offset} "
            f"body={record.body[:60]!r}"
        )

    _heading("delayed messages: due (tags_code) and delivery (store time in the real topic)")
    delayed = spark.sql(DELAYED_SQL).cache()
    delayed.orderBy("due_ms").show(10, truncate=False)
    stats = delayed.agg(
        F.countDistinct("uniq_key").alias("delayed"),
        F.count("delivered_ms").alias("deliveries"),
        F.countDistinct(F.when(F.col("delivered_ms").isNotNull(), F.col("uniq_key"))).alias(
            "delivered"
        ),
        F.sum(F.when(F.col("late_ms") < 0, 1).otherwise(0)).alias("early"),
        F.percentile_approx("late_ms", 0.5).alias("late_p50_ms"),
        F.percentile_approx("late_ms", 0.99).alias("late_p99_ms"),
    ).first()
    delayed.unpersist()

    acked_ids = {a.message_id for a in acks.acked}
    stored_ids = {
        r.uniq_key
        for r in spark.sql("SELECT DISTINCT uniq_key FROM rmq.messages").collect()
        if r.uniq_key
    }
    missing = sorted(acked_ids - stored_ids)
    summary = {
        "workdir": str(run.workdir),
        "sent": acks.sent,
        "acked": len(acks.acked),
        "acked_missing_from_tables": len(missing),
        "delayed_acked": len(acks.delayed()),
        "delayed_in_tables": stats["delayed"],
        "delayed_delivered": stats["delivered"],
        "delayed_deliveries": stats["deliveries"],
        "delayed_early": stats["early"] or 0,
        "lateness_p50_ms": stats["late_p50_ms"],
        "lateness_p99_ms": stats["late_p99_ms"],
    }
    _heading("checks")
    print(
        f"acknowledged {summary['acked']} of {summary['sent']} sends; missing from "
        f"rmq.messages: {summary['acked_missing_from_tables']}"
    )
    print(
        f"delayed: {summary['delayed_delivered']} of {summary['delayed_in_tables']} redelivered "
        f"({summary['delayed_deliveries']} deliveries, {summary['delayed_early']} early); "
        f"lateness p50 {summary['lateness_p50_ms']} ms, p99 {summary['lateness_p99_ms']} ms"
    )
    return summary
