"""Exports the packaged embedding model into the installation's seed directory, once, at install.

Run as ``python -m raptor_engine.install_export`` by the Docker build and ``make install``.
The runtime loads this export when the model's files are the ones it was made from
(``export_files.py``), so even the first command of a new data directory, or a one-shot
``docker run`` whose process ends before a child of its own could finish exporting, embeds
without importing torch. The directory may be read-only at run time.
"""

from __future__ import annotations

import time
from pathlib import Path

from raptor_engine.export_files import seed_dir
from raptor_engine.onnx_model import export, export_path, exportable
from raptor_engine.tokens import default_model_path


def export_seed() -> Path | None:
    """Exports the packaged model into :func:`~raptor_engine.export_files.seed_dir` unless it
    is there already; returns the export, or None for a model ``onnx_model`` does not export.
    Imports torch. Raises ``ProviderError``."""
    model_dir = default_model_path()
    if not exportable(model_dir):
        return None
    target = export_path(seed_dir(), model_dir)  # also writes the model's fingerprint there
    if not target.is_file():
        from sentence_transformers import SentenceTransformer  # heavy: only the install pays it

        export(SentenceTransformer(str(model_dir), device="cpu"), target)
    return target


if __name__ == "__main__":
    started = time.perf_counter()
    made = export_seed()
    print(f"embedding model exported to {made} in {time.perf_counter() - started:.1f} s" if made
          else "the packaged embedding model is not one that is exported")
