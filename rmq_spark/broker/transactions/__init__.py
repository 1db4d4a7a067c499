"""Transactional messages (docs/TRANSACTIONS.md): half messages, EndTransaction, check-back.

``records.py`` says what RocketMQ writes (the half, the committed copy, the op marker, the
discard copy) and what a transaction id holds; ``service.py`` ends transactions and keeps
which ones are resolved; ``check.py`` is the check-back (RocketMQ's
``TransactionalMessageCheckService``).
"""
