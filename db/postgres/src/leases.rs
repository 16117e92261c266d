//! Moves here from `orchestrator/src/store/leases.rs`.
