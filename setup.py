"""The package list, which pyproject.toml cannot express: every package under queueadmin/ and
core/ (found, so a new one is never left out of the wheel), plus the console's templates/ and
static/, which the repository keeps at its top level and the wheel carries inside the
queueadmin package (queueadmin/templates, queueadmin/static; queueadmin/settings.py finds them
there when installed, at the top level in a checkout). Everything else is in pyproject.toml.

Folders that hold only data (the Lua scripts, the Java source, the assets' subfolders) are
listed as namespace packages, which is what setuptools takes them for: `python -m build` and
`pip wheel` then say nothing about them."""

from setuptools import find_namespace_packages, setup

ASSETS = {"queueadmin.templates": "templates", "queueadmin.static": "static"}
NOT_PACKAGES = ["*__pycache__*"]
ASSET_PACKAGES = [f"{name}.{sub}" for name, top in ASSETS.items()
                  for sub in find_namespace_packages(where=top, exclude=NOT_PACKAGES)]

setup(
    packages=[*find_namespace_packages(include=["queueadmin", "queueadmin.*", "core", "core.*"],
                                       exclude=NOT_PACKAGES),
              *ASSETS, *ASSET_PACKAGES],
    package_dir=ASSETS,
)
