"""Reading and checking CSV files for the ``bayesnet`` command (pandas), before any sampling."""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import warnings

import numpy as np

from .options import CLIError


# pandas' default missing-value markers (pandas.read_csv, na_values): a target cell holding one is missing
_NA_STRINGS = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                         "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})

# ---------------------------------------------------------------------- #
# CSV files (pandas), checked cell by cell before anything is fitted
# ---------------------------------------------------------------------- #
def _check_input_file(path: str, option: str) -> None:
    if not os.path.exists(path):
        raise CLIError(f"{option} {path!r} not found.")
    if os.path.isdir(path):
        raise CLIError(f"{option} {path!r} is a directory, not a file.")

def _check_output_path(path: str | None, option: str = "--output", inputs: dict | None = None) -> None:
    """Fail before the fit, not after it, when the output cannot be written, or would replace an input
    (``inputs``: option -> path)."""
    if not path:
        return
    for name, source in (inputs or {}).items():
        same = False
        if source and os.path.exists(path) and os.path.exists(source):
            with contextlib.suppress(OSError):
                same = os.path.samefile(path, source)
        if same:
            raise CLIError(f"{option}: {path!r} is the {name} file; writing it would replace the input. Give "
                           "another file name.")
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise CLIError(f"{option}: {path!r} is a directory; give a file name.")
    if not os.path.isdir(folder):
        raise CLIError(f"{option}: the folder {folder!r} does not exist.")
    if not os.access(folder, os.W_OK) or os.path.exists(path) and not os.access(path, os.W_OK):
        raise CLIError(f"{option}: {path!r} is not writable.")

def read_csv(path: str, option: str = "--data: file"):
    """Read a CSV with a header row, every cell as text.

    Returns
    -------
    names : list of str
        The header, unique and non-empty.
    body : pandas.DataFrame
        The data rows, as strings; blank lines at the end are dropped (one inside the data is a row of empty,
        missing cells), and the index is the line number minus one.

    Raises
    ------
    CLIError
        For a missing, empty or unreadable file, ragged rows (too many fields), a header with duplicate or
        empty names, or no data rows.
    """
    import pandas as pd

    _check_input_file(path, option)
    try:
        raw = pd.read_csv(path, header=None, dtype=str, keep_default_na=False, skip_blank_lines=False,
                          skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise CLIError(f"{path} is empty; a CSV file with a header row and data rows is needed.") from None
    except pd.errors.ParserError as exc:
        found = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(exc))
        if found:
            expected, line, saw = found.groups()
            raise CLIError(f"{path}: line {line} has {saw} fields but the header has {expected} (ragged rows); "
                            "every row needs one value per column.") from None
        raise CLIError(f"{path} is not a readable CSV file: {str(exc).strip()}") from None
    except UnicodeDecodeError:
        raise CLIError(f"{path} is not a text CSV file (it is not UTF-8).") from None
    except OSError as exc:
        raise CLIError(f"cannot read {path}: {exc.strerror or exc}.") from None
    raw = raw.fillna("")  # missing fields of short rows (NaN in some pandas versions): see _raise_if_short_rows
    names = [str(n).strip() for n in raw.iloc[0]]
    unnamed = [i + 1 for i, n in enumerate(names) if not n]
    if unnamed:
        raise CLIError(f"{path}: column(s) {unnamed} have no name in the header row; name every column (an "
                        "unnamed first column is often a saved index: drop it).")
    seen: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        seen.setdefault(name, []).append(i + 1)
    dup = {name: cols for name, cols in seen.items() if len(cols) > 1}
    if dup:
        which = "; ".join(f"{name!r} (columns {', '.join(map(str, cols))})" for name, cols in dup.items())
        raise CLIError(f"{path} has duplicate column names: {which}; give every column its own name.")
    body = raw.iloc[1:]
    filled = (body != "").any(axis=1).to_numpy()
    # blank lines at the end only: a row of empty cells inside the data is a row with missing values (the empty
    # cell pandas writes for NaN in a one-column file read as a blank line; dropped, it stitched a series across
    # the gap and numbered every later prediction one too low)
    body = body.iloc[:int(filled.nonzero()[0][-1]) + 1] if filled.any() else body.iloc[:0]
    if body.empty:
        raise CLIError(f"{path} has a header row but no data rows.")
    return names, body

def _raise_if_short_rows(path: str) -> None:
    """Rows with fewer fields than the header read as empty cells; tell them apart (python engine: None)."""
    import pandas as pd

    raw = pd.read_csv(path, header=None, dtype=object, keep_default_na=False, skip_blank_lines=False,
                      engine="python", skipinitialspace=True)
    missing = raw.isna()
    short = missing.any(axis=1) & ~missing.all(axis=1)
    if short.any():
        line = int(short.to_numpy().nonzero()[0][0]) + 1
        fields = int((~missing.loc[short.idxmax()]).sum())
        raise CLIError(f"{path}: line {line} has {fields} fields but the header has {raw.shape[1]} (ragged "
                        "rows); every row needs one value per column.")

def _cell(value: str) -> str:
    return "an empty cell" if value == "" else repr(value)

def _numeric(path: str, names: list[str], body, columns: list[str], role: str) -> np.ndarray:
    """The given columns as finite float64 numbers, shape ``(n_rows, len(columns))``; a missing or
    non-numeric cell raises, naming the column, how many cells and the first one's line."""
    import pandas as pd

    out = np.empty((len(body), len(columns)))
    for j, name in enumerate(columns):
        text = body.iloc[:, names.index(name)]
        values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        bad = ~np.isfinite(values)
        if bad.any():
            first = int(bad.nonzero()[0][0])
            if text.iloc[first] == "":
                _raise_if_short_rows(path)
            raise CLIError(
                f"{role} column {name!r} in {path} has {int(bad.sum())} missing, non-numeric or infinite "
                f"value(s), the first on line {body.index[first] + 1}: {_cell(text.iloc[first])}. "
                "Its values must be finite numbers: fill or drop those rows, or remove the column.")
        out[:, j] = values
    return out

def _target_cells(path: str, names: list[str], body, target: str, option: str = "--target"):
    """The target column as text, refusing missing cells (empty, or one of pandas' NA markers). ``option``: the
    command-line option that names the column (``predict`` reads a forecast's series from ``--column``)."""
    if target not in names:
        close = difflib.get_close_matches(target, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        separators = [sep for sep in (";", "\t", "|") if len(names) == 1 and sep in names[0]]
        if separators:
            hint = f" (the header reads as one column: is the file separated by {separators[0]!r}? only commas are)"
        raise CLIError(f"{option}: column {target!r} is not in {path}{hint}; its columns are "
                        f"{', '.join(names)}.")
    text = body.iloc[:, names.index(target)]
    missing = text.isin(_NA_STRINGS).to_numpy()
    if missing.any():
        first = int(missing.nonzero()[0][0])
        if text.iloc[first] == "":
            _raise_if_short_rows(path)
        raise CLIError(f"target column {target!r} in {path} is missing in {int(missing.sum())} of {len(text)} "
                        f"rows, the first on line {body.index[first] + 1} ({_cell(text.iloc[first])}); drop or "
                        "fill those rows (a time series' gaps: fill them, as a dropped row joins the values on "
                        "either side into one window).")
    return text

def _load_csv_for_fit(path: str, target: str, task: str):
    """``X (n, F)``, ``y`` and the feature names from a CSV; for forecasts ``X`` is the series ``(n,)`` and
    ``y`` None."""
    import pandas as pd

    names, body = read_csv(path)
    text = _target_cells(path, names, body, target)
    if task == "forecast":
        return _numeric(path, names, body, [target], "series")[:, 0], None, [target]
    features = [n for n in names if n != target]
    if not features:
        raise CLIError(f"{path} has no feature columns besides the target {target!r}.")
    if task == "regression":
        values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        bad = ~np.isfinite(values)
        infinite = np.isinf(values)
        if infinite.any():  # (a number, but not a finite one: not a class label)
            first = int(infinite.nonzero()[0][0])
            raise CLIError(f"--task regression needs finite target values, but column {target!r} holds "
                            f"{_cell(text.iloc[first])} on line {body.index[first] + 1} ({int(infinite.sum())} such "
                            "rows); fill or drop those rows.")
        if bad.any():
            first = int(bad.nonzero()[0][0])
            raise CLIError(f"--task regression needs a numeric target, but column {target!r} holds "
                            f"{_cell(text.iloc[first])} on line {body.index[first] + 1} ({int(bad.sum())} such "
                            "rows); for class labels use --task classification.")
        y = values
    else:
        y = text.to_numpy(dtype=object).astype(str)
    X = _numeric(path, names, body, features, "feature")
    if task == "classification":
        _check_classes(path, target, y)
    return X, y, features

def _check_classes(source: str, target: str, y: np.ndarray) -> None:
    import pandas as pd

    classes, counts = np.unique(y, return_counts=True)
    numbers = pd.to_numeric(pd.Series(classes), errors="coerce")
    twice = numbers[numbers.notna() & numbers.duplicated(keep=False)]
    if len(twice):  # ("1" and "1.0": labels are text on the command line, so two classes)
        spelled = ", ".join(repr(str(c)) for c in classes[twice.index[:6]])
        warnings.warn(f"target column {target!r} in {source} spells one number in several ways ({spelled}): they "
                      "are different classes to the classifier, which reads labels as text. Write each label one "
                      "way if they are meant as one class.", UserWarning, stacklevel=2)
    if len(classes) < 2:
        raise CLIError(f"target column {target!r} in {source} has a single class, {str(classes[0])!r}; "
                        "classification needs at least two.")
    rare = classes[counts < 2]
    if len(rare):
        # numbers with more distinct values than half the rows, or with many single-row values (a whole-number
        # measurement, e.g. diabetes' progression score: 214 values in 442 rows, 84 of them once), not 2 rows' 0, 1
        continuous = numbers.notna().all() and len(y) >= 10 and (
            len(classes) > len(y) / 2 or len(rare) > max(5, len(classes) / 5))
        hint = " The target looks continuous: use --task regression." if continuous else ""
        shown = ", ".join(repr(str(c)) for c in rare[:5]) + (", ..." if len(rare) > 5 else "")
        raise CLIError(f"target column {target!r} in {source}: {len(rare)} class(es) have a single row ({shown}); "
                        "the stratified train/test split needs at least two rows per class: drop or merge "
                        f"them.{hint}")
