"""Reads Delta tables with delta-kernel, through DuckDB's delta extension, and prints what
it saw as JSON on stdout.

It runs in the test-only virtual environment ``.venv-kernel`` (``make kernel``), which holds
the DuckDB the extension's pip package is built for (``duckdb-ext-delta``), not the
project's: import nothing from cdnlake here. The extension is loaded from that package's
folder; DuckDB is told never to download or autoload one, so this reads offline or fails.

    python kernel_reader.py REQUEST.json

REQUEST: ``{"tables": [{"uri": ..., "key": "request_id", "columns": ["ts", ...],
"versions": [null, 100, ...]}]}``; ``null`` is the table's latest version. For each version
the answer has the kernel's own version (the end of the log segment it read), the rows,
the distinct keys, a digest of the sorted (key, columns) rows and the data files.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import duckdb
import duckdb_ext  # the pip package's namespace: its extensions/ folder

FAR = 2**40  # a version no table here reaches
END = re.compile(r"LogSegment end version (\d+) not the same as the specified end version")


def connect() -> duckdb.DuckDBPyConnection:
    folder = Path(next(iter(duckdb_ext.__path__))) / "extensions"
    con = duckdb.connect(
        config={
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            "allow_unsigned_extensions": False,  # the package's build is signed
        }
    )
    con.execute("SET extension_directory = ?", [str(folder)])
    con.execute("LOAD delta")
    return con


def latest_version(con: duckdb.DuckDBPyConnection, uri: str) -> int:
    """The kernel's latest version of the table.

    The extension has no function that returns a snapshot's version, but its time travel
    (``ATTACH ... (TYPE delta, VERSION n)``) builds a log segment ending at ``n`` and
    refuses one that ends elsewhere, naming the end the kernel found: asked for a version
    past any, it tells the latest. The caller reads that version again to be sure.
    """
    con.execute(f"ATTACH '{uri}' AS probe (TYPE delta, VERSION {FAR})")
    try:
        con.execute("SELECT count(*) FROM probe").fetchall()
    except duckdb.Error as exc:
        found = END.search(str(exc))
        if found is None:
            raise
        return int(found.group(1))
    finally:
        con.execute("DETACH probe")
    raise AssertionError(f"the kernel read version {FAR} of {uri}")


def digest(rows: list[tuple[Any, ...]]) -> str:
    text = "\n".join("|".join(str(v) for v in row) for row in sorted(rows))
    return hashlib.sha256(text.encode()).hexdigest()


def read(con: duckdb.DuckDBPyConnection, table: dict[str, Any], version: int | None) -> Any:
    uri, key, columns = table["uri"], table["key"], table["columns"]
    pinned = "" if version is None else f", VERSION {int(version)}"
    con.execute(f"ATTACH '{uri}' AS t (TYPE delta{pinned})")
    try:
        wanted = ", ".join(f"epoch_us({c})" if c == "ts" else c for c in [key, *columns])
        rows = con.execute(f"SELECT {wanted} FROM t").fetchall()
        (distinct,) = con.execute(f"SELECT count(DISTINCT {key}) FROM t").fetchone() or (0,)
    finally:
        con.execute("DETACH t")
    root = uri.rstrip("/") + "/"
    listed = con.execute(
        "SELECT data_file FROM delta_list_files(?"
        + ("" if version is None else f", version := {int(version)}")
        + ")",
        [uri],
    ).fetchall()
    files = sorted(unquote(f.removeprefix("file://").removeprefix(root)) for (f,) in listed)
    return {
        "rows": len(rows),
        "distinct": distinct,
        "digest": digest(rows),
        "files": files,
    }


def read_table(con: duckdb.DuckDBPyConnection, table: dict[str, Any]) -> Any:
    latest = latest_version(con, table["uri"])
    seen = []
    for version in table["versions"]:
        got = read(con, table, version)
        got["version"] = latest if version is None else version
        seen.append(got)
    # The latest read without a version is the version the kernel reported.
    pinned = read(con, table, latest)
    return {"uri": table["uri"], "latest": latest, "pinned": pinned, "seen": seen}


def main(request_path: str) -> None:
    request = json.loads(Path(request_path).read_text())
    con = connect()
    answer: dict[str, Any] = {"duckdb": duckdb.__version__, "tables": []}
    for table in request["tables"]:
        try:
            answer["tables"].append(read_table(con, table))
        except duckdb.Error as exc:  # said as data: the test names both readers' outcomes
            answer["tables"].append({"uri": table["uri"], "error": str(exc).splitlines()[0]})
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
