//! The operations on `transcript_entries`, the CLI's transcripts as mirrored.

#[allow(async_fn_in_trait)]
pub trait TranscriptQueries {}
