"""Chroma storage of channels: sources, caches and versioned trees.

Each channel owns its own collections, named from a digest of its
:class:`ChannelKey`, so a query of one channel cannot reach another's nodes:

- ``rc-<digest>-src``          the sources' text, in segments (rebuilds need nothing else)
- ``rc-<digest>-leaf-<prof>``  chunks of each source with their embeddings, per
                               embedding model and chunk size (the leaf cache)
- ``rc-<digest>-sum-<prof>``   summaries by content hash of their cluster (the summary cache)
- ``rc-<digest>-tree``         the trees: a pool of records in ``TREE_SLOTS`` slots, reused
                               build after build
- ``rc-<digest>-meta``         one record naming the tree that is served, one of the channel's notes
- ``rc-<digest>-answers``      answers kept with their questions, citations and votes

A rebuild writes a whole new tree, under a tag of its own, into a slot beside the
served one and then switches by rewriting the single ``meta`` record: one write,
so a crash leaves either the old tree or the new one served, never a mixture. The
switch serves only a complete tree newer than the served one. The previous tree
stays until the next build writes over it, so a reader that has just looked up
the old version can still finish its query. Storage stays bounded: single-node Chroma
never reclaims a deleted collection or record (chroma-core/chroma issue 5259),
but it updates a record written over in place. A state naming a tree that is
gone (a racing build wrote over it) heals when read: the newest complete
tree is served, and a warning says so.

The registry ``rc-channels`` lists every channel with the format of its records
(``STORE_FORMAT``). Records an earlier version wrote are rewritten to the current
format once, when the store or the channel is opened (``migrations.py``); every
other module reads the current format only.

A source's first text segment carries its :class:`SourceState`. Only a stored
source is listed, built from or searched: ingest writes the text as
``storing``, then its leaves, then flips it to ``stored``, so a crash in
between leaves nothing findable (and a new upload of the same text repairs
it). Forget flips it to ``forgetting`` first, then deletes everything built
from it, the text last; anything that writes derived data (a build's leaves,
summaries or tree, a kept answer) looks afterwards whether one of its sources
is forgotten meanwhile (:meth:`ChannelStore.forgotten_among`) and then removes
what it wrote. Write first, look second: whichever of the two finishes last
cleans up, so no forgotten text survives either order.

A channel left with no source at all (none stored, storing or forgetting) is
dropped whole (:meth:`ChannelStore.drop`): every ``rc-<digest>-*`` collection
and its entry in the ``rc-channels`` registry; its next upload starts it anew.
On the embedded store :meth:`ChromaStore.reclaim` then takes back the disk space
Chroma keeps after deleting collections (``reclaim.py``); a Chroma server keeps
those files (issue 5259), and only its operator can reclaim them.

Texts are kept in each record's metadata (``TEXT_KEY``), not as Chroma documents:
Chroma indexes every document for full-text search, which nothing here uses
(lexical search is ours, ``lexical.py``), at several times the text's size and
churning with every tree written over (see ``TEXT_KEY``).

Embeddings are always passed explicitly: Chroma's default embedding function
downloads a model, which fails offline. Chroma's errors are translated into
:class:`~raptor_engine.errors.StoreError` here, where they enter.

The package, one module per seam (each module's docstring states its contract):

- ``common.py``       a channel's collections, naming, opening, batching, error translation
- ``chroma.py``       :class:`ChromaStore`: opening embedded or remote Chroma, reclaiming space
- ``deadline.py``     a Chroma server's requests given up after a deadline (``StoreTimeout``)
- ``write_clock.py``  an embedded store's writes counted, so the reads every question makes are kept
- ``migrations.py``   records of earlier versions brought to the current format, once per channel
- ``channel.py``      :class:`ChannelStore`: the thin aggregate callers use, delegating to:
- ``sources.py``      source texts and states
- ``leaves.py``       the leaf cache
- ``summaries.py``    the summary cache
- ``answers.py``      kept answers
- ``notes.py``        the channel's notes
- ``tree_format.py``  the served state and nodes as Chroma records (no Chroma call)
- ``tree_pool.py``    the tree pool and the per-channel locks
- ``tree_state.py``   which tree is served, and healing a missing one
- ``tree_builds.py``  writing a tree and switching to it
- ``tree_reads.py``   queries and lookups of tree nodes
- ``tree_forget.py``  removing a forgotten source's nodes from the trees
"""

from raptor_engine.store.channel import ChannelStore
from raptor_engine.store.chroma import ChromaStore
from raptor_engine.store.common import REGISTRY_COLLECTION, TEXT_KEY, channel_digest, profile_digest
from raptor_engine.store.leaves import leaf_node
from raptor_engine.store.sources import SEGMENT_CHARS, SourceState
from raptor_engine.store.tree_format import TreeState, node_metadata
from raptor_engine.store.tree_pool import TREE_SLOTS

# Exactly what callers import from ``raptor_engine.store``; the rest stays in its module.
__all__ = [
    "REGISTRY_COLLECTION",
    "SEGMENT_CHARS",
    "TEXT_KEY",
    "TREE_SLOTS",
    "ChannelStore",
    "ChromaStore",
    "SourceState",
    "TreeState",
    "channel_digest",
    "leaf_node",
    "node_metadata",
    "profile_digest",
]
