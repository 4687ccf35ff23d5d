"""HTTP route handlers, grouped by audience."""
