"""Usage and quality analytics: one event per finished answer (``events``), daily and
monthly rollups kept beside them so a year of questions sums in milliseconds
(``rollups``), the report over a chosen period (``report``), and the questions the
documents did not answer, grouped by meaning (``gaps``). Its tables are the ``usage``
owner's (``migrations``)."""
