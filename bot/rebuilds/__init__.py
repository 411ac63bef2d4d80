"""Rebuilding channels' trees: the one home of the concept.

* :mod:`~bot.rebuilds.service`: what the bot needs from a rebuild service, and its types;
* :mod:`~bot.rebuilds.schedule`: each channel's scheduled check, and what it asks;
* :mod:`~bot.rebuilds.report`: one rebuild run and its result put into a reply;
* :mod:`~bot.rebuilds.relay`: progress replies while it runs, and sends that never stop it;
* :mod:`~bot.rebuilds.in_process`: the service when this process builds (one process);

and the service when worker processes build, over :mod:`bot.coordination`:

* :mod:`~bot.rebuilds.queued`: the front-end's side: requests recorded, jobs enqueued;
* :mod:`~bot.rebuilds.job_queue`: rebuild jobs on an RQ queue, enqueued once per channel;
* :mod:`~bot.rebuilds.requests`: who asked for a channel's rebuild, until they are told;
* :mod:`~bot.rebuilds.worker`: the ``python -m bot worker`` process that builds.
"""
