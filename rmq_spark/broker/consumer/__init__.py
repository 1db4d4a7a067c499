"""The consumer side of the broker: groups, their progress, receipt handles, long polling.

``service.ConsumeService`` is the entry point (used by ``consume_grpc.py`` and the embedded
broker); ``ports.py`` names what it needs from the rest of the broker and ``wiring.py``
builds those from the store (ConsumeQueue), ``filters.py`` and RocketMQ's config files.
See docs/BROKER.md, "Consumers".
"""
