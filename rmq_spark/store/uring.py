"""A minimal io_uring for fdatasync, through ctypes: submissions from the event loop's thread,
completions read from shared memory.

Owns the ring (``io_uring_setup``, the three shared mappings), preparing and submitting
``IORING_OP_FSYNC`` with ``IORING_FSYNC_DATASYNC``, reaping completions, and the eventfd the
kernel signals on each completion (an event loop watches it like a socket). Knows nothing of
segments or waves (``async_commit.py`` drives it).

Why: a SYNC put waits for an fsync. With a flush thread, the fsync's end is only seen once
the thread gets the GIL back, which the event loop holds while it runs puts; the kernel's
io-wq worker needs no GIL, and the loop sees a finished fsync by reading the completion
ring's tail, a memory read, between two puts.

Only x86-64 Linux (the ring is read and written with plain loads and stores, which x86's
memory order makes safe without fences). ``FsyncRing.create`` returns ``None`` anywhere else,
when the kernel refuses io_uring (``kernel.io_uring_disabled``, a seccomp filter, a kernel
older than 5.6), and the store falls back to its flush thread. Not thread-safe: one thread
(the loop's) uses a ring, except ``wait_all`` + ``close`` after that thread stopped using it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import mmap
import os
import platform
import struct
import sys
from typing import Any

__all__ = ["FsyncRing"]

_log = logging.getLogger(__name__)

_NR_SETUP, _NR_ENTER, _NR_REGISTER = 425, 426, 427  # the same on every architecture
_OFF_SQ_RING, _OFF_CQ_RING, _OFF_SQES = 0, 0x8000000, 0x10000000
_OP_FSYNC = 3
_FSYNC_DATASYNC = 1
_ENTER_GETEVENTS = 1
_REGISTER_EVENTFD = 4
_SQE = struct.Struct(
    "=BBHiQQIIQ"
)  # opcode, flags, ioprio, fd, off, addr, len, fsync_flags, user_data
_SQE_SIZE = 64
_CQE = struct.Struct("=Qi")  # user_data, res (then flags)
_CQE_SIZE = 16
_U32 = struct.Struct("=I")


class _Params(ctypes.Structure):
    _fields_ = [  # noqa: RUF012 - ctypes layout
        ("sq_entries", ctypes.c_uint32),
        ("cq_entries", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("sq_thread_cpu", ctypes.c_uint32),
        ("sq_thread_idle", ctypes.c_uint32),
        ("features", ctypes.c_uint32),
        ("wq_fd", ctypes.c_uint32),
        ("resv", ctypes.c_uint32 * 3),
        # io_sqring_offsets: head, tail, ring_mask, ring_entries, flags, dropped, array,
        # resv1, user_addr (u64); io_cqring_offsets: head, tail, ring_mask, ring_entries,
        # overflow, cqes, flags, resv1, user_addr (u64). As u32 pairs for the u64s.
        ("sq_off", ctypes.c_uint32 * 10),
        ("cq_off", ctypes.c_uint32 * 10),
    ]


_syscalls: tuple[Any, Any] | None = None


def _libc_syscalls() -> tuple[Any, Any]:
    """``syscall(2)`` twice: releasing the GIL (for calls that block) and keeping it (for
    calls that do not: releasing it would let another thread take it, and the loop would
    wait to get it back)."""
    global _syscalls
    if _syscalls is None:
        name = ctypes.util.find_library("c") or None
        blocking = ctypes.CDLL(name, use_errno=True).syscall
        quick = ctypes.PyDLL(name, use_errno=True).syscall
        for function in (blocking, quick):
            function.restype = ctypes.c_long
        _syscalls = (blocking, quick)
    return _syscalls


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


class FsyncRing:
    """One io_uring whose completions signal ``eventfd``. Use ``FsyncRing.create``.

    ``submit_fdatasync`` queues and submits one fdatasync per descriptor; ``ready`` tells,
    without a system call, whether a completion is waiting; ``reap`` returns them as
    ``(user_data, result)`` (``result`` is 0 or ``-errno``).
    """

    def __init__(self, entries: int = 16) -> None:
        params = _Params()
        syscall, quick = _libc_syscalls()
        self._syscall = syscall
        self._quick = quick
        self.fd = _check(syscall(_NR_SETUP, entries, ctypes.byref(params)), "io_uring_setup")
        self.eventfd = -1
        maps: list[mmap.mmap] = []
        try:
            sq_off, cq_off = params.sq_off, params.cq_off
            sq = mmap.mmap(self.fd, sq_off[6] + params.sq_entries * 4, offset=_OFF_SQ_RING)
            maps.append(sq)
            cq = mmap.mmap(self.fd, cq_off[5] + params.cq_entries * _CQE_SIZE, offset=_OFF_CQ_RING)
            maps.append(cq)
            sqes = mmap.mmap(self.fd, params.sq_entries * _SQE_SIZE, offset=_OFF_SQES)
            maps.append(sqes)
            self.eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            value = ctypes.c_int(self.eventfd)
            _check(
                syscall(_NR_REGISTER, self.fd, _REGISTER_EVENTFD, ctypes.byref(value), 1),
                "io_uring_register(EVENTFD)",
            )
        except BaseException:
            for mapping in maps:
                mapping.close()
            if self.eventfd >= 0:
                os.close(self.eventfd)
            os.close(self.fd)
            raise
        self._sq, self._cq, self._sqes = sq, cq, sqes
        self._sq_tail_at = sq_off[1]
        self._sq_mask = _U32.unpack_from(sq, sq_off[2])[0]
        self._sq_array = sq_off[6]
        self._sq_entries = params.sq_entries
        self._cq_head_at = cq_off[0]
        self._cq_tail_at = cq_off[1]
        self._cq_mask = _U32.unpack_from(cq, cq_off[2])[0]
        self._cqes = cq_off[5]
        self._tail = _U32.unpack_from(sq, self._sq_tail_at)[0]
        self._head: int = _U32.unpack_from(cq, self._cq_head_at)[0]
        self._cq_words = memoryview(cq).cast("I")  # released in ``close``
        self._cq_tail_word = self._cq_tail_at // 4
        self.in_flight = 0
        """Submitted requests not reaped yet."""

    @classmethod
    def create(cls) -> FsyncRing | None:
        """A ring, or ``None`` where io_uring is not usable (see the module docstring)."""
        if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
            return None
        try:
            return cls()
        except OSError as err:
            _log.debug("io_uring is not available (%s); SYNC puts use a flush thread", err)
            return None

    def submit_fdatasync(self, fds: list[int], user_data: int) -> None:
        """Queue an fdatasync of each of ``fds`` (all with ``user_data``) and submit them."""
        count = len(fds)
        if count > self._sq_entries - self.in_flight:
            raise OSError(errno.EBUSY, f"io_uring: {self.in_flight} requests in flight")
        tail = self._tail
        mask = self._sq_mask
        for fd in fds:
            index = tail & mask
            _SQE.pack_into(
                self._sqes,
                index * _SQE_SIZE,
                _OP_FSYNC,
                0,
                0,
                fd,
                0,
                0,
                0,
                _FSYNC_DATASYNC,
                user_data,
            )
            _U32.pack_into(self._sq, self._sq_array + index * 4, index)
            tail = (tail + 1) & 0xFFFFFFFF
        self._tail = tail
        _U32.pack_into(self._sq, self._sq_tail_at, tail)  # publish the entries
        submitted = _check(
            self._syscall(_NR_ENTER, self.fd, count, 0, 0, None, 0), "io_uring_enter"
        )
        self.in_flight += submitted
        if submitted != count:  # cannot happen for a ring this size; never leave it half done
            raise OSError(errno.EAGAIN, f"io_uring_enter submitted {submitted} of {count}")

    def ready(self) -> bool:
        """Whether a completion is waiting (one memory read, no system call: only this
        object moves the head)."""
        tail: int = self._cq_words[self._cq_tail_word]
        return tail != self._head

    def reap(self) -> list[tuple[int, int]]:
        """The waiting completions, ``(user_data, result)`` each, oldest first."""
        cq = self._cq
        head = self._head
        tail = self._cq_words[self._cq_tail_word]
        out = []
        mask = self._cq_mask
        base = self._cqes
        while head != tail:
            out.append(_CQE.unpack_from(cq, base + (head & mask) * _CQE_SIZE))
            head = (head + 1) & 0xFFFFFFFF
        _U32.pack_into(cq, self._cq_head_at, head)
        self._head = head
        self.in_flight -= len(out)
        return out

    def drain_eventfd(self) -> None:
        """Reset the eventfd's counter (after it woke the loop)."""
        try:
            os.eventfd_read(self.eventfd)
        except BlockingIOError:
            pass

    def wait_all(self) -> list[tuple[int, int]]:
        """Block until every submitted request completed; returns what ``reap`` returns."""
        out = self.reap()
        while self.in_flight > 0:
            try:
                _check(
                    self._syscall(_NR_ENTER, self.fd, 0, self.in_flight, _ENTER_GETEVENTS, None, 0),
                    "io_uring_enter",
                )
            except InterruptedError:
                pass
            out.extend(self.reap())
        return out

    def close(self) -> None:
        """Release the ring (its requests must have completed: ``wait_all``). Idempotent."""
        if self.fd < 0:
            return
        self._cq_words.release()
        for mapping in (self._sq, self._cq, self._sqes):
            mapping.close()
        os.close(self.eventfd)
        os.close(self.fd)
        self.fd = self.eventfd = -1
