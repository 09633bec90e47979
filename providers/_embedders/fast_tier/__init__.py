"""The fast tier: a small static-embedding model mapped into MiniLM's space by ridge fitting."""
