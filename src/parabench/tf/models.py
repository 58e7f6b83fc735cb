"""Keras models with the same layer shapes as the torch workloads' models, keyed by name.

Usage::

    from parabench.tf.models import keras_model, keras_layout, missing_model

    if (reason := missing_model(workload.name)) is None:
        x = keras_layout(workload.name, x_numpy)            # NCHW images -> NHWC
        model = keras_model(workload.name, x.shape[1:], classes=10)

The workloads stay free of TensorFlow (a workload never imports an engine): their Keras twins
live here. Layer shapes match the torch models (``parabench.workloads.mlp`` / ``cnn``); the
initialisers are Keras' defaults (Glorot uniform, zero bias), not torch's, so a twin starts
from other weights than the torch model: the ``tf_*`` methods are compared with ``tf_serial``,
never with torch's ``serial``. Images become channels-last, the layout TensorFlow's CPU
convolutions support.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from parabench.workloads.mlp import hidden_width


def _mlp(keras: Any, shape: tuple[int, ...], classes: int) -> Any:
    hidden = hidden_width(shape[0])
    return keras.Sequential([
        keras.Input(shape=shape),
        keras.layers.Dense(hidden, activation="relu"),
        keras.layers.Dense(hidden, activation="relu"),
        keras.layers.Dense(classes),
    ])


def _cnn(keras: Any, shape: tuple[int, ...], classes: int) -> Any:
    # Conv(32, 3x3) - ReLU - Conv(64, 3x3) - ReLU - MaxPool(2) - Linear(128) - ReLU - Linear
    return keras.Sequential([
        keras.Input(shape=shape),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(classes),
    ])


#: workload name -> (builder, whether inputs are NCHW images to move to channels-last)
MODELS: dict[str, tuple[Callable[[Any, tuple[int, ...], int], Any], bool]] = {
    "mlp": (_mlp, False),
    "cnn": (_cnn, True),
}


def missing_model(workload: str) -> str | None:
    """Why a ``tf_*`` method cannot train ``workload`` (None: there is a Keras twin)."""
    if workload in MODELS:
        return None
    return (f"no Keras model for workload {workload}; the tf_* methods train "
            f"{', '.join(sorted(MODELS))}")


def keras_layout(workload: str, x: np.ndarray) -> np.ndarray:
    """The workload's torch-layout inputs in the layout its Keras twin takes."""
    if MODELS[workload][1]:
        return np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    return x


def keras_model(workload: str, shape: tuple[int, ...], classes: int) -> Any:
    """A fresh Keras twin of the workload's model (build it inside a strategy's scope)."""
    import keras

    builder, _ = MODELS[workload]
    return builder(keras, tuple(shape), classes)
