"""Several brokers as one log: routes across brokers (from RocketMQ name servers) and the
producer's latency fault table. See docs/CLUSTER.md."""
