"""RocketMQ's own config files under ``<store>/config/``: their codec and each file."""
