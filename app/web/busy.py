"""One answer at a time per conversation: a question asked while the conversation's last
answer is still being written would run at once beside it and race its storage."""

from __future__ import annotations

from app.chat.service import ChatService
from app.errors import AppError
from app.state import Services

STILL_ANSWERING = (
    "an answer in this conversation is still being written: wait for it to finish or stop it"
)


class StillAnswering(AppError):
    status = 409
    title = "Conflict"

    def __init__(self) -> None:
        super().__init__(STILL_ANSWERING)


def require_quiet(services: Services, chat: ChatService, conversation_id: int | None) -> None:
    """409 while the last question of ``conversation_id`` is being answered (a new
    conversation, ``None``, is always quiet)."""
    if conversation_id is None:
        return
    messages = services.conversations.messages(conversation_id)
    if messages and messages[-1].role == "user" and chat.is_answering(messages[-1].id):
        raise StillAnswering
