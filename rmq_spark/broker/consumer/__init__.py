"""The consumer side of the broker: groups, their progress, receipt handles, long polling.

``service.ConsumeService`` is the entry point (used by ``consume_grpc.py`` and the embedded
broker); ``ports.py`` names what it needs from the rest of the broker and ``stand_ins.py``
provides simple versions of those. See docs/BROKER.md, "Consumers".
"""
