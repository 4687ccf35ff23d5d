"""Identity and access: users, browser sessions, API keys, collection permissions.

Every route needs a session cookie or an ``Authorization: Bearer`` API key, except the
handlers marked ``opt={"public": True}`` (health, login, static files): see ``guards``.
"""
