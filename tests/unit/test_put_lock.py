from __future__ import annotations

import threading
import time

from rmq_spark.store.put_lock import PutLock


def test_contended_threads_exclude_each_other_and_all_get_through() -> None:
    lock = PutLock()
    state = {"inside": 0, "most_inside": 0, "count": 0}

    def worker() -> None:
        for _ in range(300):
            if not lock.mutex.acquire(False):
                lock.acquire_contended()
            try:
                state["inside"] += 1
                state["most_inside"] = max(state["most_inside"], state["inside"])
                count = state["count"]
                time.sleep(0)  # give up the GIL inside the critical section
                state["count"] = count + 1
                state["inside"] -= 1
            finally:
                lock.release()

    threads = [threading.Thread(target=worker) for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert state["count"] == 32 * 300  # no lost update: never two threads inside
    assert state["most_inside"] == 1
    assert not lock.locked() and not lock.parked


def test_a_parked_thread_is_woken_by_a_release_through_the_context_manager() -> None:
    lock = PutLock()
    lock.acquire()
    entered = threading.Event()

    def waiter() -> None:
        with lock:
            entered.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    while not lock.parked:  # the waiter parked on its token
        threading.Event().wait(0.001)
    assert not entered.is_set()
    lock.release()
    thread.join()
    assert entered.is_set() and not lock.locked()


def test_only_one_parked_thread_is_woken_per_release_until_it_retries() -> None:
    lock = PutLock()
    lock.acquire()
    done: list[int] = []
    threads = [
        threading.Thread(target=lambda i=i: (lock.acquire(), done.append(i), lock.release()))
        for i in range(3)
    ]
    for thread in threads:
        thread.start()
    while len(lock.parked) < 3:
        threading.Event().wait(0.001)
    lock.release()  # wakes the oldest; each one that gets through wakes the next
    for thread in threads:
        thread.join()
    assert sorted(done) == [0, 1, 2]
    assert not lock.parked and not lock.locked()
