"""The broker's TLS certificate: the configured one, or a self-signed one made once per store.

RocketMQ 5's clients (Java ``enableSsl``, Go ``EnableSsl``) default to TLS and trust any
certificate; RocketMQ's proxy answers them with a self-signed certificate of its own
(``tlsTestModeEnable``, on by default). We do the same so those clients connect with their
default configuration: without ``broker.tls_cert_file`` the broker uses
``<store>/config/tls/{cert,key}.pem``, made with the ``openssl`` command on first start and
kept (the key readable by the owner only). In the store and not in ``conf/`` because the store
directory is the one place a broker can always write, and the certificate belongs to the
broker serving that store; ``conf/`` may be a read-only install.

Owns finding/making the PEM files; the port that serves them (and its TLS context) is
``front.py``'s and ``server.py``'s.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.errors import BrokerError
from rmq_spark.store.file_ops import fsync_dir, make_dirs_durably

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
    ``openssl`` (or a store) ``permissive`` falls back to plaintext with a warning.

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
    if not problem and shutil.which("openssl") is None:
        problem = "the openssl command is not installed"
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
    alternative names), made with ``openssl`` unless a whole pair exists already.

    Written so a power cut leaves the old pair or the new one: temp files, fsync, rename,
    fsync of the directory (a pinned certificate survives). A pair a crash left damaged (a
    file missing, empty or cut short) is made again, with a warning.

    Raises
    ------
    BrokerError
        ``openssl`` failed or the directory cannot be written.
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
    names = ",".join(
        f"IP:{host}" if _is_ip(host) else f"DNS:{host}" for host in dict.fromkeys(hosts)
    )
    tmp_key, tmp_cert = directory / "key.pem.tmp", directory / "cert.pem.tmp"
    command = [
        "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-days", str(_VALID_DAYS), "-subj", "/CN=rmq-spark broker",
        "-addext", f"subjectAltName={names}", "-keyout", str(tmp_key), "-out", str(tmp_cert),
    ]  # fmt: skip
    try:
        make_dirs_durably(directory)
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise BrokerError(
                f"openssl could not make a self-signed certificate in {directory}: "
                f"{done.stderr.strip().splitlines()[-1:]}"
            )
        tmp_key.chmod(0o600)
        for tmp in (tmp_key, tmp_cert):
            _fsync_file(tmp)
        tmp_key.replace(files.key_file)
        tmp_cert.replace(files.cert_file)
        fsync_dir(directory)
    except OSError as err:
        raise BrokerError(f"cannot write a self-signed certificate to {directory}: {err}") from err
    log.info("broker: made a self-signed TLS certificate %s (%s)", files.cert_file, names)
    return files


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


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
