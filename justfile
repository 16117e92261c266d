# Harness tasks. `just --list` shows them.

# Run the daemon (release build).
run *ARGS:
    cargo run --release -p harness -- serve {{ARGS}}

# Every test: units, the real claude CLI against the mock Messages API, end to end.
test:
    cargo test --workspace

# Benchmarks against the real CLI and the mock API: prints figures, writes target/bench/report.md and
# latency.png, and times the Python claude-agent-sdk (pip, into target/bench/venv) when python3 is there.
# BENCH_SAMPLES=n sets the samples per scenario; BENCH_ONLY=cluster runs only the clustering section
# (two nodes on one PostgreSQL) and prints it.
bench:
    cargo run --release -p harness-tests --bin bench

# 20 threads x 5 messages at once through HTTP; prints turns/s, latency and CLI RSS.
load:
    cargo run --release -p harness-tests --bin load

# Placement of threads on N nodes, simulated (seeded, no daemon): warm hits, forwards, node loss.
# docs/scale-out.md explains it. Flags: --nodes --threads --capacity --sessions --seed …
placement *ARGS:
    cargo run -p harness-tests --bin placement -- {{ARGS}}

# Format and lint; what CI expects.
lint:
    cargo fmt --all
    cargo clippy --workspace --all-targets -- -D warnings

# Regenerate the query data (db/sqlite/.sqlx, db/postgres/.sqlx, .sqlx) that lets a build without
# DATABASE_URL check the SQL; run after changing a query or a migration, and commit it. Needs
# python3, cargo and Debian's postgresql (installed with apt when missing).
sqlx-prepare *ARGS:
    tests/sqlx-prepare.sh {{ARGS}}

# The daemon against the real CLI and the local mock API, no account needed.
demo:
    cargo run --release -p harness-tests --bin demo

# docs/screenshot.png: the web page in headless Chromium (apt-installs chromium when missing).
screenshot:
    cargo run -p harness-tests --bin screenshot
