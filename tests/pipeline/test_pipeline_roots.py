"""A data job reads and writes under the data roots only (core.pipeline.roots): every way out
(an absolute path, `..`, a symbolic link, a glob, a link inside a directory, the stack's own
var/) is refused with a message that names the roots; overwrite replaces only an output a
data job wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.pipeline import roots
from core.pipeline.check import check_output, make_spec
from core.pipeline.roots import DataRoots, OutsideRoots
from core.pipeline.spec import SpecError


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Path]:
    """A stack's var/ (secret key, sample data, outputs), a data root outside it, and a
    folder that is no root."""
    var = tmp_path / "var"
    for d in ("sample", "data", "out"):
        (var / d).mkdir(parents=True)
    (var / "secret_key").write_text("s3cret")
    (var / "sample" / "flights.csv").write_text("a,b\n1,2\n")
    data = tmp_path / "lake"
    data.mkdir()
    (data / "t.csv").write_text("a,b\n1,2\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "private.csv").write_text("a\n1\n")
    return {"var": var, "data": data, "elsewhere": elsewhere, "tmp": tmp_path}


def make_roots(place: dict[str, Path], *extra: Path) -> DataRoots:
    var = place["var"]
    return DataRoots.make([var / "sample", var / "data", place["data"], *extra],
                          [var / "out"], var)


def test_paths_under_the_roots_are_resolved(place: dict[str, Path]) -> None:
    r = make_roots(place)
    assert roots.check_input(str(place["data"] / "t.csv"), r) == str(place["data"] / "t.csv")
    dotted = place["var"] / "sample" / ".." / "sample" / "flights.csv"
    assert roots.check_input(str(dotted), r) == str(place["var"] / "sample" / "flights.csv")
    assert roots.check_input(str(place["data"] / "*.csv"), r) == str(place["data"] / "*.csv")
    # an output folder is readable: a job may read another job's output
    assert roots.check_input(str(place["var"] / "out" / "x"), r)
    assert roots.check_output(str(place["var"] / "out" / "delay"), r) == \
        str(place["var"] / "out" / "delay")


@pytest.mark.parametrize("where", [
    "/etc/passwd", "{elsewhere}/private.csv", "{var}/secret_key", "{var}",
    "{var}/sample/../secret_key", "{var}/sample/../../elsewhere/private.csv", "{elsewhere}/*",
])
def test_an_input_outside_the_roots_is_refused_naming_them(place: dict[str, Path],
                                                           where: str) -> None:
    path = where.format(**{k: str(v) for k, v in place.items()})
    with pytest.raises(OutsideRoots) as got:
        roots.check_input(path, make_roots(place))
    message = str(got.value)
    assert message.startswith(f"input {path!r}")
    assert str(place["var"] / "sample") in message or "private folder" in message


def test_the_stacks_var_stays_private_even_under_a_root_that_holds_it(
    place: dict[str, Path]
) -> None:
    r = make_roots(place, place["tmp"])  # a root that holds var/ itself
    with pytest.raises(OutsideRoots, match="inside the stack's private folder"):
        roots.check_input(str(place["var"] / "secret_key"), r)
    assert roots.check_input(str(place["elsewhere"] / "private.csv"), r)  # under that root


def test_a_symbolic_link_out_of_the_roots_is_refused_whatever_it_is_called(
    place: dict[str, Path]
) -> None:
    r = make_roots(place)
    link = place["data"] / "innocent.csv"
    link.symlink_to(place["var"] / "secret_key")
    with pytest.raises(OutsideRoots, match=r"resolves to .*secret_key"):
        roots.check_input(str(link), r)
    link.unlink()
    # inside a directory input: Spark would follow it
    (place["data"] / "sub").mkdir()
    (place["data"] / "sub" / "part-0.csv").symlink_to(place["elsewhere"] / "private.csv")
    with pytest.raises(OutsideRoots, match=r"holds .*part-0\.csv, a symbolic link to "):
        roots.check_input(str(place["data"]), r)
    # a glob matching it
    with pytest.raises(OutsideRoots):
        roots.check_input(str(place["data"] / "*" / "*.csv"), r)
    # an output through a link
    (place["var"] / "out" / "escape").symlink_to(place["elsewhere"])
    with pytest.raises(OutsideRoots, match="resolves to"):
        roots.check_output(str(place["var"] / "out" / "escape" / "x"), r)


def test_an_output_must_lie_inside_an_output_root(place: dict[str, Path]) -> None:
    r = make_roots(place)
    with pytest.raises(OutsideRoots, match="is an output root itself"):
        roots.check_output(str(place["var"] / "out"), r)
    with pytest.raises(OutsideRoots, match="not inside an output root"):
        roots.check_output(str(place["data"] / "x"), r)  # an input root is not one
    with pytest.raises(OutsideRoots, match="private folder"):
        roots.check_output(str(place["var"] / "x"), r)


def test_a_remote_path_needs_a_root_that_is_its_prefix(place: dict[str, Path]) -> None:
    r = DataRoots.make(["s3a://lake/raw"], [place["var"] / "out"], place["var"])
    assert roots.check_input("s3a://lake/raw/2026/x.parquet", r)
    for bad in ("s3a://lake/other/x", "s3a://lake/rawer/x", "s3a://lake/raw/../secret"):
        with pytest.raises(OutsideRoots):
            roots.check_input(bad, r)


def job(place: dict[str, Path], **kw: object) -> object:
    defaults = {"job_id": "j1", "input": str(place["var"] / "sample" / "flights.csv"),
                "format": "csv", "output": str(place["var"] / "out" / "o"),
                "sql": "SELECT a FROM chunk", "roots": make_roots(place)}
    return make_spec(**{**defaults, **kw})  # type: ignore[arg-type]


def test_make_spec_checks_the_input_the_views_and_the_output(place: dict[str, Path]) -> None:
    with pytest.raises(OutsideRoots, match=r"^input '/etc/passwd'"):
        job(place, input="/etc/passwd")
    with pytest.raises(OutsideRoots, match=r"^--view p"):
        job(place, views={"p": str(place["var"] / "secret_key")})
    with pytest.raises(OutsideRoots, match=r"^--output"):
        job(place, output="/tmp/anywhere")
    (place["var"] / "out" / "o").mkdir()
    (place["var"] / "out" / "o" / "x.csv").write_text("a\n1\n")
    with pytest.raises(SpecError, match="overlap: a job cannot write where it reads"):
        job(place, input=str(place["var"] / "out" / "o" / "x.csv"))


def test_overwrite_replaces_only_an_output_a_data_job_wrote(place: dict[str, Path]) -> None:
    out = place["var"] / "out" / "o"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(SpecError, match="was not written by a data job"):
        job(place, overwrite=True)
    (out / "_manifest.json").write_text(json.dumps({"job": "old", "finished_at": "t"}))
    (out / "_SUCCESS").write_text("")
    with pytest.raises(SpecError, match=r"already complete .* written by job old"):
        job(place)
    spec = job(place, overwrite=True)
    check_output(spec)  # type: ignore[arg-type]


def test_an_overlong_output_name_is_a_message_not_an_oserror(place: dict[str, Path]) -> None:
    with pytest.raises(SpecError, match="longer than 255 bytes"):
        job(place, output=str(place["var"] / "out" / ("x" * 300)))


# -- as Spark reads a path: Hadoop's glob syntax (issue 33, item 4) ---------------------------


def test_an_input_may_use_wildcards_in_its_last_part_only(place: dict[str, Path]) -> None:
    r = make_roots(place)
    lake = place["data"]
    (lake / "t2.csv").write_text("a,b\n3,4\n")
    assert roots.check_input(f"{lake}/*.csv", r) == f"{lake}/*.csv"
    assert roots.check_input(f"{lake}/t?.csv", r) == f"{lake}/t?.csv"
    with pytest.raises(OutsideRoots, match=r"a wildcard \(\* or \?\) may stand in the path's "
                       r"last part only \(such as data/\*\.parquet\), not in a folder's name "
                       r"\('la\*'\)"):
        roots.check_input(f"{place['tmp']}/la*/t.csv", r)


@pytest.mark.parametrize("name", ["{t,u}.csv", "[t].csv", "t\\.csv", "{.,x/}./t.csv"])
def test_braces_brackets_and_backslashes_are_refused_in_an_input(place: dict[str, Path],
                                                                 name: str) -> None:
    bad = next(c for c in name if c in "{[\\")
    with pytest.raises(OutsideRoots) as refused:
        roots.check_input(f"{place['data']}/{name}", make_roots(place))
    assert f"holds '{bad}', which Spark reads as a pattern" in str(refused.value)
    assert "an input may use only * and ?, in its last part" in str(refused.value)


@pytest.mark.parametrize("char", sorted(roots.GLOB_CHARS))
def test_a_view_and_an_output_hold_no_glob_character_at_all(place: dict[str, Path],
                                                            char: str) -> None:
    r = make_roots(place)
    with pytest.raises(OutsideRoots, match=r"^--view v .*which Spark reads as a pattern.*a view "
                                           r"is a path without any of them$"):
        roots.check_input(f"{place['data']}/t{char}.csv", r, what="--view v", wildcards=False)
    with pytest.raises(OutsideRoots, match=r"^--output .*which Spark reads as a pattern.*an "
                                           r"output is a path without any of them$"):
        roots.check_output(f"{place['var']}/out/x{char}y/z", r)


def test_a_remote_path_is_checked_as_spark_reads_it_too(place: dict[str, Path]) -> None:
    r = DataRoots.make(["s3a://lake/raw"], ["s3a://lake/out"], place["var"])
    assert roots.check_input("s3a://lake/raw/2026/*.parquet", r)
    for bad in ("s3a://lake/raw/.{./,x/}./secret/x.parquet", "s3a://lake/raw/*/x.parquet",
                "s3a://lake/raw/[a]"):
        with pytest.raises(OutsideRoots, match=r"pattern|wildcard"):
            roots.check_input(bad, r)
    with pytest.raises(OutsideRoots, match="which Spark reads as a pattern"):
        roots.check_output("s3a://lake/out/{a,b}", r)


def test_no_file_spark_is_given_by_name_may_hold_a_glob_character(
        place: dict[str, Path]) -> None:
    """The split lists a directory input (or the matches of its wildcard) and gives Spark each
    file by name: a name Spark would read as a pattern is refused in an input. What the
    listing skips (hidden and `_` names) and a view's folder (Spark lists it itself) may."""
    r = make_roots(place)
    pond = place["data"] / "pond"
    (pond / "{.,x").mkdir(parents=True)
    (pond / "{.,x" / "}.").mkdir()
    (pond / "ok.csv").write_text("a\n1\n")
    with pytest.raises(OutsideRoots, match=r"holds .*/pond/\{\.,x, whose name has '\{': Spark "
                                           r"is given each file of an input by name"):
        roots.check_input(str(pond), r)
    assert roots.check_input(str(pond), r, what="--view v", wildcards=False) == str(pond)
    (pond / "{.,x").rename(pond / ".{.,x")
    (pond / "_t[1].csv").write_text("a\n1\n")
    assert roots.check_input(str(pond), r) == str(pond)
    (pond / "t[1].csv").write_text("a\n1\n")
    with pytest.raises(OutsideRoots, match=r"t\[1\]\.csv, whose name has '\['"):
        roots.check_input(f"{pond}/*.csv", r)
