"""Prompt to tokens: grounded prompt building, citations, and generation backends."""
