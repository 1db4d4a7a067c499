"""The broker's TLS certificate: the configured one, or a self-signed one made once per store.

RocketMQ 5's clients (Java ``enableSsl``, Go ``EnableSsl``) default to TLS and trust any
certificate; RocketMQ's proxy answers them with a self-signed certificate of its own
(``tlsTestModeEnable``, on by default). We do the same so those clients connect with their
default configuration: without ``broker.tls_cert_file`` the broker uses
``<store>/config/tls/{cert,key}.pem``, made with the ``cryptography`` package on first start
and kept (the key readable by the owner only). In the store and not in ``conf/`` because the store
directory is the one place a broker can always write, and the certificate belongs to the
broker serving that store; ``conf/`` may be a read-only install.

Owns finding/making the PEM files; the port that serves them (and its TLS context) is
``front.py``'s and ``server.py``'s.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.errors import BrokerError
from rmq_spark.store.file_ops import make_dirs_durably, write_file_atomically

__all__ = ["TLS_DIR", "TlsFiles", "make_self_signed", "resolve_tls"]

log = logging.getLogger("rmq_spark.broker")

TLS_DIR = Path("config") / "tls"  # under the store root
_VALID_DAYS = 3650


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """A PEM certificate chain and its private key; ``self_signed``: made by the broker."""

    cert_file: Path
    key_file: Path
    self_signed: bool = False


def resolve_tls(config: BrokerConfig, store_root: Path | None) -> TlsFiles | None:
    """The certificate to serve, or ``None`` for plaintext only.

    ``tls_mode = "disabled"``: ``None``. A configured ``tls_cert_file``/``tls_key_file``: those
    (they must be readable). Otherwise the store's self-signed pair, made if missing; without
    a store ``permissive`` falls back to plaintext with a warning.

    Raises
    ------
    BrokerError
        A configured file cannot be read, or ``enforcing`` has no certificate to serve.
    """
    if config.tls_mode == "disabled":
        return None
    if config.tls_cert_file:
        files = TlsFiles(Path(config.tls_cert_file), Path(config.tls_key_file))
        for path in (files.cert_file, files.key_file):
            if not os.access(path, os.R_OK):
                raise BrokerError(f"broker.tls: cannot read {path} (tls_cert_file/tls_key_file)")
        return files
    problem = "the broker has no store directory" if store_root is None else ""
    if not problem:
        assert store_root is not None
        return make_self_signed(store_root / TLS_DIR, hosts=_hosts(config))
    if config.tls_mode == "enforcing":
        raise BrokerError(
            f"broker.tls_mode=enforcing needs a certificate: {problem}; "
            "set broker.tls_cert_file and broker.tls_key_file"
        )
    log.warning("broker: serving plaintext only (no self-signed certificate: %s)", problem)
    return None


def _hosts(config: BrokerConfig) -> list[str]:
    hosts = ["localhost", "127.0.0.1", "::1"]
    if config.route_host not in hosts and config.route_host not in ("0.0.0.0", "::"):
        hosts.append(config.route_host)
    return hosts


def make_self_signed(directory: Path, hosts: list[str]) -> TlsFiles:
    """``directory/cert.pem`` and ``key.pem`` (EC P-256, 10 years, the hosts as subject
    alternative names) unless a whole pair exists already.

    Written so a power cut leaves the old pair or the new one: temp files, fsync, rename,
    fsync of the directory (a pinned certificate survives). A pair a crash left damaged (a
    file missing, empty or cut short) is made again, with a warning.

    Raises
    ------
    BrokerError
        The directory cannot be written.
    """
    files = TlsFiles(directory / "cert.pem", directory / "key.pem", self_signed=True)
    damage = _pair_damage(files)
    if damage is None:
        return files
    if damage:
        log.warning(
            "broker: the self-signed TLS pair in %s is damaged (%s): making a new one",
            directory,
            damage,
        )
    names = list(dict.fromkeys(hosts))
    key_pem, cert_pem = _self_signed_pem(names)
    try:
        make_dirs_durably(directory)
        write_file_atomically(files.key_file, key_pem, mode=0o600)
        write_file_atomically(files.cert_file, cert_pem)
    except OSError as err:
        raise BrokerError(f"cannot write a self-signed certificate to {directory}: {err}") from err
    log.info("broker: made a self-signed TLS certificate %s (%s)", files.cert_file, names)
    return files


def _self_signed_pem(hosts: list[str]) -> tuple[bytes, bytes]:
    """A new P-256 key and a certificate for ``hosts``, both PEM (the key unencrypted, PKCS#8)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rmq-spark broker")])
    now = datetime.datetime.now(datetime.UTC)
    alt_names = [
        x509.IPAddress(ipaddress.ip_address(host)) if _is_ip(host) else x509.DNSName(host)
        for host in hosts
    ]
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # clocks a little behind
        .not_valid_after(now + datetime.timedelta(days=_VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem, certificate.public_bytes(serialization.Encoding.PEM)


_PEM_ENDS = {"cert.pem": b"-----END CERTIFICATE-----", "key.pem": b"PRIVATE KEY-----"}


def _pair_damage(files: TlsFiles) -> str | None:
    """``None``: a whole pair; ``""``: no pair yet; else what a crash left damaged."""
    paths = (files.cert_file, files.key_file)
    if not any(path.exists() for path in paths):
        return ""
    for path in paths:
        try:
            text = path.read_bytes()
        except OSError as err:
            return f"{path.name}: {err.strerror}"
        if not text.strip():
            return f"{path.name} is empty"
        if not text.rstrip().endswith(_PEM_ENDS[path.name]):
            return f"{path.name} is cut short"
    return None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
