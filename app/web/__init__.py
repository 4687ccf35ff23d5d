"""Every HTTP handler: pages and partials, ``/api``, ``/v1``, account and admin pages,
health, and the helpers templates use. The only tier that may import every other."""
