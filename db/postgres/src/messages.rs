//! Moves here from `orchestrator/src/store/messages.rs`.
