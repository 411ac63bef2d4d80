"""The Chroma server's bound on open vector indexes: the configuration docker-compose mounts
(``deploy/chroma.yaml``) is the one the benchmark measures (``testkit.cluster.chroma_config``),
and a server under it answers from collections whose indexes it closed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from bench.many_channels import DEFAULT_OPEN_INDEXES
from testkit.cluster import ChromaServer, chroma_config
from tests.conftest import REPO


def test_the_compose_server_is_bounded_as_the_benchmark_measured_it() -> None:
    deployed = yaml.safe_load((REPO / "deploy" / "chroma.yaml").read_text())
    measured = chroma_config(Path("/data"), 8000, DEFAULT_OPEN_INDEXES)
    assert deployed["segment_manager"] == measured["segment_manager"]
    assert (deployed["persist_path"], deployed["port"]) == ("/data", 8000)
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert "./deploy/chroma.yaml:/config.yaml:ro" in compose["services"]["chroma"]["volumes"]


def test_a_bounded_server_answers_from_collections_whose_indexes_it_closed(tmp_path: Path) -> None:
    import chromadb  # noqa: PLC0415 - the client only this test uses directly

    server = ChromaServer(tmp_path / "chroma", open_indexes=2)
    server.start()
    try:
        client = chromadb.HttpClient(host="127.0.0.1", port=server.port)
        vectors = np.eye(6, 8, dtype=np.float32)
        for n in range(6):  # three times as many collections as open indexes
            client.create_collection(f"bound-{n}").add(ids=[f"r{n}-{i}" for i in range(6)], embeddings=vectors)
        for n in range(6):  # the first ones' indexes were closed: read from disk again
            got = client.get_collection(f"bound-{n}").query(query_embeddings=[vectors[n]], n_results=1)
            assert got["ids"] == [[f"r{n}-{n}"]]
    finally:
        server.stop()
