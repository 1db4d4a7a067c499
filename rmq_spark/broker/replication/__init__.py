"""Master/slave replication over RocketMQ's HA protocol (docs/REPLICATION.md)."""
