#!/usr/bin/env bash
# Installs what building and testing Kickoff needs, skipping whatever is already there.
# Usage: scripts/bootstrap.sh [--e2e]   (--e2e, for scripts/test: also cargo-nextest, Chromium and
# playwright-core)
#
# The WebAssembly client needs a wasm32 std. Where `rustup target add wasm32-unknown-unknown`
# works (and the toolchain is 1.96 or newer), the rustup toolchain is used. Where it
# cannot download (these machines reach only the package registries), Debian's rustc-web (1.96),
# its std sources and lld are installed and linked as the rustup toolchain `debian-web`, and std is
# built from source (-Zbuild-std, see Cargo.toml). Everything is then built with that one toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
WITH_E2E=0
[ "${1:-}" = "--e2e" ] && WITH_E2E=1
NEXTEST_VERSION=0.9.143
STANDARDWEBHOOKS_VERSION=1.1.0
PSYCOPG_VERSION=3.3.9
BINARYEN_VERSION=132.0.0
log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'bootstrap: %s\n' "$*" >&2; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_ready=0
apt_install() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  if [ $apt_ready = 0 ]; then as_root apt-get update -qq; apt_ready=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

command -v rustup >/dev/null || die "rustup is needed (https://rustup.rs)"
mkdir -p "$KICKOFF_CACHE"

# ---- 1. the toolchain
toolchain="${RUSTUP_TOOLCHAIN:-}"
if [ -z "$toolchain" ]; then
  default_version="$(rustup run stable rustc -V 2>/dev/null | awk '{print $2}' || true)"
  if [ -n "$default_version" ] && version_ge "$default_version" 1.96.0 \
     && timeout 120 rustup target add --toolchain stable wasm32-unknown-unknown >/dev/null 2>&1 \
     && timeout 120 rustup component add --toolchain stable rust-src >/dev/null 2>&1; then
    toolchain=stable
  else
    log "wasm32 std cannot come from rustup here: using Debian's rustc-web with -Zbuild-std"
    apt_install rustc-web cargo-web rust-web-src rust-web-llvm lld-22
    v="$(/usr/bin/rustc -V | awk '{print $2}')"
    version_ge "$v" 1.96.0 || die "/usr/bin/rustc is $v; need 1.96 or newer (bookworm-security's rustc-web)"
    [ -x "$(readlink -f /usr/bin/rust-lld)" ] || die "/usr/bin/rust-lld does not resolve (install lld-22)"
    rustup toolchain list | grep -qx debian-web || rustup toolchain link debian-web /usr
    toolchain=debian-web
  fi
  echo "$toolchain" > "$KICKOFF_CACHE/toolchain"
fi
export RUSTUP_TOOLCHAIN="$toolchain"
# The formatter and the linter the test command runs, of the same toolchain (so that the lints
# reuse the build's dependencies).
if [ "$toolchain" = debian-web ]; then
  apt_install rustfmt-web rust-web-clippy
else
  for c in rustfmt clippy; do
    rustup component list --toolchain "$toolchain" --installed 2>/dev/null | grep -q "^$c" \
      || timeout 120 rustup component add --toolchain "$toolchain" "$c" >/dev/null
  done
fi

# ---- 2. PostgreSQL server binaries (the embedded cluster and the tests run them)
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then
  apt_install postgresql
fi

# ---- 2b. libfaketime: a process test runs a node whose wall clock is moved ahead
apt_install libfaketime

# ---- 2c. make: scripts/build runs the builds under its jobserver (scripts/build.mk)
command -v make >/dev/null || apt_install make

# ---- 3. cargo tools: wasm-bindgen, at exactly the version in Cargo.lock, is installed by
# scripts/build itself (scripts/install-wasm-bindgen) while the builds run: it is needed only once
# the client is compiled, and compiling it first held the builds back by about 2 minutes on a fresh
# machine. No cargo-leptos: compiling it took about 12 minutes to run two cargo builds and a copy.
# wasm-opt (release builds only, scripts/build): binaryen's npm build.
if [ "${WITH_WASM_OPT:-0}" = 1 ] && ! command -v wasm-opt >/dev/null; then
  log "npm install binaryen@$BINARYEN_VERSION (wasm-opt)"
  npm install --prefix "$KICKOFF_CACHE/tools" --no-audit --no-fund --silent "binaryen@$BINARYEN_VERSION"
fi

# ---- 4. tests: cargo-nextest (the Rust test runner scripts/test uses), Debian's Chromium and
# playwright-core
if [ $WITH_E2E = 1 ]; then
  # Any version will do; a missing one is installed at the version these scripts were tried with.
  if ! cargo nextest --version >/dev/null 2>&1; then
    log "cargo install cargo-nextest $NEXTEST_VERSION (about 10 min on 2 cores)"
    env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS cargo install cargo-nextest --version "$NEXTEST_VERSION" --locked
  fi
  apt_install chromium
  # PgBouncer: the suites that run behind a transaction pooler start one each (apt starts none).
  apt_install pgbouncer
  # psql, which examples/sql/add_job.sql runs in (tests/it/sql_inserts.rs).
  command -v psql >/dev/null || apt_install postgresql-client
  if [ ! -d end2end/node_modules/playwright-core ]; then
    log "npm ci in end2end/"
    (cd end2end && npm ci --no-audit --no-fund --silent)
  fi
  # The TypeScript worker's packages (examples/workers/typescript: npm's standardwebhooks and
  # TypeScript), which tests/it/workers_any_language.rs compiles and runs.
  if [ ! -d examples/workers/typescript/node_modules/standardwebhooks ]; then
    log "npm ci in examples/workers/typescript/"
    (cd examples/workers/typescript && npm ci --no-audit --no-fund --silent)
  fi
  # node-postgres, which examples/sql/node/add_job.mjs inserts a job with from Node
  # (tests/it/sql_inserts.rs).
  if [ ! -d examples/sql/node/node_modules/pg ]; then
    log "npm ci in examples/sql/node/"
    (cd examples/sql/node && npm ci --no-audit --no-fund --silent)
  fi
  # The published Standard Webhooks verifier (PyPI), so that the tests check Kickoff's signatures
  # with a receiver's library, not only with Kickoff's own code (and the Python worker's); and
  # psycopg, which examples/sql/python/add_job.py inserts a job with from Python.
  SWH_VENV="$KICKOFF_CACHE/tools/pyvenv"
  if ! "$SWH_VENV/bin/python" -c 'import standardwebhooks, psycopg' >/dev/null 2>&1; then
    log "pip install standardwebhooks==$STANDARDWEBHOOKS_VERSION psycopg[binary]==$PSYCOPG_VERSION in $SWH_VENV"
    [ -x "$SWH_VENV/bin/pip" ] || python3 -m venv "$SWH_VENV"
    "$SWH_VENV/bin/pip" install --quiet "standardwebhooks==$STANDARDWEBHOOKS_VERSION" \
      "psycopg[binary]==$PSYCOPG_VERSION"
  fi
  # schemathesis (PyPI): the test command fuzzes the API against its OpenAPI document.
  "$(dirname "$0")/schemathesis" --install
fi
log "toolchain: $RUSTUP_TOOLCHAIN"
