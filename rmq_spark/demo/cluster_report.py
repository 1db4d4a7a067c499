"""The cluster demo's checks: SQL over ``rmq.messages`` (both stores), against what the
producers had acknowledged and what the push consumer got.

* every acknowledged message is in ``rmq.messages`` (``missing``);
* exactly once: no message stored twice in one store (``duplicated_in_a_store``); a send the
  client retried on the other broker after the kill (its first answer lost) can be in both
  stores: counted apart (``stored_on_both_brokers``), as RocketMQ's at-least-once allows;
* every acknowledged message consumed at least once (``not_consumed``);
* the longest pause any producer saw, and the messages per broker.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rmq_spark.demo.cluster_parts import TOPICS

__all__ = ["cluster_checks", "copies"]


def cluster_checks(
    spark: Any, demo: Any, brokers: list[Any], producers: Any, consumer: Any
) -> dict[str, Any]:
    topics = ", ".join(f"'{topic}'" for topic in TOPICS)
    print("\n== messages per store and topic: SELECT store, topic, count(*) FROM rmq.messages")
    spark.sql(
        f"SELECT store, topic, count(*) AS messages FROM rmq.messages WHERE topic IN ({topics}) "
        "GROUP BY store, topic ORDER BY store, topic"
    ).show(20, truncate=False)
    rows = copies(spark)
    acked = set(producers.acked)
    stores_of: dict[str, set[str]] = {}
    for (key, store), _count in rows.items():
        stores_of.setdefault(key, set()).add(store)
    per_store = Counter(store for (key, store) in rows if key in acked)
    names = {str(broker.store.absolute()): broker.name for broker in brokers}
    consumed = consumer.seen()
    summary = {
        "workdir": str(demo.workdir),
        "sent": producers.sent,
        "acked": len(acked),
        "failed_sends": producers.failed,
        "missing": len(acked - set(stores_of)),
        "duplicated_in_a_store": sum(1 for (key, _), n in rows.items() if key in acked and n > 1),
        "stored_on_both_brokers": sum(1 for key in acked if len(stores_of.get(key, ())) > 1),
        "not_consumed": len(acked - consumed),
        "consumed_more_than_once": sum(1 for key in acked if consumer.consumed.get(key, 0) > 1),
        "longest_producer_pause_s": round(producers.longest_pause_s, 3),
        "acked_per_broker": {names.get(store, store): n for store, n in sorted(per_store.items())},
    }
    _print(summary)
    return summary


def _print(summary: dict[str, Any]) -> None:
    print("\n== checks")
    print(
        f"acknowledged {summary['acked']} of {summary['sent']} sends "
        f"({summary['failed_sends']} failed, counted as not acknowledged); per broker "
        f"{summary['acked_per_broker']}"
    )
    print(
        f"in rmq.messages exactly once: missing {summary['missing']}, stored twice in one store "
        f"{summary['duplicated_in_a_store']}; stored on both brokers by a retry after the kill "
        f"{summary['stored_on_both_brokers']}"
    )
    print(
        f"consumed at least once: not consumed {summary['not_consumed']} "
        f"(consumed more than once: {summary['consumed_more_than_once']})"
    )
    print(f"longest pause any producer saw: {summary['longest_producer_pause_s']} s")


def copies(spark: Any) -> Counter[tuple[str, str]]:
    """(uniq key, store) -> rows of the demo topics in ``rmq.messages``."""
    topics = ", ".join(f"'{topic}'" for topic in TOPICS)
    rows = spark.sql(
        f"SELECT uniq_key, store FROM rmq.messages WHERE topic IN ({topics})"
    ).collect()
    return Counter((row.uniq_key, row.store) for row in rows if row.uniq_key)
