"""``/admin/eval``: stored retrieval evaluation runs, newest first, and a form that runs one
(the bundled golden set or an uploaded JSONL) against the server's own retriever; below
them the answer-quality runs of ``ragdesk eval --answers`` (minutes of generation each, so
they run from the command line, not from a request)."""

from __future__ import annotations

import asyncio
import hashlib
import re
import tempfile
from pathlib import Path
from typing import Any

from litestar import Controller, Request, get, post
from litestar.datastructures import FormMultiDict, UploadFile
from litestar.response import Template

from app.config.settings import REPO_ROOT
from app.documents.answer_eval import answer_history
from app.errors import AppError, NotFound, UnprocessableInput
from app.state import Services
from app.web.admin_pages import ADMIN
from retrieval.eval_runs import run_history, save_run
from retrieval.evaluation import GoldenQuestion, GoldenSetError, evaluate, load_golden
from retrieval.library import display_filename

BUNDLED_GOLDEN = REPO_ROOT / "bench" / "data" / "samples-golden.jsonl"
MAX_GOLDEN_BYTES = 1 << 20
MAX_K = 50
HISTORY = 50


class TooLarge(AppError):
    status = 413
    title = "Too large"


def _services(request: Request[Any, Any, Any]) -> Services:
    services: Services = request.app.state.services
    return services


def _page(services: Services, **extra: Any) -> dict[str, Any]:
    return {
        "runs": run_history(services.db, HISTORY)[::-1],  # newest first
        "answer_runs": answer_history(services.db, HISTORY)[::-1],
        "collections": services.store.collections(),
        "bundled": BUNDLED_GOLDEN.name,
        "max_k": MAX_K,
        **extra,
    }


def _k(form: FormMultiDict) -> int:
    value = str(form.get("k", "5")).strip()
    if not (value.isascii() and value.isdigit() and len(value) < 3 and 0 < int(value) <= MAX_K):
        raise UnprocessableInput(f"k: a whole number from 1 to {MAX_K}")
    return int(value)


def _collection(services: Services, form: FormMultiDict) -> tuple[list[int] | None, str | None]:
    value = str(form.get("collection", "")).strip()
    if not value:
        return None, None
    names = {str(c.id): c.name for c in services.store.collections()}
    if value not in names:
        raise NotFound("no such collection")
    return [int(value)], names[value]


def _load(path: Path, shown_as: str) -> list[GoldenQuestion]:
    try:
        return load_golden(path)
    except GoldenSetError as exc:  # name the file as the admin knows it, not our path
        raise UnprocessableInput(str(exc).replace(str(path), shown_as)) from None


def _keep_upload(services: Services, upload: UploadFile, data: bytes) -> Path:
    """Check an uploaded golden set, then keep it (by content) so its runs stay comparable."""
    name = re.sub(r"[^\w.-]", "_", display_filename(upload.filename))
    with tempfile.TemporaryDirectory() as tmp:
        checked = Path(tmp) / name
        checked.write_bytes(data)
        _load(checked, name)
    kept = (
        services.settings.server.data_dir / "golden" / hashlib.sha256(data).hexdigest()[:16] / name
    )
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_bytes(data)
    return kept


def _run(services: Services, golden: Path, form: FormMultiDict, k: int) -> int:
    collection_ids, collection = _collection(services, form)
    questions = _load(golden, golden.name)
    retrieval, settings = services.require_retrieval(), services.settings
    report = evaluate(
        retrieval.retriever,  # the server's own (scoped to the admin: every collection)
        services.store,
        questions,
        k=k,
        collection_ids=collection_ids,
        min_score=settings.search.min_score if settings.search.mode != "bm25" else None,
    )
    return save_run(
        services.db,
        report,
        golden=golden,
        collection=collection,
        mode=settings.search.mode,
        model_id=retrieval.embedder.model_id,
    )


class EvalPages(Controller):
    path = "/admin/eval"
    opt = ADMIN

    @get("/")
    async def runs(self, request: Request[Any, Any, Any]) -> Template:
        context = await asyncio.to_thread(_page, _services(request))
        return Template("eval.html", context=context)

    @post("/", status_code=200)
    async def run(self, request: Request[Any, Any, Any]) -> Template:
        """Evaluate now (off the event loop), store the run and show the table with it."""
        services = _services(request)
        try:
            form = await request.form()
        except ValueError as exc:
            raise UnprocessableInput("the multipart body is malformed") from exc
        golden, k = BUNDLED_GOLDEN, _k(form)
        if form.get("golden") == "upload":
            upload = form.get("file")
            if not isinstance(upload, UploadFile) or not upload.filename:
                raise UnprocessableInput("choose a JSONL golden set to upload")
            data = await upload.read()
            if len(data) > MAX_GOLDEN_BYTES:
                raise TooLarge(f"a golden set may be at most {MAX_GOLDEN_BYTES >> 10} KB")
            golden = await asyncio.to_thread(_keep_upload, services, upload, data)
        run_id = await asyncio.to_thread(_run, services, golden, form, k)
        context = await asyncio.to_thread(_page, services, new_run=run_id)
        return Template("eval.html", context=context)
