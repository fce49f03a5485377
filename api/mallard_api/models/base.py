"""The one SQLAlchemy declarative base every table model derives from.

Tables are created only by Alembic migrations in `db/`; the models mirror them.
"""

from sqlalchemy import DateTime
from sqlalchemy.orm import DeclarativeBase


class Base(DeclarativeBase):
    pass


TS = DateTime(timezone=True)
