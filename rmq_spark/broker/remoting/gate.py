"""Who may send a remoting request: the 4.x ACL signature and the ACL of each request code.

With ``broker.auth_enabled`` off every call passes, as on the gRPC port. With it on, a request
must carry ``AccessKey`` and ``Signature`` extFields as RocketMQ's ``AclClientRPCHook`` writes
them: ``Signature`` = Base64(HMAC-SHA1(secret key, the values of every other extField in key
order, concatenated, then the body)) (``AclUtils.combineRequestContent``, ``AclSigner``). The
users and their policies are the gRPC port's (``broker.auth_users_file``, ``acl.allowed``);
the rights a code needs are ``permissions.PERMISSIONS``'s row. An unsigned, badly signed or
unknown-key request, a code without a row, a privileged (``admin``) code from a user who is
not a super user, or a missing right is answered ``NO_PERMISSION`` and its handler never runs.

Unlike the gRPC signature, the 4.x one carries no time: a captured request can be replayed
(as against a RocketMQ 4.x broker). Use TLS where that matters.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
from collections.abc import Mapping
from pathlib import Path

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.remoting.calls import Call, response_to
from rmq_spark.broker.remoting.codec import RemotingCommand
from rmq_spark.broker.remoting.codes import ResponseCode
from rmq_spark.broker.remoting.permissions import needs_of_call
from rmq_spark.broker.security.acl import User, load_users, missing_rights
from rmq_spark.broker.security.auth import Identity, require_private

__all__ = ["ACCESS_KEY", "RemotingGate", "SIGNATURE", "sign_request", "signed_command"]

log = logging.getLogger("rmq_spark.broker")

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
_UNKNOWN_SECRET = "\0unknown"  # an unknown key is checked against this: the same work


def sign_request(ext_fields: Mapping[str, str], body: bytes, secret_key: str) -> str:
    """The ``Signature`` of a request with these extFields (``Signature`` itself left out)."""
    content = "".join(value for key, value in sorted(ext_fields.items()) if key != SIGNATURE)
    digest = hmac.new(secret_key.encode(), content.encode() + body, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def signed_command(
    code: int, fields: Mapping[str, str], credentials: tuple[str, str] | None
) -> RemotingCommand:
    """A request with ``fields``, signed as RocketMQ's ``AclClientRPCHook`` signs it when
    ``credentials`` (access key, secret key) are given."""
    ext = dict(fields)
    if credentials is not None:
        ext[ACCESS_KEY] = credentials[0]
        ext[SIGNATURE] = sign_request(ext, b"", credentials[1])
    return RemotingCommand(code=code, ext_fields=ext, language="PYTHON")


class RemotingGate:
    """``gate(call)`` -> (refusal or ``None``, ``Identity`` or ``None``)."""

    def __init__(self, config: BrokerConfig, users: Mapping[str, User] | None = None) -> None:
        self._enabled = config.auth_enabled
        if users is None and self._enabled:
            path = Path(config.auth_users_file)
            users = load_users(path)
            require_private(path, "broker.auth_users_file", "every user's secret key")
        self._users = dict(users or {})

    def __call__(self, call: Call) -> tuple[RemotingCommand | None, Identity | None]:
        if not self._enabled:
            return None, None
        user = self._authenticate(call)
        if isinstance(user, str):
            return self._refuse(call, user), None
        needs = needs_of_call(call)
        if needs is None:
            problem = f"request code {call.code} is not served to users when auth is on"
        elif needs == "admin":
            problem = "" if user.super_user else f"request code {call.code} needs a super user"
        else:
            missing = missing_rights(user, needs)
            problem = "no right to " + ", ".join(str(n) for n in missing) if missing else ""
        if problem:
            log.info("remoting: refused %s from %s: %s", user.name, call.link.peer_host, problem)
            return self._refuse(call, f"{user.name}: {problem}"), None
        return None, Identity(user.name, user)

    def _authenticate(self, call: Call) -> User | str:
        ext = call.ext
        access_key, given = ext.get(ACCESS_KEY), ext.get(SIGNATURE)
        if not access_key or not given:
            return "authentication failed: the request is not signed (AccessKey, Signature)"
        user = self._users.get(access_key)
        secret = user.secret_key if user is not None else _UNKNOWN_SECRET
        expected = sign_request(ext, call.command.body, secret)
        valid = hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace"))
        if user is None or not valid:
            return "authentication failed: unknown access key or bad signature"
        return user

    @staticmethod
    def _refuse(call: Call, message: str) -> RemotingCommand:
        return response_to(call.command, ResponseCode.NO_PERMISSION, message)
