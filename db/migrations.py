"""Schema migrations: an ordered list, each applied once, recorded in ``schema_migrations``.

Kept as plain SQL in code (no Alembic) because the schema is small and the embedded
server is always at the version we ship. A PostgreSQL advisory lock makes two
processes starting at once apply each migration exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text

from db.session import engine_for

_LOCK_KEY = 0x63747870  # "ctxp"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "extensions",
        (
            "CREATE EXTENSION IF NOT EXISTS vector",
            "CREATE EXTENSION IF NOT EXISTS pg_trgm",
        ),
    ),
    Migration(
        2,
        "completion telemetry and IDE feedback",
        (
            """CREATE TABLE completion_events (
                id bigserial PRIMARY KEY,
                created_at timestamptz NOT NULL DEFAULT now(),
                request_id text NOT NULL,
                repository text NOT NULL,
                path text NOT NULL,
                language text,
                mode text NOT NULL,
                scenario text NOT NULL DEFAULT 'ide',
                model text,
                outcome text NOT NULL CHECK (outcome IN ('ok', 'degraded', 'error')),
                degraded_reason text,
                error_code text,
                strategy text,
                sources text[] NOT NULL DEFAULT '{}',
                features jsonb NOT NULL DEFAULT '{}',
                file_tokens integer,
                context_tokens integer,
                prompt_tokens integer,
                cached_tokens integer,
                completion_tokens integer,
                draft_tokens_proposed integer,
                draft_tokens_accepted integer,
                queue_ms real,
                context_ms real,
                prompt_ms real,
                decode_ms real,
                total_ms real
            )""",
            "CREATE INDEX completion_events_created_at ON completion_events (created_at)",
            "CREATE INDEX completion_events_request_id ON completion_events (request_id)",
            """CREATE TABLE completion_feedback (
                id bigserial PRIMARY KEY,
                created_at timestamptz NOT NULL DEFAULT now(),
                completion_id text NOT NULL,
                action text NOT NULL CHECK (action IN ('shown', 'accepted', 'dismissed')),
                chars_kept integer
            )""",
            "CREATE INDEX completion_feedback_completion_id ON completion_feedback (completion_id)",
        ),
    ),
    Migration(
        3,
        "repository index",
        (
            "CREATE TABLE repositories ("
            " id serial PRIMARY KEY, name text NOT NULL UNIQUE, root text, head_commit text,"
            " embedder text, indexed_at timestamptz, created_at timestamptz NOT NULL DEFAULT now())",
            # One row per path ever seen; a deleted file keeps its row (deleted = true) so that the stream
            # sequence of the last event applied to it survives, and an older redelivered event is ignored.
            "CREATE TABLE indexed_files ("
            " repo_id integer NOT NULL REFERENCES repositories(id) ON DELETE CASCADE,"
            " path text NOT NULL, language text, content_hash text, size_bytes integer NOT NULL DEFAULT 0,"
            " module_keys text[] NOT NULL DEFAULT '{}', imports text[] NOT NULL DEFAULT '{}',"
            " chunk_count integer NOT NULL DEFAULT 0, skipped_reason text, deleted boolean NOT NULL DEFAULT false,"
            " source_seq bigint NOT NULL DEFAULT 0, edited_at timestamptz,"
            " indexed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (repo_id, path))",
            "CREATE INDEX indexed_files_module_keys ON indexed_files USING gin (module_keys)",
            "CREATE INDEX indexed_files_imports ON indexed_files USING gin (imports)",
            "CREATE INDEX indexed_files_edited ON indexed_files (repo_id, edited_at DESC)",
            "CREATE TABLE code_chunks ("
            " id bigserial PRIMARY KEY,"
            " repo_id integer NOT NULL REFERENCES repositories(id) ON DELETE CASCADE,"
            " path text NOT NULL, symbol text NOT NULL, kind text NOT NULL, language text NOT NULL,"
            " start_line integer NOT NULL, end_line integer NOT NULL,"
            " signature text NOT NULL, content text NOT NULL, content_hash text NOT NULL,"
            # Identifier words: the symbol's own (weight A) rank above those used in its body (weight C).
            " name_lexemes text NOT NULL, lexemes text NOT NULL,"
            " tsv tsvector GENERATED ALWAYS AS (setweight(to_tsvector('simple', name_lexemes), 'A')"
            " || setweight(to_tsvector('simple', lexemes), 'C')) STORED,"
            " embedding vector(384) NOT NULL,"
            " indexed_at timestamptz NOT NULL DEFAULT now(),"
            " CONSTRAINT code_chunks_identity UNIQUE (repo_id, path, symbol, content_hash))",
            "CREATE INDEX code_chunks_embedding_hnsw ON code_chunks USING hnsw (embedding vector_cosine_ops)",
            "CREATE INDEX code_chunks_tsv ON code_chunks USING gin (tsv)",
            "CREATE INDEX code_chunks_symbol_trgm ON code_chunks USING gin (symbol gin_trgm_ops)",
            "CREATE INDEX code_chunks_repo_path ON code_chunks (repo_id, path)",
            "CREATE INDEX code_chunks_repo_hash ON code_chunks (repo_id, content_hash)",
        ),
    ),
    Migration(
        4,
        "team users, repository grants, the user of each telemetry row",
        (
            # Names are NATS subject tokens (ctxpress.v1.u.<name>.complete); passwords are bcrypt hashes only.
            "CREATE TABLE team_users ("
            " name text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),"
            " password_hash text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())",
            # A grant names a repository as requests do (the index's repositories.name), indexed yet or not.
            # ("user" is a reserved word in SQL, hence user_name.)
            "CREATE TABLE team_grants ("
            " user_name text NOT NULL REFERENCES team_users(name) ON DELETE CASCADE,"
            " repository text NOT NULL, granted_at timestamptz NOT NULL DEFAULT now(),"
            " PRIMARY KEY (user_name, repository))",
            "ALTER TABLE completion_events ADD COLUMN user_name text",
            "ALTER TABLE completion_feedback ADD COLUMN user_name text",
        ),
    ),
    Migration(
        5,
        "prompt tokens read back from the engine's disk KV tier, and the time it took",
        (
            "ALTER TABLE completion_events ADD COLUMN restored_tokens integer",
            "ALTER TABLE completion_events ADD COLUMN restore_ms real",
        ),
    ),
    Migration(
        6,
        "team users of two kinds: developers, and git hooks scoped to their granted repositories",
        (
            "ALTER TABLE team_users ADD COLUMN kind text NOT NULL DEFAULT 'developer'"
            " CHECK (kind IN ('developer', 'hooks'))",
        ),
    ),
    Migration(
        7,
        "a user's saved, uncommitted files kept apart from the shared index",
        (
            # '' is the shared index (what was committed, or any save of a single-user appliance); a user's
            # name, that user's saves in team mode, which only that user's retrieval reads.
            "ALTER TABLE indexed_files ADD COLUMN owner text NOT NULL DEFAULT ''",
            "ALTER TABLE indexed_files DROP CONSTRAINT indexed_files_pkey",
            "ALTER TABLE indexed_files ADD PRIMARY KEY (repo_id, path, owner)",
            "ALTER TABLE code_chunks ADD COLUMN owner text NOT NULL DEFAULT ''",
            "ALTER TABLE code_chunks DROP CONSTRAINT code_chunks_identity",
            "ALTER TABLE code_chunks ADD CONSTRAINT code_chunks_identity"
            " UNIQUE (repo_id, path, owner, symbol, content_hash)",
        ),
    ),
    Migration(
        8,
        "model-written notes of the shared index's opaque blocks (syntax/notes.py), written in idle engine time",
        (
            # A row is asked for by the indexer (note NULL) and written by a completion worker; note_key hashes
            # the block's text, so a row never describes another version of its block.
            "CREATE TABLE block_notes ("
            " repo_id integer NOT NULL REFERENCES repositories(id) ON DELETE CASCADE,"
            " path text NOT NULL, note_key text NOT NULL, language text NOT NULL, source text NOT NULL,"
            " note text, tries smallint NOT NULL DEFAULT 0, claimed_at timestamptz, written_at timestamptz,"
            " PRIMARY KEY (repo_id, path, note_key))",
            "CREATE INDEX block_notes_pending ON block_notes (repo_id, path) WHERE note IS NULL",
        ),
    ),
    Migration(
        9,
        "the team console: its admins, their server-side sessions, the audit log; indexes for its usage pages",
        (
            # Console admins are not NATS users: they sign in to the web console only (ctxpress/console/).
            "CREATE TABLE console_admins ("
            " name text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),"
            " password_hash text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())",
            # Only the SHA-256 of a session token is stored: a copy of the table signs nobody in.
            "CREATE TABLE console_sessions ("
            " token_hash text PRIMARY KEY, admin_name text NOT NULL REFERENCES console_admins(name) ON DELETE CASCADE,"
            " csrf_token text NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),"
            " expires_at timestamptz NOT NULL)",
            "CREATE INDEX console_sessions_expires ON console_sessions (expires_at)",
            "CREATE TABLE audit_log ("
            " id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now(), actor text NOT NULL,"
            " action text NOT NULL, target text NOT NULL DEFAULT '', detail text NOT NULL DEFAULT '',"
            " source text NOT NULL DEFAULT 'console')",
            "CREATE INDEX audit_log_at ON audit_log (at DESC)",
            # The usage pages read a period of telemetry: feedback by time (completion_feedback had no time index),
            # and a member's last request without reading their whole history.
            "CREATE INDEX completion_feedback_created_at ON completion_feedback (created_at)",
            "CREATE INDEX completion_events_user_created ON completion_events (user_name, created_at DESC)",
            # The usage pages' rollup (db/usage_rollup.py): per closed hour and per value of a dimension
            # (member, repository, language, door, source, error), the sums a page adds up and a latency
            # histogram over fixed buckets; the state says up to when hours are rolled and feedback was seen.
            "CREATE TABLE usage_hourly ("
            " hour timestamptz NOT NULL, dimension text NOT NULL, key text NOT NULL,"
            " requests integer NOT NULL, shown integer NOT NULL, accepted integer NOT NULL,"
            " chars_accepted bigint NOT NULL, errors integer NOT NULL,"
            " queue_ms double precision, queue_n integer NOT NULL, context_ms double precision,"
            " context_n integer NOT NULL, prompt_ms double precision, prompt_n integer NOT NULL,"
            " decode_ms double precision, decode_n integer NOT NULL, prompt_tokens bigint, cached_tokens bigint,"
            " latency integer[] NOT NULL, PRIMARY KEY (dimension, hour, key))",
            # The same cells per whole UTC day, summed from the hours once a day is rolled: a month by member is
            # 1,500 cells, not 36,000.
            "CREATE TABLE usage_daily (LIKE usage_hourly INCLUDING ALL)",
            "ALTER TABLE usage_daily RENAME COLUMN hour TO day",
            "CREATE TABLE usage_rollup_state ("
            " id boolean PRIMARY KEY DEFAULT true CHECK (id), rolled_until timestamptz, feedback_seen timestamptz)",
            "INSERT INTO usage_rollup_state (id) VALUES (true)",
        ),
    ),
    Migration(
        10,
        "model-written notes measured and removed (docs/context.md): their table goes",
        ("DROP TABLE IF EXISTS block_notes",),
    ),
    Migration(
        11,
        "the latency plan's budget, where a prompt was planned smaller than its budget (prompt_plan.py)",
        ("ALTER TABLE completion_events ADD COLUMN IF NOT EXISTS planned_budget_tokens integer",),
    ),
)


def migrate(url: str) -> list[int]:
    """Apply what is missing; returns the versions applied now."""
    applied_now: list[int] = []
    with engine_for(url).begin() as conn:
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
        conn.execute(text(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        ))
        done = {row[0] for row in conn.execute(text("SELECT version FROM schema_migrations"))}
        for migration in MIGRATIONS:
            if migration.version in done:
                continue
            for statement in migration.statements:
                conn.execute(text(statement))
            conn.execute(
                text("INSERT INTO schema_migrations (version, name) VALUES (:v, :n)"),
                {"v": migration.version, "n": migration.name},
            )
            applied_now.append(migration.version)
    return applied_now


def current_version(url: str) -> int:
    with engine_for(url).connect() as conn:
        row = conn.execute(text("SELECT coalesce(max(version), 0) FROM schema_migrations")).first()
    return int(row[0]) if row else 0
