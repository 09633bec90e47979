"""Loopback HTTP servers that speak real vendors' wire formats, for integration tests."""
