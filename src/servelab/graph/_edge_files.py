"""Read edge lists from CSV / TSV, Parquet and .npy files into (src, dst) int64 arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from servelab.errors import InvalidArgument, NotFound, Unsupported

_COMMENT = ("#", "%")


def read_edge_file(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Return (src, dst) from a .csv/.tsv/.txt/.edges, .parquet or .npy edge file."""
    p = Path(path)
    if not p.is_file():
        raise NotFound(f"edge file {p} does not exist")
    suffix = p.suffix.lower()
    if suffix == ".npy":
        return _read_npy(p)
    if suffix in (".parquet", ".pq"):
        return _read_parquet(p)
    if suffix in (".csv", ".tsv", ".txt", ".edges", ".el"):
        return _read_csv(p)
    raise InvalidArgument(f"cannot read edge file {p.name}: expected .csv/.tsv/.txt, .parquet or .npy")


def _read_npy(p: Path) -> tuple[np.ndarray, np.ndarray]:
    a = np.load(p, mmap_mode="r")
    if a.ndim != 2 or a.shape[1] != 2:
        raise InvalidArgument(f"{p.name}: expected an [E, 2] array of (src, dst), got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.integer):
        raise InvalidArgument(f"{p.name}: expected integer node ids, got dtype {a.dtype}")
    return np.ascontiguousarray(a[:, 0], dtype=np.int64), np.ascontiguousarray(a[:, 1], dtype=np.int64)


def _pyarrow() -> object:
    try:
        import pyarrow
    except ImportError as exc:  # pragma: no cover - pyarrow is in the graph extra
        raise Unsupported(
            "reading CSV/Parquet edge files needs pyarrow: pip install 'servelab[graph]'"
        ) from exc
    return pyarrow


def _int_column(col: object, name: str, where: str) -> np.ndarray:
    import pyarrow as pa

    if not pa.types.is_integer(col.type):  # type: ignore[attr-defined]
        raise InvalidArgument(f"{where}: column {name!r} must hold integer node ids, found {col.type}")  # type: ignore[attr-defined]
    if col.null_count:  # type: ignore[attr-defined]
        raise InvalidArgument(f"{where}: column {name!r} has {col.null_count} empty value(s)")  # type: ignore[attr-defined]
    return np.asarray(col.to_numpy(), dtype=np.int64)  # type: ignore[attr-defined]


def _read_parquet(p: Path) -> tuple[np.ndarray, np.ndarray]:
    _pyarrow()
    import pyarrow.parquet as pq

    names = pq.read_schema(p).names
    missing = [c for c in ("src", "dst") if c not in names]
    if missing:
        raise InvalidArgument(f"{p.name}: expected columns 'src' and 'dst', found {names}")
    table = pq.read_table(p, columns=["src", "dst"])
    return _int_column(table["src"].combine_chunks(), "src", p.name), _int_column(
        table["dst"].combine_chunks(), "dst", p.name
    )


def _sniff(p: Path) -> tuple[int, str, bool]:
    """Return (comment lines to skip, delimiter, has header) from the first lines."""
    skip = 0
    with p.open("r", errors="replace") as fh:
        for line in fh:
            if line.strip() and not line.lstrip().startswith(_COMMENT):
                first = line.strip()
                break
            skip += 1
        else:
            raise InvalidArgument(f"{p.name}: the edge file has no edges")
    delim = "," if "," in first else ("\t" if "\t" in first else " ")
    fields = [x for x in first.split(delim) if x != ""]
    if len(fields) < 2:
        raise InvalidArgument(f"{p.name}: expected 2 integer columns (src, dst), first line is {first!r}")
    header = not all(_is_int(x) for x in fields[:2])
    return skip, delim, header


def _is_int(s: str) -> bool:
    try:
        int(s.strip())
    except ValueError:
        return False
    return True


def _read_csv(p: Path) -> tuple[np.ndarray, np.ndarray]:
    _pyarrow()
    import pyarrow as pa
    import pyarrow.csv as pcsv

    skip, delim, header = _sniff(p)
    read = pcsv.ReadOptions(skip_rows=skip + int(header), autogenerate_column_names=True)
    parse = pcsv.ParseOptions(delimiter=delim, ignore_empty_lines=True)
    conv = pcsv.ConvertOptions(column_types={"f0": pa.int64(), "f1": pa.int64()})
    try:
        table = pcsv.read_csv(p, read_options=read, parse_options=parse, convert_options=conv)
    except pa.ArrowInvalid as exc:
        raise InvalidArgument(f"{p.name}: expected 2 integer columns (src, dst) per line: {exc}") from exc
    if table.num_columns < 2:
        raise InvalidArgument(f"{p.name}: expected 2 integer columns (src, dst), found {table.num_columns}")
    return (
        _int_column(table.column(0).combine_chunks(), "column 1", p.name),
        _int_column(table.column(1).combine_chunks(), "column 2", p.name),
    )
