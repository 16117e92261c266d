#!/usr/bin/env bash
# Regenerates the query data that lets `sqlx::query!` and friends check SQL at compile time
# without a database (sqlx reads it whenever DATABASE_URL is unset). Run it (`just sqlx-prepare`)
# after changing a query or adding a migration, and commit the result. Each crate keeps its own:
#
# | crate                 | database   | schema from            | query data        |
# |-----------------------|------------|------------------------|-------------------|
# | `harness-db-sqlite`   | SQLite     | `migrations/`          | `db/sqlite/.sqlx` |
# | `harness-db-postgres` | PostgreSQL | `migrations/postgres/` | `db/postgres/.sqlx` |
# | `orchestrator`        | SQLite     | `migrations/`          | `.sqlx` (its tests, and what has not moved yet) |
#
# Needs python3, cargo and, for PostgreSQL, Debian's `postgresql` (the same server the tests
# start; installed with apt when missing), not sqlx-cli. The SQLite schema is a scratch file; the
# PostgreSQL one a scratch server on a free loopback port, stopped on exit. Each crate is then
# type-checked with DATABASE_URL pointing at its schema and SQLX_OFFLINE_DIR set, which makes each
# query macro write its data there; the crate's data is then replaced, so it holds exactly the
# current queries.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

scratch="$(mktemp -d)"
pg_data=""
env_file=""
cleanup() {
    if [ -n "$env_file" ]; then
        rm -f "$env_file"
    fi
    if [ -n "$pg_data" ]; then
        as_postgres "$pg_bin/pg_ctl" -D "$pg_data" -m immediate stop >/dev/null 2>&1 || true
    fi
    rm -rf "$scratch"
}
trap cleanup EXIT

# Apply the SQLite migrations in version order, as sqlx's migrator does (down ones are skipped).
python3 - "$scratch/schema.db" migrations <<'EOF'
import os, re, sqlite3, sys

db, folder = sys.argv[1], sys.argv[2]
names = [n for n in os.listdir(folder) if re.match(r"\d+_.*\.sql$", n) and not n.endswith(".down.sql")]
conn = sqlite3.connect(db)
for name in sorted(names, key=lambda n: int(n.split("_", 1)[0])):
    with open(os.path.join(folder, name), encoding="utf-8") as f:
        conn.executescript(f.read())
conn.commit()
conn.close()
EOF

# PostgreSQL refuses to run as root: the server runs as `postgres` then.
as_postgres() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

start_postgres() {
    pg_bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
    if [ -z "$pg_bin" ] || [ ! -x "$pg_bin/initdb" ]; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "PostgreSQL is missing: apt-get install postgresql" >&2
            exit 1
        fi
        apt-get install -y postgresql >/dev/null || { apt-get update >/dev/null && apt-get install -y postgresql >/dev/null; }
        pg_bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
    fi
    mkdir -p "$scratch/pg"
    if [ "$(id -u)" -eq 0 ]; then
        chown postgres "$scratch" "$scratch/pg"
    fi
    pg_data="$scratch/pg/data"
    pg_port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    as_postgres "$pg_bin/initdb" -D "$pg_data" -A trust -U postgres >/dev/null
    as_postgres "$pg_bin/pg_ctl" -D "$pg_data" -l "$scratch/pg/log" -w \
        -o "-p $pg_port -k $scratch/pg -c listen_addresses=127.0.0.1" start >/dev/null
    local psql=("$pg_bin/psql" -q -h 127.0.0.1 -p "$pg_port" -U postgres -v ON_ERROR_STOP=1)
    "${psql[@]}" -d postgres -c "CREATE DATABASE schema" >/dev/null
    local migration
    while IFS= read -r migration; do
        "${psql[@]}" -d schema -f "$migration" >/dev/null
    done < <(ls migrations/postgres/*.sql | grep -v '\.down\.sql$' | sort -V)
    pg_url="postgres://postgres@127.0.0.1:$pg_port/schema"
}

# A target dir of its own, so the user's builds are untouched; the crate is cleaned there so
# every query macro runs again (cargo cannot see that DATABASE_URL changed).
target="${CARGO_TARGET_DIR:-$root/target}/sqlx-prepare"

# prepare PACKAGE DIR DATABASE_URL OUT_DIR: the query data of PACKAGE's queries, into OUT_DIR.
# The URL reaches PACKAGE's macros only, through a `.env` in DIR (sqlx reads it there): the query
# crates PACKAGE depends on keep reading their own data, whatever cargo rebuilds.
prepare() {
    local package="$1" dir="$2" url="$3" out="$4"
    local written_dir="$scratch/sqlx-$package"
    mkdir -p "$written_dir"
    if [ -e "$dir/.env" ]; then
        echo "$dir/.env exists; move it away while this runs." >&2
        exit 1
    fi
    printf 'DATABASE_URL=%s\n' "$url" >"$dir/.env"
    env_file="$dir/.env"
    cargo clean --quiet --target-dir "$target" -p "$package"
    SQLX_OFFLINE_DIR="$written_dir" \
        cargo check --quiet --target-dir "$target" --all-targets -p "$package"
    rm -f "$env_file"
    env_file=""
    mkdir -p "$out"
    rm -f "$out"/query-*.json
    shopt -s nullglob
    local written=("$written_dir"/query-*.json)
    shopt -u nullglob
    if [ ${#written[@]} -gt 0 ]; then
        cp "${written[@]}" "$out/"
    fi
    echo "Wrote ${#written[@]} query files to $out/ ($package)."
}

if [ -n "${DATABASE_URL:-}" ]; then
    echo "DATABASE_URL is set; unset it (each crate gets its own database here)." >&2
    exit 1
fi
prepare harness-db-sqlite db/sqlite "sqlite:$scratch/schema.db" db/sqlite/.sqlx
start_postgres
prepare harness-db-postgres db/postgres "$pg_url" db/postgres/.sqlx
prepare orchestrator orchestrator "sqlite:$scratch/schema.db" .sqlx
