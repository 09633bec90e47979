"""``toolroute serve``: one engine behind an HTTP service (see ``docs/notes/serve.md``)."""
