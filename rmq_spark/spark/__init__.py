"""Spark integration: the session builder, the rocketmq data source, Delta tables."""
