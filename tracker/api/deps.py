"""``Annotated`` dependency aliases shared by the routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from tracker.config import Settings
from tracker.db.engine import Database
from tracker.services.delivery import Deliverer
from tracker.services.keys import KeyCache
from tracker.services.notify import RunNotifier


def _database(request: Request) -> Database:
    database: Database = request.app.state.database
    return database


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def _keys(request: Request) -> KeyCache:
    keys: KeyCache = request.app.state.keys
    return keys


def _notifier(request: Request) -> RunNotifier:
    notifier: RunNotifier = request.app.state.notifier
    return notifier


def _deliverer(request: Request) -> Deliverer:
    deliverer: Deliverer = request.app.state.deliverer
    return deliverer


DatabaseDep = Annotated[Database, Depends(_database)]
DelivererDep = Annotated[Deliverer, Depends(_deliverer)]
SettingsDep = Annotated[Settings, Depends(_settings)]
KeysDep = Annotated[KeyCache, Depends(_keys)]
NotifierDep = Annotated[RunNotifier, Depends(_notifier)]
