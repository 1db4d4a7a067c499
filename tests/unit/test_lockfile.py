from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rmq_spark.errors import StoreLockedError
from rmq_spark.store.lockfile import StoreLock, abort_exists, create_abort, remove_abort


def test_lock_file_holds_the_text_lock(tmp_path: Path) -> None:
    lock = StoreLock.acquire(tmp_path)
    assert (tmp_path / "lock").read_bytes() == b"lock"
    lock.release()


def test_second_lock_in_the_same_process_is_refused(tmp_path: Path) -> None:
    lock = StoreLock.acquire(tmp_path)
    with pytest.raises(StoreLockedError, match="already open by this process"):
        StoreLock.acquire(tmp_path)
    lock.release()
    StoreLock.acquire(tmp_path).release()


def test_lock_held_by_another_process_is_refused(tmp_path: Path) -> None:
    code = (
        "import sys, fcntl, os\n"
        f"fd = os.open({str(tmp_path / 'lock')!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0)\n"
        "print('locked', flush=True)\n"
        "sys.stdin.read()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(StoreLockedError, match="another process") as info:
            StoreLock.acquire(tmp_path)
        assert str(tmp_path / "lock") in str(info.value)
    finally:
        holder.communicate("")
    StoreLock.acquire(tmp_path).release()


def test_abort_marker_is_created_and_removed(tmp_path: Path) -> None:
    assert not abort_exists(tmp_path)
    create_abort(tmp_path)
    assert abort_exists(tmp_path) and (tmp_path / "abort").read_bytes() == b""
    remove_abort(tmp_path)
    assert not abort_exists(tmp_path)


def test_a_refused_second_lock_in_this_process_keeps_the_first_one_held(tmp_path: Path) -> None:
    lock = StoreLock.acquire(tmp_path)
    with pytest.raises(StoreLockedError):
        StoreLock.acquire(tmp_path)
    # POSIX locks drop when *any* descriptor of the file closes: another process must still
    # find the store locked.
    code = (
        "import fcntl, os, sys\n"
        f"fd = os.open({str(tmp_path / 'lock')!r}, os.O_RDWR)\n"
        "try:\n"
        "    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)\n"
        "except OSError:\n"
        "    sys.exit(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False)
    assert done.returncode == 3
    lock.release()
