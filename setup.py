"""The package list, which pyproject.toml cannot express: every package under queueadmin/ and
core/ (found, so a new one is never left out of the wheel), plus the console's templates/ and
static/, which the repository keeps at its top level and the wheel carries inside the
queueadmin package (queueadmin/templates, queueadmin/static; queueadmin/settings.py finds them
there when installed, at the top level in a checkout). Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

ASSETS = {"queueadmin.templates": "templates", "queueadmin.static": "static"}

setup(
    packages=[*find_packages(include=["queueadmin", "queueadmin.*", "core", "core.*"]), *ASSETS],
    package_dir=ASSETS,
)
