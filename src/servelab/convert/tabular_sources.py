"""Tabular sources of ``servelab convert``: scikit-learn, LightGBM and XGBoost models.

A pickle or joblib file of the estimator, LightGBM's text model (``.txt``) or XGBoost's ``.json``/``.ubj``;
the reference is the estimator's own ``predict`` (and ``predict_proba`` for classifiers). Pickles run
code when loaded: give convert only files you would import.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

from servelab.convert.source_types import Source, SourceKind, TensorInfo
from servelab.errors import InvalidArgument, Unsupported
from servelab.types import DataType

__all__ = ["load_tabular"]


def _load_estimator(path: Path) -> tuple[SourceKind, Any]:
    suffix = path.suffix.lower()
    if suffix == ".txt":
        import lightgbm

        return "lightgbm", lightgbm.Booster(model_file=str(path))
    if suffix in (".json", ".ubj"):
        try:
            import xgboost
        except ImportError as exc:
            raise Unsupported(f"{path}: an XGBoost model needs xgboost (pip install xgboost-cpu): {exc}") from exc
        booster = xgboost.Booster()
        booster.load_model(str(path))
        return "xgboost", booster
    if suffix == ".joblib":
        import joblib

        estimator = joblib.load(path)
    else:
        with path.open("rb") as f:
            estimator = pickle.load(f)  # the user's own file, named on the command line
    return _estimator_kind(estimator), estimator


def _estimator_kind(estimator: Any) -> SourceKind:
    module = type(estimator).__module__.split(".")[0]
    if module == "lightgbm":
        return "lightgbm"
    if module == "xgboost":
        return "xgboost"
    if module == "sklearn" or hasattr(estimator, "predict"):
        return "sklearn"
    raise InvalidArgument(f"a pickled {type(estimator).__name__} is not a scikit-learn, LightGBM or XGBoost model")


def _n_features(estimator: Any) -> int:
    for attr in ("n_features_in_", "n_features_"):
        if isinstance(getattr(estimator, attr, None), int):
            return int(getattr(estimator, attr))
    if hasattr(estimator, "num_feature"):  # lightgbm.Booster / xgboost.Booster
        return int(estimator.num_feature() if callable(estimator.num_feature) else estimator.num_feature)
    if hasattr(estimator, "num_features"):
        return int(estimator.num_features())
    raise InvalidArgument(f"cannot tell how many features {type(estimator).__name__} takes")


def _is_classifier(estimator: Any, path: Path) -> bool:
    """Estimators with ``predict_proba`` classify; a bare booster must be a regression model."""
    if hasattr(estimator, "predict_proba"):
        return True
    params = getattr(estimator, "params", None)
    objective = str(params.get("objective", "")) if isinstance(params, dict) else ""
    if objective.startswith(("binary", "multiclass", "multi:", "binary:", "lambdarank", "rank:")):
        raise Unsupported(
            f"{path}: a bare booster with objective {objective!r}; save the classifier as a pickled "
            "LGBMClassifier / XGBClassifier so its classes are known, or use a regression objective"
        )
    return False


def load_tabular(path: Path) -> Source:
    kind, estimator = _load_estimator(path)
    features = _n_features(estimator)
    classifier = _is_classifier(estimator, path)
    inputs = [TensorInfo("input", DataType.FP32, (-1, features))]
    if classifier:
        outputs = ["label", "probabilities"]

        def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
            x = feed["input"]
            proba = np.asarray(estimator.predict_proba(x), dtype=np.float32)
            return [np.asarray(estimator.predict(x)).astype(np.int64), proba]
    else:
        outputs = ["variable"]

        def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
            pred = np.asarray(_predict(estimator, feed["input"]), dtype=np.float32)
            return [pred.reshape(len(pred), -1)]

    return Source(kind, path, inputs, outputs, "classifier" if classifier else "regressor", estimator=estimator, _run=run)


def _predict(estimator: Any, x: np.ndarray) -> Any:
    if type(estimator).__name__ == "Booster" and type(estimator).__module__.startswith("xgboost"):
        import xgboost

        return estimator.predict(xgboost.DMatrix(x))
    return estimator.predict(x)
