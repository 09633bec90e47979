"""HTTP for remote providers: the one httpx module, the retry core and its two drivers."""
