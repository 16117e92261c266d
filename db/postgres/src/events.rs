//! Moves here from `orchestrator/src/store/events.rs`.
