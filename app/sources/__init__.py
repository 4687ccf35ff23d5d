"""Synced sources: directories and S3-compatible buckets whose files a collection mirrors.

A sync lists the source, adds new files, re-ingests changed ones (by content hash) and
removes from search those that are gone, never touching documents uploaded by hand into
the same collection. Its bookkeeping lives in its own tables (``migrations``), keyed by
document id; ``retrieval`` knows nothing of sources.
"""
