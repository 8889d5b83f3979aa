"""The named queries live in ``sql/`` at the top of the repository (the one copy); the wheel
ships them inside the package as ``cdnlake/sql/``. pyproject.toml cannot map a folder outside
``src/`` into the package next to a package search, so that one mapping is here."""

from setuptools import find_namespace_packages, setup

SQL = ["cdnlake.sql", "cdnlake.sql.internal", "cdnlake.sql.postgres"]

setup(
    packages=[*find_namespace_packages("src", include=["cdnlake", "cdnlake.*"]), *SQL],
    package_dir={"": "src", "cdnlake.sql": "sql"},
)
