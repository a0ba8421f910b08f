//! The `velvet-rope` command's tests, one module per command, linked into one test binary
//! (`make test` spent most of its Rust time compiling and linking a binary per file).

mod commands;
mod demo;
mod import_cloudflare;
mod simulate;
