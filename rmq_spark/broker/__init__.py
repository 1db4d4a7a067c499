"""The broker: the put service over the store, RocketMQ 5 gRPC API, process lifecycle."""
