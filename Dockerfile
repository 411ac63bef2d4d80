# The same install as the README's `make install`, running `python -m bot` as a
# non-root user with the configuration mounted at /config and data in /data. Caches that
# outlive the container (numba's kernels; an ONNX export of a model other than the packaged
# one) go in /data too.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    ANONYMIZED_TELEMETRY=False \
    NUMBA_CACHE_DIR=/data/.cache/numba \
    XDG_CACHE_HOME=/data/.cache \
    RAPTOR_COMMAND="docker run --rm -v raptor-data:/data raptor-chat"

WORKDIR /app
COPY pyproject.toml README.md ./
COPY raptor_engine ./raptor_engine
COPY bot ./bot
COPY adapters ./adapters
COPY bench ./bench
COPY testkit ./testkit
# torch first and pinned: the CPU build; then the project and its pinned majors.
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
 && pip install --no-cache-dir . \
 && python -m raptor_engine.install_kernels \
 && python -m raptor_engine.install_export
# (UMAP's numba kernels, compiled into the image; /data's cache is seeded from them on first use.
# Kernels built on another CPU model are not loaded there: that machine's first rebuild compiles.
# The embedding model's ONNX export, made into the image, read from there: no command imports
# torch to embed, not even a one-shot `docker run` whose process ends before an export could.)

RUN useradd --create-home --uid 10001 raptor && mkdir -p /data /config && chown raptor /data
USER raptor
VOLUME ["/data"]
# Mount a configuration and set RAPTOR_CONFIG=/config/config.yaml to use it. With Slack or
# Discord tokens configured the bot serves them; without, it opens the console chat (run with -it).
# SIGTERM and SIGINT stop it cleanly: a running rebuild is interrupted and resumes at the next start.
STOPSIGNAL SIGTERM
ENTRYPOINT ["python", "-m", "bot", "--data-dir", "/data"]
CMD ["serve"]
