"""Alembic environment for Mallard: online migrations only, against PostgreSQL."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import create_engine, pool

config = context.config
if config.config_file_name and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from mallard_api.config import Settings
    from mallard_api.db import database_url

    return database_url(Settings())


def run_migrations_online() -> None:
    from mallard_api.models import Base

    connectable = config.attributes.get("connection")
    if connectable is not None:
        context.configure(connection=connectable, target_metadata=Base.metadata)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            context.configure(connection=connection, target_metadata=Base.metadata)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()
        if not config.get_main_option("sqlalchemy.url"):
            from mallard_api.db import stop_embedded

            stop_embedded()  # only if this process started it


if context.is_offline_mode():
    raise SystemExit("Mallard migrations run online only (they need a PostgreSQL server)")
run_migrations_online()
