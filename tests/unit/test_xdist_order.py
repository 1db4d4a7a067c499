"""The order ``make test`` hands modules to its workers (tests/xdist_order.py): the modules that
take the bench lock are one unit, and units go out longest first."""

from __future__ import annotations

from pathlib import Path

from xdist_order import BENCH_LOCK_GROUP, group_of, longest_first

ROOT = Path(__file__).resolve().parents[2]
LOCKED = ("tests/remoting/test_consume_java.py", "tests/peers/test_remoting_bench.py")


def test_the_bench_lock_modules_are_one_unit_and_the_others_their_own() -> None:
    assert {group_of(f"{module}::test_x", ROOT) for module in LOCKED} == {BENCH_LOCK_GROUP}
    plain = "tests/unit/test_xdist_order.py"
    assert group_of(f"{plain}::test_x", ROOT) == plain


def test_a_module_unknown_to_the_durations_is_guessed_by_its_slow_mark() -> None:
    slow, fast = "tests/remoting/test_consume_java.py", "tests/unit/test_xdist_order.py"
    assert longest_first([f"{fast}::a", f"{slow}::b"], ROOT, {}) == [f"{slow}::b", f"{fast}::a"]


def test_units_go_out_longest_first_and_keep_their_inside_order() -> None:
    short, long_ = "tests/unit/test_put_columns.py", "tests/spark/test_sink_stream_kill.py"
    nodeids = [f"{short}::a", f"{short}::b", f"{long_}::c", f"{LOCKED[0]}::d", f"{long_}::e"]
    nodeids.append(f"{LOCKED[1]}::f")
    known = {short: 1.0, long_: 100.0, LOCKED[0]: 60.0, LOCKED[1]: 50.0}
    order = longest_first(nodeids, ROOT, known)
    # the bench-lock unit sums its modules (110 s), so it goes first, then the long module,
    # then the short one; each unit's tests keep their collection order
    assert order == [
        f"{LOCKED[0]}::d", f"{LOCKED[1]}::f", f"{long_}::c", f"{long_}::e",
        f"{short}::a", f"{short}::b",
    ]  # fmt: skip
