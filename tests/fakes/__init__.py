"""Stand-in servers for tests: real network protocols on 127.0.0.1, scripted behaviour."""
