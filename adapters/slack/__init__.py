"""The Slack adapter: slack-bolt's ``AsyncApp`` in Socket Mode or HTTP mode.

* :mod:`adapters.slack.translate` — pure: Slack payloads to neutral events
  (and to the few facts the app must fetch before it can build one); it gathers
  :mod:`~adapters.slack.payload`, :mod:`~adapters.slack.events`,
  :mod:`~adapters.slack.threads`, :mod:`~adapters.slack.interactions`,
  :mod:`~adapters.slack.files` and :mod:`~adapters.slack.failures`.
* :mod:`adapters.slack.blocks` — pure: a neutral :class:`~bot.neutral.Reply` to
  Block Kit messages, split within Slack's limits.
* :mod:`adapters.slack.web` — the Web API basics: failures named, people,
  threads, reactions.
* :mod:`adapters.slack.downloads` — shared files downloaded, the token sent to Slack only.
* :mod:`adapters.slack.outbox` — delivering replies (failures reported to the person),
  and :mod:`adapters.slack.sending` — the ``send`` of an event, which can show an
  answer while it is written.
* :mod:`adapters.slack.handling` — :class:`~adapters.slack.handling.SlackHandling`:
  each acknowledged payload read once, then taken as background work for the bot by
  its flow: :mod:`~adapters.slack.question_flows`, :mod:`~adapters.slack.source_flows`
  or :mod:`~adapters.slack.interaction_flows`, all working with
  :class:`~adapters.slack.core.HandlingCore`.
* :mod:`adapters.slack.listeners` — the ``AsyncApp``, its middleware and listeners.
* :mod:`adapters.slack.app` — :func:`~adapters.slack.app.run_slack` with
  :class:`~adapters.slack.app.SlackAdapter`, the adapter ``python -m bot serve``
  runs when ``slack.bot_token`` is set.

``manifest.yaml`` beside this file creates the Slack app with every scope and
event used here.
"""
