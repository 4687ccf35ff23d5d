"""Ragdesk's web application: HTTP, HTML and wiring of retrieval/ and llm/."""
