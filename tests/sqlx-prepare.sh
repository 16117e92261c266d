#!/usr/bin/env bash
# Regenerates .sqlx/, the query data that lets `sqlx::query!` and friends check SQL at compile time
# without a database (sqlx reads it whenever DATABASE_URL is unset). Run it (`just sqlx-prepare`)
# after changing a query or adding a migration, and commit the result.
#
# Needs only python3 and cargo, not sqlx-cli: it builds a scratch SQLite database from migrations/,
# then type-checks the workspace with DATABASE_URL pointing at it and SQLX_OFFLINE_DIR set, which
# makes each query macro write its data there. .sqlx/ is then replaced, so it holds exactly the
# current queries. Arguments replace `--workspace` (e.g. `-p orchestrator`) to check less.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/sqlx"

# Apply the migrations in version order, as sqlx's migrator does (down migrations are skipped).
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

# A target dir of its own, so the user's builds are untouched; the workspace's own crates are
# cleaned there so every query macro runs again (cargo cannot see that DATABASE_URL changed).
target="${CARGO_TARGET_DIR:-$root/target}/sqlx-prepare"
clean_args=()
while IFS= read -r package; do
    clean_args+=(-p "$package")
done < <(cargo metadata --no-deps --format-version 1 |
    python3 -c 'import json, sys; print("\n".join(p["name"] for p in json.load(sys.stdin)["packages"]))')
cargo clean --quiet --target-dir "$target" "${clean_args[@]}"

scope=("$@")
if [ ${#scope[@]} -eq 0 ]; then
    scope=(--workspace)
fi
DATABASE_URL="sqlite:$scratch/schema.db" SQLX_OFFLINE=false SQLX_OFFLINE_DIR="$scratch/sqlx" \
    cargo check --target-dir "$target" --all-targets "${scope[@]}"

mkdir -p .sqlx
rm -f .sqlx/query-*.json
shopt -s nullglob
written=("$scratch"/sqlx/query-*.json)
if [ ${#written[@]} -gt 0 ]; then
    cp "${written[@]}" .sqlx/
fi
echo "Wrote ${#written[@]} query files to .sqlx/."
