"""Every side is an allocator build: projects carry a build recipe and their peers.

`projects.recipe` (jsonb, a wire `Recipe`: how the project's allocator builds, set by an
admin; NULL: not set, the project cannot queue builds) replaces `projects.allocator_dir`
(the recipe's `source` says where the allocator is). `projects.peers` (text[]; NULL: the
API's MALLARD_PEERS) are the allocators a project is compared beside: catalogue names
(`glibc`) or other projects at a ref (`jemalloc@5.3.0`).

Data: every existing project measured Mallard's own allocator (the only one that could be
built), so it gets Mallard's recipe (the content of the repository's `.mallard.toml`,
written here as it is today: a migration never imports code that may change) with
`source` = its old `allocator_dir`. Stored job specs lose `allocator_dir`; each side named
`mallard` (the only built kind before) gets `build: {repo_url: <the spec's repo_url>,
recipe: <that recipe>}`. Stored results are untouched: the allocator `mallard` of a trial
is project mallard's build, the Debian peers keep their catalogue names.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-02
"""

import json

from alembic import op
from sqlalchemy import text

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

# /.mallard.toml's [allocator] table on 2026-12-02, without `source` (each project's own)
MALLARD_RECIPE = {
    "kind": "cmake",
    "configure": ["-DBUILD_TESTING=OFF"],
    "target": "mallard",
    "library": "**/libmallard.so",
    "options": {"prefix": "MALLARD_",
                "keys": ["transfer", "decay_ms", "on_misuse", "verbose", "remote",
                         "canary_ns", "canary_loops_per_us"]},
    "stats": {"parser": "mallard", "file_env": "MALLARD_STATS_FILE"},
}

# each old side named mallard gets its build; the others stay as they are
_SPEC_UP = """
UPDATE jobs SET spec = (spec - 'allocator_dir') || jsonb_build_object('allocators', (
    SELECT coalesce(jsonb_agg(CASE WHEN a->>'name' = 'mallard' AND NOT a ? 'build'
        THEN a || jsonb_build_object('build', jsonb_build_object(
            'repo_url', spec->'repo_url',
            'recipe', CAST(:recipe AS jsonb) || jsonb_build_object(
                'source', coalesce(spec->>'allocator_dir', 'allocator'))))
        ELSE a END ORDER BY e.ord), '[]'::jsonb)
    FROM jsonb_array_elements(spec->'allocators') WITH ORDINALITY AS e(a, ord)))
WHERE jsonb_typeof(spec->'allocators') = 'array'
"""

_SPEC_DOWN = """
UPDATE jobs SET spec = spec || jsonb_build_object(
    'allocator_dir', coalesce((
        SELECT a->'build'->'recipe'->>'source'
        FROM jsonb_array_elements(spec->'allocators') WITH ORDINALITY AS e(a, ord)
        WHERE a ? 'build' ORDER BY e.ord LIMIT 1), 'allocator'),
    'allocators', (
        SELECT coalesce(jsonb_agg(a - 'build' ORDER BY e.ord), '[]'::jsonb)
        FROM jsonb_array_elements(spec->'allocators') WITH ORDINALITY AS e(a, ord)))
WHERE jsonb_typeof(spec->'allocators') = 'array'
"""


def upgrade() -> None:
    recipe = json.dumps(MALLARD_RECIPE)
    op.execute("ALTER TABLE projects ADD COLUMN recipe jsonb, ADD COLUMN peers text[]")
    op.get_bind().execute(text(
        "UPDATE projects SET recipe = CAST(:recipe AS jsonb) "
        "|| jsonb_build_object('source', allocator_dir)"), {"recipe": recipe})
    op.execute("ALTER TABLE projects DROP COLUMN allocator_dir")
    op.get_bind().execute(text(_SPEC_UP), {"recipe": recipe})


def downgrade() -> None:
    op.execute("ALTER TABLE projects ADD COLUMN allocator_dir text NOT NULL "
               "DEFAULT 'allocator'")
    op.execute("UPDATE projects SET allocator_dir = recipe->>'source' "
               "WHERE recipe->>'source' IS NOT NULL")
    op.execute("ALTER TABLE projects DROP COLUMN recipe, DROP COLUMN peers")
    op.execute(_SPEC_DOWN)
