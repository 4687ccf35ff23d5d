"""What a killed process can leave in a data directory, removed at the next start.

Every write here is a temporary file renamed into place, so a kill never tears live data;
it can leave the temporary file, though, or a file that was never (or is no longer)
referenced. Each of those is recognised by name and by what references it, never by age:

- ``index/.chunks….tmp``, ``index/.manifest.json….tmp``: a checkpoint being written;
- ``index/chunks*`` not named by a readable manifest: a checkpoint staged but never made
  live, or an old one whose removal the kill cut short;
- ``uploads/<xx>/.<hash>.<random>.tmp``: an upload being written;
- ``uploads/<xx>/<hash>`` that no document row names: an upload killed before its row was
  committed (never acknowledged), or a delete killed after its row was.

Run it in the process that owns the data directory (``retrieval.data_lock``), before
ingestion starts. The KV cache and model files have their own sweeps
(``llm.engine.kv_disk.sweep_kv_leftovers``, ``llm.models.sweep_partial_models``).
"""

from __future__ import annotations

from pathlib import Path, PurePath

from retrieval.index_files import sweep_index_dir
from retrieval.library import Library


def sweep_data_leftovers(index_dir: Path, library: Library) -> list[PurePath]:
    """Remove the leftovers of interrupted index saves, uploads and deletes (each one
    logged); returns the paths removed (keys, for originals in a bucket)."""
    return [*sweep_index_dir(index_dir), *library.sweep()]
