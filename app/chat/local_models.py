"""The models chat may answer with, by name, and which of them it offers.

Three kinds: the bundled ones (``llm.models.BUNDLED``, usable once their packages are
installed), GGUF files added with ``ragdesk models add`` (hard-linked or copied into
``<models dir>/added`` and listed in the ``local_models`` table), and those the settings
configure (``generator_model``, ``RAGDESK_MODELS``). The admin picks which chat offers
(``chat_model_offers``); the configured chat model is always offered, and is what a
conversation without a choice of its own is answered with.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import sqlite3
import time
from collections.abc import Collection
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from app.config.settings import Settings
from app.errors import AppError
from llm.models import BUNDLED, BundledModel, installed, sweep_partial_models
from llm.params import UnknownModel
from retrieval.db import Database
from retrieval.sql import IntegrityError

Kind = Literal["bundled", "added", "configured", "alias"]

NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
NAME_RULE = "1 to 64 of a-z 0-9 . _ -, starting with a letter or digit"
RESERVED = frozenset({"default", "rag", "fake"})  # the default alias, the grounded API, tests
GGUF_MAGIC = b"GGUF"
ADDED = "added"  # the models directory's folder of added files


class ModelError(Exception):
    """A model that cannot be added, removed or offered; the message says why."""


@dataclass(frozen=True)
class AddedModel:
    name: str
    file: str  # its file's name in the folder of added models
    size: int
    source: str  # the path it was added from
    added_at: float


@dataclass(frozen=True)
class KnownModel:
    name: str
    kind: Kind
    location: str  # its file, or the URL of its server
    size: int | None  # bytes of its file (None: remote, or not there)
    state: str  # present, installed (assembled on first use), not installed, missing, remote
    usable: bool  # whether it can be loaded (or reached) now
    default: bool = False  # what chat answers with when no model is chosen


def added_dir(settings: Settings) -> Path:
    return settings.models_dir / ADDED


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise ModelError(f"{name[:80]!r} is not a model name ({NAME_RULE})")
    return name


def name_for(path: Path) -> str:
    """A model name made of a file's name: ``Mistral-7B.Q4_K_M.gguf`` -> ``mistral-7b.q4_k_m``."""
    stem = re.sub(r"[^a-z0-9._-]+", "-", path.stem.lower()).strip("._-")
    return stem[:64].rstrip("._-")


def check_gguf(path: Path) -> None:
    """Refuse anything but a regular file that starts with the GGUF magic."""
    if not path.is_file():
        raise ModelError(f"{path} is not a file")
    with path.open("rb") as source:
        if source.read(len(GGUF_MAGIC)) != GGUF_MAGIC:
            raise ModelError(f"{path} is not a GGUF model (it does not start with 'GGUF')")


def default_name(settings: Settings) -> str:
    """The model chat answers with when a conversation has chosen none: the configured
    chat model, or (for the ``default`` alias) the model behind it."""
    generation = settings.generation
    if generation.chat_model != "default" or "default" in generation.model_aliases:
        return generation.chat_model
    if generation.generator_model is not None:
        return generation.generator_model.stem
    return generation.bundled_model


def added_models(settings: Settings) -> dict[str, Path]:
    """The added models' files by name, read from the configured database without
    migrating it (the model loaders need them before, or without, the app's database
    being open); none before m015, or before PostgreSQL has chat's tables."""
    if settings.server.database_url is not None:
        rows = _added_in_postgresql(settings)
    elif not settings.db_path.is_file():
        return {}
    else:
        try:
            with closing(sqlite3.connect(settings.db_path, timeout=30.0)) as conn:
                rows = conn.execute(_ADDED).fetchall()
        except sqlite3.OperationalError:  # no such table yet
            return {}
    return {str(name): added_dir(settings) / str(file) for name, file in rows}


_ADDED = "SELECT name, file FROM local_models ORDER BY name"


def _added_in_postgresql(settings: Settings) -> list[Any]:
    """``local_models``' rows through one short-lived connection (psycopg and the store
    are imported only when PostgreSQL is configured)."""
    import psycopg

    from retrieval.pg import PostgresDatabase

    assert settings.server.database_url is not None
    db = PostgresDatabase(
        settings.server.database_url.get_secret_value(),
        pool_size=1,
        timeout_s=settings.server.database_timeout_s,
    )
    try:
        return db.read().execute(_ADDED).fetchall()
    except psycopg.errors.UndefinedTable:
        return []
    finally:
        db.close()


class LocalModels:
    """The added GGUF files: their rows, and their files in the models directory."""

    def __init__(self, db: Database, settings: Settings):
        self.db = db
        self.settings = settings

    def list(self) -> list[AddedModel]:
        rows = self.db.read().query("SELECT * FROM local_models ORDER BY name")
        return [AddedModel(**row) for row in rows]

    def get(self, name: str) -> AddedModel | None:
        rows = list(self.db.read().query("SELECT * FROM local_models WHERE name = ?", [name]))
        return AddedModel(**rows[0]) if rows else None

    def path(self, model: AddedModel) -> Path:
        return added_dir(self.settings) / model.file

    def add(self, source: Path, name: str | None = None) -> AddedModel:
        """Hard-link (or, across file systems, copy) ``source`` into the models directory
        under ``<name>.gguf`` and list it; the name defaults to the file's."""
        if name is None:
            name = name_for(source)
            if not NAME.fullmatch(name):
                raise ModelError(f"cannot make a model name of {source.name[:80]!r}: give one")
        check_name(name)
        if name in (taken := self._taken()):
            raise ModelError(f"the name {name!r} is taken by {taken[name]}; choose another")
        check_gguf(source)
        directory = added_dir(self.settings)
        directory.mkdir(parents=True, exist_ok=True)
        sweep_partial_models(directory)  # what a killed add left behind
        target = directory / f"{name}.gguf"
        partial = directory / f".{target.name}.{os.getpid()}.partial"
        try:
            _place(source, partial)
            check_gguf(partial)  # what was placed, not what was looked at first
            model = AddedModel(
                name, target.name, partial.stat().st_size, str(source.absolute()), time.time()
            )
            with self.db.write() as db:  # the row and the file: both or neither
                db.execute(
                    "INSERT INTO local_models (name, file, size, source, added_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    [model.name, model.file, model.size, model.source, model.added_at],
                )
                partial.replace(target)
        except IntegrityError:
            raise ModelError(f"a model named {name!r} was added meanwhile") from None
        finally:
            partial.unlink(missing_ok=True)
        return model

    def remove(self, name: str) -> AddedModel:
        """Forget an added model and delete its file; bundled, configured and default
        models are refused."""
        model = self.get(name)
        if model is None:
            if name in BUNDLED:
                raise ModelError(f"{name!r} is bundled: uninstall its packages instead")
            if name in self.settings.generation.models:
                raise ModelError(f"{name!r} is configured in the settings (RAGDESK_MODELS)")
            raise ModelError(f"no added model named {name[:80]!r}")
        if (use := _in_use(self.settings, name)) is not None:
            raise ModelError(f"{name!r} is {use}: change the settings first")
        with self.db.write() as db:
            db.execute("DELETE FROM local_models WHERE name = ?", [name])
            db.execute("DELETE FROM chat_model_offers WHERE name = ?", [name])
        self.path(model).unlink(missing_ok=True)
        return model

    def _taken(self) -> dict[str, str]:
        """Names an added model may not take, and what has them."""
        generation = self.settings.generation
        taken = {name: "a reserved name" for name in RESERVED}
        for model in BUNDLED.values():
            taken[model.name] = taken[Path(model.file_name).stem] = "a bundled model"
        taken.update({name: "an alias" for name in generation.model_aliases})
        taken.update({name: "a configured model" for name in generation.models})
        if generation.generator_model is not None:
            taken[generation.generator_model.stem] = "the configured generator model"
        taken.update({model.name: "an added model" for model in self.list()})
        return taken


class ChatModels:
    """Every model chat could answer with, and the admin's choice of those it offers."""

    def __init__(self, db: Database, settings: Settings):
        self.db = db
        self.settings = settings
        self.local = LocalModels(db, settings)

    def known(self) -> list[KnownModel]:
        """Bundled, added and configured models, the default first (a later kind wins a
        name, as in the model loaders: app.config.models)."""
        settings, generation = self.settings, self.settings.generation
        found: dict[str, KnownModel] = {}
        if generation.generator_model is not None:
            path = generation.generator_model
            found[path.stem] = _file_model(path.stem, "configured", path)
        for model in BUNDLED.values():
            found[model.name] = _bundled(model, settings.models_dir)
        for added in self.local.list():
            found[added.name] = _file_model(added.name, "added", self.local.path(added))
        for name, entry in generation.models.items():
            if entry.url is not None:
                found[name] = KnownModel(name, "configured", entry.url, None, "remote", True)
            else:
                assert entry.path is not None
                found[name] = _file_model(name, "configured", entry.path)
        default = default_name(settings)
        if default not in found:  # an alias, or a model only the registry knows
            found[default] = KnownModel(default, "alias", "", None, "alias", True)
        models = [replace(m, default=m.name == default) for m in found.values()]
        return sorted(models, key=lambda m: not m.default)  # stable: default first

    def offerable(self) -> list[KnownModel]:
        """What the admin may offer besides the default: the usable models."""
        return [m for m in self.known() if m.usable and not m.default]

    def offered_names(self) -> set[str]:
        return {row["name"] for row in self.db.read().query("SELECT name FROM chat_model_offers")}

    def offered(self, served: Collection[str] | None = None) -> list[KnownModel]:
        """The default, then the offered models still usable (and, given ``served``, the
        names the running server can load)."""
        chosen = self.offered_names()
        known = self.known()
        return [known[0]] + [
            m
            for m in known[1:]
            if m.usable and m.name in chosen and (served is None or m.name in served)
        ]

    def open_to_everyone(self, aliases: Collection[str] = ()) -> set[str]:
        """Models any signed-in caller may generate with (the API's ``model``): those chat
        offers (the default first), those the settings configure (RAGDESK_MODELS, the
        generator model) and ``aliases`` (the settings' too). A bundled or added model the
        admin has not offered is loaded for an admin only: loading one costs gigabytes of
        disk and memory (#30: a staff key made the server assemble and load one)."""
        generation = self.settings.generation
        names = {m.name for m in self.offered()} | set(generation.models) | set(aliases)
        if generation.generator_model is not None:
            names.add(generation.generator_model.stem)
        return names

    def refuse_unoffered(self, name: str, *, aliases: Collection[str], may_load_any: bool) -> None:
        """UnknownModel (404) unless the caller may generate with ``name`` (any model, for
        ``may_load_any``: an admin's session or full key); the same answer as for a name
        that does not exist, so nothing is told about what is there."""
        if may_load_any or name in self.open_to_everyone(aliases):
            return
        raise UnknownModel(f"no model or alias named {name[:80]!r} is offered")

    def set_offered(self, names: Collection[str]) -> None:
        """Offer exactly ``names`` besides the default (which is always offered)."""
        known = {m.name: m for m in self.known()}
        default = next(m.name for m in known.values() if m.default)
        wanted = set(names) - {default}
        offerable = {m.name for m in self.offerable()}
        if unknown := sorted(wanted - offerable):
            shown = ", ".join(repr(n[:80]) for n in unknown[:5])
            raise ModelError(f"cannot offer {shown}: no such model, or it cannot be loaded")
        now = time.time()
        with self.db.write() as db:
            db.execute("DELETE FROM chat_model_offers")
            for name in sorted(wanted):
                db.execute(
                    "INSERT INTO chat_model_offers (name, offered_at) VALUES (?, ?)", [name, now]
                )

    def choose(self, raw: str, served: Collection[str] | None = None) -> str | None:
        """The model a conversation asks for, checked: None for the default; a model chat
        does not offer is refused (400)."""
        name = raw.strip()
        offered = self.offered(served)
        if not name or name == offered[0].name:
            return None
        if name not in {m.name for m in offered[1:]}:
            listed = ", ".join(m.name for m in offered)
            raise AppError(f"the model {name[:80]!r} is not offered in chat (offered: {listed})")
        return name


def _place(source: Path, target: Path) -> None:
    """A hard link when the file systems allow it (no second copy of gigabytes)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _in_use(settings: Settings, name: str) -> str | None:
    generation = settings.generation
    if name in (default_name(settings), generation.chat_model):
        return "the default chat model"
    for alias, weights in generation.model_aliases.items():
        if name in weights:
            return f"served by the alias {alias!r}"
    return None


def _file_model(name: str, kind: Kind, path: Path) -> KnownModel:
    try:
        size: int | None = path.stat().st_size if path.is_file() else None
    except OSError:
        size = None
    state = "present" if size is not None else "missing"
    return KnownModel(name, kind, str(path), size, state, size is not None)


def _bundled(model: BundledModel, models_dir: Path) -> KnownModel:
    path = models_dir / model.file_name
    if path.is_file() and path.stat().st_size == model.size:
        state = "present"
    elif _installed(model.name):
        state = "installed"  # assembled on first use
    else:
        state = "not installed"
    return KnownModel(model.name, "bundled", str(path), model.size, state, state != "not installed")


@functools.cache
def _installed(name: str) -> bool:
    """Whether a bundled model's packages are installed (asked once per process)."""
    return installed(BUNDLED[name])
