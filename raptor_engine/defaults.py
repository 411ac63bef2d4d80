"""The engine's defaults and bounds, in one place: the engine's settings take their
defaults from here, and so does the bot's configuration (``bot/config.py``), whose
range checks use the bounds below. A default changes here and nowhere else;
``tests/bot/test_config.py`` proves the two never disagree.

Plain constants only: the command line imports this before anything heavy.
"""

from __future__ import annotations

# -- files and chunks -------------------------------------------------------------
CHUNK_TOKENS = 100  # the paper's leaf size
CHUNK_TOKENS_RANGE = (16, 512)  # 512: the packaged model's input limit
MAX_FILE_BYTES = 20 * 1024 * 1024
# The text a file may hold: ~1.3 M tokens, thousands of pages. More is almost
# always a data dump, and it would take long to embed.
MAX_TEXT_CHARS = 5 * 1024 * 1024

# -- the tree -----------------------------------------------------------------------
SUMMARY_TOKENS = 130  # the paper's average summary length
SUMMARY_TOKENS_RANGE = (20, 2000)
MAX_CONCURRENCY = 8  # summaries (and model calls) in flight at once
MAX_CONCURRENCY_RANGE = (1, 256)
REDUCTION_DIM = 10  # UMAP target dimensions (the reference's)
REDUCTION_DIM_RANGE = (2, 100)  # one dimension leaves the mixtures nothing to separate
MAX_CLUSTERS = 50
MAX_CLUSTERS_RANGE = (2, 500)
MEMBERSHIP_THRESHOLD = 0.1  # a node joins every cluster it belongs to with more than this probability
LOCAL_NEIGHBORS = 10
LOCAL_NEIGHBORS_RANGE = (2, 200)
MAX_CLUSTER_TOKENS = 3500
MAX_CLUSTER_TOKENS_MIN = 200
SEED = 224  # the reference's random state

# -- retrieval and answers ----------------------------------------------------------
BUDGET = 2000  # tokens: the paper's best collapsed-tree context
BUDGET_RANGE = (50, 100_000)
TOP_K = 40  # at most this many nodes, whatever the budget
TOP_K_RANGE = (1, 1000)
PER_LAYER = 5  # traversal: nodes kept at each layer
PER_LAYER_RANGE = (1, 100)
SUPPORT_THRESHOLD = 0.5  # answers: the share of a sentence's words its cited nodes must hold (answer_check.py)
SUMMARY_CHARS = 600  # offline answers: the summary leading a broad answer is cut to this
SUMMARY_CHARS_RANGE = (80, 10_000)
# Channels whose search indexes (BM25 over the served tree and its fresh leaves, the summary map)
# a process keeps in memory, least recently asked dropped first: about 1-3 MiB each for a channel
# of ~150 nodes. A question in a channel not kept builds them again from the store. The same
# number of channels keep their store handles (about 75 KiB each, see channel_writers.py).
INDEXED_CHANNELS = 64
INDEXED_CHANNELS_RANGE = (1, 100_000)

# -- a Chroma server ----------------------------------------------------------------
STORE_TIMEOUT_S = 10.0  # each request to a Chroma server is given up after this long

# -- a language model (OpenAI-compatible endpoint) ----------------------------------
LLM_MAX_CONCURRENCY = 8
LLM_TIMEOUT_S = 60.0
LLM_MAX_RETRIES = 4
LLM_SUMMARY_TOKENS = 130
LLM_ANSWER_TOKENS = 500
LLM_CONTEXT_TOKENS = 3500
MAX_CALLS_PER_REBUILD = 5000  # a ceiling on one rebuild's model calls; 0 = none
MAX_TOKENS_PER_REBUILD = 0  # a ceiling on one rebuild's model tokens; 0 = none
