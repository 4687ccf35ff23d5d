"""The one typed Settings object, in sections; each field is read from ``RAGDESK_<NAME>``.

Sections map onto one library config or one app feature, one module each. Where a library
config object exists, the section's field names are the config's own
(``IndexSettings.nprobe`` is ``IndexSpec.nprobe``), so the config is built from the
section's fields at once (``settings.index.spec()``), never copied field by field. The
environment names stay flat and unchanged (:mod:`.flat`): a field whose name differs from
its variable (``RAGDESK_IVF_NPROBE``) takes that name as its first validation alias, and
that alias is also the flat keyword ``Settings(ivf_nprobe=...)`` accepts.
"""

from app.config.settings.auth import AuthSettings
from app.config.settings.embedder import EmbedderSettings
from app.config.settings.flat import FLAT, SECTIONS, FlatEnvSource, flat_fields
from app.config.settings.generation import GenerationSettings, KvType, ModelEntry
from app.config.settings.index import IndexSettings
from app.config.settings.ingest import IngestSettings
from app.config.settings.root import REPO_ROOT, Settings
from app.config.settings.search import SearchSettings
from app.config.settings.section import flat_name
from app.config.settings.server import ServerSettings

__all__ = [
    "FLAT",
    "REPO_ROOT",
    "SECTIONS",
    "AuthSettings",
    "EmbedderSettings",
    "FlatEnvSource",
    "GenerationSettings",
    "IndexSettings",
    "IngestSettings",
    "KvType",
    "ModelEntry",
    "SearchSettings",
    "ServerSettings",
    "Settings",
    "flat_fields",
    "flat_name",
]
