from __future__ import annotations

import pytest

from rmq_spark.store.message import HostAddress


def test_ipv4_mapped_ipv6_address_becomes_plain_ipv4_like_java() -> None:
    mapped = HostAddress.parse("[::ffff:10.0.0.1]:10911")
    assert mapped == HostAddress("10.0.0.1", 10911)
    assert not mapped.is_ipv6 and mapped.packed() == bytes([10, 0, 0, 1])


def test_ipv6_address_keeps_sixteen_bytes_and_brackets() -> None:
    host = HostAddress.parse("[::1]:8081")
    assert host.is_ipv6 and len(host.packed()) == 16 and str(host) == "[::1]:8081"


def test_bad_address_text_is_rejected() -> None:
    with pytest.raises(ValueError, match="not an ip:port"):
        HostAddress.parse("localhost")
    with pytest.raises(ValueError):
        HostAddress("1.2.3.4", -1)


def test_packed_and_the_family_are_ipaddress_own_for_every_form() -> None:
    import ipaddress

    for ip in ("192.168.0.1", "::1", "fe80::1%eth0", "::ffff:10.0.0.1", "2001:db8::1"):
        host, address = HostAddress(ip, 1), ipaddress.ip_address(ip)
        address = getattr(address, "ipv4_mapped", None) or address
        assert host.packed() == address.packed and host.is_ipv6 == (address.version == 6)
