# Sourced by every project script: one toolchain, one target directory, one set of flags, so that the
# server, the tests and the WebAssembly client share their build and nothing compiles twice.
#
# - RUSTUP_TOOLCHAIN: `debian-web` (Debian's rustc-web, linked by scripts/bootstrap.sh) where the
#   wasm32 target cannot be downloaded, else the rustup default. bootstrap.sh records its choice.
# - RUSTC_BOOTSTRAP=1: needed by -Zbuild-std for the wasm32 std; set for every build because some
#   build scripts (proc-macro2) rerun when it changes, which would rebuild everything.
# - CARGO_TARGET_DIR: outside the checkout, so a fresh clone on this machine reuses the build.
export PATH="$HOME/.cargo/bin:$PATH"
KICKOFF_CACHE="${KICKOFF_CACHE:-$HOME/.cache/kickoff}"
export KICKOFF_CACHE
if [ -z "${RUSTUP_TOOLCHAIN:-}" ] && [ -f "$KICKOFF_CACHE/toolchain" ]; then
  RUSTUP_TOOLCHAIN="$(cat "$KICKOFF_CACHE/toolchain")"
  export RUSTUP_TOOLCHAIN
fi
export RUSTC_BOOTSTRAP=1
# Clippy's lints run inside the build: `clippy-driver` is rustc with Clippy's lint passes, and
# Cargo runs it for the workspace's own crates only (its dependencies are compiled by rustc as
# always). So `scripts/test` lints what it builds instead of a `cargo clippy` that checked every
# dependency a second time (about 6 minutes on a fresh machine). scripts/test sets
# CLIPPY_ARGS=-Dwarnings, which clippy-driver tracks: only the workspace's crates are rebuilt when it
# changes. scripts/bootstrap.sh installs tools without it.
if [ -z "${RUSTC_WORKSPACE_WRAPPER+set}" ] && [ -n "${RUSTUP_TOOLCHAIN:-}" ]; then
  RUSTC_WORKSPACE_WRAPPER="$(rustup which --toolchain "$RUSTUP_TOOLCHAIN" clippy-driver 2>/dev/null || true)"
  export RUSTC_WORKSPACE_WRAPPER
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$KICKOFF_CACHE/target}"
# The cargo tools' release profiles use LTO with one codegen unit: a very long single-threaded link
# on two cores. Installing them without it is 3x faster.
export CARGO_PROFILE_RELEASE_LTO="${CARGO_PROFILE_RELEASE_LTO:-off}"
export CARGO_PROFILE_RELEASE_CODEGEN_UNITS="${CARGO_PROFILE_RELEASE_CODEGEN_UNITS:-16}"
export PATH="$KICKOFF_CACHE/tools/node_modules/.bin:$PATH"
# Every build (scripts/build's server and client, the tests, the lints) runs with these in the
# environment: Cargo tracks RUSTFLAGS and the variables crates read at compile time (the server's
# hydration script reads LEPTOS_OUTPUT_NAME), so a build with other values would compile the whole
# tree a second time. They are what cargo-leptos sets, so a cache it warmed is reused. (A developer
# with cargo-leptos runs it as `env -u RUSTFLAGS cargo leptos watch`: it appends its own flag.)
export RUSTFLAGS="${RUSTFLAGS:---cfg erase_components}"
export LEPTOS_OUTPUT_NAME=kickoff LEPTOS_SITE_ROOT=target/site LEPTOS_SITE_PKG_DIR=pkg \
  LEPTOS_RELOAD_PORT=3001 LEPTOS_LIB_DIR=app LEPTOS_BIN_DIR=. LEPTOS_HASH_FILES=false LEPTOS_JS_MINIFY=false
