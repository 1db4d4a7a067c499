"""Units of authentication and the ACL: signatures as the official client makes them, the
skew window, policy matching (wildcards, precedence, deny by default), the users file, the
store's redelivery secret and the redelivery journal."""

from __future__ import annotations

import stat
from pathlib import Path
from types import ModuleType

import pytest

from rmq_spark.broker.redelivery_journal import RedeliveredCopy, RedeliveryJournal
from rmq_spark.broker.security.acl import Action, Need, User, allowed, parse_policy, parse_users
from rmq_spark.broker.security.auth import (
    STORE_ACCESS_KEY,
    Authenticator,
    Identity,
    Refusal,
    ensure_redelivery_secret,
    format_date_time,
    parse_authorization,
    read_redelivery_secret,
    sign,
    signature_metadata,
)
from rmq_spark.clock import ManualClock
from rmq_spark.errors import ConfigError, StoreMetadataError

NOW_MS = 1_790_000_000_000


def test_our_signature_is_the_official_clients(rocketmq: ModuleType) -> None:
    from rocketmq.v5.util.signature import Signature

    assert sign("sk-1", "20261126T033418Z") == Signature.sign("sk-1", "20261126T033418Z")
    headers = dict(signature_metadata("ak-1", "sk-1", NOW_MS))
    credential = parse_authorization(headers["authorization"], headers["x-mq-date-time"])
    assert not isinstance(credential, str)
    assert credential.access_key == "ak-1"
    assert credential.signature == sign("sk-1", format_date_time(NOW_MS))


def _authenticator(skew_ms: int = 60_000, local_offset_ms: int = 0) -> Authenticator:
    users = {"alice": User("alice", "alice-secret-1")}
    return Authenticator(
        users,
        enabled=True,
        skew_ms=skew_ms,
        clock=ManualClock(NOW_MS),
        store_secret="store-secret",
        local_offset_ms=local_offset_ms,
    )


def test_the_skew_window_bounds_a_replay_and_accepts_a_local_time_stamp() -> None:
    auth = _authenticator()
    ok = auth.authenticate(dict(signature_metadata("alice", "alice-secret-1", NOW_MS - 59_000)))
    assert isinstance(ok, Identity) and ok.name == "alice" and not ok.is_store
    stale = auth.authenticate(dict(signature_metadata("alice", "alice-secret-1", NOW_MS - 61_000)))
    assert isinstance(stale, Refusal) and "x-mq-date-time" in stale.message
    # The Python client stamps local wall time with a Z: a broker at UTC+2 reads it as such.
    local = _authenticator(local_offset_ms=2 * 3_600_000)
    stamp = signature_metadata("alice", "alice-secret-1", NOW_MS + 2 * 3_600_000)
    assert isinstance(local.authenticate(dict(stamp)), Identity)


def test_unknown_users_and_bad_signatures_get_the_same_refusal() -> None:
    auth = _authenticator()
    wrong = auth.authenticate(dict(signature_metadata("alice", "nope", NOW_MS)))
    unknown = auth.authenticate(dict(signature_metadata("bob", "alice-secret-1", NOW_MS)))
    assert isinstance(wrong, Refusal) and wrong == unknown
    assert auth.authenticate({}) is None  # unsigned
    store = auth.authenticate(dict(signature_metadata(STORE_ACCESS_KEY, "store-secret", NOW_MS)))
    assert isinstance(store, Identity) and store.is_store
    with pytest.raises(ConfigError, match="reserved"):
        Authenticator(
            {STORE_ACCESS_KEY: User(STORE_ACCESS_KEY, "x" * 8)},
            enabled=True,
            skew_ms=1000,
            clock=ManualClock(0),
            store_secret=None,
        )


def _user(*policies: dict[str, object], super_user: bool = False) -> User:
    return User(
        "u",
        "secret-12",
        super_user,
        tuple(parse_policy(p, f"p{i}") for i, p in enumerate(policies)),
    )


def test_policies_match_wildcards_the_most_specific_decides_and_deny_is_the_default() -> None:
    user = _user(
        {"resource": "Topic:order-*", "actions": ["Pub"]},
        {"resource": "Topic:order-secret", "actions": ["Pub"], "decision": "Deny"},
        {"resource": "Topic:*", "actions": ["Sub"]},
        {"resource": "Group:billing", "actions": ["All"]},
    )
    assert allowed(user, Need("Topic", "order-1", (Action.PUB,)))
    assert not allowed(user, Need("Topic", "order-secret", (Action.PUB,)))
    assert not allowed(user, Need("Topic", "payments", (Action.PUB,)))  # no policy: denied
    assert allowed(user, Need("Topic", "payments", (Action.SUB,)))
    assert allowed(user, Need("Group", "billing", (Action.UPDATE,)))
    assert not allowed(user, Need("Group", "billing", (Action.REDELIVER,)))  # All excludes it
    assert not allowed(user, Need("Group", "other", (Action.SUB,)))
    assert allowed(_user(super_user=True), Need("Topic", "x", (Action.REDELIVER,)))


def _policy(resource: str, action: str) -> dict[str, object]:
    return {"secret_key": "long-enough", "policies": [{"resource": resource, "actions": [action]}]}


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"secret_key": "short"}, "secret_key"),
        ({"secret_key": "long-enough", "user_type": "root"}, "user_type"),
        (_policy("Queue:x", "Pub"), "resource"),
        (_policy("Topic:x", "Fly"), "actions"),
        (_policy("Topic:a*b", "Pub"), "resource"),
        ({"secret_key": "long-enough", "colour": "red"}, "unknown keys"),
    ],
)
def test_a_bad_users_file_names_the_key(table: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        parse_users({"users": {"alice": table}}, "users.toml")


def test_the_redelivery_secret_is_made_once_readable_by_its_owner_only(tmp_path: Path) -> None:
    assert read_redelivery_secret(tmp_path) is None
    secret = ensure_redelivery_secret(tmp_path)
    path = tmp_path / "config" / "redelivery.secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_redelivery_secret(tmp_path) == secret == read_redelivery_secret(tmp_path)
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        ensure_redelivery_secret(tmp_path)


def test_the_redelivery_journal_survives_reopen_drops_deleted_records_and_a_torn_tail(
    tmp_path: Path,
) -> None:
    journal = RedeliveryJournal.open(tmp_path)
    with journal.lock:
        journal.record(100, RedeliveredCopy("orders", 1, 7, 5000))
        journal.record(900, RedeliveredCopy("orders", 2, 8, 6000))
    journal.sync()
    with (tmp_path / "redelivered.log").open("a") as handle:
        handle.write("950 ord")  # a crash in the middle of a line
    again = RedeliveryJournal.open(tmp_path, min_offset=500)
    assert again.lookup(100) is None  # its schedule record was deleted: cannot be named
    assert again.lookup(900) == RedeliveredCopy("orders", 2, 8, 6000)
    assert len(again) == 1
    (tmp_path / "redelivered.log").write_text("junk\n900 orders 2 8 6000\n")
    with pytest.raises(StoreMetadataError, match="line 1"):
        RedeliveryJournal.open(tmp_path)


def test_the_example_users_file_and_production_config_load() -> None:
    from rmq_spark.broker.security.acl import load_users
    from rmq_spark.config import load_config

    root = Path(__file__).resolve().parents[2]
    users = load_users(root / "conf" / "users.example.toml")
    assert users["admin"].super_user
    assert allowed(users["spark"], Need("Group", "spark-orders", (Action.UPDATE,)))
    assert not allowed(users["orders-app"], Need("Topic", "payments", (Action.PUB,)))
    config = load_config(root / "conf" / "rmq.production.toml", {})
    assert config.broker.auth_enabled and config.broker.auth_users_file == "conf/users.toml"


def test_the_redelivery_journal_prunes_deleted_records_while_open(tmp_path: Path) -> None:
    journal = RedeliveryJournal.open(tmp_path)
    journal.prune_every = 3
    with journal.lock:
        journal.record(10, RedeliveredCopy("orders", 0, 0, 100), min_offset=0)
        journal.record(20, RedeliveredCopy("orders", 0, 1, 200), min_offset=0)
        journal.record(30, RedeliveredCopy("orders", 0, 2, 300), min_offset=15)  # prunes
        journal.record(40, RedeliveredCopy("orders", 0, 3, 400), min_offset=15)
    journal.sync()
    assert (journal.lookup(10), len(journal)) == (None, 3)
    reopened = RedeliveryJournal.open(tmp_path)
    assert sorted(o for o in (10, 20, 30, 40) if reopened.lookup(o)) == [20, 30, 40]
