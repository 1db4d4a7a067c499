"""Transactional messages (docs/TRANSACTIONS.md): half messages, EndTransaction, check-back.

``records.py`` says what RocketMQ writes (the half, the committed copy, the op marker, the
discard copy) and what a transaction id holds; ``service.py`` ends transactions and keeps
which ones are resolved; ``check_plan.py`` is the check-back's rule (RocketMQ's
``TransactionalMessageCheckService``), run by ``check.py`` in the broker or by the txcheck
job, whose requests ``check_job.py`` acts on.
"""
