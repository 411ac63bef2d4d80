"""A sentence-transformers model exported to ONNX, so that a fresh process embeds without torch.

Importing torch and loading a model through sentence-transformers costs a fresh process
about 5 s of CPU (measured on the 2-core machine; ``import sentence_transformers`` alone
4.8 to 6.6 s), and unloading torch another 1.4 s at exit. A one-shot ``rebuild`` paid both
to embed a few dozen summaries. ONNX Runtime (a dependency of chromadb, so already
installed) loads the same network from one file in about 0.2 s.

The export is made once per model and machine and kept in a cache directory (the bot's is
``~/.cache/raptor-chat/model-cache``): a process that finds none loads the model with
sentence-transformers as before and starts :func:`start_export`, a child process that
loads it once more, exports it and exits; a later process finds the file and never imports
torch. A child, not a thread: tracing the network in the process that also embeds with it
is not safe, and a process ending (a refused command, a stop) while a thread of its own is
inside torch's exporter aborted ("terminate called without an active exception"). The
child exits with its parent (``parent_watch.exit_with_parent``): a process that ends
early leaves the export to the next one, and no orphan. One child at a time exports a
model: it holds ``<export>.lock`` while it works, and another stands down. Only models
made of a transformer, mean pooling and an optional normalisation are exported (all-MiniLM-L6-v2, the default, is one):
anything else keeps the sentence-transformers path. Measured: the exported default model's
vectors are within 2e-7 of sentence-transformers' own.

The file name carries a digest of the model's files' content and of :data:`EXPORT_FORMAT`
(``export_files.py``), so a changed model is exported anew rather than read stale, and the
same model copied anew keeps its export. The install exports the packaged model into a seed
directory that the runtime reads first (``install_export.py``). The export is written under
a temporary name and renamed into place: a process killed while exporting leaves no partial
file under the real name. Once written, the cache's older exports of the model are removed.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from raptor_engine.errors import ProviderError
from raptor_engine.export_files import export_name, lock_path, remove_stale, seed_dir
from raptor_engine.tokens import TOKENIZER_FILENAME

log = logging.getLogger(__name__)

EXPORT_FORMAT = 1  # changed whenever the exported graph or its inputs change
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"
_DEFAULT_MAX_TOKENS = 512  # sentence-transformers' cap where the model states none
_OPSET = 17


def exportable(model_dir: Path) -> bool:
    """Whether the model in ``model_dir`` is one this module reproduces exactly: a transformer,
    mean pooling over its tokens, and optionally a normalisation, with a fast tokenizer."""
    try:
        modules = json.loads((model_dir / "modules.json").read_text())
        types = [str(m["type"]) for m in modules]
        pooling_dir = next(str(m["path"]) for m in modules if m["type"] == _POOLING)
        pooling = json.loads((model_dir / pooling_dir / "config.json").read_text())
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return False
    modes = {k for k, v in pooling.items() if k.startswith("pooling_mode") and v}
    return (types in ([_TRANSFORMER, _POOLING], [_TRANSFORMER, _POOLING, _NORMALIZE])
            and modes == {"pooling_mode_mean_tokens"} and (model_dir / TOKENIZER_FILENAME).is_file())


def export_path(cache_dir: Path, model_dir: Path) -> Path:
    """Where the export of the model in ``model_dir`` is kept under ``cache_dir``; the seed
    directory holds it under the same name when the install made it (see ``export_files``)."""
    return cache_dir / export_name(model_dir, EXPORT_FORMAT, (seed_dir(), cache_dir), cache_dir)


def export(model: Any, target: Path) -> None:
    """Exports the transformer of a loaded sentence-transformers ``model`` to ``target``
    (written under a temporary name, then renamed). Imports torch and onnx: call it only
    where the model is loaded with them. Raises ``ProviderError``."""
    import warnings

    import torch  # heavy, and loaded already wherever a model is

    class LastHiddenState(torch.nn.Module):  # the transformer's token vectors; pooling is ours
        def __init__(self, network: Any) -> None:
            super().__init__()
            self.network = network

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.network(input_ids=input_ids, attention_mask=attention_mask,
                                token_type_ids=token_type_ids).last_hidden_state

    sample = model.tokenizer(["an export", "of the model's network"], padding=True, return_tensors="pt")
    arguments = tuple(sample[name] for name in _INPUTS)
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # The tracer warns about shapes it fixes (none matters to this network). The filter is
        # process-wide: the export runs in a child process of its own (start_export).
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                LastHiddenState(model[0].auto_model.eval()), arguments, str(partial),
                input_names=list(_INPUTS), output_names=["last_hidden_state"], opset_version=_OPSET,
                dynamic_axes={name: {0: "batch", 1: "tokens"} for name in (*_INPUTS, "last_hidden_state")},
                dynamo=False,  # the TorchScript exporter: the newer one needs onnxscript
            )
        os.replace(partial, target)
    except Exception as exc:  # torch's and onnx's errors vary; the caller keeps the torch model
        partial.unlink(missing_ok=True)
        raise ProviderError(f"cannot export the embedding model to {target}: {exc}") from exc


def start_export(model_dir: Path, target: Path) -> subprocess.Popen[bytes] | None:
    """Starts a child process that exports the model in ``model_dir`` to ``target`` (see the
    module docstring), unless another one is at it; returns it, or None. Its outcome is
    logged by a thread that waits for it, while this process lives."""
    if _export_running(target):
        return None
    command = [sys.executable, "-m", "raptor_engine.onnx_model", str(model_dir), str(target), str(os.getpid())]
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        log.warning("cannot start exporting the embedding model to %s: %s", target, exc)
        return None
    threading.Thread(target=_report, args=(child, target), name="embedding-model-export", daemon=True).start()
    return child


def _report(child: subprocess.Popen[bytes], target: Path) -> None:
    _, errors = child.communicate()
    if child.returncode == 0:
        log.info("embedding model exported to %s: later processes load it without torch", target)
    else:
        last = (errors.decode(errors="replace").strip().splitlines() or [f"exit status {child.returncode}"])[-1]
        log.warning("exporting the embedding model to %s failed (the next start tries again): %s", target, last)


def _export_running(target: Path) -> bool:
    """Whether a child holds ``target``'s export lock now."""
    try:
        with _lock_file(target).open("a") as probe:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # no cache directory to write in: the child fails and says so
        return False
    return False


def _lock_file(target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    return lock_path(target)


def _export_in_child(model_dir: Path, target: Path, parent_pid: int) -> int:
    """The child's work: exports unless another child holds the lock or the file is there."""
    from raptor_engine.parent_watch import exit_with_parent

    exit_with_parent(parent_pid)
    with _lock_file(target).open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # another child exports it
        if target.is_file():
            return 0
        for stale in target.parent.glob(f".{target.name}.*.tmp"):  # of a child killed with its parent
            stale.unlink(missing_ok=True)
        from sentence_transformers import SentenceTransformer

        export(SentenceTransformer(str(model_dir), device="cpu"), target)
    remove_stale(target.parent, model_dir, target)
    return 0


class OnnxEncoder:
    """Mean-pooled, L2-normalised sentence vectors from an exported model, as
    sentence-transformers computes them (same tokenizer, same truncation)."""

    def __init__(self, exported: Path, model_dir: Path, threads: int | None = None) -> None:
        """Loads the export and the model's tokenizer; each run computes on ``threads`` threads
        (None: one per core). Raises ``ProviderError``."""
        import onnxruntime
        from tokenizers import Tokenizer

        try:
            self._session = onnxruntime.InferenceSession(str(exported), _session_options(onnxruntime, threads),
                                                         providers=["CPUExecutionProvider"])
            self._tokenizer = Tokenizer.from_file(str(model_dir / TOKENIZER_FILENAME))
        except Exception as exc:  # ONNX Runtime raises its own types for a corrupt or foreign file
            raise ProviderError(f"cannot load the exported embedding model {exported}: {exc}") from exc
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(_max_tokens(model_dir))
        self.dimension = int(self._session.get_outputs()[0].shape[-1])
        # ONNX Runtime's memory arena grows to the largest batch it has seen and keeps it: a
        # 15-minute soak's RSS went from 583 to 1,331 MiB. Shrunk back after every run, the
        # same embedding workload stayed at 250 to 340 MiB instead of 860, as fast.
        self._run_options = onnxruntime.RunOptions()
        self._run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")

    def encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        """Vectors of ``texts``, one row each, in order. Batched longest first, as
        sentence-transformers does, so that a batch pads little."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        ranked = [texts[i] for i in order]
        vectors = np.vstack([self._batch(ranked[start:start + batch_size]) for start in range(0, len(ranked), batch_size)])
        result = np.empty_like(vectors)
        result[order] = vectors
        return result

    def _batch(self, texts: Sequence[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(list(texts))
        width = max(len(e.ids) for e in encodings)
        inputs = {name: np.zeros((len(encodings), width), dtype=np.int64) for name in _INPUTS}
        for row, encoding in enumerate(encodings):
            used = len(encoding.ids)
            inputs["input_ids"][row, :used] = encoding.ids
            inputs["attention_mask"][row, :used] = encoding.attention_mask
            inputs["token_type_ids"][row, :used] = encoding.type_ids
        tokens = self._session.run(None, inputs, self._run_options)[0]
        mask = inputs["attention_mask"][..., None].astype(np.float32)
        pooled = (tokens * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return (pooled / norms).astype(np.float32)


def _session_options(onnxruntime: Any, threads: int | None) -> Any:
    """ONNX Runtime's options for a process that shares its cores with the clustering worker:
    ``threads`` computing each run (None: one per core), which sleep when they have no work
    instead of spinning for a while after every run (ONNX Runtime's default)."""
    options = onnxruntime.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    if threads:
        options.intra_op_num_threads = threads
    return options


def _max_tokens(model_dir: Path) -> int:
    """The model's input cap, as sentence-transformers reads it."""
    try:
        return int(json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return _DEFAULT_MAX_TOKENS


if __name__ == "__main__":  # the child of start_export: model directory, target, parent pid
    logging.disable(logging.WARNING)  # transformers' notices; a failure reaches the parent as the last line
    try:
        sys.exit(_export_in_child(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])))
    except ProviderError as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
