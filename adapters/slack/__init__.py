"""The Slack adapter: slack-bolt's ``AsyncApp`` in Socket Mode or HTTP mode.

* :mod:`adapters.slack.translate` — pure: Slack payloads to neutral events
  (and to the few facts the app must fetch before it can build one).
* :mod:`adapters.slack.blocks` — pure: a neutral :class:`~bot.chat.Reply` to
  Block Kit messages, split within Slack's limits.
* :mod:`adapters.slack.web` — the Web API and file-download side: people,
  threads, downloads, reactions, and delivering replies (failures reported).
* :mod:`adapters.slack.app` — the ``AsyncApp``, its listeners, and
  :func:`~adapters.slack.app.run_slack` with :class:`~adapters.slack.app.SlackPlatform`,
  the adapter ``python -m bot serve`` runs when ``slack.bot_token`` is set.

``manifest.yaml`` beside this file creates the Slack app with every scope and
event used here.
"""
