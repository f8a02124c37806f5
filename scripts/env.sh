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
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$KICKOFF_CACHE/target}"
# The cargo tools' release profiles use LTO with one codegen unit: a very long single-threaded link
# on two cores. Installing them without it is 3x faster.
export CARGO_PROFILE_RELEASE_LTO="${CARGO_PROFILE_RELEASE_LTO:-off}"
export CARGO_PROFILE_RELEASE_CODEGEN_UNITS="${CARGO_PROFILE_RELEASE_CODEGEN_UNITS:-16}"
export PATH="$KICKOFF_CACHE/tools/node_modules/.bin:$PATH"
# cargo-leptos builds the debug server with these in the environment. Cargo tracks RUSTFLAGS and the
# variables crates read at compile time, so every other build (tests, checks) sets the same values,
# or the whole tree would compile a second time. cargo-leptos appends its flag to RUSTFLAGS, so it
# runs through `leptos_build`, which clears RUSTFLAGS first.
export RUSTFLAGS="${RUSTFLAGS:---cfg erase_components}"
export LEPTOS_OUTPUT_NAME=kickoff LEPTOS_SITE_ROOT=target/site LEPTOS_SITE_PKG_DIR=pkg \
  LEPTOS_RELOAD_PORT=3001 LEPTOS_LIB_DIR=app LEPTOS_BIN_DIR=. LEPTOS_HASH_FILES=false LEPTOS_JS_MINIFY=false
leptos_build() { env -u RUSTFLAGS cargo leptos build "$@"; }
