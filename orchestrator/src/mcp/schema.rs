//! Placeholder; JSON Schema normalization and validation for tool inputs and outputs.
