"""Several processes as one bot: the building blocks, over a Redis-protocol server (Redis or Valkey).

Only used when ``coordination.redis_url`` is set; the embedded default runs in one
process and needs none of it. What lives here:

* :mod:`~bot.coordination.link`: the connection, and whether the server is reachable
  (logged once per outage, not per call);
* :mod:`~bot.coordination.deliveries`: "was this event handled already?" across replicas;
* :mod:`~bot.coordination.shared_limits`: rate limits counted across replicas;
* :mod:`~bot.coordination.lease`: one builder per channel, with a fencing token;
* :mod:`~bot.coordination.reply_stream`: replies from workers to the front-ends that post them;
* :mod:`~bot.coordination.signing`: the HMAC that signs what the processes pass through Redis
  (rebuild requests, replies), so that writing to Redis is not enough to make the bot post.

The rebuilds run through them (the job queue, the requests store, the front-end's queued
service and the worker) live with the other rebuilds, in :mod:`bot.rebuilds`.
"""
