//! Moves here from `orchestrator/src/store/transcripts.rs`.
