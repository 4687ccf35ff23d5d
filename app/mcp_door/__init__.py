"""The Model Context Protocol door at ``/mcp``: agents and internal tools search, read and
ask the knowledge base with a Ragdesk API key, through the same permission filter,
rate limit and answer audit as ``/v1`` (issue 28, part 3).

``tools`` holds what each tool does (on the services, no SDK types), ``limits`` the bounds
on their arguments, ``results`` what they return; ``server`` registers them with the
official ``mcp`` SDK; ``door`` runs the SDK's Streamable HTTP session manager for the app's
lifetime. The HTTP mount and its key check are in ``app.web.mcp`` (handlers live in the web
tier). The SDK is imported only when the app starts, never with ``app.asgi``."""
