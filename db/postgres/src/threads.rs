//! Moves here from `orchestrator/src/store/threads.rs`.
