"""Several processes as one bot, coordinated through a Redis-protocol server (Redis or Valkey).

Only used when ``coordination.redis_url`` is set; the embedded default runs in one
process and needs none of it. What lives here:

* :mod:`~bot.coordination.link`: the connection, and whether the server is reachable
  (logged once per outage, not per call);
* :mod:`~bot.coordination.deliveries`: "was this event handled already?" across replicas;
* :mod:`~bot.coordination.shared_limits`: rate limits counted across replicas;
* :mod:`~bot.coordination.lease`: one builder per channel, with a fencing token;
* :mod:`~bot.coordination.rebuild_queue`: rebuild jobs on an RQ queue, enqueued once per channel;
* :mod:`~bot.coordination.requests`: who asked for a channel's rebuild, until they are told;
* :mod:`~bot.coordination.reply_stream`: rebuild progress and results from workers to front-ends;
* :mod:`~bot.coordination.queued_rebuilds`: the front-end's rebuild service over all of these;
* :mod:`~bot.coordination.worker`: the ``python -m bot worker`` process.
"""
