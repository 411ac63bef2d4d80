"""The parameters of one clustering: :class:`ClusteringSettings`, checked on creation."""

from __future__ import annotations

from dataclasses import dataclass

from raptor_engine import defaults


@dataclass(frozen=True, slots=True)
class ClusteringSettings:
    """Parameters of :func:`~raptor_engine.clustering.cluster_rows`; defaults are the reference's.

    ``reduction_dim``: UMAP target dimensions (reference 10).
    ``max_clusters``: upper bound of the BIC search, inclusive (reference 50,
    exclusive there).
    ``membership_threshold``: a row joins every component whose probability
    exceeds this (reference 0.1).
    ``local_neighbors``: UMAP ``n_neighbors`` of the local pass (reference 10).
    ``max_cluster_tokens``: a cluster whose members' tokens exceed this is
    clustered again (reference 3,500).
    ``seed``: random state of UMAP and of the mixtures (reference 224).
    ``umap_epochs``: UMAP optimisation epochs. Not in the reference, which
    uses UMAP's default (500 below 10,000 rows); 200, UMAP's own default for
    large inputs, cuts the global pass on 1,000 rows from ~2.1 s to ~0.9 s.
    ``None`` means UMAP's default.
    ``small_input_rows``: inputs of at most this many rows are clustered
    without UMAP, on PCA (see the package docstring); 0 always uses UMAP
    where it can run.
    """

    reduction_dim: int = defaults.REDUCTION_DIM
    max_clusters: int = defaults.MAX_CLUSTERS
    membership_threshold: float = defaults.MEMBERSHIP_THRESHOLD
    local_neighbors: int = defaults.LOCAL_NEIGHBORS
    max_cluster_tokens: int = defaults.MAX_CLUSTER_TOKENS
    seed: int = defaults.SEED
    umap_epochs: int | None = 200
    small_input_rows: int = 32

    def __post_init__(self) -> None:
        # The bounds are the configuration's too (raptor_engine.defaults): what one accepts, so does the other.
        _within("reduction_dim", self.reduction_dim, defaults.REDUCTION_DIM_RANGE)
        _within("max_clusters", self.max_clusters, defaults.MAX_CLUSTERS_RANGE)
        _within("local_neighbors", self.local_neighbors, defaults.LOCAL_NEIGHBORS_RANGE)
        _within("max_cluster_tokens", self.max_cluster_tokens, (defaults.MAX_CLUSTER_TOKENS_MIN, None))
        if not 0.0 <= self.membership_threshold < 1.0:
            raise ValueError(
                f"membership_threshold must be in [0, 1), got {self.membership_threshold}"
            )
        if self.umap_epochs is not None and self.umap_epochs < 1:
            raise ValueError(f"umap_epochs must be >= 1 or None, got {self.umap_epochs}")
        if self.small_input_rows < 0:
            raise ValueError(f"small_input_rows must be >= 0, got {self.small_input_rows}")


def _within(name: str, value: int, bounds: tuple[int, int | None]) -> None:
    low, high = bounds
    if value < low or (high is not None and value > high):
        shown = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {shown}, got {value}")
