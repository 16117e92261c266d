//! A session's events: the API's event types ([`wire`]), the projection of a thread's stored
//! events onto them ([`project`]), and the reader that reads them in order, with the previews
//! of a message streamed in pieces ([`previews`]).

pub mod previews;
pub mod project;
pub mod wire;

pub use previews::{Frame, Reader};
pub use project::{
    goal_event_id, project, row_of, tool_result_event_id, tool_use_event_id, tool_use_of,
    user_message_event_id, Lens,
};
pub use wire::{event_type, EventBody, EventParams, SendEvents, SessionEvent};
