"""The console adapter: a terminal as a chat channel (the embedded default of ``python -m bot``).

``translate`` holds the pure translation (typed line -> neutral event, reply ->
text); ``app`` holds the channel that reads lines and writes replies.
"""
