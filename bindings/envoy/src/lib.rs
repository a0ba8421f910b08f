//! velvet-rope as an Envoy HTTP filter: a dynamic module (`envoy.filters.http.dynamic_modules`)
//! written against Envoy's dynamic-modules ABI v0.2.0 (Envoy 1.40).
//!
//! Filter configurations naming one configuration source share one engine, shared in turn
//! by all of Envoy's worker threads (so counts are exact across them with no shared memory)
//! and ticked by a thread the module owns. A new configuration takes effect only once Envoy
//! has taken it, and never removes a room a live filter still decides (see `filter_config`).
//! Per request: the decision on the request's headers; the waiting page (HTML, or JSON when
//! asked) as a local reply with its status, `Refresh` or `Retry-After` and `Set-Cookie`; a
//! renewed ticket's `Set-Cookie` added to the upstream's response; the upstream's
//! `Velvet-Rope-Command` taken off it (a header or a trailer), and its `revoke` followed (the
//! session ended, the cookie cleared unless the command came as a trailer) in rooms that
//! accept it, by every room's filter on the stream (through the stream's dynamic metadata,
//! see `stream`). A room with rules or header tickets is decided on the whole request and
//! Envoy's client address (see `stream`). A route turns the filter off with Envoy's own
//! `FilterConfig { disabled: true }` (nothing of the module runs there: README, "Envoy", says
//! how such routes take the command off). The engine's metrics go into Envoy's own stats
//! (admin `/stats`, `/stats/prometheus`), published about once a second on Envoy's main
//! thread (see `metrics`). See README, "Envoy".

pub mod abi;
pub mod filter_config;
pub mod hooks;
pub mod metrics;
pub mod stream;
pub mod ticker;
