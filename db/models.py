"""SQLAlchemy 2 models of the repository index (schema: ``db.migrations`` version 2).

The migrations own the DDL; these classes mirror it for queries. One database serves many
repositories: every row carries ``repo_id`` and every query of the index (``db.chunks``, ``db.chunk_search``,
``db.coarse_files``) filters on it.
"""

from __future__ import annotations

from datetime import datetime

from pgvector.sqlalchemy import Vector
from sqlalchemy import BigInteger, Boolean, Computed, DateTime, ForeignKey, Integer, Text, UniqueConstraint, func
from sqlalchemy.dialects.postgresql import ARRAY, TSVECTOR
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ctxpress_core.inference import EMBEDDING_DIM


class Base(DeclarativeBase):
    pass


class Repository(Base):
    __tablename__ = "repositories"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    root: Mapped[str | None] = mapped_column(Text)
    head_commit: Mapped[str | None] = mapped_column(Text)
    embedder: Mapped[str | None] = mapped_column(Text)
    indexed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class IndexedFile(Base):
    __tablename__ = "indexed_files"

    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"), primary_key=True)
    path: Mapped[str] = mapped_column(Text, primary_key=True)
    owner: Mapped[str] = mapped_column(Text, primary_key=True, default="")  # db.scope.SHARED or a user
    language: Mapped[str | None] = mapped_column(Text)
    content_hash: Mapped[str | None] = mapped_column(Text)
    size_bytes: Mapped[int] = mapped_column(Integer, default=0)
    module_keys: Mapped[list[str]] = mapped_column(ARRAY(Text), default=list)
    imports: Mapped[list[str]] = mapped_column(ARRAY(Text), default=list)
    chunk_count: Mapped[int] = mapped_column(Integer, default=0)
    skipped_reason: Mapped[str | None] = mapped_column(Text)
    deleted: Mapped[bool] = mapped_column(Boolean, default=False)
    source_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    edited_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    indexed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class CodeChunk(Base):
    __tablename__ = "code_chunks"
    __table_args__ = (UniqueConstraint("repo_id", "path", "owner", "symbol", "content_hash",
                                       name="code_chunks_identity"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    path: Mapped[str] = mapped_column(Text)
    owner: Mapped[str] = mapped_column(Text, default="")
    symbol: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(Text)
    language: Mapped[str] = mapped_column(Text)
    start_line: Mapped[int] = mapped_column(Integer)
    end_line: Mapped[int] = mapped_column(Integer)
    signature: Mapped[str] = mapped_column(Text)
    content: Mapped[str] = mapped_column(Text)
    content_hash: Mapped[str] = mapped_column(Text)
    name_lexemes: Mapped[str] = mapped_column(Text)
    lexemes: Mapped[str] = mapped_column(Text)
    tsv: Mapped[str] = mapped_column(TSVECTOR, Computed(
        "setweight(to_tsvector('simple', name_lexemes), 'A') || setweight(to_tsvector('simple', lexemes), 'C')",
        persisted=True))
    embedding: Mapped[list[float]] = mapped_column(Vector(EMBEDDING_DIM))
    indexed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
