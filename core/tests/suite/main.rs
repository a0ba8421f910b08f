//! The core's integration tests, one module per concern, linked into one test binary: `make
//! test` spent most of its Rust time compiling and linking a binary per file. (`fork.rs` and
//! `routing_alloc.rs` stay binaries of their own: a fork wants a process without other tests'
//! threads, an allocation counter one without other tests' allocations.)

mod admission;
mod ambiguous_rooms;
mod cluster_seam;
mod decoders_fuzz;
mod event_log;
mod events;
mod events_faults;
mod front_doors;
mod governance;
mod host_checks;
mod lease_algorithms;
mod lease_client;
mod lease_conformance;
mod lease_coordinator;
mod lifecycle;
mod metrics_review;
mod pages;
mod pages_faults;
mod queue_estimates;
mod restart_learning;
mod revoke;
mod revoke_attacks;
mod routing;
mod rules_attacks;
mod rules_cookie_pass;
mod shared_key;
mod shared_region;
mod shared_tallies;
