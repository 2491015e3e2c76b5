"""What users paste and call first: the documentation's Python examples, and the metrics on their own arrays."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the pages with examples (docs/api.md's Python blocks are signatures: ``*``, ``**kwargs``, ``...``)
PAGES = [ROOT / "README.md", ROOT / "docs" / "user_guide.md", ROOT / "docs" / "architecture.md"]


def _blocks():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"```python\n(.*?)```", text, flags=re.S):
            line = text.count("\n", 0, match.start()) + 2
            yield pytest.param(match.group(1), id=f"{page.name}:{line}")


@pytest.mark.parametrize("code", list(_blocks()))
def test_python_examples_compile(code):
    """Before: the README's grid search put its parameter grid's opening brace in a comment (a SyntaxError
    when pasted)."""
    compile(code, "<example>", "exec")


def test_the_metrics_refuse_shapes_they_would_broadcast():
    """Before: a 1-D target against a regressor's column intervals compared every target with every interval
    (coverage 0.0125 for intervals that hold every target), and a column of labels gave an ECE of 0.5 for
    perfect predictions."""
    import numpy as np

    from bayesnet.metrics import expected_calibration_error, interval_coverage

    y = np.arange(80.0)
    assert interval_coverage(y, (y - 0.5)[:, None], (y + 0.5)[:, None]) == 1.0
    assert interval_coverage(y[:, None], y - 0.5, y + 0.5) == 1.0
    assert interval_coverage(np.c_[y, y], np.c_[y - 1, y + 1], np.c_[y + 1, y + 2]) == 0.5  # two outputs
    with pytest.raises(ValueError, match="same shape"):
        interval_coverage(y, y[:40], y[:40])
    with pytest.raises(ValueError, match="must not hold NaN"):  # (before: counted as a miss, silently)
        interval_coverage(np.r_[y[:-1], np.nan], y - 1, y + 1)
    with pytest.raises(ValueError, match="hold no value"):  # (before: nan and numpy's RuntimeWarning)
        interval_coverage(y[:0], y[:0], y[:0])
    labels = np.arange(80) % 2
    P = np.eye(2)[labels]
    assert expected_calibration_error(labels[:, None], P) == 0.0
    with pytest.raises(ValueError, match="proba must have shape"):
        expected_calibration_error(labels, P[:40])
    with pytest.raises(ValueError, match="y_true must be 1-D"):
        expected_calibration_error(np.c_[labels, labels], P)
    # (before: n_bins=0 and no rows gave 0.0, n_bins=-3 numpy's own error, proba * 5 an ECE of 2.66, a short
    # classes an IndexError; found by a helper's user test)
    for kwargs, words in ((dict(n_bins=0), "n_bins must be a positive integer"),
                          (dict(n_bins=-3), "n_bins must be a positive integer"),
                          (dict(proba=P * 5), "proba must hold probabilities"),
                          (dict(classes=[0]), "classes has 1 labels for 2 columns"),
                          (dict(y_true=labels[:0], proba=P[:0]), "proba holds no row"),
                          # labels that are not column indices, without classes (a helper's user test: labels {1, 2}
                          # or strings counted every row wrong, an ECE of about the mean confidence, silently)
                          (dict(y_true=labels + 1), r"column indices 0..1 of proba; got labels \[1, 2\]"),
                          (dict(y_true=np.where(labels, "yes", "no")), "Pass classes=est.classes_")):
        with pytest.raises(ValueError, match=words):
            expected_calibration_error(**{"y_true": labels, "proba": P, **kwargs})
    assert expected_calibration_error(labels + 1, P, classes=[1, 2]) == 0.0
    assert expected_calibration_error(np.where(labels, "yes", "no"), P, classes=["no", "yes"]) == 0.0
