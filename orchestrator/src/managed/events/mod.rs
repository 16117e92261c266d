//! A session's events: the API's event types ([`wire`]) and the projection of a thread's stored
//! events onto them ([`project`]).

pub mod project;
pub mod wire;

pub use project::{project, row_of, tool_use_event_id, tool_use_of, user_message_event_id};
pub use wire::{event_type, EventBody, EventParams, SendEvents, SessionEvent};
