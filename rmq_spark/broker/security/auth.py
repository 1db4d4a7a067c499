"""Authentication as RocketMQ 5's clients speak it: ``MQv2-HMAC-SHA1`` request signatures.

Owns the signature scheme (what the official clients send with ``Credentials(ak, sk)``:
``authorization: MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time,
Signature=<hex HMAC-SHA1(sk, x-mq-date-time)>`` beside ``x-mq-date-time: yyyyMMdd'T'HHmmss'Z'``;
``sign``/``signature_metadata`` make it, ``parse_authorization`` reads it as the Java proxy's
DefaultAuthenticationContextBuilder does), ``Authenticator`` (who a request's metadata says it
is, or why not), and the store's redelivery secret (``<store>/config/redelivery.secret``, 0600,
made by the broker on first start): the credential of the built-in identity
``STORE_ACCESS_KEY``, which only processes that can read the store know and which has one
right, ``Redeliver`` (docs/BROKER.md, "Authentication and ACL").

The signature covers the date-time header only (the protocol's choice), so the broker refuses
a date-time further than ``broker.auth_skew_ms`` from its clock: a captured header is good for
that window and no longer. The Python client 5.1.2 stamps its *local* wall time with a ``Z``;
a stamp is accepted when it is within the window read as UTC or as the broker's local time.

Does not own: the users file and the ACL (``acl.py``), the gRPC wiring (``auth_grpc.py``).
"""

from __future__ import annotations

import calendar
import hmac
import ipaddress
import logging
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from hashlib import sha1
from pathlib import Path

from rmq_spark.broker.config import BrokerConfig, parse_listen
from rmq_spark.broker.security.acl import User, load_users
from rmq_spark.clock import Clock
from rmq_spark.errors import ConfigError

__all__ = [
    "AUTHORIZATION_HEADER",
    "Authenticator",
    "Credential",
    "DATE_TIME_HEADER",
    "Identity",
    "REDELIVERY_SECRET_FILE",
    "Refusal",
    "RequestSigner",
    "SIGNATURE_ALGORITHM",
    "STORE_ACCESS_KEY",
    "authenticator_for",
    "ensure_redelivery_secret",
    "format_date_time",
    "open_listener_warning",
    "parse_authorization",
    "parse_date_time",
    "read_redelivery_secret",
    "require_private",
    "sign",
    "signature_metadata",
]

AUTHORIZATION_HEADER = "authorization"
DATE_TIME_HEADER = "x-mq-date-time"
SIGNATURE_ALGORITHM = "MQv2-HMAC-SHA1"
STORE_ACCESS_KEY = "rmq-spark-redeliver"
"""The access key of the store's own identity (the schedule job): never a users-file name."""
REDELIVERY_SECRET_FILE = "redelivery.secret"
log = logging.getLogger("rmq_spark.broker")
_DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
_SECRET_BYTES = 32


def sign(secret_key: str, date_time: str) -> str:
    """Hex HMAC-SHA1 of ``date_time`` keyed by ``secret_key`` (the clients' ``Signature``)."""
    mac = hmac.new(secret_key.encode("utf-8"), date_time.encode("utf-8"), sha1)
    return mac.hexdigest()


def format_date_time(epoch_ms: int) -> str:
    """``x-mq-date-time`` for ``epoch_ms`` in UTC: ``20261126T033418Z``."""
    return time.strftime(_DATE_TIME_FORMAT, time.gmtime(epoch_ms // 1000))


def parse_date_time(text: str) -> int | None:
    """``x-mq-date-time`` read as UTC epoch milliseconds; ``None`` if malformed."""
    try:
        return calendar.timegm(time.strptime(text, _DATE_TIME_FORMAT)) * 1000
    except (ValueError, OverflowError):
        return None


def signature_metadata(
    access_key: str, secret_key: str, now_ms: int
) -> tuple[tuple[str, str], ...]:
    """The two headers a signed request carries (as the official clients build them)."""
    date_time = format_date_time(now_ms)
    authorization = (
        f"{SIGNATURE_ALGORITHM} Credential={access_key}, SignedHeaders={DATE_TIME_HEADER}, "
        f"Signature={sign(secret_key, date_time)}"
    )
    return ((DATE_TIME_HEADER, date_time), (AUTHORIZATION_HEADER, authorization))


@dataclass(frozen=True, slots=True)
class Credential:
    """What a request claims: its access key, signature (hex) and signed date-time."""

    access_key: str
    signature: str
    date_time: str


def parse_authorization(header: str, date_time: str) -> Credential | str:
    """Read an ``authorization`` header as the Java proxy does, or say what is wrong.

    ``<algorithm> k=v, k=v, ...``: ``Credential`` is the access key (before any ``/``),
    ``Signature`` the hex signature; other keys are ignored.
    """
    if not date_time:
        return "datetime is null"
    algorithm, sep, rest = header.partition(" ")
    if not sep or not algorithm:
        return "authentication header is incorrect"
    fields: dict[str, str] = {}
    for item in rest.split(","):
        key, eq, value = item.strip().partition("=")
        if not eq:
            return "authentication keyValues length is incorrect"
        fields[key] = value
    access_key = fields.get("Credential", "").split("/")[0]
    if not access_key:
        return "username cannot be null"
    return Credential(access_key, fields.get("Signature", ""), date_time)


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated caller: a users-file ``user``, or the store identity (``user`` None)."""

    name: str
    user: User | None

    @property
    def is_store(self) -> bool:
        return self.user is None


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is not authenticated (the status message; reveals no user or key)."""

    message: str


class Authenticator:
    """Checks a request's signature headers against the users and the store secret.

    Parameters
    ----------
    users
        Access key -> user (``acl.load_users``); empty when auth is off.
    enabled
        Auth on: every RPC must be signed by a user, and the ACL applies. Off: requests need
        no signature, but a redelivery request must still be signed by the store identity.
    skew_ms
        Largest distance between a request's ``x-mq-date-time`` and the broker's clock.
    clock
        The broker's clock.
    store_secret
        The store's redelivery secret (``ensure_redelivery_secret``); ``None``: no store
        identity (redelivery is then refused to everyone but users with the right).
    local_offset_ms
        The broker's UTC offset: stamps of clients that send local time are read with it too.
    """

    def __init__(
        self,
        users: Mapping[str, User],
        *,
        enabled: bool,
        skew_ms: int,
        clock: Clock,
        store_secret: str | None,
        local_offset_ms: int = 0,
    ) -> None:
        if STORE_ACCESS_KEY in users:
            raise ConfigError(
                "broker.auth_users_file", f"the user name {STORE_ACCESS_KEY!r} is reserved"
            )
        self._users = dict(users)
        self.enabled = enabled
        self._skew_ms = skew_ms
        self._clock = clock
        self._store_secret = store_secret
        self._local_offset_ms = local_offset_ms

    def authenticate(self, metadata: Mapping[str, str]) -> Identity | Refusal | None:
        """The caller ``metadata`` proves, a ``Refusal``, or ``None`` when it is unsigned."""
        header = metadata.get(AUTHORIZATION_HEADER, "")
        if not header:
            return None
        credential = parse_authorization(header, metadata.get(DATE_TIME_HEADER, ""))
        if isinstance(credential, str):
            return Refusal(f"authentication failed: {credential}")
        if credential.access_key == STORE_ACCESS_KEY:
            secret, user = self._store_secret, None
        else:
            found = self._users.get(credential.access_key)
            secret, user = (found.secret_key, found) if found is not None else (None, None)
        # An unknown user is checked against a throwaway key: the same work and the same reply.
        expected = sign(secret if secret is not None else "\0unknown", credential.date_time)
        given = credential.signature.lower().encode("utf-8", "replace")
        valid = hmac.compare_digest(expected.encode("ascii"), given)
        if secret is None or not valid:
            return Refusal("authentication failed: unknown access key or bad signature")
        stamp_ms = parse_date_time(credential.date_time)
        if stamp_ms is None:
            return Refusal(
                f"authentication failed: bad {DATE_TIME_HEADER} {credential.date_time!r}"
            )
        now_ms = self._clock.now_ms()
        skew = min(abs(now_ms - stamp_ms), abs(now_ms + self._local_offset_ms - stamp_ms))
        if skew > self._skew_ms:
            return Refusal(
                f"authentication failed: {DATE_TIME_HEADER} {credential.date_time} is more than "
                f"{self._skew_ms} ms from the broker's clock (a replay, or a clock to fix)"
            )
        return Identity(credential.access_key, user)


def _secret_path(store_root: Path) -> Path:
    return Path(store_root) / "config" / REDELIVERY_SECRET_FILE


def read_redelivery_secret(store_root: Path) -> str | None:
    """The store's redelivery secret, ``None`` if no broker made one yet.

    Raises
    ------
    ConfigError
        The file exists but cannot be read or is empty.
    """
    path = _secret_path(store_root)
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}", f"cannot read the redelivery secret: {err}") from err
    if not text:
        raise ConfigError(
            f"{path}", "the redelivery secret is empty (delete it; the broker makes a new one)"
        )
    return text


def ensure_redelivery_secret(store_root: Path) -> str:
    """The store's redelivery secret, made (random, mode 0600, fsynced) if missing.

    Raises
    ------
    ConfigError
        It cannot be read or written, or others may read it (mode wider than 0600).
    """
    path = _secret_path(store_root)
    existing = read_redelivery_secret(store_root)
    if existing is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        secret = secrets.token_hex(_SECRET_BYTES)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first: use theirs
            return ensure_redelivery_secret(store_root)
        except OSError as err:
            raise ConfigError(
                f"{path}", f"cannot create the redelivery secret: {err.strerror}"
            ) from err
        try:
            os.write(fd, f"{secret}\n".encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        return secret
    require_private(path, str(path), "the redelivery secret")
    return existing


def require_private(path: Path, key: str, what: str) -> None:
    """Refuse a secrets file others may read: the rule for the redelivery secret and the
    users file alike (``key`` names the setting in the error).

    Raises
    ------
    ConfigError
        Its mode lets the group or other users read it, or it cannot be stat'ed.
    """
    try:
        mode = path.stat().st_mode & 0o777
    except OSError as err:
        raise ConfigError(key, f"cannot read {path}: {err.strerror}") from err
    if mode & 0o077:
        raise ConfigError(
            key, f"mode {mode:04o} of {path} lets other users read {what}; chmod 600 {path}"
        )


def authenticator_for(config: BrokerConfig, store_root: Path | None, clock: Clock) -> Authenticator:
    """The broker's ``Authenticator``: users from ``auth_users_file`` when auth is on, the
    store identity from ``<store_root>/config/redelivery.secret`` (made if missing).

    Raises
    ------
    ConfigError
        The users file or the secret cannot be read.
    """
    users = _load_private_users(Path(config.auth_users_file)) if config.auth_enabled else {}
    secret = ensure_redelivery_secret(store_root) if store_root is not None else None
    if config.auth_enabled:
        log.info(
            "broker: auth on: %d users from %s, clock skew up to %d ms",
            len(users),
            config.auth_users_file,
            config.auth_skew_ms,
        )
    return Authenticator(
        users,
        enabled=config.auth_enabled,
        skew_ms=config.auth_skew_ms,
        clock=clock,
        store_secret=secret,
        local_offset_ms=time.localtime().tm_gmtoff * 1000,
    )


def _load_private_users(path: Path) -> dict[str, User]:
    users = load_users(path)  # first: a missing file is named as such
    require_private(path, "broker.auth_users_file", "every user's secret key")
    return users


def open_listener_warning(config: BrokerConfig) -> str | None:
    """A warning when the broker listens beyond loopback with auth off, else ``None``."""
    if config.auth_enabled:
        return None
    host = parse_listen(config.listen)[0]
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback:
        return None
    return (
        f"broker.listen is {config.listen} with auth off: anyone who can reach the port can "
        "send, consume and reset offsets; set broker.auth_enabled = true and "
        "broker.auth_users_file (conf/rmq.production.toml, docs/BROKER.md)"
    )


class RequestSigner:
    """Adds fresh signature headers to a client's metadata for each call (``None``
    credentials: the metadata unchanged), as the official clients do with ``Credentials``."""

    def __init__(self, credentials: tuple[str, str] | None, clock: Clock) -> None:
        self._credentials = credentials
        self._clock = clock

    def __call__(self, metadata: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
        if self._credentials is None:
            return metadata
        access_key, secret_key = self._credentials
        return metadata + signature_metadata(access_key, secret_key, self._clock.now_ms())
