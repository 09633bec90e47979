"""Embedders: MiniLM (with its int8 kernel), hashing, OpenAI-compatible, and the fast tier."""
