"""The consumer side of the broker: groups, their progress, receipt handles, long polling.

``service.ConsumeService`` is the entry point (used by ``consume_grpc.py`` and the embedded
broker). ``delivery.py`` is the delivery state machine (pure: every transition of a group's
progress in a queue and the effects it asks for); ``groups.py`` holds every group's state
under one lock per group and reads what the machine decides on (its vocabulary:
``pop_model.py``); ``hand_off.py`` stores the retry and DLQ copies a pop asks for, after the
pop and outside every lock; ``waiters.py`` is the one long-poll loop. ``ports.py`` names what
the consumer side needs from the rest of the broker and ``wiring.py`` builds those from the
store (ConsumeQueue), ``filters.py`` and RocketMQ's config files. See docs/BROKER.md,
"Consumers".
"""
