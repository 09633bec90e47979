"""The decision providers that read images or video, named when another refuses media."""

from __future__ import annotations

#: Quoted in "does not accept images/video" messages: where the caller can send media instead.
MEDIA_READERS = "XOR, Perplexity Decisions, Cloudflare Clef, OpenAI Decisions"
