"""Consumers' message filters: TAG and SQL92 (RocketMQ's selector grammar)."""
