"""Where a data job may read and write: under the configured data roots, and nowhere else.

A job's input, its --view tables and its output are paths a person typed (in the console, on
the command line) or that a task in Redis carries; the workers read and write them with the
workers' rights, and the first rows of the output show on the job's page. So every path is
checked here, in the console, the CLI and again in the worker, after `..` and symbolic links
are resolved:

- inputs and views lie under an input root (QA_DATA_ROOTS; by default the stack's
  `var/sample` and `var/data`) or an output root (a job may read another job's output);
- outputs lie strictly inside an output root (QA_OUTPUT_ROOTS; by default `var/out`);
- nothing inside the stack's own `var/` other than those data folders, whatever the roots say:
  it holds the secret key, the admin password and the database;
- a directory input holds no symbolic link leading out of the roots (Spark follows them).

A root may also be a URL prefix (`s3a://bucket/data/`): a remote path must start with it and
hold no `..` segment.

And every path is checked as Spark will read it. Spark hands a path holding any of Hadoop's
glob characters (`{ } [ ] * ? \\`) to FileSystem.globStatus, which expands `{a,b/c}` before it
matches anything: `.{./,x/}.` reads as `..`, so a path that is a plain folder under a root
here can name a file outside every root there. Those characters are refused, not expanded
(an expansion checked here would have to follow Hadoop's exactly, forever): an input may use
`*` and `?` in its last part only (`data/*.parquet`), where they match names in one folder
that is checked; a view and an output none at all; and no file that Spark is given by name
(the files of a directory input, the matches of an input's wildcard) may hold one.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .spec import SpecError, is_local, local_path

DATA_DIRS = ("sample", "data", "out")  # the folders of var/ that hold data, not secrets
# Hadoop's glob syntax: Spark globs a path holding any of these (SparkHadoopUtil.isGlobPath).
GLOB_CHARS = frozenset("{}[]*?\\")
WILDCARDS = frozenset("*?")  # the only ones an input may use, in its last part
HIDDEN = (".", "_")  # names Spark and the split's listing skip in a folder


class OutsideRoots(SpecError):
    """A path outside the data roots; the message names the roots."""


@dataclass(frozen=True)
class DataRoots:
    """Absolute, resolved local directories (or URL prefixes) for inputs and for outputs."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    var_dir: str

    @classmethod
    def make(cls, inputs: Iterable[str | Path], outputs: Iterable[str | Path],
             var_dir: str | Path) -> DataRoots:
        return cls(tuple(_root(r) for r in inputs), tuple(_root(r) for r in outputs),
                   os.path.realpath(var_dir))

    def describe(self, *, output: bool = False) -> str:
        roots = self.outputs if output else self.inputs + self.outputs
        name = "QA_OUTPUT_ROOTS" if output else "QA_DATA_ROOTS or QA_OUTPUT_ROOTS"
        return f"{', '.join(roots) or '(none configured)'} ({name})"


def from_settings() -> DataRoots:
    """The roots of QA_DATA_ROOTS / QA_OUTPUT_ROOTS (settings.DATA_ROOTS, OUTPUT_ROOTS)."""
    from django.conf import settings

    return DataRoots.make(settings.DATA_ROOTS, settings.OUTPUT_ROOTS, settings.VAR_DIR)


def _root(root: str | Path) -> str:
    root = str(root)
    if not is_local(root):
        return root if root.endswith("/") else root + "/"
    return os.path.realpath(os.path.expanduser(local_path(root)))


def _within(path: str, root: str, *, strictly: bool = False) -> bool:
    if root.endswith("/") and "://" in root:  # a URL prefix
        return path.startswith(root) and (not strictly or len(path) > len(root))
    return path.startswith(root + os.sep) or (not strictly and path == root) or root == os.sep


def _private(path: str, roots: DataRoots) -> bool:
    """Inside var/ but not in one of its data folders."""
    var = roots.var_dir
    if not (path == var or path.startswith(var + os.sep)):
        return False
    return not any(_within(path, os.path.join(var, d)) for d in DATA_DIRS)


def spark_pattern(path: str, what: str, *, wildcards: bool) -> None:
    """OutsideRoots unless Spark reads `path` as the text it is: no Hadoop glob character in it
    (with `wildcards`, an input's: `*` and `?` in its last part only, where they match names of
    one folder, which is checked). The one check of the form, the CLI, the scheduler and the
    worker, through check_input and check_output."""
    found = [c for c in path if c in GLOB_CHARS]
    if not found:
        return
    parts = path.rstrip("/").split("/")
    if wildcards:
        strict = [c for c in found if c not in WILDCARDS]
        if not strict:
            inner = next((p for p in parts[:-1] if WILDCARDS & set(p)), None)
            if inner is None:
                return
            raise OutsideRoots(
                f"{what} {path!r}: a wildcard (* or ?) may stand in the path's last part only "
                f"(such as data/*.parquet), not in a folder's name ({inner!r})")
        raise OutsideRoots(
            f"{what} {path!r} holds '{strict[0]}', which Spark reads as a pattern (Hadoop's "
            "glob: {a,b/c} is expanded before anything is matched, and could name a folder "
            "outside the data roots): an input may use only * and ?, in its last part (such as "
            "data/*.parquet), and none of { } [ ] \\")
    raise OutsideRoots(
        f"{what} {path!r} holds '{found[0]}', which Spark reads as a pattern (Hadoop's glob: "
        "{ } [ ] * ? \\; {a,b/c} is expanded before anything is matched, and could name a "
        f"folder outside the data roots): {'an output' if what == '--output' else 'a view'} "
        "is a path without any of them")


def _spark_name(name: str, where: str, given: str, what: str) -> None:
    """OutsideRoots for a file or folder that Spark would be given by name (a file of a
    directory input, a match of its wildcard) whose name it would read as a pattern."""
    bad = next((c for c in name if c in GLOB_CHARS), None)
    if bad is not None:
        raise OutsideRoots(
            f"{what} {given!r} holds {where}, whose name has '{bad}': Spark is given each file "
            "of an input by name and would read it as a pattern (Hadoop's glob: { } [ ] * ? "
            "\\), which could name a file outside the data roots; rename it, or move it out "
            "of the input")


def _remote(path: str, what: str, roots: tuple[str, ...], described: str) -> str:
    rest = path.split("://", 1)[1]
    if any(part == ".." for part in rest.split("/")) or "?" in rest or "#" in rest:
        raise OutsideRoots(f"{what} {path!r}: a remote path may not hold '..', '?' or '#'")
    if not any(_within(path, r) for r in roots if "://" in r):
        raise OutsideRoots(f"{what} {path!r} is not under a data root: {described}")
    return path


def check_input(path: str, roots: DataRoots, *, what: str = "input",
                wildcards: bool = True) -> str:
    """`path` (a file, directory or, with `wildcards`, a glob: an input's, not a view's)
    resolved, if everything it names lies under an input or output root and Spark reads it as
    it is checked here; OutsideRoots otherwise."""
    allowed = roots.inputs + roots.outputs
    described = roots.describe()
    spark_pattern(path, what, wildcards=wildcards)
    if not is_local(path):
        return _remote(path, what, allowed, described)
    absolute = os.path.abspath(os.path.expanduser(local_path(path)))
    magic = glob.has_magic(absolute)
    base = _glob_base(absolute) if magic else absolute
    resolved = os.path.realpath(base)
    _check_local(resolved, path, what, roots, allowed, described)
    # Hidden names too: what Spark's glob matches is not Python's to decide.
    for match in (glob.glob(absolute, include_hidden=True) if magic else [absolute]):
        real = os.path.realpath(match)
        _check_local(real, path, what, roots, allowed, described)
        if magic and wildcards and not os.path.basename(match).startswith(HIDDEN):
            _spark_name(os.path.basename(match), match, path, what)
        if os.path.isdir(real):
            _check_tree(real, path, what, roots, allowed, described, names=wildcards)
    return os.path.join(resolved, os.path.relpath(absolute, base)) if magic else resolved


def _glob_base(path: str) -> str:
    """The directory a glob starts from: its longest prefix without a wildcard."""
    parts = Path(path).parts
    keep = []
    for part in parts:
        if glob.has_magic(part):
            break
        keep.append(part)
    return str(Path(*keep)) if keep else os.sep


def _check_local(real: str, given: str, what: str, roots: DataRoots, allowed: tuple[str, ...],
                 described: str) -> None:
    shown = f" (it resolves to {real})" if real != os.path.abspath(given) else ""
    if _private(real, roots):
        raise OutsideRoots(f"{what} {given!r}{shown} is inside the stack's private folder "
                           f"{roots.var_dir} (its keys and database); data goes in "
                           f"{', '.join(os.path.join(roots.var_dir, d) for d in DATA_DIRS)} "
                           f"or another data root: {described}")
    if not any(_within(real, r) for r in allowed if "://" not in r):
        raise OutsideRoots(f"{what} {given!r}{shown} is not under a data root: {described}")


def _check_tree(top: str, given: str, what: str, roots: DataRoots, allowed: tuple[str, ...],
                described: str, *, names: bool = False) -> None:
    """Every symbolic link below `top` must stay under the roots (Spark follows links); with
    `names` (an input, whose files Spark is given one by one by the split's listing), no file
    or folder that the listing takes may have a name Spark would read as a pattern."""
    for root, dirs, files in os.walk(top):
        listed = names and not any(part.startswith(HIDDEN)
                                   for part in os.path.relpath(root, top).split(os.sep)
                                   if part != ".")
        for name in dirs + files:
            p = os.path.join(root, name)
            if listed and not name.startswith(HIDDEN):
                _spark_name(name, p, given, what)
            if not os.path.islink(p):
                continue
            real = os.path.realpath(p)
            if _private(real, roots) or not any(_within(real, r) for r in allowed
                                                if "://" not in r):
                raise OutsideRoots(f"{what} {given!r} holds {p}, a symbolic link to {real}, "
                                   "which is outside the data roots (Spark would read it): "
                                   f"{described}")


def check_output(path: str, roots: DataRoots) -> str:
    """`path` resolved, if it lies strictly inside an output root; OutsideRoots otherwise."""
    described = roots.describe(output=True)
    spark_pattern(path, "--output", wildcards=False)
    if not is_local(path):
        return _remote(path, "--output", roots.outputs, described)
    absolute = os.path.abspath(os.path.expanduser(local_path(path)))
    real = os.path.realpath(absolute)
    if _private(real, roots):
        _check_local(real, path, "--output", roots, roots.outputs, described)
    if not any(_within(real, r, strictly=True) for r in roots.outputs if "://" not in r):
        at_root = any(real == r for r in roots.outputs)
        shown = f" (it resolves to {real})" if real != absolute else ""
        raise OutsideRoots(f"--output {path!r}{shown} "
                           + ("is an output root itself: give a folder inside it"
                              if at_root else "is not inside an output root")
                           + f": {described}")
    return real


def overlapping(a: str, b: str) -> bool:
    """Whether one of two resolved paths holds the other (an output over its own input)."""
    return _within(a, b) or _within(b, a)
