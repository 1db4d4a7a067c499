"""Who may do what: users, their ACL policies, and the rights each RPC needs.

Owns the ACL model (RocketMQ 5's ACL 2.0 shape: a user is ``Super`` or ``Normal``; a normal
user's policies name a resource ``Topic:orders``, ``Topic:order-*`` (prefix), ``Topic:*``,
``Group:billing`` or ``*``, the actions it covers and a decision, Allow or Deny), the users file
(``load_users``: TOML, read by the broker, never stored in the store), and ``needs_of``: the one
table that says which rights every RPC needs, on the resources ``resources.resolve`` resolved
its request to.

Every resource is checked under its full name (``resources.Name.full``: ``namespace%name``),
the very name the handler is then given. A prefix's ``*`` stands for characters other than
``%``, so a prefix never reaches across a namespace separator: ``Topic:A*`` matches ``A`` and
``A-1`` but not ``A%orders`` (topic ``orders`` of namespace ``A``) nor ``Ab%orders``; grant a
namespace with ``Topic:A%*``. A bare ``*`` (``Topic:*``, ``*``) still matches every name.

Deny by default: a right no policy allows is refused. When several policies match, the most
specific one decides (a literal name before a prefix, a longer prefix before a shorter one,
a prefix before ``*``), and Deny wins a tie, as in RocketMQ's DefaultAuthorizationHandler.

PURE: no sockets, no clock; ``load_users`` reads one file. Does not own authentication
(``auth.py``) nor the gRPC wiring (``auth_grpc.py``).
"""

from __future__ import annotations

import enum
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmq_spark.broker.security.resources import Resolved
from rmq_spark.errors import ConfigError

__all__ = [
    "Action",
    "Need",
    "Policy",
    "User",
    "allowed",
    "load_users",
    "missing_rights",
    "needs_of",
    "parse_policy",
    "parse_users",
    "rights_names",
]


class Action(enum.Enum):
    """What a policy allows on a resource."""

    PUB = "Pub"  # send to a topic (SendMessage, EndTransaction, RecallMessage)
    SUB = "Sub"  # consume a topic / as a group (receive, ack, assignments, offsets read)
    UPDATE = "Update"  # change a group's committed offsets (UpdateOffset: Spark commits, resets)
    GET = "Get"  # read a group's committed offsets (GetOffset)
    REDELIVER = "Redeliver"  # the schedule job's redelivery of due delayed messages
    ALL = "All"  # every action above except Redeliver (which is only ever granted by name)


_NAMESPACE_SEPARATOR = "%"
_ALL_COVERS = frozenset({Action.PUB, Action.SUB, Action.UPDATE, Action.GET})
_RESOURCE_TYPES = ("Topic", "Group")


@dataclass(frozen=True, slots=True)
class Policy:
    """One ACL entry: ``resource_type`` ``Topic``/``Group``/``*``; ``name`` literal, or a
    prefix when ``prefix`` (``""`` with ``prefix`` is ``*``)."""

    resource_type: str
    name: str
    prefix: bool
    actions: frozenset[Action]
    allow: bool = True

    def matches(self, resource_type: str, name: str) -> bool:
        if self.resource_type not in ("*", resource_type):
            return False
        if not self.prefix:
            return name == self.name
        # A prefix stops at a namespace separator; a bare ``*`` (empty prefix) matches all.
        return name.startswith(self.name) and (
            not self.name or _NAMESPACE_SEPARATOR not in name[len(self.name) :]
        )

    def covers(self, action: Action) -> bool:
        return action in self.actions or (Action.ALL in self.actions and action in _ALL_COVERS)

    @property
    def specificity(self) -> tuple[int, int, int]:
        """Larger is more specific: literal > prefix (longer first) > any; typed > ``*``."""
        return (0 if self.prefix else 1, len(self.name), 0 if self.resource_type == "*" else 1)


@dataclass(frozen=True, slots=True)
class User:
    """A user of the users file. ``secret_key`` is never printed (``repr`` hides it)."""

    name: str
    secret_key: str = field(repr=False)
    super_user: bool = False
    policies: tuple[Policy, ...] = ()


@dataclass(frozen=True, slots=True)
class Need:
    """A right an RPC needs: any one of ``actions`` on ``resource_type:name``."""

    resource_type: str
    name: str
    actions: tuple[Action, ...]

    def __str__(self) -> str:
        return f"{'|'.join(a.value for a in self.actions)} on {self.resource_type}:{self.name}"


def allowed(user: User, need: Need) -> bool:
    """Whether ``user`` has ``need``: a super user has every right; else the most specific
    matching policy decides, Deny on a tie, and no match is a refusal."""
    if user.super_user:
        return True
    for action in need.actions:
        best: tuple[int, int, int] | None = None
        decision = False
        for policy in user.policies:
            if not policy.matches(need.resource_type, need.name) or not policy.covers(action):
                continue
            rank = policy.specificity
            if best is None or rank > best:
                best, decision = rank, policy.allow
            elif rank == best and not policy.allow:
                decision = False
        if decision:
            return True
    return False


def parse_policy(entry: Mapping[str, Any], where: str) -> Policy:
    """A policy from its TOML table ``{resource, actions, decision}``.

    Raises
    ------
    ConfigError
        A bad resource, action or decision; the message names ``where``.
    """
    resource = entry.get("resource")
    if not isinstance(resource, str) or not resource:
        raise ConfigError(f"{where}.resource", "expected 'Topic:name', 'Group:name' or '*'")
    if resource == "*":
        resource_type, pattern = "*", "*"
    else:
        resource_type, sep, pattern = resource.partition(":")
        if not sep or resource_type not in _RESOURCE_TYPES or not pattern:
            raise ConfigError(
                f"{where}.resource", f"expected 'Topic:name', 'Group:name' or '*', got {resource!r}"
            )
    if "*" in pattern[:-1]:
        raise ConfigError(f"{where}.resource", f"'*' may only end a name, got {resource!r}")
    names = entry.get("actions")
    if not isinstance(names, list) or not names:
        raise ConfigError(f"{where}.actions", 'expected a list such as ["Pub", "Sub"]')
    by_name = {action.value.lower(): action for action in Action}
    actions = set()
    for name in names:
        if not isinstance(name, str) or name.lower() not in by_name:
            choices = ", ".join(a.value for a in Action)
            raise ConfigError(f"{where}.actions", f"unknown action {name!r} (one of {choices})")
        actions.add(by_name[name.lower()])
    decision = str(entry.get("decision", "Allow"))
    if decision.lower() not in ("allow", "deny"):
        raise ConfigError(f"{where}.decision", f"expected Allow or Deny, got {decision!r}")
    unknown = set(entry) - {"resource", "actions", "decision"}
    if unknown:
        raise ConfigError(f"{where}", f"unknown keys {sorted(unknown)}")
    prefix = pattern.endswith("*")
    return Policy(
        resource_type,
        pattern[:-1] if prefix else pattern,
        prefix,
        frozenset(actions),
        allow=decision.lower() == "allow",
    )


def parse_users(raw: Mapping[str, Any], source: str) -> dict[str, User]:
    """The ``[users.<access key>]`` tables of a users file (``source`` names it in errors)."""
    tables = raw.get("users", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{source}", "users: expected tables [users.<access key>]")
    users: dict[str, User] = {}
    for name, table in tables.items():
        where = f"{source}: users.{name}"
        if not isinstance(table, dict):
            raise ConfigError(f"{where}", "expected a table")
        secret = table.get("secret_key")
        if not isinstance(secret, str) or len(secret) < 8:
            raise ConfigError(f"{where}.secret_key", "expected a string of at least 8 characters")
        user_type = str(table.get("user_type", "Normal"))
        if user_type.lower() not in ("normal", "super"):
            raise ConfigError(f"{where}.user_type", f"expected Normal or Super, got {user_type!r}")
        entries = table.get("policies", [])
        if not isinstance(entries, list):
            raise ConfigError(f"{where}.policies", "expected a list of tables")
        policies = tuple(
            parse_policy(entry if isinstance(entry, dict) else {}, f"{where}.policies[{index}]")
            for index, entry in enumerate(entries)
        )
        unknown = set(table) - {"secret_key", "user_type", "policies"}
        if unknown:
            raise ConfigError(f"{where}", f"unknown keys {sorted(unknown)}")
        users[name] = User(name, secret, user_type.lower() == "super", policies)
    return users


def load_users(path: Path) -> dict[str, User]:
    """Read the users file (``broker.auth_users_file``).

    Raises
    ------
    ConfigError
        The file is missing, is not TOML, or holds a bad user or policy.
    """
    try:
        with path.open("rb") as handle:
            raw = tomllib.load(handle)
    except OSError as err:
        raise ConfigError("broker.auth_users_file", f"cannot read {path}: {err.strerror}") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError("broker.auth_users_file", f"{path} is not valid TOML: {err}") from err
    return parse_users(raw, str(path))


# --- the rights of every RPC ---------------------------------------------------------------

_PUB = (Action.PUB,)
_SUB = (Action.SUB,)
# (actions on the group, actions on each topic) of a ``Resolved``'s ``rights``; a group is
# checked only when the request names one (a producer's Heartbeat names none).
_RIGHTS: dict[str, tuple[tuple[Action, ...], tuple[Action, ...]]] = {
    "QueryRoute": ((), (Action.PUB, Action.SUB)),
    "Heartbeat": (_SUB, ()),
    "SendMessage": ((), _PUB),
    "EndTransaction": ((), _PUB),
    "RecallMessage": ((), _PUB),
    "ReceiveMessage": (_SUB, _SUB),
    "PullMessage": (_SUB, _SUB),
    "AckMessage": (_SUB, _SUB),
    "ChangeInvisibleDuration": (_SUB, _SUB),
    "ForwardMessageToDeadLetterQueue": (_SUB, _SUB),
    "QueryAssignment": (_SUB, _SUB),
    "NotifyClientTermination": (_SUB, ()),
    "Telemetry": (_SUB, _SUB),  # a consumer's settings: its group and topics
    "Telemetry/publishing": ((), _PUB),  # a producer's settings: the topics it declares
    "UpdateOffset": ((Action.UPDATE,), _SUB),
    "GetOffset": ((Action.GET, Action.SUB), _SUB),
    "QueryOffset": ((), _SUB),
    "SyncLiteSubscription": (_SUB, _SUB),
    # StoreService: a send-back needs what an Ack of the delivery needs (store_gate.py)
    "SendBack": (_SUB, _SUB),
    "Redeliver": ((), (Action.REDELIVER,)),
    "CheckTransaction": ((), ()),  # no user right: the store identity only (store_gate.py)
}


def rights_names() -> frozenset[str]:
    """The ``Resolved.rights`` keys ``needs_of`` knows."""
    return frozenset(_RIGHTS)


def needs_of(resolved: Resolved) -> list[Need] | None:
    """The rights a request needs, on exactly the names it was resolved to
    (``resources.resolve``); ``None`` for rights this table does not know (refused when auth
    is on: deny by default)."""
    rights = _RIGHTS.get(resolved.rights)
    if rights is None:
        return None
    group_actions, topic_actions = rights
    needs = []
    if group_actions and resolved.group is not None:
        needs.append(Need("Group", resolved.group.full, group_actions))
    if topic_actions:
        needs += [Need("Topic", topic.full, topic_actions) for topic in resolved.topics]
    return needs


def missing_rights(user: User, needs: Sequence[Need]) -> list[Need]:
    """The needs ``user`` lacks (empty: allowed)."""
    return [need for need in needs if not allowed(user, need)]
