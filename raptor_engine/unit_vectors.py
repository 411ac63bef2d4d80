"""Unit vectors: what every cosine here is computed between (a vector over its length)."""

from __future__ import annotations

import numpy as np

_MIN_NORM = 1e-12  # a row of zeros stays zeros instead of dividing by 0


def unit(vector: np.ndarray) -> np.ndarray:
    """``vector`` as float32 over its length; a zero vector as it is."""
    vector = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Each row of ``matrix`` (as float32) over its length; a row of zeros stays zeros."""
    matrix = np.asarray(matrix, dtype=np.float32)
    return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), _MIN_NORM)
