"""Ragdesk's inference engine: continuous batching, prefix caching and admission control
over llama.cpp's low-level API. Importing this package does not load llama.cpp."""
