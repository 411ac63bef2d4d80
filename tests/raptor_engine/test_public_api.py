"""The engine's public API: every name in ``raptor_engine.__all__`` imports, lazily."""

from __future__ import annotations

import subprocess
import sys

import raptor_engine


def test_every_exported_name_imports_and_is_listed_once() -> None:
    assert sorted(raptor_engine.__all__) == sorted(raptor_engine._EXPORTS)
    for name in raptor_engine.__all__:
        assert getattr(raptor_engine, name) is not None


def test_a_light_name_does_not_load_the_heavy_modules() -> None:
    code = ("import sys; from raptor_engine import ChannelKey, RaptorError, defaults; "
            "print(sorted(m for m in ('chromadb', 'sklearn', 'onnxruntime', 'raptor_engine.engine') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
