"""TF Serving fixtures: a tiny SavedModel with predict, classify and regress signatures, a models.config,
a `servelab serve --tfserving-config` process, and TensorFlow computing the reference answers.

The SavedModel is built with TensorFlow's own SignatureDef helpers (``tf.compat.v1.saved_model``:
``predict_signature_def``, ``classification_signature_def``, ``regression_signature_def``) over
serialized ``tf.Example`` input, the way TF Serving's classify/regress signatures are made (tf.estimator
is gone in TF 2.21). Version v scales the weights by v, so every version answers differently.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.servers import ServerProcess

WEIGHTS = np.array([[1.0, -1.0], [0.5, 0.25], [-2.0, 1.0]], np.float32)
BIAS = np.array([0.1, -0.2], np.float32)
REGRESS = np.array([1.0, 2.0, 3.0], np.float32)
LABELS = ("neg", "pos")


def build_saved_model(tf: Any, folder: Path, version: int) -> None:
    """``folder`` = one SavedModel version: serving_default (x [-1,3] -> probs, total), classify, regress."""
    tf1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        w = tf.constant(WEIGHTS * version)
        b = tf.constant(BIAS)
        x = tf1.placeholder(tf.float32, [None, 3], name="x")
        probs = tf.nn.softmax(tf.matmul(x, w) + b, name="probs")
        total = tf.reduce_sum(x * float(version), axis=1, name="total")
        serialized = tf1.placeholder(tf.string, [None], name="tf_example")
        features = tf1.io.parse_example(serialized, {"x": tf1.io.FixedLenFeature([3], tf.float32)})
        scores = tf.nn.softmax(tf.matmul(features["x"], w) + b, name="scores")
        classes = tf.tile(tf.constant([list(LABELS)]), [tf.shape(serialized)[0], 1], name="classes")
        value = tf.reduce_sum(features["x"] * tf.constant(REGRESS) * float(version), axis=1, name="value")
        signatures = {
            "serving_default": tf1.saved_model.predict_signature_def({"x": x}, {"probs": probs, "total": total}),
            "classify": tf1.saved_model.classification_signature_def(serialized, classes, scores),
            "regress": tf1.saved_model.regression_signature_def(serialized, value),
        }
        with tf1.Session(graph=graph) as session:
            builder = tf1.saved_model.Builder(str(folder))
            builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map=signatures)
            builder.save()


def example(tf: Any, x: list[float]) -> Any:
    return tf.train.Example(features=tf.train.Features(feature={"x": tf.train.Feature(float_list=tf.train.FloatList(value=x))}))


class Reference:
    """TensorFlow in this process, running each version's signatures: the answers servelab must give."""

    def __init__(self, tf: Any, base_path: Path, folders: dict[int, str] | None = None) -> None:
        self.tf = tf
        self.base_path = base_path
        self.folders = folders or {}
        self._loaded: dict[int, Any] = {}

    def signature(self, version: int, key: str) -> Any:
        if version not in self._loaded:
            folder = self.base_path / self.folders.get(version, str(version))
            self._loaded[version] = self.tf.saved_model.load(str(folder))
        return self._loaded[version].signatures[key]

    def predict(self, version: int, x: np.ndarray) -> dict[str, np.ndarray]:
        return {k: v.numpy() for k, v in self.signature(version, "serving_default")(x=self.tf.constant(x)).items()}

    def examples(self, version: int, key: str, serialized: list[bytes]) -> dict[str, np.ndarray]:
        out = self.signature(version, key)(inputs=self.tf.constant(serialized))
        return {k: v.numpy() for k, v in out.items()}


def models_config(entries: list[dict[str, Any]]) -> str:
    """A ModelServerConfig text: entries of name, base_path, policy (text) and labels."""
    parts = []
    for e in entries:
        labels = "".join(f'\n    version_labels {{ key: "{k}" value: {v} }}' for k, v in e.get("labels", {}).items())
        policy = f"\n    model_version_policy {{ {e['policy']} }}" if e.get("policy") else ""
        parts.append(f'  config {{\n    name: "{e["name"]}"\n    base_path: "{e["base_path"]}"\n'
                     f'    model_platform: "tensorflow"{policy}{labels}\n  }}')
    return "model_config_list {\n" + "\n".join(parts) + "\n}\n"


BATCHING = textwrap.dedent("""\
    max_batch_size { value: 8 }
    batch_timeout_micros { value: 2000 }
    max_enqueued_batches { value: 100 }
    num_batch_threads { value: 2 }
    allowed_batch_sizes: 4
    allowed_batch_sizes: 8
""")


@dataclass
class TfServingServer(ServerProcess):
    """`servelab serve --tfserving-config CONFIG` (``repository`` is the config file, no repository folder)."""

    env: dict[str, str] = field(default_factory=lambda: {"TF_CPP_MIN_LOG_LEVEL": "2"})

    def target_args(self) -> list[str]:
        return ["--tfserving-config", str(self.repository)]
