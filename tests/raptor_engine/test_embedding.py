"""The local embedding model, loaded now or on a thread of its own."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.errors import ProviderError
from raptor_engine.export_files import SEED_ENV_VAR, loading, lock_path, remove_stale
from raptor_engine.onnx_model import export_path, exportable
from raptor_engine.tokens import default_model_path
from tests.conftest import REPO

TEXTS = ["Deploys are frozen on Fridays.", "The cafeteria closes at three."]


def test_a_model_loaded_in_the_background_embeds_as_one_loaded_now(embedder: SentenceTransformerEmbedder) -> None:
    background = SentenceTransformerEmbedder(background=True)
    assert background.model_id == embedder.model_id  # known before the model is loaded
    assert np.allclose(background.embed(TEXTS), embedder.embed(TEXTS), atol=1e-6)
    assert background.dimension == embedder.dimension == 384
    assert background.embed([]).shape == (0, 384)


def test_a_model_that_cannot_load_fails_now_or_at_first_use(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(ProviderError, match="cannot load embedding model"):
        SentenceTransformerEmbedder(missing)
    later = SentenceTransformerEmbedder(missing, background=True)  # no error yet: it loads on a thread
    for _ in range(2):  # every caller hears it, not only the first
        with pytest.raises(ProviderError, match="cannot load embedding model"):
            later.embed(TEXTS)


# -- the ONNX export: a fresh process embeds without torch ----------------------------------

LONG = " ".join(f"word{i}" for i in range(600))  # far past the model's 256-token cap


@pytest.fixture(scope="module", autouse=True)
def no_seed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An empty seed directory for this module's tests, child processes included: an install
    that made the packaged model's export into the venv (``install_export``) must not answer
    for the exports these tests make."""
    seed = tmp_path_factory.mktemp("no-seed")
    before = os.environ.get(SEED_ENV_VAR)
    os.environ[SEED_ENV_VAR] = str(seed)
    yield seed
    if before is None:
        os.environ.pop(SEED_ENV_VAR, None)
    else:
        os.environ[SEED_ENV_VAR] = before


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory holding the default model's export, made as a first process makes it."""
    cache = tmp_path_factory.mktemp("model-cache")
    assert SentenceTransformerEmbedder(cache_dir=cache).wait_for_export(timeout=300)
    return cache


def test_the_export_embeds_as_sentence_transformers_does(
    exported: Path, embedder: SentenceTransformerEmbedder
) -> None:
    assert sorted(p.suffix for p in exported.iterdir()) == [".fingerprint", ".lock", ".onnx"]  # no partial file
    fast = SentenceTransformerEmbedder(cache_dir=exported, batch_size=3)
    assert fast._encoder is not None and fast._model is None
    texts = [*TEXTS, "", "é ü 中文 🙂", LONG, "x", "A longer sentence about trees and their summaries."]
    assert np.abs(fast.embed(texts) - embedder.embed(texts)).max() < 1e-5
    assert fast.dimension == 384 and fast.embed([]).shape == (0, 384)


def test_a_process_with_the_export_never_imports_torch(exported: Path) -> None:
    script = ("import sys; from pathlib import Path; from raptor_engine.embedding import SentenceTransformerEmbedder; "
              f"e = SentenceTransformerEmbedder(cache_dir=Path({str(exported)!r}), background=True); "
              "print(e.embed(['hello']).shape, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=REPO, check=True)
    assert done.stdout.split() == ["(1,", "384)", "False"], done.stderr[-2000:]


def test_a_process_that_ends_at_once_after_asking_for_the_model_exits_cleanly(exported: Path) -> None:
    """A refused command asks for the model in the background and ends at once. A thread still
    starting ONNX Runtime when the process ended made it abort (exit -6); an export loads there
    and then instead."""
    script = ("import sys, time; from pathlib import Path; from raptor_engine.embedding import SentenceTransformerEmbedder; "
              f"SentenceTransformerEmbedder(cache_dir=Path({str(exported)!r}), background=True); "
              "time.sleep(float(sys.argv[1]))")
    for delay in ("0", "0.1", "0.2", "0.3", "0.4", "0.6"):  # ends at some point of the model's loading
        done = subprocess.run([sys.executable, "-c", script, delay], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=REPO, check=False)
        assert (done.returncode, done.stderr) == (0, ""), delay


def test_a_damaged_export_is_replaced_and_the_model_still_loads(
    tmp_path: Path, exported: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (target,) = exported.glob("*.onnx")
    (cache / target.name).write_bytes(b"not an ONNX model")
    caplog.set_level(logging.WARNING, logger="raptor_engine.embedding")
    embedder = SentenceTransformerEmbedder(cache_dir=cache)
    assert embedder._model is not None and embedder.embed(TEXTS).shape == (2, 384)
    assert "cannot load the exported embedding model" in caplog.text
    assert embedder.wait_for_export(timeout=300)
    assert (cache / target.name).read_bytes()[:4] != b"not " and SentenceTransformerEmbedder(cache_dir=cache)._encoder


def test_the_exporting_child_ends_with_its_parent(tmp_path: Path) -> None:
    """A process that ends while its export runs leaves no orphan and no file under the
    export's name: the next process exports again."""
    script = ("import sys, time; from pathlib import Path; from raptor_engine.embedding import SentenceTransformerEmbedder; "
              f"e = SentenceTransformerEmbedder(cache_dir=Path({str(tmp_path)!r})); "
              "print(e._exporter.pid, flush=True); sys.exit(0)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=REPO, check=True)
    child = int(done.stdout.split()[-1])
    for _ in range(100):  # it exits within a few seconds of its parent
        try:
            if Path(f"/proc/{child}/stat").read_text().split()[2] == "Z":
                break  # exited, not yet reaped by its new parent
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the exporting child {child} outlived its parent")
    assert not list(tmp_path.glob("*.onnx"))


def test_only_models_it_reproduces_are_exported(tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(default_model_path(), model)
    assert exportable(model)
    pooling = model / "1_Pooling" / "config.json"
    pooling.write_text(json.dumps({**json.loads(pooling.read_text()), "pooling_mode_cls_token": True}))
    assert not exportable(model)
    assert SentenceTransformerEmbedder(str(model), cache_dir=tmp_path / "cache")._export is None


def test_a_changed_model_gets_an_export_of_its_own(tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(default_model_path(), model)
    before = export_path(tmp_path, model)
    (model / "config.json").write_text((model / "config.json").read_text() + "\n")
    assert export_path(tmp_path, model) != before


def test_the_same_model_copied_anew_keeps_its_export(tmp_path: Path) -> None:
    """An image rebuilt or a package reinstalled writes the same files with new modification
    times: the export's name, made of their content, stays, and is found again with no hashing."""
    model = tmp_path / "model"
    shutil.copytree(default_model_path(), model)
    name = export_path(tmp_path / "cache", model).name
    for path in model.rglob("*"):
        os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    (tmp_path / "cache" / f"{name.rsplit('-', 1)[0]}.fingerprint").unlink(missing_ok=True)  # hashed again
    assert export_path(tmp_path / "other-cache", model).name == name


def test_the_fingerprint_spares_hashing_unchanged_files(tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(default_model_path(), model)
    export_path(tmp_path, model)
    (fingerprint,) = tmp_path.glob("*.fingerprint")
    remembered = json.loads(fingerprint.read_text())
    fingerprint.write_text(json.dumps({**remembered, "content": "f" * 64}))  # what it says is taken as is
    assert export_path(tmp_path, model).name.endswith("-ffffffffffffffff.onnx")
    (model / "config.json").write_text((model / "config.json").read_text() + "\n")  # seen changed: hashed
    assert not export_path(tmp_path, model).name.endswith("-ffffffffffffffff.onnx")


def stale_exports(cache: Path, current: Path) -> list[Path]:
    """Old exports of the packaged model beside ``current``: an older content, and the
    mtime-named file of earlier versions; and another model's export, which is not stale."""
    series, model = current.name.rsplit("-", 1)[0], current.name.split("-", 1)[0]
    old = [cache / f"{series}-{'0' * 16}.onnx", cache / f"{model}-{'1' * 16}.onnx"]
    for path in [*old, cache / f"other-{'2' * 16}.onnx"]:
        path.write_bytes(b"an old export")
    return old


def test_loading_the_current_export_removes_the_models_old_ones(tmp_path: Path, exported: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (current,) = exported.glob("*.onnx")
    shutil.copy(current, cache / current.name)
    old = stale_exports(cache, current)
    assert SentenceTransformerEmbedder(cache_dir=cache)._encoder is not None
    assert not any(path.exists() for path in old)
    assert sorted(p.name for p in cache.glob("*.onnx")) == [current.name, f"other-{'2' * 16}.onnx"]


def test_an_old_export_another_process_is_loading_is_left_until_it_is_done(tmp_path: Path, exported: Path) -> None:
    (current,) = exported.glob("*.onnx")
    (old, *_) = stale_exports(tmp_path, current)
    script = ("import sys, time; from pathlib import Path; from raptor_engine.export_files import loading\n"
              "with loading(Path(sys.argv[1])) as there:\n    print(there, flush=True); time.sleep(600)")
    with subprocess.Popen([sys.executable, "-c", script, str(old)], stdout=subprocess.PIPE, text=True,
                          cwd=REPO) as loader:
        assert loader.stdout is not None and loader.stdout.readline().strip() == "True"
        assert remove_stale(tmp_path, default_model_path(), current) == [tmp_path / f"model-{'1' * 16}.onnx"]
        assert old.exists()
        loader.kill()
    assert remove_stale(tmp_path, default_model_path(), current) == [old]
    assert not old.exists() and not lock_path(old).exists()
    with loading(old) as there:  # a loader that comes after the removal finds nothing to read
        assert not there


def test_the_installs_export_spares_the_first_process_torch(tmp_path: Path) -> None:
    """``python -m raptor_engine.install_export`` (the Docker build, ``make install``) exports
    into the seed directory; a first process with an empty cache loads it and never imports
    torch, and writes nothing into its cache."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", SEED_ENV_VAR: str(tmp_path / "seed")}
    subprocess.run([sys.executable, "-m", "raptor_engine.install_export"], env=env, cwd=REPO, check=True,
                   capture_output=True, timeout=600)
    script = ("import sys; from pathlib import Path; from raptor_engine.embedding import SentenceTransformerEmbedder; "
              f"e = SentenceTransformerEmbedder(cache_dir=Path({str(tmp_path / 'cache')!r}), background=True); "
              "print(e.embed(['hello']).shape, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=env, cwd=REPO, check=True)
    assert done.stdout.split() == ["(1,", "384)", "False"], done.stderr[-2000:]
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())
