"""Answering: the grounding step shared by every door, the chat service, conversations,
stopping and the rendering of answers."""
