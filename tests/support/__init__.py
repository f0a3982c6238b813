"""Test support: real redis-servers on free loopback ports and a tiny RESP client."""
