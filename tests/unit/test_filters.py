"""Consumer filters (rmq_spark/broker/filters/expression.py, sql92.py): TAG and SQL92 as
RocketMQ 5.3.3.

The SQL92 answers are RocketMQ's own: ``rocketmq_reference/filter_cases.json`` holds what
``SelectorParser`` (rocketmq-filter 5.3.3) parses and evaluates for each case, written by
``rocketmq_reference/make_reference.py`` with the real jar. The cases include every
expression of RocketMQ's ``ParserTest`` and ``ExpressionTest`` that uses string properties.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rmq_spark.broker.filters.expression import Sql92Filter, TagFilter, compile_filter
from rmq_spark.broker.filters.sql92 import compile_sql92
from rmq_spark.broker.filters.sql92_eval import EvaluationError
from rmq_spark.errors import FilterExpressionError, RmqError
from rmq_spark.store.hashing import java_string_hash, tags_code

REFERENCE = json.loads(
    (Path(__file__).parent / "rocketmq_reference" / "filter_cases.json").read_text("utf-8")
)
CASES = REFERENCE["cases"]
CONTEXTS = REFERENCE["contexts"]


def _rocketmq_answer(evaluator, properties: dict[str, str]) -> str:
    try:
        result = evaluator(properties.get)
    except EvaluationError:
        return "EXCEPTION"
    return {True: "TRUE", False: "FALSE", None: "NULL"}[result]


@pytest.mark.parametrize("case", CASES, ids=[repr(case["expression"]) for case in CASES])
def test_sql92_agrees_with_rocketmq_selector_parser(case: dict) -> None:
    if not case["parses"]:
        with pytest.raises(FilterExpressionError):
            compile_sql92(case["expression"])
        return
    evaluator = compile_sql92(case["expression"])
    answers = [_rocketmq_answer(evaluator, context) for context in CONTEXTS]
    assert answers == case["results"]


def test_reference_covers_parse_errors_exceptions_and_unknowns() -> None:
    answers = {answer for case in CASES if case["parses"] for answer in case["results"]}
    assert answers == {"TRUE", "FALSE", "NULL", "EXCEPTION"}
    assert sum(not case["parses"] for case in CASES) >= 30


def test_sql92_filter_matches_only_when_true() -> None:
    f = compile_filter("SQL92", "a > 5 OR b = 'x'")
    assert f.matches(None, {"a": "6"})
    assert not f.matches(None, {"a": "5"})
    assert not f.matches(None, {})  # unknown
    assert not f.matches(None, {"a": "abc", "b": "x"})  # RocketMQ's evaluation throws
    assert f.matches_tags_code(12345)


def test_sql92_sees_tags_beside_user_properties() -> None:
    f = compile_filter("SQL92", "TAGS IN ('TagA', 'TagB') AND region = 'eu'")
    assert f.matches("TagA", {"region": "eu"})
    assert not f.matches("TagC", {"region": "eu"})
    assert not f.matches(None, {"region": "eu"})
    assert compile_filter("SQL92", "TAGS IS NULL").matches(None, {})


def test_sql92_compiles_once_and_evaluates_many() -> None:
    f = compile_filter("SQL92", "(a between 2 and 10) AND (b not between 6 and 9)")
    assert isinstance(f, Sql92Filter)
    results = [f.matches(None, {"a": str(a), "b": str(b)}) for a in range(12) for b in range(12)]
    assert results.count(True) == 9 * 8


@pytest.mark.parametrize(
    ("expression", "column", "words"),
    [
        ("a and between 2 and 10", 7, "expected a value, found 'between'"),
        (" a between 10 and 0", 4, "low value of BETWEEN"),
        ("a > 100000000000000000000000", 5, "does not fit in a Java long"),
        ("a = NULL", 3, "NULL cannot be compared"),
        ("a > 'x'", 3, "only numbers can be compared"),
        ("a # 1", 3, "unexpected character '#'"),
        ("a not x", 7, "after NOT"),
        ("a = 'open", 5, "unexpected character"),
        ("a in ()", 7, "expected STRING"),
        ("3 in ('3')", 3, "IN needs a property"),
        ("a = 1 AND 5", 7, "will not result in a boolean"),
        ("(a = 3", 7, "expected ), found the end of the expression"),
        ("a > 0.0", 5, "less than Double.MIN_VALUE"),
    ],
)
def test_bad_sql92_names_the_column(expression: str, column: int, words: str) -> None:
    with pytest.raises(FilterExpressionError) as info:
        compile_filter("SQL92", expression)
    err = info.value
    assert isinstance(err, RmqError)
    assert err.position == column - 1
    assert f"at column {column}: " in str(err)
    assert words in str(err)
    assert "\n" not in str(err)


def test_bad_sql92_on_a_later_line_names_line_and_column() -> None:
    with pytest.raises(FilterExpressionError, match=r"at line 2, column 3: ") as info:
        compile_filter("SQL92", "a = 1 AND\nb # 2")
    assert "\n" not in str(info.value)


def test_empty_sql92_and_unknown_filter_type_are_errors() -> None:
    with pytest.raises(FilterExpressionError, match="empty"):
        compile_filter("SQL92", "  ")
    with pytest.raises(FilterExpressionError, match="unknown filter type"):
        compile_filter("REGEX", "a.*")


def test_sql92_ignores_what_follows_a_complete_expression_as_rocketmq() -> None:
    # SelectorParser.JmsSelector does not require end of input: RocketMQ accepts these.
    f = compile_filter("SQL92", "a = 1 xyz")
    assert f.matches(None, {"a": "1"})
    assert compile_filter("SQL92", "a = 3 -- trailing comment").matches(None, {"a": "3"})


# -- TAG --------------------------------------------------------------------------------


@pytest.mark.parametrize("expression", ["*", "", None])
def test_tag_star_or_empty_matches_everything(expression: str | None) -> None:
    f = compile_filter("TAG", expression or "")
    assert f.matches_tags_code(0) and f.matches_tags_code(java_string_hash("x"))
    assert f.matches(None, {}) and f.matches("anything", {})


def test_tag_list_is_split_and_trimmed_as_filter_api() -> None:
    f = compile_filter("TAG", " TagA ||TagB||  || TagC")
    assert isinstance(f, TagFilter)
    assert f.tags == {"TagA", "TagB", "TagC"}
    assert f.tags_codes == {java_string_hash(t) for t in ("TagA", "TagB", "TagC")}
    assert f.matches_tags_code(tags_code("TagB"))
    assert not f.matches_tags_code(tags_code("TagD"))
    assert not f.matches_tags_code(0)  # a message without tags
    assert f.matches("TagC", {}) and not f.matches("TagD", {}) and not f.matches(None, {})


def test_tag_code_match_is_confirmed_on_the_record_tags() -> None:
    # "Aa" and "BB" share Java hashCode 2112: the ConsumeQueue check passes both, the
    # record's TAGS tell them apart (the proxy's FilterUtils.isTagMatched).
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    f = compile_filter("TAG", "Aa")
    assert f.matches_tags_code(tags_code("BB"))
    assert f.matches("Aa", {})
    assert not f.matches("BB", {})


def test_tag_code_compares_the_int_value_of_a_64_bit_unit() -> None:
    # A ConsumeQueue unit holds tagsCode as a long; RocketMQ checks its intValue().
    f = compile_filter("TAG", "TagA")
    code = java_string_hash("TagA")
    assert f.matches_tags_code(code)
    assert f.matches_tags_code(code + (1 << 32))
    negative = compile_filter("TAG", "polygenelubricants")
    assert negative.matches_tags_code(java_string_hash("polygenelubricants") & 0xFFFFFFFF)


def test_tag_star_inside_a_list_is_a_literal_tag() -> None:
    # Only the whole expression "*" means all (FilterAPI); " * " is the tag "*".
    f = compile_filter("TAG", " * ")
    assert not f.matches("TagA", {}) and f.matches("*", {})


@pytest.mark.parametrize(
    ("expression_type", "kind"),
    [("TAG", TagFilter), ("FILTER_TYPE_UNSPECIFIED", TagFilter), ("", TagFilter)]
    + [("SQL", Sql92Filter), ("SQL92", Sql92Filter)],
)
def test_grpc_filter_type_names_map_as_the_proxy_maps_them(expression_type: str, kind) -> None:
    # GrpcConverter.buildExpressionType: SQL -> SQL92, anything else -> TAG
    f = compile_filter(expression_type, "TagA")
    assert isinstance(f, kind)
    assert f.expression_type == ("TAG" if kind is TagFilter else "SQL92")


def test_sql92_filter_never_reads_the_tags_code() -> None:
    assert compile_filter("SQL92", "TRUE").matches_tags_code(-1)
