"""Delay-level and timer redelivery: RocketMQ's ScheduleMessageService as a job.

``schedule.py`` and ``offsets.py`` are PURE; ``redeliver.py`` runs one pass; ``job.py`` runs
the job (``rmq-spark schedule``, ``jobs/schedule.py``). See docs/DELAY.md.
"""

from __future__ import annotations

__all__: list[str] = []
