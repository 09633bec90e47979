"""``toolroute serve``: one engine behind an HTTP service (see ``docs/service.md``)."""
