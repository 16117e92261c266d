//! End-to-end tests: the daemon on 127.0.0.1:0, the real `claude` CLI, the mock Messages API.
//! One test binary, a module per feature.

mod admission;
mod approvals;
mod attachments;
mod audit;
mod callers;
mod cluster;
mod cluster_events;
mod cluster_mcp;
mod containment;
mod contract;
mod events;
mod faults;
mod forks;
mod http_api;
mod load;
mod mcp;
mod metrics;
mod oauth;
mod ordering;
mod outcomes;
mod pool;
mod postgres;
mod rate_limits;
mod resume;
mod schedules;
mod security;
mod spares;
mod structured;
mod support;
mod tenants;
mod tools;
mod transcripts;
mod usage;
mod webhooks;
mod workspaces;
