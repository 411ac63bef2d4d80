"""Loopback stand-ins of the remote services the bot talks to: Slack's Web API and Socket
Mode (:mod:`testkit.slack_api`), Discord's gateway and REST API (:mod:`testkit.discord_api`)
and an OpenAI-compatible server (:mod:`testkit.openai_stub`). Real network protocols on
127.0.0.1, scripted behaviour; the real SDKs talk to them unchanged.

Shipped with the bot (unlike ``tests``) because the benchmarks use them too, from the
Docker image's install. The running bot never imports them (``tests/test_architecture.py``);
they may start the bot's adapters against themselves (``slack_api.app_running``)."""
