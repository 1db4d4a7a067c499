"""Who may call ``rmq_spark.v1.StoreService`` (``store_rpc.py``): checked with auth on *and* off.

``auth_grpc.AuthInterceptor`` runs a ``StoreGate`` before either handler sees a request; it
resolves the request once (``resources.resolve``: the group, each entry's or message's topic)
and checks the rights on those names; the handler acts on the same ``Resolved``:

- Redeliver: only the store's identity (``auth.STORE_ACCESS_KEY``, signed with the secret in
  ``<store>/config/redelivery.secret``) or, with auth on, a user with ``Redeliver`` on each
  message's schedule topic (``acl.needs_of``). Refused: every entry ``BAD_REQUEST``
  ``REDELIVERY_REFUSED``.
- CheckTransaction: only the store's identity, with auth on or off (no user right grants
  it, a wildcard grant neither). Refused: status ``FORBIDDEN`` ``TRANSACTION_CHECK_REFUSED``.
- SendBack: the store's identity may name records by CommitLog offset or by receipt; anyone
  else only by receipt (the handler checks the receipt is current and the group's,
  ``consumer/send_back.py``), and with auth on only a user with ``Sub`` on the group and on
  each entry's topic, as an Ack of that delivery needs (``acl.needs_of``). An illegal group
  too is refused: every entry ``FORBIDDEN`` ``SEND_BACK_REFUSED``.

A refusal says nothing else (who, which rule, which record); the broker logs the reason.
"""

from __future__ import annotations

import logging
from typing import Any

from rmq_spark.broker.consumer.send_back import SEND_BACK_REFUSED
from rmq_spark.broker.proto import definition_pb2 as pb
from rmq_spark.broker.proto import service_pb2 as spb
from rmq_spark.broker.proto import store_service_pb2 as ssb
from rmq_spark.broker.redelivery import REDELIVERY_REFUSED
from rmq_spark.broker.security.acl import missing_rights, needs_of
from rmq_spark.broker.security.auth import Identity, Refusal
from rmq_spark.broker.security.resources import Refused, Resolved, resolve
from rmq_spark.broker.transactions.check_job import CHECK_REFUSED

__all__ = ["StoreGate"]

log = logging.getLogger("rmq_spark.broker")


class StoreGate:
    """The decision for one StoreService call (the shape of ``auth_grpc.Gate``)."""

    def __init__(self, method: str, identity: Identity | Refusal | None, *, enabled: bool) -> None:
        self.method = method
        self.identity = identity
        self.enabled = enabled

    @property
    def _is_store(self) -> bool:
        return isinstance(self.identity, Identity) and self.identity.user is None

    def admit(self, request: Any) -> tuple[Any | None, Resolved | None]:
        """As ``auth_grpc.Gate.admit``: ``(reply, None)`` or ``(None, resolved)``."""
        if not hasattr(request, "DESCRIPTOR"):  # Malformed: the handler answers BAD_REQUEST
            return None, None
        resolved = resolve(self.method, request)
        if self.method == "CheckTransaction":
            return self._check_transaction(resolved)
        if self.method == "Redeliver":
            reason = self._redeliver_problem(resolved)
            messages = request.messages
            status = pb.Status(code=pb.BAD_REQUEST, message=REDELIVERY_REFUSED)
        else:
            reason = self._send_back_problem(request, resolved)
            messages = request.entries
            status = pb.Status(code=pb.FORBIDDEN, message=SEND_BACK_REFUSED)
        if reason is None:
            assert isinstance(resolved, Resolved)
            return None, resolved
        name = self.identity.name if isinstance(self.identity, Identity) else "unauthenticated"
        log.info("broker: %s from %s refused: %s", self.method, name, reason)
        entries = []
        for message in messages:
            props = getattr(message, "system_properties", message)  # a Message, or an entry
            mid = props.message_id
            entries.append(spb.SendResultEntry(status=status, message_id=mid))
        return spb.SendMessageResponse(status=status, entries=entries), None

    def _check_transaction(self, resolved: Resolved | Refused) -> tuple[Any | None, Any]:
        if self._is_store and isinstance(resolved, Resolved):
            return None, resolved
        name = self.identity.name if isinstance(self.identity, Identity) else "unauthenticated"
        log.info("broker: CheckTransaction from %s refused: not the store identity", name)
        refused = pb.Status(code=pb.FORBIDDEN, message=CHECK_REFUSED)
        return ssb.CheckTransactionResponse(status=refused), None

    def _user_problem(self, resolved: Resolved) -> str | None:
        """Why the authenticated user lacks a right ``resolved`` needs (auth on)."""
        identity = self.identity
        if not isinstance(identity, Identity) or identity.user is None:
            return "not authenticated"
        needs = needs_of(resolved)
        if needs is None:
            return f"no rule for {self.method}'s rights"
        missing = missing_rights(identity.user, needs)
        return f"may not {missing[0]}" if missing else None

    def _redeliver_problem(self, resolved: Resolved | Refused) -> str | None:
        if isinstance(resolved, Refused):
            return resolved.message
        if self._is_store:
            return None
        if not self.enabled or not isinstance(self.identity, Identity):
            return "only the store identity or a user with Redeliver may redeliver"
        return self._user_problem(resolved)

    def _send_back_problem(self, request: Any, resolved: Resolved | Refused) -> str | None:
        if isinstance(resolved, Refused):
            return resolved.message
        if self._is_store:
            return None
        if any(entry.WhichOneof("record") == "physical_offset" for entry in request.entries):
            return "only the store identity may name a record by offset"
        if not self.enabled:
            return None  # a receipt of the group is the right (as for an Ack)
        return self._user_problem(resolved)
