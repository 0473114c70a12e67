"""Error fingerprints: the same failure with different ids, numbers or values groups as one;
different failures (handler, exception class, wording) do not."""

from __future__ import annotations

import pytest

from core.mirror.fingerprint import PATTERN_MAX, fingerprint, mask, split_error


@pytest.mark.parametrize(
    ("message", "pattern"),
    [
        ("chunk 17 of 200 failed", "chunk <n> of <n> failed"),
        ("took 2.5s, limit -1.0e3", "took <n>s, limit <n>"),
        ("row 12:30:01", "row <n>:<n>:<n>"),
        ("file part-00017.parquet and chunk_3", "file part-<n>.parquet and chunk_<n>"),
        ("utf8 sha1 s3 ipv4 stay", "utf8 sha1 s3 ipv4 stay"),
        ("id 550e8400-e29b-41d4-a716-446655440000 gone", "id <uuid> gone"),
        ("ID 550E8400-E29B-41D4-A716-446655440000", "ID <uuid>"),
        ("at 0x7f3a2c1b9e10 and 0XFF", "at <hex> and <hex>"),
        ("commit 9fceb02d0ae598e95dc970b74767f19372d61af8", "commit <hex>"),
        ("object 507f1f77bcf86cd799439011", "object <hex>"),
        ("worker host-12-ab12 died", "worker host-<n>-<hex> died"),
        ("a facade, not a hex word", "a facade, not a hex word"),
        ("key 'user_42' missing", "key '<str>' missing"),
        ('no such file "/data/in 3.csv"', 'no such file "<str>"'),
        ("column `amount` unknown", "column `<str>` unknown"),
        ("can't open 'x.csv'", "can't open '<str>'"),
        ("it's the user's file 'a'", "it's the user's file '<str>'"),
        ("two\n  lines\tand   spaces", "two lines and spaces"),
        ("", ""),
    ],
)
def test_mask(message: str, pattern: str) -> None:
    assert mask(message) == pattern


@pytest.mark.parametrize(
    ("error", "exception", "message"),
    [
        ("ValueError: bad chunk", "ValueError", "bad chunk"),
        ("pyspark.errors.AnalysisException: [X] y", "pyspark.errors.AnalysisException", "[X] y"),
        ("KeyError: 'a'", "KeyError", "'a'"),
        ("KeyboardInterrupt", "KeyboardInterrupt", ""),
        ("MyProblem:no space", "MyProblem", "no space"),
        ("Exception:\nmulti-line", "Exception", "multi-line"),
        ("boom", "", "boom"),
        ("timeout: no reply", "", "timeout: no reply"),  # not named like a class
        ("  ValueError: indented", "", "  ValueError: indented"),
        ("", "", ""),
    ],
)
def test_split_error(error: str, exception: str, message: str) -> None:
    assert split_error(error) == (exception, message)


def test_the_same_failure_with_other_values_has_one_fingerprint() -> None:
    a = fingerprint("ingest", "KeyError: 'row 17' in part-00003 (id 9f8e7d6c5b4a)")
    b = fingerprint("ingest", "KeyError: 'row 2' in part-00011 (id 0a1b2c3d4e5f)")
    assert a == b
    assert (a.exception, a.pattern) == ("KeyError", "'<str>' in part-<n> (id <hex>)")
    assert len(a.fingerprint) == 40


def test_handler_exception_and_wording_each_make_another_fingerprint() -> None:
    base = fingerprint("ingest", "ValueError: bad row 3")
    assert fingerprint("export", "ValueError: bad row 3") != base
    assert fingerprint("ingest", "TypeError: bad row 3") != base
    assert fingerprint("ingest", "ValueError: bad column 3") != base
    assert fingerprint("ingest", "ValueError: bad row 99") == base


def test_a_long_message_is_cut() -> None:
    fp = fingerprint("h", "ValueError: " + "word " * 1000)
    assert len(fp.pattern) == PATTERN_MAX
