# scripts/build's two jobs under one make jobserver (see scripts/build). `+` hands each recipe the
# jobserver, which cargo (and the cargo install of wasm-bindgen inside the client's job) uses.
.PHONY: all server client
all: server client
server:
	+@KICKOFF_BUILD_JOB=server scripts/build
client:
	+@KICKOFF_BUILD_JOB=client scripts/build
