"""Configuration: the one ``Settings`` object and how it becomes the libraries' objects."""
