"""Every sentence the bot shows a person, by subject; import them through :mod:`bot.replies`.

* :mod:`bot.texts.words` — the one way to write a count, a moment, a short id, a
  size and a wait; every other module here writes them only through it;
* :mod:`bot.texts.answers` — answers and their citations, retrieval hits, votes;
* :mod:`bot.texts.tree` — the tree's state, one node, build progress and reports;
* :mod:`bot.texts.outline` — the tree outline, as text and as the picture's labels;
* :mod:`bot.texts.sources` — sources listed, added, refused and removed;
* :mod:`bot.texts.requests` — help, usage, refusals, rate limits and errors;
* :mod:`bot.texts.assistant` — an AI assistant's side panel: prompts, status lines, scope;
* :mod:`bot.texts.session` — what the operator reads as a serving session starts and ends.

All functions are pure: plain values in, plain text (or a neutral reply) out; nothing
here calls the engine or a platform. Adapters may add their platform's formatting.
"""
