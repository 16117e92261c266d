//! Placeholder; the store helper fills this in.
