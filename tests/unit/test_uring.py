"""``FsyncRing``: fdatasync through io_uring, completions read from shared memory."""

from __future__ import annotations

import errno
import os
import platform
import select
from pathlib import Path

import pytest

from rmq_spark.store.uring import FsyncRing


def _io_uring_allowed() -> bool:
    disabled = Path("/proc/sys/kernel/io_uring_disabled")
    return platform.machine() == "x86_64" and (
        not disabled.exists() or disabled.read_text().strip() == "0"
    )


@pytest.fixture
def ring() -> FsyncRing:
    created = FsyncRing.create()
    assert created is not None, "io_uring is allowed on this machine but the ring failed"
    yield created
    created.wait_all()
    created.close()


def test_create_gives_a_ring_exactly_where_the_kernel_allows_io_uring() -> None:
    ring = FsyncRing.create()
    assert (ring is not None) == _io_uring_allowed()
    if ring is not None:
        ring.close()
        ring.close()  # idempotent


def test_an_fdatasync_completes_with_its_user_data_and_signals_the_eventfd(
    ring: FsyncRing, tmp_path: Path
) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        os.pwrite(fd, b"x" * 4096, 0)
        assert not ring.ready()
        ring.submit_fdatasync([fd], 7)
        assert ring.in_flight == 1
        readable, _, _ = select.select([ring.eventfd], [], [], 10)
        assert readable == [ring.eventfd]
        assert ring.ready()
        assert ring.reap() == [(7, 0)]
        assert ring.in_flight == 0 and not ring.ready()
        ring.drain_eventfd()
        assert select.select([ring.eventfd], [], [], 0)[0] == []
    finally:
        os.close(fd)


def test_one_submission_fsyncs_every_descriptor_and_wait_all_blocks_for_them(
    ring: FsyncRing, tmp_path: Path
) -> None:
    fds = [os.open(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT) for i in range(3)]
    try:
        for fd in fds:
            os.pwrite(fd, b"y" * 100, 0)
        ring.submit_fdatasync(fds, 3)
        assert sorted(ring.wait_all()) == [(3, 0)] * 3
        assert ring.in_flight == 0
    finally:
        for fd in fds:
            os.close(fd)


def test_a_failed_fdatasync_reports_minus_errno(ring: FsyncRing, tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    os.close(fd)  # a descriptor number that is no longer open
    ring.submit_fdatasync([fd], 1)
    assert ring.wait_all() == [(1, -errno.EBADF)]


def test_more_requests_than_the_ring_holds_are_refused_before_anything_is_queued(
    ring: FsyncRing, tmp_path: Path
) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="in flight"):
            ring.submit_fdatasync([fd] * 64, 1)
        assert ring.in_flight == 0
        ring.submit_fdatasync([fd], 2)
        assert ring.wait_all() == [(2, 0)]
    finally:
        os.close(fd)
