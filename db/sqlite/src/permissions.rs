//! Moves here from `orchestrator/src/store/permissions.rs`.
