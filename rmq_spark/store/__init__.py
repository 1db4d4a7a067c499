"""The CommitLog store: RocketMQ-compatible segments, put path, flush, recovery."""
