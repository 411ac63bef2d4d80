# Two commands do all the set-up on a fresh machine (see README.md):
#   make demo   installs into .venv, then opens the console chat on the embedded defaults
#   make test   installs into .venv, runs the gates (make lint: ruff; make typecheck: mypy), then every test
#   make test-fast  the edit-test loop: tests that need no model, no Chroma and no process of their own (< 2 min)
# Nothing here needs a network beyond the package registries.

VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export HF_HUB_DISABLE_PROGRESS_BARS := 1
export ANONYMIZED_TELEMETRY := False
export NUMBA_CACHE_DIR ?= $(CURDIR)/.cache/numba

.PHONY: install demo test test-fast lint typecheck bench clean

install: $(STAMP)

# torch goes first and pinned: that takes the CPU wheel; an unpinned torch pulls a CUDA build of several GB.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	# UMAP's numba kernels, compiled once into the venv: a new data directory's first rebuild loads them.
	$(PY) -m raptor_engine.install_kernels
	# The embedding model's ONNX export, made once into the venv: no command imports torch to embed.
	$(PY) -m raptor_engine.install_export
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m bot

test: $(STAMP) lint typecheck
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not heavy"

lint: $(STAMP)
	$(VENV)/bin/ruff check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) -m bench.build
	$(PY) -m bench.query
	$(PY) -m bench.retrieval
	$(PY) -m bench.answers
	$(PY) -m bench.llm_build
	$(PY) -m bench.chat
	$(PY) -m bench.streaming
	$(PY) -m bench.scale
	$(PY) -m bench.slack_chat --mode both
	$(PY) -m bench.discord_chat
	$(PY) -m bench.summaries
	$(PY) -m bench.cold
	$(PY) -m bench.soak --minutes 15

clean:
	rm -rf $(VENV) .cache data
