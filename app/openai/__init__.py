"""The OpenAI-compatible ``/v1`` API: its schemas, errors, generation, grounded answers
and messages (the handlers themselves are in app/web/)."""
