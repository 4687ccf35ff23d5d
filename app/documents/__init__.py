"""Documents in: uploads read from requests, and the ingest, reindex and eval commands."""
