"""PURE: a transaction's state from what the store holds about it, one rule for the broker's
ledger (``broker/transactions/ledger.py``) and the Spark ``transactions`` view.

The evidence, strongest first: a committed copy of it in its real topic (``committed``), its
half copied to TRANS_CHECK_MAX_TIME_TOPIC after the last check (``discarded``), an op marker
naming one of its halves (``resolved``: a rollback, when no committed copy exists); with none
of these it is ``pending``.
"""

from __future__ import annotations

__all__ = ["PENDING", "PRECEDENCE", "STATES", "tx_state"]

PENDING = "pending"
# (state, the evidence that gives it), strongest first
PRECEDENCE = (("committed", "committed"), ("discarded", "discarded"), ("rolled_back", "resolved"))
STATES = (PENDING, "committed", "rolled_back", "discarded")


def tx_state(*, committed: bool, discarded: bool, resolved: bool) -> str:
    """The state the strongest piece of evidence gives (module docstring)."""
    evidence = {"committed": committed, "discarded": discarded, "resolved": resolved}
    return next((state for state, flag in PRECEDENCE if evidence[flag]), PENDING)
